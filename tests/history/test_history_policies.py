"""Policies from histories: valid ScorePolicy tables, hindsight choices, event sampling, and
no effect at all on an unconstrained run."""

import numpy as np
import pytest
from support.history import HAND_LOG, hand_graph, random_events

from acep import EventBatch, Matcher
from acep.shedding import Budget, Candidates, RandomPolicy, ScorePolicy
from history.build import build_history, traced_run
from history.graph import decode_cells
from history.policies import (
    DEFER,
    POLICY_NAMES,
    CompletionPolicy,
    EventSampler,
    HindsightPolicy,
    HistoryPolicy,
    HSpicePolicy,
    HybridPolicy,
    PSpicePolicy,
    policy_options,
    sample_events,
)
from history.sketch import Sketch

NAN = float("nan")


def test_history_policy_is_a_score_policy_over_a_copy_of_the_sketch():
    s = Sketch.from_graph(hand_graph(), hashes=8)
    p = HistoryPolicy(s, learning_rate=0.1, explore=0.02, seed=5)
    assert isinstance(p, ScorePolicy) and p.n_cells == 24
    assert p.score.dtype == np.float64 and p.proxy_class.dtype == np.int64
    assert np.allclose(p.score, s.score) and np.array_equal(p.proxy_class, s.proxy_class)
    assert (p.learning_rate, p.explore, p.seed) == (0.1, 0.02, 5)
    p.score[5] = 0.0  # what the kernel's online update does, in place
    assert s.score[5] > 0 and p.learned_sketch().score[5] == 0.0
    assert p.bins.rem_edges == (5.0,) and HistoryPolicy(s, proxy=False).proxy_class is None


def test_history_policy_needs_the_sketch_bins():
    s = Sketch.from_graph(hand_graph(), hashes=8)
    with pytest.raises(ValueError, match="bins"):
        Matcher("a b", 10.0, 1, policy=HistoryPolicy(s))


def test_completion_policy_is_per_state_and_remaining_window():
    g = hand_graph()
    p = CompletionPolicy(g)
    p0 = 4 / 6
    # (state, rem bin) of cells 5, 9, 23: (0, 0) 2/2, (1, 0) 2/3, (2, 1) 0/1; smoothed
    expected = {(0, 0): (2 + p0) / 3, (1, 0): (2 + p0) / 4, (2, 1): p0 / 2}
    state, _, rem, _ = decode_cells(np.arange(24), 1, 2, 2)
    for cell in range(24):
        want = expected.get((int(state[cell]), int(rem[cell])), p0)
        assert p.score[cell] == pytest.approx(want)
    assert p.proxy_class is None and p.learning_rate == 0.0 and p.completion.shape == (3, 2)
    counts = {"visits": g.visits.reshape(g.shape), "successes": g.successes.reshape(g.shape)}
    assert np.allclose(CompletionPolicy(counts).score, p.score)
    with pytest.raises(ValueError, match="shape"):
        CompletionPolicy({"visits": g.visits, "successes": g.successes})


def _cands(state, err, start, position, tag, budget):
    n = len(state)
    return Candidates(np.array(state, np.int32), np.array(err, np.int32),
                      np.array(start, np.float64), np.zeros(n), np.full(n, -1, np.int32),
                      np.full(n, -1, np.int64), 0, tag, position, budget)


