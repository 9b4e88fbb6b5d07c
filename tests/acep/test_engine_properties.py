"""The engines against the brute-force oracle on many random small inputs.

For random patterns, streams, windows, error bounds, predicates and partitions:
- all-trajectories output of both kernels (compiled and pure Python) equals the oracle's
  set of matches with their least errors;
- the reference Algorithm 1 finds the same trajectories;
- the default output (merging on and off) has the oracle's best (errors, start) per match
  point, and so its bundles; every reported trajectory is a real match with those errors.
"""

from __future__ import annotations

import bisect

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from support.oracle import oracle_matches
from support.strategies import case, regex, stream

from acep import backend
from acep.matcher import Matcher, best_per_point, bundles
from acep.reference import acep_match

BACKENDS = ["compiled", "python"] if backend() == "compiled" else ["python"]


def _trajectories(found) -> dict:
    return {(p, tuple(int(x) for x in found.events_of(i))): int(found.errors[i])
            for i, p in enumerate(found.partition)}


def _reference(pattern, where, events, w, k) -> dict:
    best: dict = {}
    for m in acep_match(pattern, events, w, k, where):
        key = (m.partition, m.events)
        best[key] = min(best.get(key, k + 1), m.errors)
    return best


SETTINGS = settings(max_examples=500, deadline=None, derandomize=False,
                    suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(case())
def test_engines_agree_with_oracle(c):
    pattern, where, events, w, k = c
    expected = oracle_matches(pattern, events, w, k, where)
    for name in BACKENDS:
        found = Matcher(pattern, w, k, where=where, all_trajectories=True,
                        backend=name).match(events)
        assert _trajectories(found) == expected["matches"], name
        for merge in (True, False):
            best = Matcher(pattern, w, k, where=where, merge=merge, backend=name).match(events)
            assert best_per_point(best) == expected["points"], (name, merge)
            assert len(best) == len(expected["points"])  # one match per (partition, point)
            got_bundles = [(b.partition, b.first, b.last, b.n_points) for b in bundles(best, w)]
            assert sorted(got_bundles, key=repr) == sorted(expected["bundles"], key=repr)
            for m in best.to_matches():  # each reported trajectory is a real match
                assert expected["matches"][(m.partition, m.events)] == m.errors
                assert m.tags[0] == m.start and m.tags[-1] == m.point
    assert _reference(pattern, where, events, w, k) == expected["matches"]


@settings(max_examples=150, deadline=None)
@given(case(), st.integers(1, 4))
def test_batches_split_anywhere_give_the_same_matches(c, pieces):
    """Streaming: feeding events in several batches changes nothing."""
    from acep.events import EventBatch

    pattern, where, events, w, k = c
    whole = Matcher(pattern, w, k, where=where).match(events)
    matcher = Matcher(pattern, w, k, where=where)
    size = max(1, len(events) // pieces)
    parts = []
    for start in range(0, len(events), size):
        batch = EventBatch.from_events(events[start:start + size], position=start)
        parts.append(matcher.match_batch(batch))
    parts.append(matcher.flush())
    from acep.matcher import MatchBatch

    split = MatchBatch.concat(parts)
    assert sorted(split.to_matches(), key=repr) == sorted(whole.to_matches(), key=repr)


@pytest.mark.parametrize("name", BACKENDS)
def test_long_random_stream_keeps_memory_bounded(name):
    """Expiry and merging keep the live nodes bounded on a long stream."""
    import numpy as np

    rng = np.random.default_rng(7)
    events = [{"type": rng.choice(["a", "b", "c", "d"]), "t": float(i)} for i in range(3000)]
    m = Matcher("a b* c (a | d) b", 20, 2, backend=name)
    m.match(events)
    stats = m.stats
    assert stats["created"] > 3000
    assert stats["peak_live"] < 200  # k+1 Pareto nodes per state and partition at most
    assert stats["arena_nodes"] <= stats["peak_live"] + 50


def densest(events: list[dict], w: float) -> int:
    """The most events one window of length ``w`` holds."""
    times = [e["t"] for e in events]
    return max(bisect.bisect_right(times, t + w) - i for i, t in enumerate(times))


@settings(max_examples=60, deadline=None)
@given(regex(), stream(max_events=150), st.integers(1, 6), st.integers(0, 3))
def test_long_streams_with_a_tiny_arena_agree_with_the_reference(pattern, events, w, k):
    """Arena growth, sweeps and reference-counted trajectories under pressure. All
    trajectories of ``a*`` over n events of one window are 2^n: a window holds at most 12
    events here (40 simultaneous events once took the test run to 24 GB and the kernel's
    out-of-memory kill)."""
    assume(densest(events, w) <= 12)
    expected = _reference(pattern, [], events, float(w), k)
    for name in BACKENDS:
        found = Matcher(pattern, w, k, all_trajectories=True, capacity=16,
                        backend=name).match(events)
        assert _trajectories(found) == expected, name
        best = Matcher(pattern, w, k, capacity=16, backend=name).match(events)
        for m in best.to_matches():
            assert expected[(m.partition, m.events)] == m.errors
    points = {}
    for (part, events_), err in expected.items():
        key = (part, events[events_[-1]]["t"])
        cand = (err, -events[events_[0]]["t"])
        points[key] = min(points.get(key, cand), cand)
    merged = Matcher(pattern, w, k, capacity=16).match(events)
    assert best_per_point(merged) == {key: (e, -s) for key, (e, s) in points.items()}
