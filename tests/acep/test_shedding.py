"""The engine under a budget (docs/SHEDDING.md): budget, policies, cells, node log, learning.

Each property runs on many random small inputs and compares the kernel with an independent
computation: the unconstrained run, a Python re-implementation of the selection rule, the
numpy cell formula, the all-trajectories output, the log's own outcomes.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.strategies import case, stream

from acep import backend
from acep.events import EventBatch
from acep.matcher import BucketWarning, MatchBatch, Matcher, best_per_point
from acep.shedding import (
    Budget,
    BudgetError,
    CallbackPolicy,
    KeepFirstPolicy,
    OldestFirstPolicy,
    RandomPolicy,
    ScorePolicy,
    VectorBins,
    check_buckets,
)

BACKENDS = ["compiled", "python"] if backend() == "compiled" else ["python"]
BINS = VectorBins((1.0, 3.0), (0.5, 2.0))
SETTINGS = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def run(pattern, where, events, w, k, **options):
    m = Matcher(pattern, window=w, k=k, where=where, **options)
    found = m.match(EventBatch.from_events(events))
    return m, found


def n_cells(pattern, where, k):
    return BINS.n_cells(Matcher(pattern, window=1, k=k, where=where).pattern.automaton.n_states, k)


def policies(pattern, where, k, seed):
    cells = n_cells(pattern, where, k)
    rng = np.random.default_rng(seed)
    return [KeepFirstPolicy(), RandomPolicy(seed), OldestFirstPolicy(),
            ScorePolicy(rng.random(cells), rng.integers(-1, 3, cells), explore=0.2,
                        learning_rate=0.3, seed=seed),
            ScorePolicy(rng.random(cells), explore=0.2, learning_rate=0.3, seed=seed,
                        seed_reserve=0.5, defer=2)]


@SETTINGS
@given(case(), st.integers(0, 2**16))
def test_a_budget_never_exceeded_finds_what_the_unconstrained_run_finds(c, seed):
    """With credit to spare, or no budget, a policy attached changes nothing."""
    pattern, where, events, w, k = c
    _, truth = run(pattern, where, events, w, k)
    for policy in policies(pattern, where, k, seed):
        for budget in (None, Budget(1000.0, burst=1)):
            m, found = run(pattern, where, events, w, k, policy=policy, budget=budget,
                           bins=BINS)
            assert best_per_point(found) == best_per_point(truth), type(policy).__name__
            assert m.stats["shed"] == 0


@SETTINGS
@given(case(), st.integers(0, 3), st.integers(0, 2**16))
def test_kept_candidates_per_event_stay_within_the_budget(c, ops, seed):
    """burst = 1: every event may keep at most ``ops`` candidates, never more."""
    pattern, where, events, w, k = c
    for policy in policies(pattern, where, k, seed):
        m = Matcher(pattern, window=w, k=k, where=where, budget=Budget(float(ops), burst=1),
                    policy=policy, bins=BINS)
        load = np.zeros((len(events), 4), dtype=np.int64)
        m.match_batch(EventBatch.from_events(events), load=load)
        assert (load[:, 0] <= ops).all()  # nodes created (after predicates) per event
        s = m.stats
        assert s["candidates"] - s["shed"] <= ops * len(events)


@SETTINGS
@given(case(), st.integers(0, 2), st.integers(0, 2**16))
def test_shed_runs_report_only_true_match_points(c, ops, seed):
    """Shedding loses matches but never invents one: precision is 1 and errors never drop."""
    pattern, where, events, w, k = c
    _, truth = run(pattern, where, events, w, k)
    best = best_per_point(truth)
    for policy in policies(pattern, where, k, seed):
        _, found = run(pattern, where, events, w, k, policy=policy,
                       budget=Budget(float(ops), burst=2), bins=BINS)
        for key, (err, start) in best_per_point(found).items():
            assert key in best
            assert (err, -start) >= (best[key][0], -best[key][1])


@pytest.mark.parametrize("kernel", BACKENDS)
@SETTINGS
@given(c=case(), ops=st.integers(0, 3), seed=st.integers(0, 2**16))
def test_runs_repeat_exactly(kernel, c, ops, seed):
    pattern, where, events, w, k = c
    outputs = []
    for _ in range(2):
        policy = policies(pattern, where, k, seed)[3]
        m, found = run(pattern, where, events, w, k, policy=policy, bins=BINS, backend=kernel,
                       budget=Budget(float(ops), burst=2))
        outputs.append((best_per_point(found), m.stats["shed"], tuple(policy.score)))
    assert outputs[0] == outputs[1]


@SETTINGS
@given(case(), st.integers(0, 2**16))
def test_a_budget_changed_between_batches_holds_from_there(c, seed):
    """set_budget between batches: after a generous budget nothing more is shed, after a
    budget of 0 every later candidate is shed."""
    pattern, where, events, w, k = c
    batch, half = EventBatch.from_events(events), len(events) // 2
    for first, then in ((Budget(0.0, burst=2), Budget(1e6, burst=2)),
                        (Budget(1e6, burst=2), Budget(0.0, burst=2))):
        m = Matcher(pattern, window=w, k=k, where=where, bins=BINS, budget=first,
                    policy=RandomPolicy(seed))
        m.match_batch(batch.slice(0, half))
        before = m.stats
        m.set_budget(then)
        m.match_batch(batch.slice(half, len(events)))
        after = m.stats
        new, shed = (after[x] - before[x] for x in ("candidates", "shed"))
        assert m.budget == then
        assert shed == (new if then.ops_per_event == 0 else 0)


def test_set_budget_is_refused_with_the_reason():
    with pytest.raises(TypeError, match="budget"):
        Matcher("a b", window=5, k=0, budget=Budget(1.0)).set_budget(1.0)
    with pytest.raises(ValueError, match="budget=Budget"):
        Matcher("a b", window=5, k=0).set_budget(Budget(1.0))
    m = Matcher("a b", window=5, k=0, budget=Budget(1.0))
    m.match([])
    with pytest.raises(ValueError, match="after flush"):
        m.set_budget(Budget(2.0))


def test_both_kernels_shed_alike():
    """The compiled and the pure-Python kernel make the same decisions (one source)."""
    if len(BACKENDS) < 2:
        pytest.skip("the compiled kernel is not built")
    rng = np.random.default_rng(5)
    events = [{"type": str(rng.choice(list("abcd"))), "t": float(i), "p": int(rng.integers(3))}
              for i in range(2000)]
    results = []
    for kernel in BACKENDS:
        policy = ScorePolicy(np.linspace(0, 1, n_cells("a b c d", (), 1)), explore=0.1,
                             learning_rate=0.05, seed=9)
        m, found = run("a b c d", (), events, 10.0, 1, partition="p", policy=policy, bins=BINS,
                       budget=Budget(0.6, burst=4), backend=kernel, trace=True)
        results.append((best_per_point(found), m.stats["shed"], policy.score,
                        m.take_node_log()))
    assert results[0][:2] == results[1][:2]
    np.testing.assert_array_equal(results[0][2], results[1][2])
    for key, column in results[0][3].items():
        np.testing.assert_array_equal(column, results[1][3][key])  # NaN equals NaN here


# --------------------------------------------------------------------------- selection rule


class Recorder(CallbackPolicy):
    """Applies SHEDDING.md section 3's score rule in numpy, and records what it saw."""

    def __init__(self, score, proxy_class, seed_reserve=0.0, depth=0.0, advance_reserve=0.0,
                 power=4.0):
        self.score, self.proxy_class, self.seen = score, proxy_class, []
        self.seed_reserve, self.depth = seed_reserve, depth
        self.advance_reserve, self.power = advance_reserve, power

    def select(self, c):
        self.seen.append(dataclasses.replace(  # the views are only valid during the call
            c, **{f: getattr(c, f).copy() for f in ("state", "err", "start", "gap", "cell",
                                                    "prev")}))
        prio = self.score[c.cell] if self.score is not None else np.zeros(len(c))
        order = np.lexsort((np.arange(len(c)), c.err, -c.start, -prio))
        first, rest, classes = [], [], set()
        for i in order:
            reserve = self.seed_reserve if c.prev[i] < 0 else self.advance_reserve
            if reserve > 0 and self.score is not None:
                s = min(max(self.score[c.cell[i]], 0.0), 1.0)
                # called only when the candidates exceed the credit, so budget is the
                # credit (integer ops per event and burst keep it whole)
                if c.budget - len(first) - 1 < reserve * (1 - s) ** self.power * self.depth:
                    continue  # a candidate the credit cannot afford: shed
            cls = -1 if self.proxy_class is None else self.proxy_class[c.cell[i]]
            if cls >= 0 and cls in classes:
                rest.append(i)
            else:
                classes.add(cls)
                first.append(i)
        return np.array((first + rest)[: c.budget], dtype=np.int64)


