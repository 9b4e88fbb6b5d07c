"""An upper bound on the bundle recall any policy can reach under a budget (offline).

The hindsight row is a greedy plan, not a proven optimum, so it cannot say whether a target
is out of reach. This bound can: no policy, knowing the future or not, finds more bundles.

Why it holds (docs/SHEDDING.md section 1 for the budget):

- Finding a bundle takes at least one trajectory to one of its points, and every node of
  it is a kept candidate (or a revived start): at least ``min_nodes`` operations, the fewest
  events any trajectory of the pattern matches with at most ``k`` errors
  (:func:`min_trajectory_nodes`; predicates can only make trajectories longer or fewer).
- A node reaches points within its window only, all within ``w`` of each other, so all in
  one bundle ([L16] Definition 3): no operation serves two bundles.
- Those operations fall on events between the bundle's first point minus ``w`` and its last
  point. Over any run of events ``[i, j)`` the bucket (full at ``depth`` at most when the
  run begins, ``ops_per_event`` added per event) pays at most
  ``depth + ops_per_event * (j - i)`` operations.

So for disjoint runs of events, the bundles lying wholly inside run ``r`` can be found at
most ``floor(pay_r / min_nodes)`` of them, and the bound is the number of bundles minus the
excess of every run. :func:`recall_bound` picks the runs (on a grid of event positions) that
maximise the total excess by dynamic programming: the tightest bound of that family.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from acep.automaton import UNREACHABLE, Automaton


def min_trajectory_nodes(automaton: Automaton, k: int) -> int:
    """The fewest events a trajectory matches to reach the final state with at most ``k``
    errors (each L-state skipped is one error, Algorithm 1): the fewest nodes of a match."""
    cost = automaton.skip_cost()
    letters = [q for q in range(automaton.n_states) if automaton.is_l_state(q)]
    pre = {q: automaton.pre(q)[0] for q in letters}
    layer = {(q, int(cost[automaton.start, pre[q]])) for q in letters
             if cost[automaton.start, pre[q]] <= k}
    for nodes in range(1, len(letters) * (k + 1) + 2):
        if any(e + cost[q, automaton.final] <= k for q, e in layer):
            return nodes
        nxt = {(s, e + int(cost[q, pre[s]])) for q, e in layer for s in letters
               if cost[q, pre[s]] < UNREACHABLE and e + cost[q, pre[s]] <= k}
        if not nxt or nxt <= layer:
            break
        layer = nxt
    raise ValueError("the pattern has no trajectory with at most k errors")


def recall_bound(tags: np.ndarray, first: np.ndarray, last: np.ndarray, window: float,
                 budgets: Sequence[tuple[float, float]], min_nodes: int,
                 step: int | None = None, longest: int = 256) -> list[float]:
    """Upper bounds on bundle recall, one per ``(ops_per_event, depth)`` of ``budgets``:
    events' ``tags`` (non-decreasing, the whole stream in its order) and the bundles'
    ``first`` and ``last`` points.

    ``step``: events per grid cell of the run boundaries (default: a 4000-cell grid);
    ``longest``: the longest run considered, in grid cells.
    """
    tags = np.asarray(tags, dtype=np.float64)
    first, last = np.asarray(first, np.float64), np.asarray(last, np.float64)
    if len(first) == 0:
        return [1.0 for _ in budgets]
    if np.any(np.diff(tags) < 0):
        raise ValueError("tags must be non-decreasing (the stream in its order)")
    n = len(tags)
    step = step or max(1, -(-n // 4000))
    cells = -(-n // step)
    longest = max(1, min(longest, cells))
    held = _bundles_inside_runs(tags, first, last, window, step, cells, longest)
    return [(len(first) - _most_excluded(held, n, step, rate, depth, min_nodes)) / len(first)
            for rate, depth in budgets]


def _bundles_inside_runs(tags, first, last, window, step, cells, longest) -> np.ndarray:
    """``held[L, j]``: the bundles whose possible trajectories all lie in grid cells
    ``[j, j + L)`` (budget-free, so shared by every budget)."""
    lo = np.searchsorted(tags, first - window, side="left")  # first event a trajectory may use
    hi = np.searchsorted(tags, last, side="right")  # one past the last
    a = lo // step  # a run starting at grid cell <= a holds the bundle's first event
    span = -(-hi // step) - a  # ... and one ending at cell >= a + span its last
    inside = span <= longest
    count = np.zeros((cells + 1, longest + 1), dtype=np.int64)  # by (a, span)
    np.add.at(count, (a[inside], span[inside]), 1)
    count = count.cumsum(axis=1)  # count[a, s]: bundles from cell a spanning <= s cells
    held = np.zeros((longest + 1, cells + 1), dtype=np.int64)
    for length in range(1, longest + 1):
        for t in range(min(length, cells) + 1):
            held[length, : cells + 1 - t] += count[t:, length - t]
    return held


def _most_excluded(held, n, step, rate, depth, min_nodes) -> float:
    """The most bundles disjoint runs can exclude (dynamic programme over run ends)."""
    longest, cells = held.shape[0] - 1, held.shape[1] - 1
    best = np.zeros(cells + 1)
    for i in range(1, cells + 1):
        lengths = np.arange(1, min(longest, i) + 1)
        starts = i - lengths
        pay = depth + rate * (np.minimum(i * step, n) - starts * step)
        excess = np.maximum(0, held[lengths, starts] - np.floor(pay / min_nodes))
        best[i] = max(best[i - 1], float(np.max(best[starts] + excess)))
    return best[cells]
