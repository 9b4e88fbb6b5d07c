"""The field's shedders as baselines (history.spice): pSPICE's utility (completion over the
operations to come) and hSPICE's (the success rate of an event for a partial match), checked
by hand on a small graph, on a tiny stream, and as rows of ``acep history evaluate``."""

import numpy as np
import pytest
from support.cli import FIXTURE, run_acep
from support.history import hand_graph, node_log, random_batch
from support.sketches import built_sketch

from acep import EventBatch, Matcher
from acep.shedding import Budget, OldestFirstPolicy, ScorePolicy, VectorBins
from history.build import build_history
from history.evaluate import evaluate
from history.graph import HistoryGraph, decode_cells
from history.policies import POLICY_NAMES, policy_options
from history.sketch import Sketch
from history.spice import (
    HSpicePolicy,
    HybridPolicy,
    PSpicePolicy,
    completion_table,
    consumption_table,
    cost_to_go,
    final_cells,
    success_table,
)

NAN = float("nan")
P0 = 4 / 6  # the hand graph: 6 visits, 4 successes
# the hand graph's cells 5, 9, 23 as (state, err, rem bin): summed over the gap bins
VISITED = {5: (0, 1, 0), 9: (1, 0, 0), 23: (2, 1, 1)}

# A chain for "a b c", k = 0, rem bins split at 5 (R = 2), gap bins at 2 (G = 2); every node
# in gap bin 0, so cell = (state * 2 + rem bin) * 2. State 3 is final (final_cost 0).
A, B_LATE, B, F = 6, 10, 8, 12  # (1, rem 1), (2, rem 1), (2, rem 0), (3, rem 0)
CHAIN_LOG = node_log([
    (0, A, -1, 3.0, 0), (0, A, -1, 8.0, 0), (0, A, -1, NAN, 0), (0, A, -1, NAN, 0),
    (0, B_LATE, A, 3.0, 0), (0, B_LATE, A, NAN, 0),   # A -> B_LATE x 2
    (0, B, A, 8.0, 0),                                # A -> B x 1
    (0, B, B_LATE, NAN, 0), (0, B, B_LATE, NAN, 0),   # B_LATE -> B x 2: one node branches
    (0, F, B_LATE, 3.0, 0), (0, F, B, 8.0, 0),        # B_LATE -> F, B -> F
])
CHAIN_AT = {A: (1, 0, 1), B_LATE: (2, 0, 1), B: (2, 0, 0), F: (3, 0, 0)}


def _chain_graph():
    return HistoryGraph.from_node_log(CHAIN_LOG, {"partition": np.array([0, 0]),
                                                  "point": np.array([3.0, 8.0])},
                                      10.0, 0, ([5.0], [2.0]), "a b c", 4)


def test_pspice_chain_utilities_by_hand():
    """[pSPICE]: P from the Markov chain, R from its reward process, U = P / R.

    Visits A 4, B_LATE 2, B 3, F 2; successes 6, so p0 = 6/11. Moves N = max(visits,
    children): A 4 (3 children), B_LATE 3 (3 children > 2 visits: one walker per match),
    B 3 (1 child), F 2; c0 = 7 children / 12 moves. With one pseudo-move:
    P(F) = 1; P(B) = (1 + p0) / 4 = 17/44; P(B_LATE) = (1 + 2 P(B) + p0) / 4 = 51/88;
    P(A) = (2 P(B_LATE) + P(B) + p0) / 5 = 23/55.
    R(F) = 1; R(B) = 1 + (1 + c0) / 4 = 67/48; R(B_LATE) = 1 + (1 + 2 R(B) + c0) / 4 =
    67/32; R(A) = 1 + (2 R(B_LATE) + R(B) + c0) / 5 = 67/30."""
    g = _chain_graph()
    assert final_cells(g).tolist() == [[False], [False], [False], [True]]
    p = PSpicePolicy(g)
    completion = {A: 23 / 55, B_LATE: 51 / 88, B: 17 / 44, F: 1.0}
    cost = {A: 67 / 30, B_LATE: 67 / 32, B: 67 / 48, F: 1.0}
    for cell, at in CHAIN_AT.items():
        assert p.completion[at] == pytest.approx(completion[cell])
        assert p.cost[at] == pytest.approx(cost[cell])
        assert p.utility[at] == pytest.approx(completion[cell] / cost[cell])
        assert p.score[cell] == pytest.approx(completion[cell] / cost[cell])
    # a cell never seen: not final, so P = p0 and R = 1 + c0
    assert p.completion[1, 0, 0] == pytest.approx(6 / 11)
    assert p.cost[1, 0, 0] == pytest.approx(1 + 7 / 12)
    assert np.all(p.utility[3] == 1.0)  # a completed match is never the one dropped
    _is_a_table_over_cells(p, g)


