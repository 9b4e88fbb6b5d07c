"""The collector's exact re-check: ACEP pattern -> SASE+ query, run by acep.nfab, checked
against the ACEP engine itself at k = 0 (every trajectory), which is the exact match set."""

from __future__ import annotations

import random
import zlib

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

import acep
from acep import EventBatch
from acep.events import Event
from acep.matcher import MatchBatch
from acep.nfab import parse_query
from edge.collector.recheck import (
    MAX_EXACT_PER_POINT,
    Unsupported,
    recheck,
    recheck_batch,
    translate,
)
from edge.wire import (
    PatternRef,
    batch_from_matches,
    decode_batch,
    encode_batch,
    partition_group_key,
)


def acep_exact(text, window, where, events):
    """Flattened trajectories of every exact (k = 0) ACEP match, as position tuples."""
    m = acep.Matcher(text, window=window, k=0, where=list(where), all_trajectories=True)
    found = MatchBatch.concat([m.match_batch(EventBatch.from_events(events)), m.flush()])
    return {tuple(found.events_of(i).tolist()) for i in range(len(found))}


def random_events(rng, n, types="abc"):
    t, out = 0.0, []
    for _ in range(n):
        t += rng.choice([0.0, 1.0, 1.0, 2.0])
        out.append(Event(rng.choice(types), t, {"x": float(rng.randint(0, 5))}))
    return out


CASES = [
    ("a b c", 4.0, ()),
    ("a b+ c", 5.0, ()),
    ("a b+", 3.0, ()),
    ("a b c", 6.0, ("c.x > a.x",)),
    ("a b+ c", 6.0, ("b.x >= a.x",)),
    ("a b+ c", 6.0, ("c.x > b.x + 1 and a.x != 2",)),
    ("b+ c", 4.0, ("abs(c.x - b.x) <= 1",)),
    ("c a b", 1.0, ()),
    ("a b", 0.0, ()),
]


@pytest.mark.parametrize("text,window,where", CASES)
def test_recheck_equals_acep_at_k0(text, window, where):
    rng = random.Random(zlib.crc32(repr((text, window, where)).encode()))
    total = 0
    for _ in range(25):
        events = random_events(rng, rng.randint(0, 11))
        ref = PatternRef("p", text, window, 0, where)
        got = {tuple(p for comp in m.positions for p in comp) for m in recheck(ref, events)}
        assert got == acep_exact(text, window, where, events), (text, events)
        total += len(got)
    assert total > 0  # the cases must exercise matches, not only empty sets


def test_translate_text_parses_and_keeps_kleene_semantics():
    q = translate("a b+ c", 10, ["c.price > b.price", "b.price > a.price", "[origin]"])
    assert "b+ v1[]" in q and "v1[v1.len].price" in q and "v1[i].price" in q
    assert "origin" not in q  # windows arrive per partition
    assert parse_query(q).window == 10.0


@pytest.mark.parametrize("text,where,reason", [
    ("a | b", (), "only sequences"),
    ("a b*", (), "only sequences"),
    ("(a b)+", (), "only sequences"),
    ("a{2}", (), "only sequences"),
    ("a b a", ("a.x > 1",), "more than once"),
    ("a b", ("z.x > 1",), "not in the pattern"),
    ("a b (", (), "does not parse"),
])
def test_unsupported_patterns_name_the_reason(text, where, reason):
    with pytest.raises(Unsupported, match=reason):
        translate(text, 3.0, where)


def _batch(text, window, k, where, events, partition=None, seq=0):
    ref = PatternRef("p", text, window, k, tuple(where), partition)
    batch = EventBatch.from_events(events)
    m = acep.Matcher(text, window=window, k=k, where=list(where), partition=partition)
    found = MatchBatch.concat([m.match_batch(batch), m.flush()])
    up = batch_from_matches(found, batch, device="d1", seq=seq, pattern=ref, created_at=0.0)
    return decode_batch(encode_batch(up))  # what the collector sees