@SETTINGS
@given(case(), st.integers(0, 3), st.integers(0, 2**16), st.booleans(), st.booleans(),
       st.sampled_from([0.0, 0.5, 1.0]), st.sampled_from([0.0, 0.5, 1.0]),
       st.sampled_from([1.0, 2.0, 4.0]))
def test_score_policy_selects_as_specified(c, ops, seed, with_score, with_classes, reserve,
                                           advance, power):
    """The kernel's score selection equals the rule of SHEDDING.md 3 written in numpy."""
    pattern, where, events, w, k = c
    cells = n_cells(pattern, where, k)
    rng = np.random.default_rng(seed)
    score = rng.integers(0, 5, cells) / 4.0 if with_score else None
    classes = rng.integers(-1, 2, cells) if with_classes else None
    budget = Budget(float(ops), burst=2)
    m1, fast = run(pattern, where, events, w, k,
                   policy=ScorePolicy(score, classes, seed_reserve=reserve,
                                      advance_reserve=advance, reserve_power=power),
                   budget=budget, bins=BINS, trace=True)
    m2, slow = run(pattern, where, events, w, k,
                   policy=Recorder(score, classes, reserve, budget.depth, advance, power),
                   budget=budget, bins=BINS, trace=True)
    assert best_per_point(fast) == best_per_point(slow)
    log1, log2 = m1.take_node_log(), m2.take_node_log()
    for key in log1:
        np.testing.assert_array_equal(log1[key], log2[key])


@SETTINGS
@given(case(), st.integers(0, 1))
def test_candidates_carry_the_cells_of_their_match_vectors(c, ops):
    """The cell the kernel computes is VectorBins.cells of (state, err, rem, gap)."""
    pattern, where, events, w, k = c
    recorder = Recorder(None, None)
    run(pattern, where, events, w, k, policy=recorder, budget=Budget(float(ops), burst=1),
        bins=BINS)
    for cands in recorder.seen:
        rem = w - (cands.tag - cands.start)
        expected = BINS.cells(cands.state, cands.err, rem, cands.gap, k)
        np.testing.assert_array_equal(cands.cell, expected)
        assert (cands.gap[cands.prev < 0] == 0).all()
        assert len(cands) > cands.budget