def test_pspice_chain_without_smoothing_is_the_plain_chain():
    """prior 0: P(c) = sum_d n(c, d) / N(c) P(d), R(c) = 1 + sum_d n(c, d) / N(c) R(d):
    P(B) = 1/3, P(B_LATE) = (1 + 2/3) / 3 = 5/9, P(A) = (2 5/9 + 1/3) / 4 = 13/36;
    R(B) = 4/3, R(B_LATE) = 1 + (1 + 8/3) / 3 = 20/9, R(A) = 1 + (40/9 + 4/3) / 4 = 22/9.
    A walker, not a subtree: B_LATE's three children from two nodes weigh 1, not 3/2."""
    g = _chain_graph()
    completion, cost = completion_table(g, prior=0.0), cost_to_go(g, prior=0.0)
    assert [completion[CHAIN_AT[c]] for c in (A, B_LATE, B, F)] == pytest.approx(
        [13 / 36, 5 / 9, 1 / 3, 1.0])
    assert [cost[CHAIN_AT[c]] for c in (A, B_LATE, B, F)] == pytest.approx(
        [22 / 9, 20 / 9, 4 / 3, 1.0])
    assert completion[1, 0, 0] == 0.0 and cost[1, 0, 0] == 1.0  # unseen: leaves at once
    assert success_table(g, prior=0.0)[CHAIN_AT[B]] == pytest.approx(1 / 3)


def test_pspice_on_the_hand_graph_keeps_final_cells_first():
    """The hand graph ("a b", k = 1): cells 9 (state 1, err 0) and 23 (state 2) report a
    match, so P = R = U = 1. Cell 5 moves to 9 twice and to 23 once in 2 visits: N = 3,
    P = (3 + p0) / 4 = 11/12, c0 = 4 children / 7 moves, R = 1 + (3 + c0) / 4 = 53/28."""
    g = hand_graph()
    p = PSpicePolicy(g)
    assert final_cells(g).tolist() == [[False, False], [True, False], [True, True]]
    assert p.completion[VISITED[5]] == pytest.approx(11 / 12)
    assert p.cost[VISITED[5]] == pytest.approx(53 / 28)
    assert p.utility[VISITED[5]] == pytest.approx((11 / 12) / (53 / 28))
    assert p.utility[VISITED[9]] == p.utility[VISITED[23]] == 1.0
    _is_a_table_over_cells(p, g)


def test_hspice_utility_is_the_success_rate_per_state_errors_and_position():
    g = hand_graph()
    h = HSpicePolicy(g)
    want = {5: (2 + P0) / 3, 9: (2 + P0) / 4, 23: P0 / 2}
    for cell, at in VISITED.items():
        assert h.utility[at] == pytest.approx(want[cell])
    assert h.utility.shape == (3, 2, 2)  # errors are kept apart, unlike CompletionPolicy
    _is_a_table_over_cells(h, g)


def test_the_cost_term_changes_the_order():
    """hSPICE ranks A above B by success rate ((2 + p0) / 5 against (1 + p0) / 4);
    pSPICE ranks B above A (17/44 over 67/48 = 0.277 against 23/55 over 67/30 = 0.187):
    a match in B is one step from its end and costs less to carry there."""
    g = _chain_graph()
    p, h = PSpicePolicy(g), HSpicePolicy(g)
    assert h.score[A] > h.score[B]
    assert p.score[B] > p.score[A]


