"""The field's shedders as baselines: pSPICE and hSPICE (docs/SHEDDING.md, "The field's
shedders").

- :class:`PSpicePolicy`: partial-match shedding by the utility of a Markov reward process
  over (state, remaining window): completion probability over the operations still to pay
  ([pSPICE] Slo, Bhowmik, Flaig, Rothermel, IEEE BigData 2019).
- :class:`HSpicePolicy`: state-aware event shedding, the utility of an event for one partial
  match from the event's type, its position in the window and the match's state ([hSPICE]
  Slo, Bhowmik, Rothermel, DEBS 2020).

Both are learned from a :class:`history.graph.HistoryGraph` of the training stream and run
as an ``acep.shedding.ScorePolicy``: one utility per cell, O(1) per candidate in the kernel.
Their state is our (L-state, errors), their remaining window our remaining-window bin; the
gap, which neither paper has, is summed out. Device side: imports only numpy and ``acep``.
"""

from __future__ import annotations

import numpy as np

from acep import _checks as check
from acep.shedding import ScorePolicy

from .graph import HistoryGraph

__all__ = ["PSpicePolicy", "HSpicePolicy", "completion_table", "cost_to_go"]


def _graph(graph) -> HistoryGraph:
    check.instance(graph, "graph", HistoryGraph, "a history.HistoryGraph",
                   " (HistoryGraph.load(path), or history.build.build_history)")
    return graph


def _summed(graph: HistoryGraph) -> tuple[np.ndarray, np.ndarray]:
    """Visits and successes per (state, err, rem bin), summed over the gap bins."""
    shape = graph.shape
    visits = graph.visits.reshape(shape).sum(axis=3).astype(np.float64)
    successes = graph.successes.reshape(shape).sum(axis=3).astype(np.float64)
    return visits, successes


def completion_table(graph: HistoryGraph, prior: float = 1.0) -> np.ndarray:
    """P(a node reaches a match | state, err, rem bin), shape ``(n_states, k + 1, R)``.

    ``prior`` pseudo-visits at the graph's overall success rate ``p0`` (as
    ``CompletionPolicy``): ``(successes + prior * p0) / (visits + prior)``; unvisited cells
    get ``p0``.
    """
    visits, successes = _summed(_graph(graph))
    p0 = successes.sum() / visits.sum() if visits.sum() else 0.0
    if prior > 0:
        return (successes + prior * p0) / (visits + prior)
    return np.where(visits > 0, successes / np.maximum(visits, 1), p0)


def cost_to_go(graph: HistoryGraph, prior: float = 1.0, horizon: int = 10_000) -> np.ndarray:
    """The operations a node still causes (its descendants), per (state, err, rem bin).

    The Markov reward process of [pSPICE] with a reward of one operation per node, on the
    chain the history's cell->cell edges give: ``C(c) = (sum_d n(c, d) (1 + C(d)) + prior *
    c0) / (visits(c) + prior)``, where ``n(c, d)`` counts the children in ``d`` of nodes in
    ``c`` and ``c0`` is the mean number of children per node (the smoothing, so a cell seen
    rarely is not thought free). Solved by value iteration over the edges (memory of the
    edges, not of a dense matrix) until it moves by less than 1e-12, or for at most
    ``horizon`` generations of descendants: a chain whose cells branch more than once per
    visit around a cycle has no finite fixed point, and then the cost counts that many
    generations.
    """
    graph = _graph(graph)
    visits, _ = _summed(graph)
    g = graph.shape[3]
    src, dst = graph.edge_src // g, graph.edge_dst // g
    count = graph.edge_count.astype(np.float64)
    flat = visits.ravel()
    children = np.bincount(src, count, minlength=flat.size)
    c0 = children.sum() / flat.sum() if flat.sum() else 0.0
    denominator = flat + prior
    denominator[denominator <= 0] = 1.0  # prior 0: an unvisited cell has no children
    cost = np.zeros(flat.size)
    for _ in range(horizon):
        step = (children + np.bincount(src, count * cost[dst], minlength=flat.size)
                + prior * c0) / denominator
        done = np.abs(step - cost).max(initial=0.0) < 1e-12
        cost = step
        if done:
            break
    return cost.reshape(visits.shape)


