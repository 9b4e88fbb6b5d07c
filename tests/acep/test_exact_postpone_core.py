"""Postponing on the compiled core (acep.nfab.postpone.core, acep/nfab/_postpone.py's
``Postpone`` on _core.py's stack machine) against the pure postponing engine
(``core="off"``, the reference) and the brute-force oracle, under skip_till_any_match:
random queries and streams with Kleene components, negation, aggregates, arithmetic,
partitions of mixed kinds and bad events (test_exact_core.py's), and every early-filter
class with shifts and scales (test_exact_postpone.py's); verbose and compact output, early
filters on and off, the counters too.
"""

from __future__ import annotations

import os
import textwrap

import pytest
from hypothesis import HealthCheck, event, given, settings
from support.cli import run_without_cython
from support.exact_cases import cases as core_cases
from support.exact_cases import filter_cases
from support.exact_oracle import oracle

from acep.events import Event, EventError
from acep.nfab import Engine
from acep.nfab.ast import Query, Strategy
from acep.nfab.core import core_module, core_name
from acep.nfab.postpone import PostponeStats, match_postponed

# the compiled core where it is built, else its source run as Python (as test_exact_core's)
COMPILED = "compiled" if core_name(core_module("auto")) == "compiled" else "python"
SETTINGS = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _any(query: Query) -> Query:
    return Query(query.components, Strategy.ANY, query.conjuncts, query.window, query.returns)


def _fields(m) -> tuple:
    values = None if m.values is None else {k: repr(v) for k, v in m.values.items()}
    part = None if m.partition is None else tuple(repr(v) for v in m.partition)
    return (m.positions, m.start, m.end, part, values)


def _record(x) -> tuple:
    cands = tuple(tuple((c.position, c.roles, tuple(sorted(c.unsafe.items()))) for c in cs)
                  for cs in x.candidates)
    return (x.start_position, x.end_position, cands, sorted(x.residual), x.negation,
            x.count(), [_fields(m) for m in x.expand()])


def _outputs(query, events, output: str, filters: bool, core: str):
    stats = PostponeStats()
    try:
        found = match_postponed(query, events, output=output, early_filters=filters,
                                stats=stats, core=core)
    except EventError as err:
        return ("refused", err.position, err.field), stats
    if output == "compact":
        return [_record(x) for x in found], stats
    return [_fields(m) for m in found], stats


def _agree(query, events, cores=(COMPILED,)) -> None:
    """Every core, output and filter setting equals the pure engine (output and counters);
    verbose output equals the oracle."""
    try:
        want = sorted(_fields(m) for m in oracle(query, events))
    except EventError as err:
        want = ("refused", err.position, err.field)
    ran = set()
    for output in ("verbose", "compact"):
        for filters in (True, False):
            ref, ref_stats = _outputs(query, events, output, filters, "off")
            assert ref_stats.core in (None, "postpone")
            for core in cores:
                got, stats = _outputs(query, events, output, filters, core)
                assert got == ref, (core, output, filters)
                if isinstance(got, tuple):
                    assert got == want
                    continue
                assert stats.as_dict() == ref_stats.as_dict(), (core, output, filters)
                ran.add(stats.core)
                if output == "verbose":
                    assert sorted(got) == want
    event(f"ran: {sorted(ran)}; " + ("refused" if isinstance(want, tuple) else
                                     f"{'some' if want else 'no'} matches"))


@SETTINGS
@given(core_cases())
def test_compiled_postponing_equals_the_pure_engine_and_the_oracle(case):
    query, events = case
    _agree(_any(query), events)


@settings(SETTINGS, max_examples=60)
@given(core_cases(wide=True))
def test_wide_inputs_fall_back_or_agree(case):
    query, events = case
    _agree(_any(query), events)


@settings(SETTINGS, max_examples=40)
@given(core_cases())
def test_the_core_run_as_python_gives_the_same_results(case):
    query, events = case
    _agree(_any(query), events, cores=("python",))


@settings(SETTINGS, max_examples=300)
@given(filter_cases())
def test_early_filter_classes_on_the_core(case):
    query, events = case
    _agree(query, events)


@settings(SETTINGS, max_examples=30)
@given(core_cases(max_size=30))
def test_longer_streams_agree(case):
    query, events = case
    _agree(_any(query), events)


