"""The compiled core on columns (an ``EventBatch`` given to ``Engine.run``) and its verbose
output made when read (``acep.nfab.core.CoreMatches``), against the pure-Python engine on
the same events as rows, on random queries and streams (tests/acep/test_exact_core.py's).
"""

from __future__ import annotations

import math
from unittest import mock

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st
from test_exact_core import COMPILED, SETTINGS, XS, cases, norm

from acep.events import Event, EventBatch, EventError
from acep.nfab import Engine
from acep.nfab.core import CoreMatches
from acep.nfab.runs import ExactMatch

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
    if not plain and draw(st.booleans()):
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
    want = Engine(query, engine="shared", core="off").run(events)
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