class Bad(CallbackPolicy):
    def __init__(self, answer):
        self.answer = answer

    def select(self, c):
        return self.answer(c)


@pytest.mark.parametrize("answer, message", [
    (lambda c: np.arange(c.budget + 1), "kept"),
    (lambda c: np.array([len(c)]), "outside"),
    (lambda c: np.array([0, 0]) if c.budget >= 2 else np.array([len(c) + 5]), "twice|outside"),
    (lambda c: np.array([0.5]), "indices"),
])
def test_a_policy_breaking_the_contract_is_named(answer, message):
    events = [{"type": "a", "t": float(i)} for i in range(6)] + [{"type": "b", "t": 6.0}]
    with pytest.raises(ValueError, match=message) as info:
        run("a b", (), events, 10.0, 0, policy=Bad(answer), budget=Budget(2.0, burst=1),
            merge=False)  # the b event has six candidates
    assert "Bad.select" in str(info.value)


def test_a_score_table_of_the_wrong_size_is_refused():
    with pytest.raises(ValueError, match="cells"):
        Matcher("a b", window=3, k=0, policy=ScorePolicy(np.zeros(7)), bins=BINS)
    with pytest.raises(ValueError, match="no bins"):
        Matcher("a b", window=3, k=0, policy=ScorePolicy(np.zeros(7)))


# --------------------------------------------------------------------------- node log, learning


@SETTINGS
@given(case())
def test_node_log_outcomes_match_the_trajectories(c):
    """Every node is logged once; a node reaches a point iff it is on a reported trajectory,
    and its ``reach`` is the earliest point of the trajectories through it."""
    pattern, where, events, w, k = c
    m, found = run(pattern, where, events, w, k, all_trajectories=True, trace=True, bins=BINS)
    log = m.take_node_log()
    assert len(log["cell"]) == m.stats["created"]
    earliest: dict[int, float] = {}
    for i in range(len(found)):
        for pos in found.events_of(i):
            earliest[int(pos)] = min(earliest.get(int(pos), np.inf), float(found.point[i]))
    reached = np.isfinite(log["reach"])
    assert set(log["position"][reached].tolist()) == set(earliest)
    for pos, reach in zip(log["position"][reached], log["reach"][reached]):
        assert reach >= earliest[int(pos)]
    for pos in earliest:
        rows = (log["position"] == pos) & reached
        assert log["reach"][rows].min() == earliest[pos]
    assert (log["reach"][reached] <= log["start"][reached] + w).all()
    assert (log["tag"] <= np.where(reached, log["reach"], np.inf)).all()
    rem = w - (log["tag"] - log["start"])
    np.testing.assert_array_equal(log["cell"], BINS.cells(log["state"], log["err"], rem,
                                                          log["gap"], k))


@SETTINGS
@given(case(), st.integers(0, 2**16))
def test_learning_moves_each_cell_to_its_latest_outcome(c, seed):
    """With learning rate 1 a cell's score is the outcome of the last node retired there."""
    pattern, where, events, w, k = c
    cells = n_cells(pattern, where, k)
    score = np.full(cells, 0.5)
    m = Matcher(pattern, window=w, k=k, where=where, bins=BINS, trace=True,
                policy=ScorePolicy(score, learning_rate=1.0))
    m.match_batch(EventBatch.from_events(events))
    log = m.take_node_log()  # before flush: only retired nodes, in retirement order
    expected = np.full(cells, 0.5)
    for cell, reach, merged in zip(log["cell"], log["reach"], log["merged"]):
        if np.isfinite(reach):
            expected[cell] = 1.0
        elif not merged:
            expected[cell] = 0.0
    np.testing.assert_array_equal(score, expected)


def test_learning_follows_a_drifting_stream():
    """Matches start at x, then only at y: the scores of the two start cells follow."""
    events, t = [], 0.0
    for good, bad in (("x", "y"), ("y", "x")):
        for _ in range(300):
            events += [{"type": good, "t": t}, {"type": "b", "t": t + 1},
                       {"type": bad, "t": t + 5}]
            t += 10
    bins = VectorBins((), ())  # one cell per state (k = 0)
    learner = Matcher("(x | y) b", window=3, k=0, bins=bins)
    automaton, types = learner.pattern.automaton, learner.pattern.types
    cell = {types[automaton.label[q]]: q for q in automaton.l_states()}
    score = np.full(bins.n_cells(automaton.n_states, 0), 0.5)
    learner = Matcher("(x | y) b", window=3, k=0, bins=bins,
                      policy=ScorePolicy(score, learning_rate=0.1))
    learner.match_batch(EventBatch.from_events(events[:900]))
    assert score[cell["x"]] > 0.9 and score[cell["y"]] < 0.1
    learner.match_batch(EventBatch.from_events(events[900:], position=900))
    assert score[cell["y"]] > 0.9 and score[cell["x"]] < 0.1


@pytest.mark.parametrize("bad", [dict(ops_per_event=-1), dict(ops_per_event=float("nan")),
                                 dict(ops_per_event=1, burst=0.5)])
def test_bad_budgets_are_refused(bad):
    with pytest.raises(ValueError, match="budget"):
        Budget(**bad)