def test_hindsight_keeps_one_candidate_per_unfound_bundle():
    log = {"partition": np.zeros(6, np.int32), "position": np.array([7, 7, 7, 7, 9, 9]),
           "state": np.array([1, 2, 2, 3, 3, 1]), "start": np.array([1., 2., 3., 3., 3., 9.]),
           "err": np.array([0, 0, 1, 0, 0, 0]), "reach": np.array([9., 9., 30., NAN, 9., 30.]),
           "merged": np.zeros(6, np.uint8), "gap": np.zeros(6)}
    p = HindsightPolicy(log, window=5.0)
    assert p.n_bundles == 2  # points 9 and 30 are more than w apart
    # at position 7: candidates 0 and 1 lead to bundle 0 (prefer the later start: 1),
    # candidate 2 to bundle 1, candidate 3 nowhere, candidate 4 is not a node of the run
    c = _cands([1, 2, 2, 3, 5], [0, 0, 1, 0, 0], [1., 2., 3., 3., 3.], 7, 5.0, budget=3)
    assert p.select(c).tolist() == [1, 2]
    assert p.select(_cands([1, 2, 2], [0, 0, 1], [1., 2., 3.], 7, 5.0, budget=1)).tolist() == [1]
    assert not p.found.any()
    # at position 9 the candidate completes bundle 0 (reach == tag): found once the tag
    # moves on, never kept again
    assert p.select(_cands([3, 1], [0, 0], [3., 9.], 9, 9.0, budget=2)).tolist() == [0, 1]
    assert p.found.tolist() == [False, False]  # another event may still share tag 9
    assert p.select(_cands([5], [0], [10.], 10, 10.0, budget=1)).tolist() == []
    assert p.found.tolist() == [True, False]  # the tag moved on: bundle 0 was completed
    assert p.select(_cands([1, 2], [0, 0], [1., 2.], 7, 5.0, budget=2)).tolist() == []


def test_sampling_keeps_one_in_n_overall_or_per_partition():
    events = [{"type": "a", "t": float(i), "g": g} for i, g in enumerate("PPQPQQPQ")]
    batch = EventBatch.from_events(events)
    assert sample_events(batch, 3).tags.tolist() == [0.0, 3.0, 6.0]
    assert sample_events(batch, 3, offset=1).tags.tolist() == [1.0, 4.0, 7.0]
    # P at 0 1 3 6, Q at 2 4 5 7: every second of each partition's events
    kept = sample_events(batch, 2, partition="g")
    assert kept.tags.tolist() == [0.0, 2.0, 3.0, 5.0]
    assert kept.columns["g"].tolist() == ["P", "Q", "P", "Q"] and kept.position == 0
    # counts carry over across batches
    s = EventSampler(2, partition="g")
    first = s(EventBatch.from_events(events[:3]))
    second = s(EventBatch.from_events(events[3:], position=3))
    assert first.tags.tolist() + second.tags.tolist() == [0.0, 2.0, 3.0, 5.0]
    assert second.position == 2 and s.kept_positions.tolist() == [3, 5]
    assert len(sample_events(batch, 1)) == len(batch)
    with pytest.raises(ValueError, match="keep_every"):
        sample_events(batch, 0)
    with pytest.raises(ValueError, match="no attribute"):
        sample_events(batch, 2, partition="origin")


# ---------------------------------------------------------------------- with the engine



def _rows(found):
    return sorted(zip(found.partition.tolist(), found.point.tolist(), found.errors.tolist(),
                      found.start.tolist(),
                      (tuple(found.events_of(i).tolist()) for i in range(len(found)))))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_unconstrained_run_with_policies_attached_finds_exactly_the_same(seed):
    pattern, w, k, where = "a b+ c d", 6.0, 1, ["c.x > a.x"]
    train = EventBatch.from_events(random_events(300, seed + 100))
    test = EventBatch.from_events(random_events(300, seed))
    g = build_history(pattern, train, w, k, where=where, partition="g", n_bins=4)
    sketch = Sketch.from_graph(g)
    plain = Matcher(pattern, w, k, where=where, partition="g").match(test)
    assert len(plain) > 0
    run = traced_run(pattern, test, w, k, where=where, partition="g", bins=sketch.bins(),
                     fields=None, merge=False)
    policies = [HistoryPolicy(sketch), HistoryPolicy(sketch, learning_rate=0.5, explore=0.5),
                CompletionPolicy(g), HindsightPolicy(run.log, w)]
    for policy in policies:
        for budget in (None, Budget(1e9)):
            m = Matcher(pattern, w, k, where=where, partition="g", bins=sketch.bins(),
                        budget=budget, policy=policy)
            found = m.match(test)
            if isinstance(policy, HindsightPolicy) and budget is not None:
                # asked on every event, it sheds what leads nowhere even with credit to
                # spare: every bundle is still hit by a match point
                hit = {(b.partition, b.first) for b in _bundles(plain, w)
                       if any(p == b.partition and b.first <= t <= b.last
                              for p, t in zip(found.partition, found.point))}
                assert hit == {(b.partition, b.first) for b in _bundles(plain, w)}
                continue
            assert _rows(found) == _rows(plain), (type(policy).__name__, budget)
            assert m.stats["shed"] == 0


