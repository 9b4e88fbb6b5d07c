"""The field's shedders as baselines (history.spice): pSPICE's utility (completion over the
operations to come) and hSPICE's (the success rate of an event for a partial match), checked
by hand on a small graph, on a tiny stream, and as rows of ``acep history evaluate``."""

import numpy as np
import pytest
from test_cli import FIXTURE, acep
from test_history_evaluate import _built
from test_history_fit import _stream
from test_history_graph import _hand_graph

from acep import EventBatch, Matcher
from acep.shedding import Budget, OldestFirstPolicy, ScorePolicy, VectorBins
from history.build import build_history
from history.evaluate import evaluate
from history.graph import decode_cells
from history.policies import POLICY_NAMES, policy_options
from history.sketch import Sketch
from history.spice import HSpicePolicy, PSpicePolicy, completion_table, cost_to_go

P0 = 4 / 6  # the hand graph: 6 visits, 4 successes
# the hand graph's cells 5, 9, 23 as (state, err, rem bin): summed over the gap bins
VISITED = {5: (0, 1, 0), 9: (1, 0, 0), 23: (2, 1, 1)}


def test_pspice_utilities_of_the_hand_graph_by_hand():
    """Edges (5 -> 9) x 2, (9 -> 9) x 1, (5 -> 23) x 1; visits 2, 3, 1; successes 2, 2, 0.
    With one pseudo-visit at p0 = 4/6 and at c0 = 4 edges / 6 visits = 2/3 children:
    C(23) = c0 / 2 = 1/3; C(9) = (1 (1 + C(9)) + c0) / 4, so C(9) = 5/9;
    C(5) = (2 (1 + 5/9) + 1 (1 + 1/3) + c0) / 3 = 46/27; unvisited cells C = c0."""
    g = _hand_graph()
    p = PSpicePolicy(g)
    completion = {5: (2 + P0) / 3, 9: (2 + P0) / 4, 23: P0 / 2}
    cost = {5: 46 / 27, 9: 5 / 9, 23: 1 / 3}
    utility = {5: 24 / 73, 9: 3 / 7, 23: 1 / 4}
    for cell, at in VISITED.items():
        assert p.completion[at] == pytest.approx(completion[cell])
        assert p.cost[at] == pytest.approx(cost[cell])
        assert p.utility[at] == pytest.approx(utility[cell])
        assert utility[cell] == pytest.approx(completion[cell] / (1 + cost[cell]))
    unvisited = np.ones(p.utility.shape, dtype=bool)
    for at in VISITED.values():
        unvisited[at] = False
    assert np.allclose(p.cost[unvisited], 2 / 3)
    assert np.allclose(p.utility[unvisited], P0 / (1 + 2 / 3))
    _is_a_table_over_cells(p, g)


def test_cost_to_go_without_smoothing_is_the_plain_fixed_point():
    """prior 0: C(c) = sum_d P(c -> d) (1 + C(d)), P = count / visits: C(23) = 0,
    C(9) = 1/3 (1 + C(9)) = 1/2, C(5) = 2/2 (1 + 1/2) + 1/2 (1 + 0) = 2."""
    g = _hand_graph()
    cost = cost_to_go(g, prior=0.0)
    assert [cost[at] for at in VISITED.values()] == pytest.approx([2.0, 0.5, 0.0])
    others = np.ones(cost.shape, dtype=bool)
    for at in VISITED.values():
        others[at] = False
    assert np.all(cost[others] == 0.0)
    assert completion_table(g, prior=0.0)[VISITED[9]] == pytest.approx(2 / 3)


def test_hspice_utility_is_the_success_rate_per_state_errors_and_position():
    g = _hand_graph()
    h = HSpicePolicy(g)
    want = {5: (2 + P0) / 3, 9: (2 + P0) / 4, 23: P0 / 2}
    for cell, at in VISITED.items():
        assert h.utility[at] == pytest.approx(want[cell])
    assert h.utility.shape == (3, 2, 2)  # errors are kept apart, unlike CompletionPolicy
    _is_a_table_over_cells(h, g)


def test_the_cost_term_changes_the_order():
    """hSPICE ranks cell 5 above cell 9 (8/9 against 2/3); pSPICE the other way round,
    because a node in cell 5 still costs 46/27 operations and one in cell 9 only 5/9."""
    g = _hand_graph()
    p, h = PSpicePolicy(g), HSpicePolicy(g)
    assert h.score[5] > h.score[9]
    assert p.score[9] > p.score[5]


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


@pytest.mark.parametrize("make", [PSpicePolicy, HSpicePolicy])
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


def test_both_are_rows_that_need_the_graph():
    assert {"pspice", "hspice"} <= set(POLICY_NAMES)
    events = _stream(31, n=400)
    graph = build_history("a b c d", events, 6.0, 1, partition="g", n_bins=4)
    assert isinstance(policy_options("pspice", graph=graph)["policy"], PSpicePolicy)
    assert isinstance(policy_options("hspice", graph=graph)["policy"], HSpicePolicy)
    for name in ("pspice", "hspice"):
        with pytest.raises(ValueError, match="graph"):
            policy_options(name)
    sketch = Sketch.from_graph(graph)
    with pytest.raises(ValueError, match="pspice and hspice policies need the history graph"):
        evaluate(sketch, events, [0.1], partition="g", policies=["pspice", "hspice"])
    rows = evaluate(sketch, events, [0.1], partition="g", graph=graph)["rows"]
    assert [r["policy"] for r in rows] == ["keep-first", "random", "oldest-first", "completion",
                                           "pspice", "hspice", "history", "history+rl"]


def test_cli_evaluates_pspice_and_hspice_with_the_history(tmp_path):
    sketch, key = _built(tmp_path)
    common = [sketch, FIXTURE, "--key-file", key, "--spec", "flights", "--partition", "origin",
              "--budgets", "0.1,0.5", "--burst", "32", "--policies", "pspice,hspice"]
    refused = acep("history", "evaluate", *common)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert "--policies pspice,hspice need --history" in refused.stderr
    r = acep("history", "evaluate", *common, "--history", tmp_path / "h.history")
    assert r.returncode == 0, r.stderr
    rows = [x.split() for x in r.stdout.splitlines()[2:]]
    assert [x[:2] for x in rows] == [["10%", "pspice"], ["10%", "hspice"], ["50%", "pspice"],
                                     ["50%", "hspice"]]
    assert all(0.0 <= float(x[2].rstrip("%")) <= 100.0 for x in rows)
    assert int(rows[0][6].replace(",", "")) > 0  # at 10% both shed