def test_a_bucket_below_one_operation_keeps_nothing_and_is_refused_with_the_burst_needed():
    """A candidate costs one operation: a bucket of 0.99 sheds them all, one of 1 does not;
    check_buckets refuses the first and names the smallest whole burst that holds one."""
    events = EventBatch.from_events([{"type": "ab"[i % 2], "t": float(i)} for i in range(200)])
    for depth, kept in ((0.99, False), (1.0, True)):
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            m = Matcher("a b", window=4, k=0, budget=Budget(depth / 100, 100))
        m.match_batch(events)
        assert (m.stats["shed"] < m.stats["candidates"]) == kept
        assert [str(w.message) for w in said if w.category is BucketWarning] == ([] if kept else [
            "budget: a bucket of 0.0099 operations per event x burst 100 holds 0.99 operations,"
            " less than the one a match node costs, so every candidate will be shed; give "
            "burst=102 or more (or a larger ops_per_event)"])
        assert all(w.filename == __file__ for w in said)  # the warning points at the caller
    check_buckets([0.5, 1], 2.0, 1)
    rng = np.random.default_rng(3)
    for ratio, ops, burst in zip(rng.uniform(0.001, 0.5, 50), rng.uniform(0.01, 5, 50),
                                 rng.uniform(1, 8, 50)):
        if ratio * ops * burst >= 1:
            check_buckets([ratio], ops, burst)
            continue
        with pytest.raises(BudgetError, match=f"budget {ratio:g} x") as exc:
            check_buckets([ratio, 100.0], ops, burst)
        need = int(str(exc.value).split("--burst ")[1].split()[0])
        assert Budget(ratio * ops, need).depth >= 1 > Budget(ratio * ops, need - 1).depth


def test_vector_bins_from_quantiles_and_decode_round_trip():
    rng = np.random.default_rng(0)
    bins = VectorBins.from_quantiles(rng.random(1000) * 60, rng.exponential(5, 1000), 4)
    assert len(bins.rem_edges) == 3 and len(bins.gap_edges) == 3
    state, err = rng.integers(0, 5, 200), rng.integers(0, 3, 200)
    rem, gap = rng.random(200) * 60, rng.exponential(5, 200)
    cells = bins.cells(state, err, rem, gap, k=2)
    assert cells.max() < bins.n_cells(5, 2)
    back = bins.decode(cells, k=2)
    np.testing.assert_array_equal(back["state"], state)
    np.testing.assert_array_equal(back["err"], err)
    np.testing.assert_array_equal(back["rem_bin"], np.searchsorted(bins.rem_edges, rem, "right"))
    with pytest.raises(ValueError, match="increasing"):
        VectorBins((2.0, 1.0), ())


class KeepEvery(CallbackPolicy):
    """Asked on every event: keeps only candidates from the seed (a deliberate, odd rule)."""

    every_event = True

    def __init__(self):
        self.calls = 0

    def select(self, c):
        self.calls += 1
        return np.flatnonzero(c.prev < 0)[: c.budget]


def test_a_policy_asked_on_every_event_can_shed_ahead():
    events = [{"type": t, "t": float(i)} for i, t in enumerate("abab")]
    policy = KeepEvery()
    m, found = run("a b", (), events, 10.0, 1, policy=policy, budget=Budget(100.0))
    assert policy.calls == 4  # every event had candidates, none exceeded the credit
    assert m.stats["shed"] > 0
    assert set(found.point) <= {0.0, 1.0, 2.0, 3.0}
    assert all(len(found.events_of(i)) == 1 for i in range(len(found)))  # seeds only


@pytest.mark.parametrize("kernel", BACKENDS)
def test_covered_candidates_are_shed(kernel):
    """Without merging. After the match at 1 (a@0 b@1), a@0 -> b@3 can only reach a point within
    w of 1 (the same bundle): cover=1 sheds it. a@2 -> b@3 surely completes at 3, within w of
    1, so it is covered too (whatever its start) and the point 3 is lost. With cover_slack 0.5
    (5 time units) the seed a@2 is covered as well."""
    events = [{"type": x, "t": t} for x, t in (("a", 0.0), ("b", 1.0), ("a", 2.0),
                                               ("b", 3.0))]
    budget = Budget(10.0, burst=10)
    cells = n_cells("a b", (), 0)
    points = {}
    for cover, slack in ((None, 0.0), (1.0, 0.0), (1.0, 0.5), (0.0, 0.5)):
        policy = ScorePolicy(np.zeros(cells), ahead=0.01, cover=cover, cover_slack=slack)
        m, found = run("a b", (), events, 10.0, 0, policy=policy, bins=BINS, budget=budget,
                       backend=kernel, merge=False)  # a@2 would replace a@0
        points[cover, slack] = (sorted(found.point.tolist()), m.stats["shed"])
    assert points[None, 0.0] == ([1.0, 3.0], 0)
    assert points[1.0, 0.0] == ([1.0], 2)
    assert points[1.0, 0.5] == ([1.0], 2)
    assert points[0.0, 0.5] == ([1.0, 3.0], 0)  # the bucket is full: covered ones pass
    with pytest.raises(ValueError, match="cover"):
        ScorePolicy(np.zeros(cells), cover=1.5)