def test_engine_reports_what_ran():
    text = ("PATTERN SEQ(A a, B+ b[], C c) WHERE [k] AND b[i].x > b[i-1].x AND c.x < "
            "max(b[].x) WITHIN 10")
    events = [Event(t, n, {"k": 1, "x": x}) for n, (t, x) in
              enumerate([("A", 0), ("B", 1), ("B", 3), ("B", 2), ("C", 2)])]
    found = {}
    for core in ("auto", "python", "off"):
        eng = Engine(text, core=core)
        found[core] = [m.positions for m in eng.run(events)]
        assert eng.core == {"auto": COMPILED, "python": "python", "off": "postpone"}[core]
    assert found["auto"] == found["python"] == found["off"] == [
        ((0,), (1, 2), (4,)), ((0,), (2,), (4,))]  # b rises and holds the 3
    eng = Engine(text, core=COMPILED, max_entries=100)
    assert [m.positions for m in eng.run(events)] == found["off"]
    assert eng.core == COMPILED  # a bound: the core notes what the pure engine holds
    eng = Engine("PATTERN SEQ(A a, !(D d), C c) WITHIN 10", core=COMPILED, max_entries=100)
    assert len(eng.run(events)) == 1
    assert eng.core == "postpone"  # verbose matches count after negation: the pure engine
    eng = Engine(eng.query, output="compact", core=COMPILED, max_entries=100)
    assert len(eng.run(events)) == 1
    assert eng.core == COMPILED
    with pytest.raises(ValueError, match="core must be one of"):
        match_postponed(eng.query, events, core="fast", max_entries=100)


def test_the_postponing_core_reads_the_opcodes_of_the_shared_core():
    """_postpone.py names the opcodes its filters compare with; they are _core.py's."""
    from acep.nfab.core import pure_core
    from acep.nfab.postpone.core import pure_postpone

    core, postpone = pure_core(), pure_postpone()
    names = [n for n in vars(postpone) if n.startswith("OP_")]
    assert len(names) == 8
    assert {n: getattr(postpone, n) for n in names} == {n: getattr(core, n) for n in names}
    assert postpone.Machine is core.Machine  # one stack machine, the Python one's too


def test_the_compiled_postponing_core_ran_where_ci_requires_it():
    from acep.nfab import _core, _postpone

    if os.environ.get("ACEP_REQUIRE_COMPILED"):
        assert core_name(_postpone) == "compiled"
    s = PostponeStats()
    q = Engine("PATTERN SEQ(A a, B+ b[]) WHERE skip_till_any_match(a, b[]) "
               "{ b[i].x > a.x } WITHIN 5").query
    ev = [Event("A", 1, {"x": 1}), Event("B", 2, {"x": 2}), Event("B", 3, {"x": 3})]
    found = match_postponed(q, ev, stats=s)
    assert [m.positions for m in found] == [((0,), (1,)), ((0,), (1, 2)), ((0,), (2,))]
    both = core_name(_core) == core_name(_postpone) == "compiled"
    assert s.core == ("compiled" if both else "postpone")


def test_postponing_core_source_runs_without_cython():
    code = textwrap.dedent("""
        from acep.events import Event
        from acep.nfab.postpone import PostponeStats, match_postponed
        from acep.nfab.query import parse_query
        q = parse_query("PATTERN SEQ(A a, B+ b[]) WHERE skip_till_any_match(a, b[]) "
                        "{ b[i].x > a.x } WITHIN 5")
        ev = [Event("A", 1, {"x": 1}), Event("B", 2, {"x": 2}), Event("B", 3, {"x": 0})]
        s = PostponeStats()
        print([m.positions for m in match_postponed(q, ev, stats=s, core="python")], s.core)
    """)
    r = run_without_cython(code)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["[((0,),", "(1,))]", "python"]


@pytest.mark.parametrize("events", [[], [Event("A", 0, {"k": 1, "x": 1})],
                                    [Event("D", 0, {"k": 1, "x": 1})]],
                         ids=["none", "one start", "one other"])
def test_a_stream_of_no_or_one_event_runs_on_every_core(events):
    """Regression: the postponing core allocated its storage only when given events, and
    an empty stream read it unallocated (a segfault in the collector's re-check)."""
    text = "PATTERN SEQ(A a, B+ b[]) WHERE [k] AND b[i].x > a.x WITHIN 10"
    ref = _outputs(Engine(text).query, events, "verbose", True, "off")[0]
    assert ref == [_fields(m) for m in oracle(Engine(text).query, events)]
    for core in ("auto", "python"):
        for output in ("verbose", "compact"):
            got, stats = _outputs(Engine(text).query, events, output, True, core)
            want, ref_stats = _outputs(Engine(text).query, events, output, True, "off")
            assert got == want and stats.as_dict() == ref_stats.as_dict(), (core, output)
            assert stats.core == (COMPILED if core == "auto" else "python")