def test_hybrid_contribution_over_consumption_of_the_hand_graph_by_hand():
    """[ZHW20]'s cost model: consumption counts every descendant, branches included.
    Edges (5 -> 9) x 2, (9 -> 9) x 1, (5 -> 23) x 1; visits 2, 3, 1; successes 2, 2, 0.
    With one pseudo-visit at p0 = 4/6 and at c0 = 4 edges / 6 visits = 2/3 children:
    C(23) = c0 / 2 = 1/3; C(9) = (1 (1 + C(9)) + c0) / 4, so C(9) = 5/9;
    C(5) = (2 (1 + 5/9) + 1 (1 + 1/3) + c0) / 3 = 46/27; unvisited cells C = c0.
    U = S / (1 + C): 5: (8/9) / (73/27) = 24/73, 9: (2/3) / (14/9) = 3/7, 23: (1/3) / (4/3)."""
    g = hand_graph()
    h = HybridPolicy(g)
    contribution = {5: (2 + P0) / 3, 9: (2 + P0) / 4, 23: P0 / 2}
    consumption = {5: 1 + 46 / 27, 9: 1 + 5 / 9, 23: 1 + 1 / 3}
    utility = {5: 24 / 73, 9: 3 / 7, 23: 1 / 4}
    for cell, at in VISITED.items():
        assert h.contribution[at] == pytest.approx(contribution[cell])
        assert h.consumption[at] == pytest.approx(consumption[cell])
        assert h.utility[at] == pytest.approx(utility[cell])
    unvisited = np.ones(h.utility.shape, dtype=bool)
    for at in VISITED.values():
        unvisited[at] = False
    assert np.allclose(h.consumption[unvisited], 1 + 2 / 3)
    assert np.allclose(h.utility[unvisited], P0 / (1 + 2 / 3))
    _is_a_table_over_cells(h, g)


def test_consumption_without_smoothing_is_the_plain_subtree():
    """prior 0: C(c) = sum_d n(c, d) / v(c) (1 + C(d)): C(23) = 0, C(9) = 1/3 (1 + C(9)) =
    1/2, C(5) = 2/2 (1 + 1/2) + 1/2 (1 + 0) = 2. On the chain graph B_LATE's two nodes
    have three children: C(B_LATE) = (2 (1 + C(B)) + (1 + C(F))) / 2 with C(B) = 1/3 and
    C(F) = 0, so 11/6, where pSPICE's walker pays 20/9 - 1 = 11/9 after the step."""
    cost = consumption_table(hand_graph(), prior=0.0)
    assert [cost[at] for at in VISITED.values()] == pytest.approx([2.0, 0.5, 0.0])
    chain = consumption_table(_chain_graph(), prior=0.0)
    assert chain[CHAIN_AT[B_LATE]] == pytest.approx(11 / 6)
    assert chain[CHAIN_AT[B]] == pytest.approx(1 / 3) and chain[CHAIN_AT[F]] == 0.0


def _is_a_table_over_cells(policy, graph):
    assert isinstance(policy, ScorePolicy) and policy.n_cells == graph.n_cells
    assert policy.score.dtype == np.float64 and np.all(np.isfinite(policy.score))
    assert np.all((policy.score >= 0) & (policy.score <= 1))
    assert policy.proxy_class is None and policy.learning_rate == 0.0
    state, err, rem, gap = decode_cells(np.arange(graph.n_cells), graph.k, graph.n_rem,
                                        graph.n_gap)
    assert np.array_equal(policy.score, policy.utility[state, err, rem])  # every gap alike
    assert policy.bins.rem_edges == tuple(graph.rem_edges)


def _events(pairs):
    return EventBatch.from_events([{"type": t, "t": x} for t, x in pairs])


