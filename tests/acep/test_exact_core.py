"""The compiled core of the shared-buffer engine (acep.nfab.core, acep/nfab/_core.py) against
the pure-Python engine (acep.nfab.shared, the reference) and the brute-force oracle
(tests/support/exact_oracle.py), on random queries and streams: every strategy, Kleene components,
aggregates, arithmetic, negation, partitions of mixed kinds; text and bad events fall back.
An EventBatch runs on the core from its columns, and its CoreMatches act as the list.

The query and stream strategies follow tests/acep/test_exact_fuzz.py's, with the core's
predicates (arithmetic) and, with ``wide``, what it leaves to the reference engine.
"""

from __future__ import annotations

import math
import os
import re
import textwrap
from unittest import mock

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from support.cli import run_without_cython
from support.exact_cases import XS, cases
from support.exact_oracle import oracle

from acep.events import Event, EventBatch, EventError
from acep.nfab import Engine
from acep.nfab.core import CoreMatches, core_module, core_name
from acep.nfab.runs import ExactMatch

SETTINGS = settings(max_examples=80, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
# the compiled core where it is built, else its source run as Python (the same file)
AUTO = core_name(core_module("auto"))
COMPILED = "compiled" if AUTO == "compiled" else "python"


def norm(m) -> tuple:
    values = None if m.values is None else {k: repr(v) for k, v in m.values.items()}
    part = None if m.partition is None else tuple(repr(v) for v in m.partition)
    return (m.positions, m.start, m.end, part, values)


def _outputs(query, events, output: str, core: str, merge: bool = False):
    eng = Engine(query, output=output, engine="shared", merge=merge, core=core)
    try:
        found = eng.run(events)
    except EventError as err:
        return eng, ("refused", err.position, err.field)
    if output == "compact":
        found = [(g.end_position, g.count(), [norm(m) for m in g.expand()], g.labels)
                 for g in found]
    else:
        found = [norm(m) for m in found]
    return eng, found


def _agree(query, events, cores=(COMPILED,)) -> None:
    """Every core and output mode equals the reference engine (merging off: the same
    labels and counters; on: the same matches) and the oracle."""
    try:
        want = sorted(map(norm, oracle(query, events)))
    except EventError as err:
        want = ("refused", err.position, err.field)
    for output in ("verbose", "compact"):
        ref_eng, ref = _outputs(query, events, output, "off")
        merged = _outputs(query, events, output, "off", merge=True)[1]
        for core in cores:
            eng, got = _outputs(query, events, output, core)
            assert got == ref, (core, output)
            if isinstance(got, tuple):  # refused: the same bad event as the oracle
                assert got == want == merged, core
            elif output == "verbose":
                assert got == merged, core
                assert all(type(p) is int for m in got for b in m[0] for p in b), core
                assert sorted(got) == want, core
                assert got == sorted(got, key=lambda m: (m[0][-1][-1], m[0])), core
            else:
                assert [g[:3] for g in got] == [g[:3] for g in merged], core
                assert all(type(g[0]) is int for g in got), core
            if eng.core != "shared":
                assert eng.stats == ref_eng.stats, (core, output)
    event("refused" if isinstance(want, tuple) else
          f"{query.strategy.value}: {'some' if want else 'no'} matches")


# ------------------------------------------------------------------ the tests


@SETTINGS
@given(cases())
def test_compiled_core_equals_the_reference_engine_and_the_oracle(case):
    query, events = case
    _agree(query, events)
    eng = Engine(query, engine="shared")
    eng.run(events)
    assert eng.core == AUTO  # no text, no bad event: the core ran where it is built


@settings(SETTINGS, max_examples=40)
@given(cases())
def test_the_core_run_as_python_gives_the_same_results(case):
    query, events = case
    _agree(query, events, cores=("python",))


@SETTINGS
@given(cases(wide=True))
def test_wide_inputs_fall_back_or_agree(case):
    """Negation, text, ids beyond 2**53, missing attributes and tags going back: the
    engine falls back to the reference where the core cannot run, with the same output."""
    query, events = case
    _agree(query, events)


@SETTINGS
@given(cases(max_size=30))
def test_longer_streams_agree(case):
    _agree(*case)


def test_the_compiled_core_ran_where_ci_requires_it():
    from acep.nfab import _core

    if os.environ.get("ACEP_REQUIRE_COMPILED"):
        assert core_name(_core) == "compiled"
    eng = Engine("PATTERN SEQ(A+ a[], B b) WHERE partition_contiguity(a[], b) "
                 "{ [k] and a[i].x > a[i-1].x and b.x < a[a.LEN].x } WITHIN 5",
                 engine="shared")
    events = [Event("A", 1, {"k": 1, "x": 1}), Event("A", 2, {"k": 1, "x": 2}),
              Event("B", 3, {"k": 1, "x": 0})]
    assert [m.positions for m in eng.run(events)] == [((0, 1), (2,)), ((1,), (2,))]
    assert eng.core == core_name(_core)
    assert Engine(eng.query, engine="shared", core="off").core is None


def test_what_the_core_leaves_to_the_reference_engine():
    events = [Event("A", 1, {"k": 1, "x": 1, "s": "p"}), Event("B", 2, {"k": 1, "x": 2})]
    eng = Engine("PATTERN SEQ(A a, B b) WHERE skip_till_next_match(a, b) { a.s == 'p' } "
                 "WITHIN 5", engine="shared", core="python")
    assert len(eng.run(events)) == 1
    assert eng.core == "shared"  # a text constant
    eng = Engine("PATTERN SEQ(A a, B b) WITHIN 5", engine="shared", core="python",
                 max_entries=10)
    eng.run(events)
    assert eng.core == "python"  # a bound runs on the core (EXACT.md 6.8)
    eng = Engine("PATTERN SEQ(A a, B b) WITHIN 5", engine="shared", core="python")
    eng.push(events)
    assert eng.core == "shared"  # streams pushed in pieces stay on shared.py
    with pytest.raises(ValueError, match="core must be one of"):
        Engine("PATTERN SEQ(A a, B b) WITHIN 5", core="fast")


def test_the_core_source_runs_without_cython():
    """A device without Cython: the core's source runs with the shim, same match."""
    code = textwrap.dedent("""
        from acep.events import Event
        from acep.nfab import Engine
        ev = [Event("A", 1, {"x": 1}), Event("B", 2, {"x": 2})]
        e = Engine("PATTERN SEQ(A a, B b) WHERE skip_till_next_match(a, b) { a.x < b.x } "
                   "WITHIN 5", engine="shared", core="python")
        print(e.run(ev)[0].positions, e.core)
    """)
    r = run_without_cython(code)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["((0,),", "(1,))", "python"]


# ------------------------------------------------------------------ batches and CoreMatches
# The core on an EventBatch's columns and its verbose output made when read, against the
# pure-Python engine on the same events as rows.

PLAIN = [x for x in XS if not (isinstance(x, float) and math.isnan(x))]
KEYS = [0, 1, 7, 7.0, -0.0, 2.5]


@st.composite
def batch_cases(draw, max_size=30):
    """A query and a stream that is mostly plain numbers (the batch runs on the core), now
    and then with a NaN, a missing attribute or a text key (the batch falls back)."""
    query, events = draw(cases(max_size))
    plain = draw(st.booleans()) or draw(st.booleans())
    for e in events:
        for a in ("x", "y"):
            if plain and isinstance(e.attrs[a], float) and math.isnan(e.attrs[a]):
                e.attrs[a] = draw(st.sampled_from(PLAIN))
        e.attrs["k"] = draw(st.sampled_from(KEYS if plain else KEYS + ["7", math.nan]))
    if not plain and events and draw(st.booleans()):
        del events[draw(st.integers(0, len(events) - 1))].attrs["y"]
    return query, events


def _verbose(query, events, core):
    eng = Engine(query, engine="shared", merge=False, core=core)
    try:
        return eng, [norm(m) for m in eng.run(events)]
    except EventError as err:
        return eng, ("refused", err.position, err.field)


@settings(SETTINGS, max_examples=50)
@given(batch_cases())
def test_a_batch_gives_the_matches_of_its_rows_on_the_reference_engine(case):
    query, events = case
    batch = EventBatch.from_events(events)
    rows = batch.to_events()  # the rows a batch stands for (NaN: a missing attribute)
    ref_eng, want = _verbose(query, rows, "off")
    for core in (COMPILED, "python"):
        eng, got = _verbose(query, batch, core)
        assert got == want, core
        if eng.core != "shared":
            assert eng.stats == ref_eng.stats, core
    event("refused" if isinstance(want, tuple) else f"{len(want) > 0} matches")


@settings(SETTINGS, max_examples=30)
@given(batch_cases(max_size=12))
def test_core_matches_behave_as_the_list_of_the_reference_engine(case):
    query, events = case
    try:
        want = Engine(query, engine="shared", core="off").run(events)
    except EventError as err:  # an attribute the query reads is missing
        with pytest.raises(EventError, match=re.escape(str(err))):
            Engine(query, engine="shared", core=COMPILED).run(events)
        return
    got = Engine(query, engine="shared", core=COMPILED).run(events)
    assert got == want and want == got and not got != want
    assert len(got) == len(want) and list(got) == want and bool(got) == bool(want)
    assert [got[i] for i in range(-len(got), len(got))] == want + want
    assert got[1:] == want[1:] and got[::-1] == want[::-1]
    assert got + [] == want and [] + got == want
    assert repr(got) == repr(want)
    if want:
        assert got.index(want[-1]) == want.index(want[-1])
    with pytest.raises(IndexError):
        got[len(got)]


def _plain_batch():
    return EventBatch.from_events(
        [
            Event("A", 1, {"k": 1, "x": 1}),
            Event("A", 2, {"k": 2, "x": 5}),
            Event("B", 3, {"k": 1, "x": 2}),
            Event("B", 4, {"k": 2, "x": 6}),
        ]
    )


QUERY = "PATTERN SEQ(A a, B b) WHERE skip_till_next_match(a, b) { [k] and a.x < b.x } WITHIN 5"


def test_a_plain_batch_runs_without_rows_and_its_matches_are_made_when_read():
    eng = Engine(QUERY, engine="shared", core=COMPILED)
    with mock.patch.object(EventBatch, "to_events", side_effect=AssertionError("rows")):
        found = eng.run(_plain_batch())
    assert isinstance(found, CoreMatches) and eng.core == COMPILED
    assert found._made is None  # nothing made yet
    assert found[1] == ExactMatch(((1,), (3,)), 2.0, 4.0, (2.0,), None)
    assert list(found) == [ExactMatch(((0,), (2,)), 1.0, 3.0, (1.0,), None), found[1]]
    assert eng.stats["events"] == 4 and eng.stats["matches"] == 2


def test_a_batch_with_a_missing_value_or_text_goes_through_rows():
    batch = _plain_batch()
    batch.columns["x"] = batch.columns["x"].astype(float)
    batch.columns["x"][1] = math.nan  # to_events leaves it out: the event is refused
    eng = Engine(QUERY, engine="shared", core=COMPILED)
    with pytest.raises(EventError, match="lacks attribute 'x'") as err:
        eng.run(batch)
    assert [m.positions for m in err.value.matches] == []
    batch = _plain_batch()
    batch.columns["k"] = batch.columns["k"].astype(object)
    batch.columns["k"][0] = "1"
    found = Engine(QUERY, engine="shared", core=COMPILED).run(batch)
    assert [m.partition for m in found] == [(2.0,)]


def test_matches_with_one_end_come_in_canonical_order_kleene_prefixes_first():
    eng = Engine(
        "PATTERN SEQ(A+ a[], B b) WHERE skip_till_any_match(a[], b) { [k] } WITHIN 9",
        engine="shared",
        core=COMPILED,
    )
    events = [Event("A", t, {"k": 1}) for t in (1, 2, 3)] + [Event("B", 4, {"k": 1})]
    got = [m.positions for m in eng.run(events)]
    assert got == sorted(got, key=lambda p: (p[-1][-1], p)) and len(got) == 7
    assert got[:3] == [((0,), (3,)), ((0, 1), (3,)), ((0, 1, 2), (3,))]


@pytest.mark.parametrize("strategy", ["strict_contiguity", "partition_contiguity",
                                      "skip_till_next_match", "skip_till_any_match"])
@pytest.mark.parametrize("negated", [False, True])
def test_a_stream_of_no_or_one_event_runs_on_every_core(strategy, negated):
    """Regression: the core allocated its storage only when given events, and an empty
    stream's output read it unallocated (a segfault)."""
    text = (f"PATTERN SEQ(A a, !(C c), B b) WHERE {strategy}(a, c, b) {{ [k] AND b.x > a.x }}"
            if negated else
            f"PATTERN SEQ(A a, B+ b[]) WHERE {strategy}(a, b) {{ [k] AND b[i].x > a.x }}")
    text += " WITHIN 10"
    for events in ([], [Event("A", 0, {"k": 1, "x": 1})]):
        for output in ("verbose", "compact"):
            want = Engine(text, engine="shared", output=output, core="off").run(events)
            for core in (COMPILED, "python"):
                for stream in (events, EventBatch.from_events(events)):
                    eng = Engine(text, engine="shared", output=output, core=core)
                    assert list(eng.run(stream)) == list(want) == []
                    assert eng.core == core and eng.stats["events"] == len(events)
