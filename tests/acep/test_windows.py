"""The events of match windows (acep.windows): what the agent uploads for its matches and
what the fit's ``windows`` reserves are rated on, checked against a brute-force reading of
docs/WIRE.md ("the window of match i is every event of its partition with a tag in
[point_i - window, point_i]") on many random streams."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from acep import EventBatch, Matcher
from acep.windows import match_windows, partition_groups, window_mask


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


def test_events_without_a_partition_key_are_in_no_window():
    events = EventBatch.from_events([{"type": "a", "t": 0.0, "g": "P"},
                                     {"type": "a", "t": 1.0},
                                     {"type": "b", "t": 2.0, "g": "P"}])
    groups = partition_groups(events, "g")
    assert list(groups) == ["P"]
    assert window_mask(events, ["P"], np.array([2.0]), 5.0, groups).tolist() == [True, False, True]