def test_recheck_batch_flags_and_exact_matches_per_point():
    rng = random.Random(7)
    events = []
    for e in random_events(rng, 60):
        e.attrs["o"] = rng.choice(["x", "y"])
        events.append(e)
    up = _batch("a b c", 4.0, 1, ["c.x >= a.x"], events, partition="o")
    assert len(up) > 5
    checks = recheck_batch(up)
    assert len(checks) == len(up)
    pos = np.asarray(up.event_position)
    by_part = {}
    for key in set(up.partition):
        idx = [i for i, e in enumerate(events) if e.attrs["o"] == key]
        sub = [events[i] for i in idx]
        by_part[key] = {tuple(idx[j] for j in t) for t in
                        acep_exact("a b c", 4.0, ["c.x >= a.x"], sub)}
    seen_exact = seen_inexact = 0
    for i, c in enumerate(checks):
        traj = tuple(up.trajectory[up.trajectory_ptr[i]:up.trajectory_ptr[i + 1]].tolist())
        truth = by_part[up.partition[i]]
        assert c.exact is (traj in truth)
        assert c.exact is (int(up.errors[i]) == 0)  # the engine reports the least errors
        point_tag = up.point[i]
        want = {t for t in truth if events[t[-1]].t == point_tag}
        assert {tuple(p for comp in m for p in comp) for m in c.exact_matches} == want
        assert c.exact_count == len(want) and not c.truncated
        assert all(p in pos for m in c.exact_matches for comp in m for p in comp)
        seen_exact += c.exact
        seen_inexact += not c.exact
    assert seen_exact and seen_inexact


def test_unsupported_pattern_gives_null_with_reason_never_raises():
    events = [Event(t, float(i), {}) for i, t in enumerate("abab")]
    up = _batch("a (b|c)", 3.0, 0, [], events)
    checks = recheck_batch(up)
    assert checks and all(c.exact is None and "only sequences" in c.reason for c in checks)


def _kleene_events(n):
    return [Event("a", 0.0, {"x": 0.0})] + [Event("b", float(i), {"x": float(i)})
                                            for i in range(1, n + 1)] + [
        Event("c", n + 1.0, {"x": 100.0})]


def _at_point(up, point, fast=True):
    return [c for c, p in zip(recheck_batch(up, fast=fast), up.point) if p == point][0]


def test_kleene_blowup_is_counted_and_cut_not_enumerated():
    # the general path (the NFA^b engine), as before the fast path
    # 10 b events between a and c: 2^10 - 1 exact matches end at c; the list is cut
    up = _batch("a b+ c", 50.0, 0, [], _kleene_events(10))
    c = _at_point(up, 11.0, fast=False)
    assert c.exact and c.exact_count == 2 ** 10 - 1 and c.truncated
    assert len(c.exact_matches) == MAX_EXACT_PER_POINT
    # 40 b events: 2^40 - 1 matches are counted by the engine's DP, none enumerated
    up = _batch("a b+ c", 50.0, 0, [], _kleene_events(40))
    c = _at_point(up, 41.0, fast=False)
    assert c.exact and c.exact_count == 2 ** 40 - 1 and c.exact_matches == [] and c.truncated
    # a pure predicate on b[i] is filtered early: still counted without enumeration
    up = _batch("a b+ c", 50.0, 0, ["b.x > a.x"], _kleene_events(40))
    assert _at_point(up, 41.0, fast=False).exact_count == 2 ** 40 - 1
    # one on the last b with arithmetic leaves a residual: counting would enumerate, refused
    up = _batch("a b+ c", 50.0, 0, ["c.x > b.x + 60"], _kleene_events(40))
    c = _at_point(up, 41.0, fast=False)
    assert c.exact is None and "too large" in c.reason
    with pytest.raises(Unsupported, match="limit"):
        recheck(PatternRef("p", "a b+ c", 50.0, 0), _kleene_events(40))


def test_fast_path_counts_what_the_engine_gives_up_on():
    # edge.collector.fastcheck counts through the last b (x_last < 40: sum of 2^(l-1), l = 1..39)
    # and lists the first 100 in canonical order where the engine listed none
    up = _batch("a b+ c", 50.0, 0, ["c.x > b.x + 60"], _kleene_events(40))
    c = _at_point(up, 41.0)
    assert c.exact and c.exact_count == 2 ** 39 - 1 and c.truncated
    assert c.exact_matches[:2] == [[[0], [1], [41]], [[0], [1, 2], [41]]]
    assert len(c.exact_matches) == MAX_EXACT_PER_POINT
    up = _batch("a b+ c", 50.0, 0, [], _kleene_events(40))
    c = _at_point(up, 41.0)
    assert c.exact_count == 2 ** 40 - 1 and len(c.exact_matches) == MAX_EXACT_PER_POINT


