"""The field's shedders as baselines: pSPICE, hSPICE and the hybrid of Zhao, Hung and
Weidlich (docs/SHEDDING.md section 12, "The field's shedders").

:class:`PSpicePolicy` is [pSPICE] (Slo et al., IEEE BigData 2019, arXiv:2002.04436),
:class:`HSpicePolicy` is [hSPICE] (Slo et al., DEBS 2020, arXiv:2006.08211) and
:class:`HybridPolicy` is the cost model of [ZHW20] (Zhao, Hung, Weidlich, ICDE 2020). Each
is learned from a :class:`history.graph.HistoryGraph` and runs as an
``acep.shedding.ScorePolicy``: one utility per cell, O(1) per candidate in the kernel.
Device side: imports only numpy and ``acep``.
"""

from __future__ import annotations

import numpy as np

from acep.matcher import Pattern
from acep.shedding import ScorePolicy
from acep.utils import checks as check

from .graph import HistoryGraph

__all__ = ["PSpicePolicy", "HSpicePolicy", "HybridPolicy", "completion_table", "consumption_table",
           "cost_to_go", "final_cells", "success_table"]


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


def success_table(graph: HistoryGraph, prior: float = 1.0) -> np.ndarray:
    """P(a node reaches a match | state, err, rem bin), shape ``(n_states, k + 1, R)``.

    ``prior`` pseudo-visits at the graph's overall success rate ``p0`` (as
    ``CompletionPolicy``): ``(successes + prior * p0) / (visits + prior)``; unvisited cells
    get ``p0``. This is hSPICE's utility (:class:`HSpicePolicy`).
    """
    visits, successes = _summed(_graph(graph))
    p0 = _rate(visits, successes)
    if prior > 0:
        return (successes + prior * p0) / (visits + prior)
    return np.where(visits > 0, successes / np.maximum(visits, 1), p0)


def _rate(visits: np.ndarray, successes: np.ndarray) -> float:
    return float(successes.sum() / visits.sum()) if visits.sum() else 0.0