@pytest.mark.parametrize("kernel", BACKENDS)
def test_a_shed_sure_point_moves_the_bundle_found(kernel):
    """Without merging, cover_slack 0.2 (2 time units). After the match at 1, a@0 -> b@4 and
    a@0 -> b@7 surely complete within w of the last point: they are shed, and the bundle found
    now reaches 4, then 7. So the seed a@5 (before 4 + 2) is covered and shed, and a@18 -> b@19
    (12 after 7: a new bundle) is kept. With a predicate on b a completion is not sure: the
    last point stays 1, a@5 is kept and finds 7 again in the bundle of 1."""
    events = [{"type": x, "t": t, "v": 1.0} for x, t in (
        ("a", 0.0), ("b", 1.0), ("b", 4.0), ("a", 5.0), ("b", 7.0), ("a", 18.0), ("b", 19.0))]
    out = {}
    for where in ((), ("b.v >= a.v",)):
        cells = n_cells("a b", where, 0)
        policy = ScorePolicy(np.zeros(cells), ahead=0.01, cover=1.0, cover_slack=0.2)
        m, found = run("a b", where, events, 10.0, 0, policy=policy, bins=BINS,
                       budget=Budget(10.0, burst=10), backend=kernel, merge=False)
        out[where] = (sorted(found.point.tolist()), m.stats["shed"])
    assert out[()] == ([1.0, 19.0], 3)
    assert out[("b.v >= a.v",)] == ([1.0, 7.0, 19.0], 2)


@pytest.mark.parametrize("kernel", BACKENDS)
def test_a_live_node_stands_in_only_with_window_enough(kernel):
    """a@0 is live at a@8 with 2 of its window left. Any live node stands in (the seed a@8 is
    deferred and, with ahead=1, shed); with live_need 5 it does not, and a@8 is kept."""
    events = [{"type": "a", "t": 0.0}, {"type": "a", "t": 8.0}]
    cells = n_cells("a b c", (), 0)
    shed = {}
    for need in (None, 5.0, 2.0):
        table = None if need is None else np.full(cells, need)
        policy = ScorePolicy(np.zeros(cells), proxy_live=True, ahead=1.0, live_need=table)
        m, _ = run("a b c", (), events, 10.0, 0, policy=policy, bins=BINS,
                   budget=Budget(10.0, burst=10), backend=kernel, merge=False)
        shed[need] = m.stats["shed"]
    assert shed == {None: 1, 5.0: 0, 2.0: 1}
    with pytest.raises(ValueError, match="live_need"):
        ScorePolicy(np.zeros(cells), live_need=np.zeros(cells + 1))


# --------------------------------------------------------------------------- deferred starts


def _gap_scores(pattern, k, good_state, max_gap_bin=0):
    """Score 1 for the cells at ``good_state`` whose gap bin is at most ``max_gap_bin``."""
    n_states = Matcher(pattern, window=1, k=k).pattern.automaton.n_states
    cells = BINS.n_cells(n_states, k)
    state, err, rem_bin, gap_bin = np.unravel_index(
        np.arange(cells), (n_states, k + 1, len(BINS.rem_edges) + 1, len(BINS.gap_edges) + 1))
    return ((state == good_state) & (gap_bin <= max_gap_bin)).astype(np.float64)


def _deferring(score, defer):
    """Starts always shed (below min_score, no spare credit), advances kept when scored 1."""
    return ScorePolicy(score, min_score=0.5, ahead=1.0, defer=defer)


@pytest.mark.parametrize("kernel", BACKENDS)
def test_a_deferred_start_is_revived_by_an_advance_with_evidence(kernel):
    """a@0 is shed (its cell scores 0) and set aside. b@0.3 (gap 0.3, first gap bin) would
    advance it into a cell scoring 1: the start and the advance are kept for two operations
    and the match a@0 b@0.3 is found. b@5 (gap 5) scores 0 and the start stays shed."""
    score = _gap_scores("a b", 0, good_state=2)
    found_by = {}
    for gap in (0.3, 5.0):
        for defer in (0, 1):
            events = [{"type": "a", "t": 0.0}, {"type": "b", "t": gap}]
            m, found = run("a b", (), events, 10.0, 0, policy=_deferring(score, defer),
                           bins=BINS, budget=Budget(10.0, burst=10), backend=kernel)
            s = m.stats
            found_by[gap, defer] = ([(float(found.point[i]), found.events_of(i).tolist())
                                     for i in range(len(found))], s["revived"],
                                    s["candidates"] - s["shed"])
    assert found_by[0.3, 1] == ([(0.3, [0, 1])], 1, 2)
    assert found_by[0.3, 0] == ([], 0, 0)
    assert found_by[5.0, 1] == ([], 0, 0)
    for bad in (-1, 1.5, 2000, "4"):
        with pytest.raises(ValueError, match="defer"):
            ScorePolicy(score, defer=bad)


@pytest.mark.parametrize("kernel", BACKENDS)
def test_deferred_starts_are_bounded_and_the_latest_kept(kernel):
    """40 shed starts within one window, defer=3: only the latest 3 stay set aside (three
    nodes of memory), and b revives exactly those (all_trajectories: one match per start)."""
    score = _gap_scores("a b", 0, good_state=2, max_gap_bin=2)
    events = [{"type": "a", "t": 0.1 * i} for i in range(40)] + [{"type": "b", "t": 4.0}]
    def matcher():
        return Matcher("a b", window=10.0, k=0, policy=_deferring(score, 3), bins=BINS,
                       budget=Budget(10.0, burst=10), backend=kernel, all_trajectories=True)

    m = matcher()
    m.match_batch(EventBatch.from_events(events[:-1]))
    assert m.stats["arena_nodes"] == 3
    m = matcher()
    found = m.match(EventBatch.from_events(events))
    assert sorted(found.events_of(i)[0] for i in range(len(found))) == [37, 38, 39]
    assert m.stats["deferred"] == 40 and m.stats["revived"] == 3


