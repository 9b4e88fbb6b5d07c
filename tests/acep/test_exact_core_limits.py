"""The compiled cores under a bound (``Engine(max_entries=...)``, EXACT.md 6.8 and 7.4):
on random queries, streams and small bounds, the core and the pure engine either both
raise ExactLimitError at the same event with the same message, or both give the same
output and counters. The shared-buffer core counts as ``shared.py`` with merging off (its
counters' reference), with merging on or off; the postponing core as the pure postponing
engine, verbose and compact, early filters on and off."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from support.cli import run_acep
from support.exact_cases import cases

from acep.cli import main
from acep.events import EventError
from acep.nfab import Engine, ExactLimitError
from acep.nfab.ast import Query, Strategy
from acep.nfab.compile import compile_query
from acep.nfab.core import core_module, core_name
from acep.nfab.postpone import PostponeStats, match_postponed

AUTO = core_name(core_module("auto"))
COMPILED = "compiled" if AUTO == "compiled" else "python"
SETTINGS = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
LIMITS = st.integers(1, 50)


def _fields(m) -> tuple:
    values = None if m.values is None else {k: repr(v) for k, v in m.values.items()}
    part = None if m.partition is None else tuple(repr(v) for v in m.partition)
    return (m.positions, m.start, m.end, part, values)


def _record(x) -> tuple:
    """A compact record of either engine, with its matches (expanded under the bound)."""
    try:
        matches = [_fields(m) for m in x.expand()]
        count = x.count()
    except ExactLimitError as err:
        return ("limit", str(err), err.position)
    if hasattr(x, "labels"):
        return (x.end_position, count, matches, x.labels)
    return (x.start_position, x.end_position, count, matches)


def _outcome(run) -> tuple:
    """("limit", message, position), ("refused", ...) or ("ok", output, counters)."""
    try:
        found, stats = run()
    except ExactLimitError as err:
        return ("limit", str(err), err.position), None
    except EventError as err:
        return ("refused", err.position, err.field), None
    out = [_record(x) if hasattr(x, "expand") else _fields(x) for x in found]
    return ("ok", out, stats), stats


def _shared(query, events, output, limit, core, merge):
    eng = Engine(query, output=output, engine="shared", merge=merge, core=core,
                 max_entries=limit)

    got = _outcome(lambda: (eng.run(events), eng.stats))[0]
    assert eng.core == ("shared" if core == "off" else core)
    return got, eng


@SETTINGS
@given(cases(max_size=20), LIMITS)
def test_the_shared_core_stops_where_the_pure_engine_does(case, limit):
    query, events = case
    for output in ("verbose", "compact"):
        want, _ = _shared(query, events, output, limit, "off", False)
        for core, merge in ((COMPILED, False), (COMPILED, True), ("python", False)):
            got, _ = _shared(query, events, output, limit, core, merge)
            assert got == want, (output, core, merge)
        event(f"{output}: {want[0]}")


def _any(query: Query) -> Query:
    return Query(query.components, Strategy.ANY, query.conjuncts, query.window, query.returns)


def _postponed(query, events, output, filters, limit, core):
    stats = PostponeStats()

    def run():
        found = match_postponed(query, events, output=output, early_filters=filters,
                                stats=stats, max_entries=limit, core=core)
        return found, stats.as_dict()
    got = _outcome(run)[0]
    # verbose matches count after negation: the pure engine
    pure = core == "off" or (output == "verbose" and compile_query(query).negations)
    assert stats.core == ("postpone" if pure else core)
    return got, stats


@SETTINGS
@given(cases(max_size=20), LIMITS)
def test_the_postponing_core_stops_where_the_pure_engine_does(case, limit):
    query, events = case
    query = _any(query)
    for output in ("verbose", "compact"):
        for filters in (True, False):
            want, _ = _postponed(query, events, output, filters, limit, "off")
            for core in (COMPILED, "python"):
                got, _ = _postponed(query, events, output, filters, limit, core)
                assert got == want, (output, filters, core)
        event(f"{output}: {want[0]}")


@pytest.mark.parametrize("limit", [None, 1])
@pytest.mark.parametrize("output", ["verbose", "compact"])
@pytest.mark.parametrize("engine", ["shared", "postpone"])
def test_no_events_run_on_the_cores(engine, output, limit):
    eng = Engine("PATTERN SEQ(A a, B+ b[], C c) WITHIN 5", output=output, engine=engine,
                 core=COMPILED, max_entries=limit)
    assert list(eng.run([])) == [] and eng.core == COMPILED


def _exact_files(tmp_path, n: int):
    """A, n B, C: 2^n - 1 matches of SEQ(A a, B+ b[], C c) under skip-till-any-match."""
    q = tmp_path / "q.sase"
    q.write_text("PATTERN SEQ(A a, B+ b[], C c) WITHIN 100\n")
    rows = ['{"type": "A", "t": 0}'] + [f'{{"type": "B", "t": {i}}}' for i in range(1, n + 1)]
    events = tmp_path / "events.jsonl"
    events.write_text("\n".join(rows + [f'{{"type": "C", "t": {n + 1}}}']) + "\n")
    return q, events


@pytest.mark.parametrize("engine", ["auto", "shared"])
def test_acep_exact_runs_on_the_core_under_a_bound(tmp_path, capsys, engine):
    q, events = _exact_files(tmp_path, 8)
    assert main(["exact", str(q), str(events), "--engine", engine,
                 "--max-entries", "1000"]) == 0
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 2 ** 8 - 1
    ran = "compiled core" if AUTO == "compiled" else "pure-Python engine"
    assert err.splitlines()[-1].endswith(f"engine, {ran})"), err


@pytest.mark.parametrize("engine", ["auto", "shared"])
def test_acep_exact_on_the_core_stops_at_the_bound_with_one_line(tmp_path, engine):
    q, events = _exact_files(tmp_path, 40)
    r = run_acep("exact", q, events, "--engine", engine, "--max-entries", 2000)
    assert r.returncode == 1 and r.stdout == "" and "Traceback" not in r.stderr, r.stderr
    (line,) = r.stderr.splitlines()
    assert line.startswith(f"acep: error: {events}, line ")
    assert "more than 2,000 partial and complete matches at once (--max-entries)" in line
