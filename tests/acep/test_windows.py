"""The events of match windows (acep.windows): what the agent uploads for its matches and
what the fit's ``windows`` reserves are rated on, checked against a brute-force reading of
docs/WIRE.md ("the window of match i is every event of its partition with a tag in
[point_i - window, point_i]") on many random streams."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from acep import EventBatch, Matcher
from acep.windows import PartitionCodes, match_windows, partition_groups, sample_mask, window_mask


def _events(seed, n, keys):
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.integers(0, 3, n)).astype(float)
    return EventBatch.from_events(
        [{"type": str(ty), "t": float(tt), "g": g}
         for ty, tt, g in zip(rng.choice(list("abx"), n), t, rng.choice(keys, n).tolist())])


def _brute(events, matches, window, partition):
    keys = events.columns[partition].tolist() if partition else [None] * len(events)
    return np.array([any(k == p and q - window <= t <= q
                         for p, q in zip(matches.partition.tolist(), matches.point.tolist()))
                     for k, t in zip(keys, events.tags.tolist())], dtype=bool)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 80), window=st.sampled_from([0.0, 2.0, 5.0]),
       numeric=st.booleans(), partitioned=st.booleans())
def test_window_mask_is_every_event_of_the_partition_within_window_before_a_point(
        seed, n, window, numeric, partitioned):
    events = _events(seed, n, [1.0, 2.0, 3.0] if numeric else ["P", "Q", "R"])
    partition = "g" if partitioned else None
    matches = Matcher("a b", window, 0, partition=partition).match(events)
    keys = matches.partition.tolist()
    expected = _brute(events, matches, window, partition)
    mask = window_mask(events, keys, matches.point, window, partition_groups(events, partition))
    assert mask.tolist() == expected.tolist()
    part = match_windows(events, keys, matches.point, window, partition)
    assert part.tags.tolist() == events.tags[expected].tolist()
    assert part.types().tolist() == events.types()[expected].tolist()
    assert part.position == 0 and len(part) == int(expected.sum())


@settings(max_examples=200, deadline=None)
@given(codes=st.lists(st.integers(-1, 3), min_size=1, max_size=60),
       tags=st.lists(st.sampled_from([0.0, 0.5, 1.0, 2.0, 3.5, 4.0, 7.25, 9.0]), min_size=60,
                     max_size=60),
       matches=st.lists(st.tuples(st.integers(0, 4), st.sampled_from([0.5, 2.0, 4.0, 9.0, 30.0])),
                        max_size=8),
       window=st.sampled_from([0.0, 0.5, 2.0, 7.0]))
def test_window_mask_of_codes_is_the_brute_force_one_whatever_the_order_of_tags(
        codes, tags, matches, window):
    # partition codes as the agent keeps them: any order of tags, codes without events,
    # events without a key (-1), windows of one partition with and without gaps between
    tags = np.array(tags[:len(codes)])
    events = EventBatch(np.zeros(len(codes), np.int32), ["a"], tags, {})
    keys = [f"k{c}" for c, _ in matches]
    points = np.array([p for _, p in matches], dtype=float)
    index = {f"k{c}": c for c in range(5)}
    mask = window_mask(events, keys, points, window, PartitionCodes(np.array(codes), index))
    expected = [any(c == m and p - window <= t <= p for m, p in matches)
                for c, t in zip(codes, tags.tolist())]
    assert mask.tolist() == expected


def test_partition_codes_and_groups_give_the_same_windows():
    events = _events(5, 400, ["P", "Q", "R", "S"])
    matches = Matcher("a b", 3.0, 0, partition="g").match(events)
    groups = partition_groups(events, "g")
    codes = np.full(len(events), -1)
    for code, idx in enumerate(groups.values()):
        codes[idx] = code
    by_codes = PartitionCodes(codes, {key: code for code, key in enumerate(groups)})
    keys = matches.partition.tolist()
    assert len(keys) > 20
    assert window_mask(events, keys, matches.point, 3.0, by_codes).tolist() == \
        window_mask(events, keys, matches.point, 3.0, groups).tolist()


def test_events_without_a_partition_key_are_in_no_window():
    events = EventBatch.from_events([{"type": "a", "t": 0.0, "g": "P"},
                                     {"type": "a", "t": 1.0},
                                     {"type": "b", "t": 2.0, "g": "P"}])
    groups = partition_groups(events, "g")
    assert list(groups) == ["P"]
    assert window_mask(events, ["P"], np.array([2.0]), 5.0, groups).tolist() == [True, False, True]


# --------------------------------------------------------------------------- sample blocks

@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 120), window=st.sampled_from([1.0, 2.5]),
       share=st.sampled_from([0.2, 0.5, 0.8]), drop=st.integers(2, 5))
def test_sample_keeps_whole_blocks_whatever_else_the_stream_holds(seed, n, window, share, drop):
    events = _events(seed, n, ["P", "Q", "R"])
    mask = sample_mask(events, "g", window, share, seed=7)
    keys, blocks = events.columns["g"].tolist(), np.floor(events.tags / (2 * window))
    decided: dict = {}
    for key, block, kept in zip(keys, blocks.tolist(), mask.tolist()):
        assert decided.setdefault((key, block), kept) == kept
    some = np.flatnonzero(np.arange(n) % drop != 0)  # another stream around the same events
    part = EventBatch(events.type_codes[some], events.type_names, events.tags[some],
                      {k: v[some] for k, v in events.columns.items()})
    assert sample_mask(part, "g", window, share, seed=7).tolist() == mask[some].tolist()


def test_sample_draws_the_share_of_blocks():
    keys = [f"k{i}" for i in range(40)]
    events = EventBatch.from_events([{"type": "a", "t": float(t), "g": key}
                                     for t in range(0, 2000, 2) for key in keys])
    blocks = 40 * 1000  # one event per block of 2 x window 1
    for share in (0.05, 0.5):
        drawn = sample_mask(events, "g", 1.0, share).sum()
        assert abs(drawn - share * blocks) < 4 * np.sqrt(blocks * share * (1 - share))
    other = sample_mask(events, "g", 1.0, 0.5, seed=1)
    assert (other != sample_mask(events, "g", 1.0, 0.5)).mean() > 0.4  # a new seed, a new draw


def test_sample_of_none_all_and_keyless_events():
    events = EventBatch.from_events([{"type": "a", "t": 0.0, "g": "P"}, {"type": "a", "t": 1.0},
                                     {"type": "b", "t": 9.0, "g": "Q"}])
    assert sample_mask(events, "g", 2.0, 1.0).tolist() == [True, False, True]
    assert not sample_mask(events, "g", 2.0, 0.0).any()
    assert sample_mask(events, None, 2.0, 1.0).all()


@pytest.mark.parametrize("window, share, problem", [
    (0.0, 0.5, "window > 0"), (float("nan"), 0.5, "window > 0"),
    (2.0, -0.1, r"share must be in \[0, 1\]"), (2.0, 1.5, "share"), (2.0, float("nan"), "share")])
def test_sample_refuses_a_bad_window_or_share(window, share, problem):
    events = EventBatch.from_events([{"type": "a", "t": 0.0}])
    with pytest.raises(ValueError, match=problem):
        sample_mask(events, None, window, share)


def test_sample_draws_a_key_alike_whatever_its_column_holds_beside_it():
    rows = [{"type": "a", "t": float(t), "g": 7} for t in range(0, 400, 3)]
    numeric = EventBatch.from_events(rows)
    mixed = EventBatch.from_events(rows + [{"type": "a", "t": 400.0, "g": "text"}])
    assert numeric.columns["g"].dtype != mixed.columns["g"].dtype
    want = sample_mask(numeric, "g", 2.0, 0.5)
    assert 0 < want.sum() < len(want)
    assert sample_mask(mixed, "g", 2.0, 0.5)[:-1].tolist() == want.tolist()