@st.composite
def deferring_case(draw):
    """Patterns of two or three steps (so starts get advanced) over longer random streams."""
    pattern = draw(st.sampled_from(["a b", "a b c", "a b+ c", "(a | b) c", "a b c{1,2}"]))
    where = draw(st.sampled_from([[], ["[g]"], ["b.x > a.x"] if "a" in pattern else []]))
    return (pattern, where, draw(stream(max_events=30)), float(draw(st.integers(1, 6))),
            draw(st.integers(0, 1)))


def _deferring_policy(pattern, where, k, seed, defer):
    """Cells scoring 0 or 1: a start (or a revival) in a 0 cell is always shed, in a 1 cell
    kept when affordable; asked on every event, so starts are shed and set aside often."""
    score = np.random.default_rng(seed).integers(0, 2, n_cells(pattern, where, k))
    return ScorePolicy(score.astype(np.float64), seed_reserve=1.0, ahead=0.01, defer=defer,
                       seed=seed)


@SETTINGS
@given(deferring_case(), st.integers(1, 3), st.integers(0, 2**16), st.integers(1, 4))
def test_revived_trajectories_are_true_trajectories(c, ops, seed, defer):
    """Every trajectory a deferring run reports is one the unconstrained run reports (all
    trajectories, so none is hidden by the best-per-point choice); the node log holds exactly
    the nodes made (revived starts, not the starts never revived); and a revival's two
    operations fit the budget: with burst 1 no event makes more than ``ops`` nodes."""
    pattern, where, events, w, k = c
    _, truth = run(pattern, where, events, w, k, all_trajectories=True)
    true = {(truth.partition[i], float(truth.point[i]), tuple(truth.events_of(i)))
            for i in range(len(truth))}
    m, found = run(pattern, where, events, w, k, all_trajectories=True, trace=True, bins=BINS,
                   policy=_deferring_policy(pattern, where, k, seed, defer),
                   budget=Budget(float(ops), burst=2))
    for i in range(len(found)):
        assert (found.partition[i], float(found.point[i]), tuple(found.events_of(i))) in true
    assert len(m.take_node_log()["cell"]) == m.stats["created"]
    m = Matcher(pattern, window=w, k=k, where=where, bins=BINS, budget=Budget(float(ops), 1),
                policy=_deferring_policy(pattern, where, k, seed, defer))
    load = np.zeros((len(events), 4), dtype=np.int64)
    m.match_batch(EventBatch.from_events(events), load=load)
    assert (load[:, 0] <= ops).all()
    assert m.stats["candidates"] - m.stats["shed"] <= ops * len(events)


def test_both_kernels_defer_alike():
    if len(BACKENDS) < 2:
        pytest.skip("the compiled kernel is not built")
    rng = np.random.default_rng(6)
    events = [{"type": str(rng.choice(list("abcd"))), "t": float(i) * 0.5,
               "p": int(rng.integers(3))} for i in range(3000)]
    results = []
    for kernel in BACKENDS:
        policy = _deferring_policy("a b c d", (), 1, 3, 3)
        m, found = run("a b c d", (), events, 10.0, 1, partition="p", policy=policy, bins=BINS,
                       budget=Budget(0.6, burst=4), backend=kernel, trace=True)
        results.append((best_per_point(found), m.stats, m.take_node_log()))
    assert results[0][0] == results[1][0]
    assert results[0][1]["revived"] > 0
    for key in ("revived", "deferred", "deferred_scans", "shed", "candidates", "created"):
        assert results[0][1][key] == results[1][1][key], key
    for key, column in results[0][2].items():
        np.testing.assert_array_equal(column, results[1][2][key])


# --------------------------------------------------------------------------- probes


def _probing_policy(pattern, where, k, seed):
    rng = np.random.default_rng(seed)
    return ScorePolicy(rng.random(n_cells(pattern, where, k)), explore=0.2, learning_rate=0.3,
                       seed=seed, probe=float(rng.choice([0.3, 1.0])), probe_share=1.0,
                       probe_activity=float(rng.choice([0.0, 0.5, 1.0])),
                       defer=int(rng.integers(0, 3)), seed_reserve=0.5, advance_reserve=0.2,
                       cover=0.5, proxy_live=True, ahead=0.5)


def _nodes(log, rows) -> list:
    return sorted((int(log["partition"][i]), int(log["position"][i]), int(log["state"][i]),
                   int(log["err"][i]), float(log["start"][i]), bool(np.isfinite(log["reach"][i])),
                   int(log["merged"][i])) for i in rows)


@SETTINGS
@given(case(), st.integers(0, 3), st.integers(1, 4), st.integers(0, 2**16))
def test_sample_nodes_live_as_in_the_unconstrained_run(c, ops, burst, seed):
    """Every node of a sampled window start is the unconstrained run's, with its outcome:
    the same events, states, errors, match point reached or not, merged or not."""
    pattern, where, events, w, k = c
    truth, _ = run(pattern, where, events, w, k, trace=True)
    truth.flush()
    log0 = truth.take_node_log()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BucketWarning)
        m, _ = run(pattern, where, events, w, k, trace=True, bins=BINS,
                   policy=_probing_policy(pattern, where, k, seed),
                   budget=Budget(float(ops), burst=burst))
    m.flush()
    log = m.take_node_log()
    sample = np.flatnonzero(log["probe"] >= 2)
    starts = set(zip(log["partition"][sample].tolist(), log["start"][sample].tolist()))
    same = [i for i in range(len(log0["start"]))
            if (int(log0["partition"][i]), float(log0["start"][i])) in starts]
    if m.stats["probes_void"] == 0:
        assert _nodes(log, sample) == _nodes(log0, same)
    else:  # a void block's samples retired before the void are exact, the rest not samples
        assert not Counter(_nodes(log, sample)) - Counter(_nodes(log0, same))
    assert set(log["probe"][log["probe"] > 0]) <= set(range(1, 10))  # 2 + j: weight 2**j