def test_missing_attribute_is_a_reason_not_a_crash():
    events = [Event("a", 0.0, {"x": 1.0}), Event("b", 1.0, {}), Event("c", 2.0, {"x": 2.0})]
    ref = PatternRef("p", "a b c", 3.0, 0, ("c.x > a.x",))
    up = _batch("a b c", 3.0, 0, ["c.x > a.x"], events)
    assert [c.exact for c in recheck_batch(up)] == [True]
    up.columns["x"][:] = np.nan  # the collector receives events lacking the attribute
    checks = recheck_batch(up)
    assert checks[0].exact is None and "x" in checks[0].reason
    assert recheck(ref, events)  # the plain interface on Event rows


@pytest.mark.parametrize("ids", [(7, 7, 7, "other"), (12345678901234567, 12345678901234567,
                                                      12345678901234567, 12345678901234568)])
def test_a_match_whose_partition_column_mixes_kinds_is_rechecked_exact(ids):
    # a text value (or an integer beyond 2**53) makes the column objects: it goes as a
    # mixed column on the wire, each value of its kind, as the match's partition does
    rows = [{"type": ty, "t": float(i), "id": key} for i, (ty, key) in enumerate(zip("abcx", ids))]
    m = acep.Matcher("a b c", window=5, k=0, partition="id")
    first, second = EventBatch.from_events(rows[:2]), EventBatch.from_events(rows[2:], position=2)
    found = MatchBatch.concat([m.match_batch(first), m.match_batch(second), m.flush()])
    assert [type(p) for p in found.partition] == [int]
    events = EventBatch.concat([first, second])
    ref = PatternRef("p", "a b c", 5.0, 0, (), "id")
    batch = decode_batch(encode_batch(batch_from_matches(found, events, device="pi", seq=0,
                                                         pattern=ref)))
    assert [c.exact for c in recheck_batch(batch)] == [True]


NUMBERS = st.one_of(st.integers(-2**63, 2**64 - 1), st.floats(allow_nan=False),
                    st.integers(-2**63, 2**63 - 1).map(np.int64), st.floats().map(np.float64))


@given(NUMBERS, NUMBERS)
@example(2**53, 2**53 + 1)
@example(np.int64(12345678901234567), 12345678901234568)
@example(2**64 - 1, float(2**64))
@example(np.int64(7), 7.0)
def test_partition_values_group_together_exactly_when_they_are_equal_numbers(a, b):
    """The collector's re-check groups a batch's events by partition: 3 and 3.0 are one
    partition, two 64-bit ids a float64 rounds to one value (2**53 and 2**53 + 1) are
    two (one group would let a match take events of another partition). NaN is one."""
    equal = (a == b) or (a != a and b != b)
    assert (partition_group_key(a) == partition_group_key(b)) == equal
    if equal:
        assert hash(partition_group_key(a)) == hash(partition_group_key(b))


def test_partition_7_and_partition_text_7_are_rechecked_apart():
    """``a b`` in partition 7 and ``b c`` in partition "7": each is a match with one error
    and no exact match ends at either point. Re-checked as one partition, ``a b c`` across
    the two would be counted at the second."""
    rows = [{"type": ty, "t": float(i), "id": key}
            for i, (ty, key) in enumerate(zip("abbc", [7, 7.0, "7", "7"]))]
    events = EventBatch.from_events(rows)
    found = acep.match("a b c", events, 5.0, 1, partition="id")
    assert [(type(p), p) for p in found.partition] == [(int, 7), (str, "7")]
    ref = PatternRef("p", "a b c", 5.0, 1, (), "id")
    batch = decode_batch(encode_batch(batch_from_matches(found, events, device="pi", seq=0,
                                                         pattern=ref)))
    assert [(type(p), p) for p in batch.partition] == [(int, 7), (str, "7")]
    checks = recheck_batch(batch)
    assert [(c.exact, c.exact_count, c.exact_matches) for c in checks] == [(False, 0, [])] * 2
    assert [(c.exact, c.exact_count) for c in recheck_batch(batch, fast=False)] == \
        [(False, 0)] * 2