@pytest.mark.parametrize("make", [PSpicePolicy, HSpicePolicy, HybridPolicy])
def test_a_policy_keeps_the_candidate_of_higher_utility(make):
    """``a b a c``: in training, an ``a`` after ``a b`` completes, a new ``a`` mostly does
    not. With credit for one operation, the second ``a`` of ``a b a c`` must advance the
    started match rather than open a window: the match is found. Oldest-first keeps the
    new window (the later start) and finds nothing."""
    pattern, w = "a b a c", 10.0
    train = []
    for i in range(30):
        t = 100.0 * i
        train += [("a", t), ("b", t + 1), ("a", t + 2), ("c", t + 3), ("a", t + 50)]
    graph = build_history(pattern, _events(train), w, 0, bins=VectorBins([5.0], [0.5]))
    policy = make(graph)
    test = _events([("a", 0.0), ("b", 1.0), ("a", 2.0), ("c", 3.0)])
    seen = Matcher(pattern, w, 0, bins=policy.bins, trace=True)
    seen.match(test)
    log = seen.take_node_log()
    at_a = log["cell"][log["position"] == 2]  # the two candidates of the second a
    advance, start = (int(c) for c in at_a[np.argsort(log["start"][log["position"] == 2])])
    assert policy.score[advance] > policy.score[start]
    m = Matcher(pattern, w, 0, budget=Budget(1.0, burst=1), bins=policy.bins, policy=policy)
    found = m.match(test)
    assert m.stats["shed"] == 1 and found.point.tolist() == [3.0]
    assert found.start.tolist() == [0.0]
    oldest = Matcher(pattern, w, 0, budget=Budget(1.0, burst=1), policy=OldestFirstPolicy())
    assert len(oldest.match(test)) == 0 and oldest.stats["shed"] == 1


def test_the_three_are_rows_that_need_the_graph():
    assert {"pspice", "hspice", "hybrid"} <= set(POLICY_NAMES)
    events = random_batch(31, n=400)
    graph = build_history("a b c d", events, 6.0, 1, partition="g", n_bins=4)
    assert isinstance(policy_options("pspice", graph=graph)["policy"], PSpicePolicy)
    assert isinstance(policy_options("hspice", graph=graph)["policy"], HSpicePolicy)
    assert isinstance(policy_options("hybrid", graph=graph)["policy"], HybridPolicy)
    for name in ("pspice", "hspice", "hybrid"):
        with pytest.raises(ValueError, match="graph"):
            policy_options(name)
    sketch = Sketch.from_graph(graph)
    with pytest.raises(ValueError, match="pspice and hspice policies need the history graph"):
        evaluate(sketch, events, [0.1], partition="g", policies=["pspice", "hspice"])
    rows = evaluate(sketch, events, [0.1], partition="g", graph=graph)["rows"]
    assert [r["policy"] for r in rows] == ["keep-first", "random", "oldest-first", "completion",
                                           "pspice", "hspice", "hybrid", "history",
                                           "history+rl"]


def test_cli_evaluates_pspice_hspice_and_hybrid_with_the_history(tmp_path):
    sketch, key = built_sketch(tmp_path)
    common = [sketch, FIXTURE, "--key-file", key, "--spec", "flights", "--partition", "origin",
              "--budgets", "0.1,0.5", "--burst", "32", "--policies", "pspice,hspice,hybrid"]
    refused = run_acep("history", "evaluate", *common)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert "--policies pspice,hspice,hybrid need --history" in refused.stderr
    r = run_acep("history", "evaluate", *common, "--history", tmp_path / "h.history")
    assert r.returncode == 0, r.stderr
    rows = [x.split() for x in r.stdout.splitlines()[2:]]
    assert [x[:2] for x in rows] == [[f, p] for f in ("10%", "50%")
                                     for p in ("pspice", "hspice", "hybrid")]
    assert all(0.0 <= float(x[2].rstrip("%")) <= 100.0 for x in rows)
    assert all(int(x[6].replace(",", "")) > 0 for x in rows[:3])  # at 10% all shed