@st.composite
def keyed_stream(draw):
    """Events of types a, b over up to four partition keys, in time order, and batch cuts:
    a cut moves a key's first event ahead of another's, so kernel partition ids change."""
    n = draw(st.integers(4, 40))
    gaps = draw(st.lists(st.sampled_from([0.0, 0.25, 0.5, 1.0, 2.0]), min_size=n, max_size=n))
    keys = draw(st.lists(st.sampled_from([9, 3, "x", 0.5]), min_size=n, max_size=n))
    types = draw(st.lists(st.sampled_from("ab"), min_size=n, max_size=n))
    events = [{"type": e, "t": t, "p": key}
              for e, t, key in zip(types, np.cumsum(gaps).tolist(), keys)]
    cuts = sorted(draw(st.lists(st.integers(1, n - 1), max_size=3)))
    return events, cuts


def _rows_by_key(m: Matcher, log: dict) -> list:
    keys = m.partition_keys()
    return sorted((repr(keys[p]), float(start), int(probe), repr(float(reach)))
                  for p, start, probe, reach in zip(log["partition"], log["start"],
                                                    log["probe"], log["reach"]))


@pytest.mark.filterwarnings("ignore::acep.matcher.BucketWarning")
@SETTINGS
@given(keyed_stream(), st.integers(0, 2**16), st.sampled_from([0.3, 1.0]))
def test_probe_draws_follow_the_partition_key_whatever_the_batch_cuts(c, seed, ops):
    """A block is sampled by a hash of (seed, partition key, block): the same starts are
    probes, with the same outcomes, whether the stream comes in one batch or in several,
    in either kernel."""
    events, cuts = c
    results = []
    for kernel in BACKENDS:
        for bounds in ([], cuts):
            policy = ScorePolicy(np.full(n_cells("a b", (), 0), 0.5), seed=seed, probe=0.4,
                                 probe_share=1.0, learning_rate=0.3)
            m = Matcher("a b", window=1.0, k=0, partition="p", bins=BINS, policy=policy,
                        budget=Budget(ops, burst=2), trace=True, backend=kernel)
            edges = [0, *bounds, len(events)]
            found = [m.match_batch(EventBatch.from_events(events[a:b], position=a))
                     for a, b in zip(edges, edges[1:])]
            found.append(m.flush())
            results.append((sorted(map(repr, best_per_point(MatchBatch.concat(found)).items())),
                            m.stats["probes"], _rows_by_key(m, m.take_node_log())))
    assert all(r == results[0] for r in results[1:])


def test_busy_partitions_are_sampled_less_and_their_samples_weigh_more():
    """probe_activity: a block is sampled 2**j times less often when its partition is 2**j
    times busier than the mean, and each of its samples counts 2**j times in the update."""
    rng = np.random.default_rng(9)
    busy = [{"type": str(rng.choice(list("ab"))), "t": i * 0.05, "p": 0} for i in range(4000)]
    calm = [{"type": str(rng.choice(list("ab"))), "t": i * 2.0 + 0.01, "p": 1 + i % 4}
            for i in range(100)]
    events = sorted(busy + calm, key=lambda e: e["t"])
    for activity in (0.0, 1.0):
        policy = ScorePolicy(np.full(n_cells("a b", (), 0), 0.5), learning_rate=1e-5,
                             prior_visits=1.0, seed=5, probe=0.5, probe_share=1.0,
                             probe_activity=activity)  # the weighted mean up to 1e5 visits
        m = Matcher("a b", window=10.0, k=0, partition="p", policy=policy, bins=BINS,
                    budget=Budget(0.5, burst=8), trace=True)
        m.match_batch(EventBatch.from_events(events))
        log = m.take_node_log()  # before the flush: the nodes retired, each learned from
        sample = log["probe"] >= 2
        weight = np.where(sample, 2.0 ** (log["probe"].astype(int) - 2), 0.0)
        busy_rows = sample & (log["partition"] == 0)
        if activity == 0.0:
            assert (log["probe"][sample] == 2).all()
        else:
            calm_rows = sample & (log["partition"] > 0)
            assert busy_rows.any() and (weight[busy_rows] >= 4).all()  # about 6x the mean
            assert calm_rows.any() and (weight[calm_rows] == 1).all()
        censored = (log["merged"] == 1) & ~np.isfinite(log["reach"])
        used = sample & ~censored
        n = np.bincount(log["cell"][used], weight[used], minlength=len(policy.score))
        hits = np.bincount(log["cell"][used], weight[used] * np.isfinite(log["reach"][used]),
                           minlength=len(policy.score))
        np.testing.assert_allclose(policy.visits, n)
        seen = n > 0
        np.testing.assert_allclose(policy.score[seen], ((0.5 + hits) / (1 + n))[seen],
                                   atol=1e-9)