def _edges(graph: HistoryGraph) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The cell->cell edges between (state, err, rem bin) cells: sources, targets, counts."""
    g = graph.shape[3]
    return graph.edge_src // g, graph.edge_dst // g, graph.edge_count.astype(np.float64)


def _fixed_point(step, x: np.ndarray, horizon: int) -> np.ndarray:
    """``x = step(x)`` until it moves by less than 1e-12, or ``horizon`` times."""
    for _ in range(horizon):
        nxt = step(x)
        done = np.abs(nxt - x).max(initial=0.0) < 1e-12
        x = nxt
        if done:
            break
    return x


def final_cells(graph: HistoryGraph) -> np.ndarray:
    """Which (state, err) report a match: ``err + final_cost[state] <= k`` (the kernel's rule).

    Shape ``(n_states, k + 1)``; the pattern is compiled from the graph's text and ``where``.
    """
    graph = _graph(graph)
    final = Pattern.compile(graph.pattern, graph.where).kernel_tables(graph.k)["final_cost"]
    err = np.arange(graph.k + 1)
    return (final[:, None] + err[None, :]) <= graph.k


class _Chain:
    """[pSPICE]'s Markov chain over cells (state, err, rem bin), learned from the edges.

    A partial match in cell ``c`` moves to ``d`` with probability ``n(c, d) / N(c)`` and
    leaves the chain (its window ends, or no event advances it) with what is left, where
    ``n(c, d)`` counts the nodes in ``d`` whose parent is in ``c`` and ``N(c) = max(v(c),
    sum_d n(c, d))``: a node that branches (skip-till-any-match) is counted as one walker,
    as the paper's chain of one partial match is. The remaining-window bin is the paper's
    time slice: the chain's own edges carry a match towards the end of its window.
    """

    def __init__(self, graph: HistoryGraph, prior: float):
        visits, successes = _summed(graph)
        self.shape = visits.shape
        self.src, self.dst, self.count = _edges(graph)
        n = visits.size
        out = np.bincount(self.src, self.count, minlength=n)
        self.moves = np.maximum(visits.ravel(), out)
        self.prior = prior
        self.denominator = self.moves + prior
        self.denominator[self.denominator <= 0] = 1.0  # prior 0: an unvisited cell stops
        self.final = np.broadcast_to(final_cells(graph)[..., None], self.shape).ravel()
        self.p0 = _rate(visits, successes)
        self.c0 = out.sum() / self.moves.sum() if self.moves.sum() else 0.0

    def solve(self, at_final: float, reward: float, default: float, horizon: int) -> np.ndarray:
        """Value iteration of ``x(c) = reward + (sum_d n(c, d) x(d) + prior default) /
        (N(c) + prior)``, ``x = at_final`` on final cells."""
        def step(x):
            ahead = np.bincount(self.src, self.count * x[self.dst], minlength=x.size)
            return np.where(self.final, at_final,
                            reward + (ahead + self.prior * default) / self.denominator)
        return _fixed_point(step, np.where(self.final, at_final, 0.0), horizon).reshape(
            self.shape)


def completion_table(graph: HistoryGraph, prior: float = 1.0, horizon: int = 10_000
                     ) -> np.ndarray:
    """[pSPICE]'s completion probability per (state, err, rem bin), from its Markov chain.

    The probability that a partial match in the cell reaches a final cell (one that reports
    a match, :func:`final_cells`) before it leaves the chain: ``P = 1`` on final cells, else
    ``P(c) = (sum_d n(c, d) P(d) + prior * p0) / (N(c) + prior)`` (chain of ``_Chain``,
    ``p0`` the overall success rate as smoothing). The paper absorbs the chain in its final
    state and reads ``P`` after the remaining window's steps; here the steps are the edges.
    Solved by value iteration (at most ``horizon`` sweeps).
    """
    chain = _Chain(_graph(graph), check.number(prior, "prior", 0.0))
    return chain.solve(1.0, 0.0, chain.p0, horizon)


def cost_to_go(graph: HistoryGraph, prior: float = 1.0, horizon: int = 10_000) -> np.ndarray:
    """[pSPICE]'s remaining processing cost per (state, err, rem bin): a Markov reward process.

    The reward is the engine's unit of work, one operation (candidate) per step of the
    chain of ``_Chain``: ``R = 1`` on final cells (the candidate itself; the match is then
    complete), else ``R(c) = 1 + (sum_d n(c, d) R(d) + prior * c0) / (N(c) + prior)``, the
    operations the partial match still costs along its own path until it completes or
    leaves. ``c0``, the chain's mean probability to move on, smooths rarely seen cells so
    they are not thought free. Solved by value iteration until it moves by less than
    1e-12, or ``horizon`` sweeps (a cycle of probability 1 with ``prior`` 0 has no fixed
    point; then the cost counts ``horizon`` steps).
    """
    chain = _Chain(_graph(graph), check.number(prior, "prior", 0.0))
    return chain.solve(1.0, 1.0, chain.c0, horizon)


def consumption_table(graph: HistoryGraph, prior: float = 1.0, horizon: int = 10_000
                      ) -> np.ndarray:
    """[ZHW20]'s consumption of a partial match: the operations its descendants cost.

    Per (state, err, rem bin), every node a node spawns counts, branches included (the
    resources a kept partial match takes, the ones shedding it saves): ``C(c) = (sum_d
    n(c, d) (1 + C(d)) + prior * c0) / (visits(c) + prior)``, ``n(c, d)`` the children in
    ``d`` of nodes in ``c``, ``c0`` the mean number of children per node (so a cell seen
    rarely is not thought free). Solved by value iteration over the edges until it moves
    by less than 1e-12, or for at most ``horizon`` generations (a chain whose cells branch
    more than once per visit around a cycle has no finite fixed point).
    """
    graph = _graph(graph)
    prior = check.number(prior, "prior", 0.0)
    visits, _ = _summed(graph)
    src, dst, count = _edges(graph)
    flat = visits.ravel()
    children = np.bincount(src, count, minlength=flat.size)
    c0 = children.sum() / flat.sum() if flat.sum() else 0.0
    denominator = flat + prior
    denominator[denominator <= 0] = 1.0  # prior 0: an unvisited cell has no children

    def step(cost):
        return (children + np.bincount(src, count * cost[dst], minlength=flat.size)
                + prior * c0) / denominator
    return _fixed_point(step, np.zeros(flat.size), horizon).reshape(visits.shape)


def _broadcast(table: np.ndarray, graph: HistoryGraph) -> np.ndarray:
    """A (state, err, rem bin) table as one score per cell (the same for every gap bin)."""
    return np.broadcast_to(table[..., None], graph.shape).ravel().astype(np.float64)


class PSpicePolicy(ScorePolicy):
    """pSPICE: keep the partial matches of highest completion probability per operation to come.

    [pSPICE] gives a partial match in state ``s`` with remaining window ``rw``
    the utility ``U = P / R``: ``P`` the probability that it completes within its window,
    from a Markov chain over the automaton's states learned on the training stream, ``R``
    its remaining processing cost, from a Markov reward process on the same chain; both are
    tabulated per (state, remaining-window bin) offline and read in O(1). Here the state is
    (L-state, errors), the bin the graph's remaining-window bin, the chain the history's
    cell->cell edges with one walker per partial match (:func:`completion_table`), and the
    reward one operation per step (:func:`cost_to_go`): ``U = P / R`` is 1 on a final cell
    (a completed match is never dropped) and below 1 elsewhere. The gap, which the paper
    has not, is summed out; no proxy classes, no learning. The matcher needs the graph's
    bins: ``Matcher(..., bins=policy.bins, policy=policy)``.

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
    4159
    """

    name = "pspice"

    def __init__(self, graph: HistoryGraph, prior: float = 1.0):
        prior = check.number(prior, "prior", 0.0)
        self.completion = completion_table(graph, prior)
        self.cost = cost_to_go(graph, prior)
        self.utility = self.completion / self.cost
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
    :func:`success_table`. hSPICE drops the pairs below a utility threshold set to shed
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
        self.utility = success_table(graph, prior)
        super().__init__(_broadcast(self.utility, graph))
        self.bins = graph.bins()


class HybridPolicy(ScorePolicy):
    """Zhao, Hung, Weidlich's hybrid shedding, as this engine can run it: contribution over
    consumption per partial-match class.

    [ZHW20] rates a class of partial matches by its contribution (the complete matches it
    leads to) against its consumption (the resources it and the partial matches it spawns
    take), and a class of input events likewise; under overload it drops the items of least
    contribution per resource freed, events and partial matches alike. Here a class is a
    cell, its contribution the smoothed success rate (:func:`success_table`), its
    consumption ``1 + C`` operations (:func:`consumption_table`): ``U = S / (1 + C)``. Input
    shedding adds nothing in this engine (docs/SHEDDING.md 12): an event's load is its
    candidates, and keeping the best of them is never worse than dropping them all. The
    matcher needs the graph's bins: ``Matcher(..., bins=policy.bins, policy=policy)``.

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
    >>> from history import HybridPolicy, build_history
    >>> events = demo_events()
    >>> graph = build_history(DEMO["pattern"], events, DEMO["window"], DEMO["k"],
    ...                       where=DEMO["where"], partition="origin")
    >>> policy = HybridPolicy(graph)
    >>> m = Matcher(DEMO["pattern"], DEMO["window"], DEMO["k"], where=DEMO["where"],
    ...             partition="origin", budget=Budget(1.0), policy=policy, bins=policy.bins)
    >>> len(m.match(events))   # match points: 4,804 unconstrained
    2191
    """

    name = "hybrid"

    def __init__(self, graph: HistoryGraph, prior: float = 1.0):
        prior = check.number(prior, "prior", 0.0)
        self.contribution = success_table(graph, prior)
        self.consumption = 1.0 + consumption_table(graph, prior)
        self.utility = self.contribution / self.consumption
        super().__init__(_broadcast(self.utility, graph))
        self.bins = graph.bins()