def _broadcast(table: np.ndarray, graph: HistoryGraph) -> np.ndarray:
    """A (state, err, rem bin) table as one score per cell (the same for every gap bin)."""
    return np.broadcast_to(table[..., None], graph.shape).ravel().astype(np.float64)


class PSpicePolicy(ScorePolicy):
    """pSPICE: keep the candidates of highest completion probability per operation to come.

    The utility of a partial match in (state, remaining window) is ``U = P / R`` ([pSPICE]):
    ``P`` the probability that it completes within its window, ``R`` its remaining
    processing cost, here ``1 + C`` operations (the candidate itself and the descendants
    :func:`cost_to_go` expects). Both come from the history ``graph`` of the training
    stream, per (L-state, errors, remaining-window bin), and are broadcast over the gap
    bins; no proxy classes, no learning. The matcher needs the graph's bins:
    ``Matcher(..., bins=policy.bins, policy=policy)``.

    Parameters
    ----------
    graph : history.graph.HistoryGraph
        The history of the training stream.
    prior : float
        Pseudo-visits of the smoothing, at the overall rates (default 1).

    Examples
    --------
    >>> from acep import Matcher
    >>> from acep.demo import DEMO, demo_events
    >>> from acep.shedding import Budget
    >>> from history import PSpicePolicy, build_history
    >>> events = demo_events()
    >>> graph = build_history(DEMO["pattern"], events, DEMO["window"], DEMO["k"],
    ...                       where=DEMO["where"], partition="origin")
    >>> policy = PSpicePolicy(graph)
    >>> m = Matcher(DEMO["pattern"], DEMO["window"], DEMO["k"], where=DEMO["where"],
    ...             partition="origin", budget=Budget(1.0), policy=policy, bins=policy.bins)
    >>> len(m.match(events))   # match points: 4,804 unconstrained
    2191
    """

    name = "pspice"

    def __init__(self, graph: HistoryGraph, prior: float = 1.0):
        prior = check.number(prior, "prior", 0.0)
        self.completion = completion_table(graph, prior)
        self.cost = cost_to_go(graph, prior)
        self.utility = self.completion / (1.0 + self.cost)
        super().__init__(_broadcast(self.utility, graph))
        self.bins = graph.bins()


class HSpicePolicy(ScorePolicy):
    """hSPICE: keep the (event, partial match) pairs most likely to end in a match.

    [hSPICE] gives an event a utility for each partial match: the probability that the
    event, processed for that match, is part of a complex event, from the event's type, its
    position in the match's window and the match's state. In this engine such a pair is a
    candidate: its new (L-state, errors) implies the event's type given the old state, its
    remaining-window bin is the event's position in the window. The utility is the history's
    success rate of the candidate's (state, errors, remaining-window bin), smoothed as
    :func:`completion_table`. hSPICE drops the pairs below a utility threshold set to shed
    the required load; here the budget keeps the best pairs instead, the same order.

    Parameters
    ----------
    graph : history.graph.HistoryGraph
        The history of the training stream.
    prior : float
        Pseudo-visits of the smoothing, at the overall success rate (default 1).

    Examples
    --------
    >>> from acep import Matcher
    >>> from acep.demo import DEMO, demo_events
    >>> from acep.shedding import Budget
    >>> from history import HSpicePolicy, build_history
    >>> events = demo_events()
    >>> graph = build_history(DEMO["pattern"], events, DEMO["window"], DEMO["k"],
    ...                       where=DEMO["where"], partition="origin")
    >>> policy = HSpicePolicy(graph)
    >>> m = Matcher(DEMO["pattern"], DEMO["window"], DEMO["k"], where=DEMO["where"],
    ...             partition="origin", budget=Budget(1.0), policy=policy, bins=policy.bins)
    >>> len(m.match(events))   # match points: 4,804 unconstrained
    4398
    """

    name = "hspice"

    def __init__(self, graph: HistoryGraph, prior: float = 1.0):
        prior = check.number(prior, "prior", 0.0)
        self.utility = completion_table(graph, prior)
        super().__init__(_broadcast(self.utility, graph))
        self.bins = graph.bins()