def test_probes_find_their_samples_on_a_long_stream_and_both_kernels_agree():
    """Over 3,000 events some blocks are sampled, learning uses only them, and the two
    kernels make the same probes."""
    if len(BACKENDS) < 2:
        pytest.skip("the compiled kernel is not built")
    rng = np.random.default_rng(7)
    events = [{"type": str(rng.choice(list("abcd"))), "t": float(i), "p": int(rng.integers(3))}
              for i in range(3000)]
    results = []
    for kernel in BACKENDS:
        policy = ScorePolicy(np.linspace(0, 1, n_cells("a b c d", (), 1)), learning_rate=0.05,
                             seed=3, probe=0.1)
        m, found = run("a b c d", (), events, 10.0, 1, partition="p", policy=policy, bins=BINS,
                       budget=Budget(0.5, burst=8), backend=kernel, trace=True)
        m.flush()
        stats = {key: v for key, v in m.stats.items() if key != "decide_ns"}  # a clock
        results.append((best_per_point(found), stats, policy.score.copy(), m.take_node_log()))
    (found, stats, score, log), other = results[0], results[1]
    assert found == other[0] and stats == other[1]
    np.testing.assert_array_equal(score, other[2])
    np.testing.assert_array_equal(log["probe"], other[3]["probe"])
    assert stats["probes"] > 0 and (log["probe"] >= 2).sum() > 0
    assert 0 < stats["probe_ops"] <= 0.05 * (0.5 * 3000 + 4) + 10  # the share, plus a block


def _storm(seed: int) -> list[dict]:
    """A quiet stream with a storm in the middle: 400 events within two time units."""
    rng = np.random.default_rng(seed)
    quiet = [{"type": str(rng.choice(list("abc"))), "t": float(i)} for i in range(600)]
    storm = [{"type": str(rng.choice(list("ab"))), "t": 300.5 + i / 200} for i in range(400)]
    return sorted(quiet + storm, key=lambda e: e["t"])


def test_a_costly_probe_block_is_void_and_probes_stay_within_twice_their_share():
    """Probes stop spending once they pass twice their share of the credit granted: the
    partition's probes become ordinary nodes and none of their samples is learned."""
    share, budget = 0.05, Budget(1.0, burst=8)
    results = []
    for kernel in BACKENDS:
        policy = ScorePolicy(np.full(n_cells("a b c", (), 1), 0.5), seed=1, probe=0.5,
                             probe_share=share, learning_rate=0.1)
        m = Matcher("a b c", window=10.0, k=1, bins=BINS, budget=budget, policy=policy,
                    trace=True, backend=kernel)
        spent = 0
        for i, event in enumerate(_storm(5)):
            m.match_batch(EventBatch.from_events([event], position=i))
            if m.stats["probe_ops"] > spent:  # the share was not yet spent twice over
                assert spent <= 2 * share * (budget.ops_per_event * (i + 1) + budget.depth)
            spent = m.stats["probe_ops"]
        log = m.take_node_log()  # before a flush: every node logged was learned from
        sample = (log["probe"] >= 2) & (np.isfinite(log["reach"]) | (log["merged"] == 0))
        assert policy.visits.sum() == (2.0 ** (log["probe"][sample] - 2)).sum() > 0
        assert m.stats["probes_void"] >= 1 and m.stats["samples_void"] >= 1
        results.append(({k: v for k, v in m.stats.items() if k != "decide_ns"},
                        policy.score.copy(), log["probe"]))
    for other in results[1:]:
        assert other[0] == results[0][0]
        np.testing.assert_array_equal(other[1], results[0][1])
        np.testing.assert_array_equal(other[2], results[0][2])


def test_learning_with_probes_moves_only_sampled_cells():
    """With probes on, a cell no sample node visits keeps its score, whatever other nodes
    there did."""
    events = [{"type": "a", "t": float(i)} for i in range(0, 400, 2)]
    events += [{"type": "b", "t": float(i)} for i in range(1, 400, 4)]
    events.sort(key=lambda e: e["t"])
    bins = VectorBins((), ())
    for probe in (0.0, 1e-9):
        score = np.full(bins.n_cells(Matcher("a b", window=3, k=0).pattern.automaton.n_states,
                                     0), 0.5)
        m = Matcher("a b", window=3, k=0, bins=bins, budget=Budget(0.5, burst=2),
                    policy=ScorePolicy(score, learning_rate=0.2, probe=probe))
        m.match(EventBatch.from_events(events))
        assert (score != 0.5).any() if probe == 0.0 else (score == 0.5).all()
        assert m.stats["probes"] == 0


def test_probes_take_tags_whose_window_blocks_overflow():
    """A window so small that tag / window overflows (the fuzzer's 5e-324) or nears 2^63
    still runs, and both kernels keep the same starts."""
    events = [{"type": "a", "t": 1.5 * i} for i in range(1, 9)]
    for w in (5e-324, 1e-300, 2e-19):
        found = {}
        for kernel in BACKENDS:
            bins = VectorBins((), ())
            n_states = Matcher("a", window=w, k=0).pattern.automaton.n_states
            m = Matcher("a", window=w, k=0, bins=bins, budget=Budget(0.5, burst=2),
                        policy=ScorePolicy(np.full(bins.n_cells(n_states, 0), 0.5), probe=1.0,
                                           probe_share=1.0), backend=kernel)
            found[kernel] = m.match(EventBatch.from_events(events)).point.tolist()
            assert m.stats["probes"] >= 1
        assert len(set(map(tuple, found.values()))) == 1, found