def _bundles(found, w):
    from acep import bundles
    return bundles(found, w)


def test_policies_under_a_tight_budget_report_only_true_points():
    pattern, w, k = "a b c d", 6.0, 1
    events = EventBatch.from_events(random_events(400, 9, types="abcd"))
    g = build_history(pattern, events, w, k, partition="g", n_bins=4)
    sketch = Sketch.from_graph(g)
    truth = Matcher(pattern, w, k, partition="g").match(events)
    true_points = set(zip(truth.partition.tolist(), truth.point.tolist()))
    run = traced_run(pattern, events, w, k, partition="g", bins=sketch.bins(), fields=None,
                     merge=False)
    found_by = {}
    for policy in (HistoryPolicy(sketch), CompletionPolicy(g), HindsightPolicy(run.log, w),
                   RandomPolicy(3)):
        m = Matcher(pattern, w, k, partition="g", bins=sketch.bins(),
                    budget=Budget(0.5, burst=4), policy=policy)
        found = m.match(events)
        points = set(zip(found.partition.tolist(), found.point.tolist()))
        assert points <= true_points and m.stats["shed"] > 0
        found_by[policy.name] = points
    # knowing every candidate's bundle beats random drop on this stream (9 bundles vs 6)
    bundles_of = _bundle_lookup(truth, w)
    assert len(bundles_of(found_by["hindsight"])) > len(bundles_of(found_by["random"])) > 0


def _bundle_lookup(truth, w):
    from acep import bundles

    table = bundles(truth, w)

    def found(points):
        return {i for i, b in enumerate(table)
                for p, t in points if p == b.partition and b.first <= t <= b.last}
    return found


def test_hand_log_policy_on_sketch_has_no_proxy_for_unreached_cells():
    s = Sketch.from_graph(hand_graph(), hashes=4)
    p = HistoryPolicy(s)
    reached = {int(c) for c in np.unique(hand_graph().reach_cell)}
    assert {int(c) for c in np.flatnonzero(p.proxy_class >= 0)} == reached
    assert len(HAND_LOG["cell"]) == 7


def test_policy_options_builds_every_row_by_name():
    """The rows of ``acep history evaluate`` and ``bench/shedding``: the presets, the
    completion model, the static and the learning history policy (with the fitted reserves
    of the budget), hindsight; an unknown name is refused with the choices."""
    pattern, w, k = "a b c", 6.0, 1
    events = EventBatch.from_events(random_events(300, 5))
    g = build_history(pattern, events, w, k, partition="g", n_bins=4)
    sketch = Sketch.from_graph(g)
    run = traced_run(pattern, events, w, k, partition="g", bins=sketch.bins(), fields=None,
                     merge=False)
    known = dict(sketch=sketch, graph=g, budget=Budget(0.5),
                 hindsight={"log": run.log, "matches": {"partition": run.partition,
                                                        "point": run.point}})
    made = {name: policy_options(name, **known) for name in POLICY_NAMES}
    assert isinstance(made["completion"]["policy"], CompletionPolicy)
    assert isinstance(made["pspice"]["policy"], PSpicePolicy)
    assert isinstance(made["hspice"]["policy"], HSpicePolicy)
    assert isinstance(made["hybrid"]["policy"], HybridPolicy)
    assert isinstance(made["hindsight"]["policy"], HindsightPolicy)
    static, rl = made["history"]["policy"], made["history+rl"]["policy"]
    assert static.learning_rate == static.explore == 0.0 and rl.learning_rate > 0
    assert static.defer == rl.defer == DEFER
    assert policy_options("history", defer=0, **known)["policy"].defer == 0
    for name, options in made.items():  # every row runs under the budget, as built
        m = Matcher(pattern, w, k, partition="g", budget=known["budget"], **options)
        assert set(m.match(events).point) <= set(run.point), name
    with pytest.raises(ValueError, match="unknown policy 'nope'.*keep-first"):
        policy_options("nope", **known)
