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
from acep.events import EventBatch


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


# --------------------------------------------------------------------------- linear programme

def lp_recall_bound(tags: np.ndarray, keys: np.ndarray, letter: np.ndarray,
                    bundle_key: np.ndarray, first: np.ndarray, last: np.ndarray,
                    point_key: np.ndarray, point_tag: np.ndarray, window: float,
                    budgets: Sequence[tuple[float, float]], min_nodes: int,
                    max_pairs: int | None = None) -> list[float | None]:
    """Tighter upper bounds on bundle recall: the best schedule of the bucket's credit, event
    by event, as a linear programme (docs/SHEDDING.md section 9). One per
    ``(ops_per_event, depth)`` of ``budgets``.

    The stream: every event's ``tags`` and partition ``keys`` (integers) in stream order and
    ``letter`` (its type is one of the pattern's). The bundles: their partition
    ``bundle_key`` and ``first`` and ``last`` points; the match points ``point_key`` and
    ``point_tag``. The programme, in which ``y_b`` is the share of bundle ``b`` found and
    ``x_e`` the operations spent at event ``e`` on its trajectory:

    - a trajectory of ``b`` has at least ``min_nodes`` nodes, at distinct letter events of
      ``b``'s partition between ``first_b - w`` and ``last_b``, the last one at one of its
      points: ``sum x_e >= min_nodes * y_b``, ``x_e <= y_b``, ``sum_{e point} x_e >= y_b``;
    - the bucket, full at the start: each event adds ``ops_per_event`` up to ``depth``,
      then the operations spent at it are taken, and the credit never falls below 0.

    Every policy's run is a feasible point (its found bundles at ``y = 1``, one trajectory's
    nodes at ``x = 1``), so the optimum of ``sum y_b`` bounds the bundles any policy finds,
    knowing the future or not. Within one partition the spans of two bundles are disjoint
    (their points lie more than ``w`` apart), so each event belongs to one bundle at most.

    ``max_pairs``: with more (bundle, event) pairs than this, nothing is solved and every
    bound is None (HiGHS, six budgets: 216 s for delay-wave's 264,101 pairs; the sensors'
    362,290 took over 15 minutes for two).
    """
    from scipy import sparse
    from scipy.optimize import linprog

    tags, keys = np.asarray(tags, np.float64), np.asarray(keys, np.int64)
    first, last = np.asarray(first, np.float64), np.asarray(last, np.float64)
    bundle_key = np.asarray(bundle_key, np.int64)
    n_bundles = len(first)
    if n_bundles == 0:
        return [1.0 for _ in budgets]
    pos, owner, at_point = _bundle_events(tags, keys, np.asarray(letter, bool), bundle_key,
                                          first, last, np.asarray(point_key, np.int64),
                                          np.asarray(point_tag, np.float64), window)
    n_pairs = len(pos)
    if max_pairs is not None and n_pairs > max_pairs:
        return [None for _ in budgets]
    events, at = np.unique(pos, return_inverse=True)  # distinct events that can hold a node
    n_events = len(events)
    y = np.arange(n_bundles)
    x = n_bundles + np.arange(n_pairs)
    c = n_bundles + n_pairs + np.arange(n_events)
    rows, cols, vals = [], [], []

    def add(r, col, v):
        rows.append(np.asarray(r)), cols.append(np.asarray(col)), vals.append(
            np.broadcast_to(np.asarray(v, np.float64), np.shape(col)))

    # 1. min_nodes * y_b - sum x <= 0; 2. y_b - sum_{points} x <= 0; 3. x_e - y_b <= 0
    add(y, y, float(min_nodes)), add(owner, x, -1.0)
    add(n_bundles + y, y, 1.0), add(n_bundles + owner[at_point], x[at_point], -1.0)
    base = 2 * n_bundles
    add(base + np.arange(n_pairs), x, 1.0), add(base + np.arange(n_pairs), y[owner], -1.0)
    # 4. c_e + spent_e - c_{e-1} <= ops_per_event * (events since e-1): the credit carried
    base += n_pairs
    add(base + at, x, 1.0), add(base + np.arange(n_events), c, 1.0)
    add(base + np.arange(1, n_events), c[:-1], -1.0)
    # 5. c_e + spent_e <= depth: what an event can spend is at most a full bucket
    add(base + n_events + at, x, 1.0), add(base + n_events + np.arange(n_events), c, 1.0)
    n_rows = base + 2 * n_events
    matrix = sparse.csr_matrix((np.concatenate(vals), (np.concatenate(rows),
                                                       np.concatenate(cols))),
                               shape=(n_rows, n_bundles + n_pairs + n_events))
    gaps = np.diff(events, prepend=events[0]).astype(np.float64)
    cost = np.concatenate([-np.ones(n_bundles), np.zeros(n_pairs + n_events)])
    out = []
    for rate, depth in budgets:
        carried = rate * gaps
        carried[0] = depth  # the bucket starts full
        rhs = np.concatenate([np.zeros(2 * n_bundles + n_pairs), carried,
                              np.full(n_events, depth)])
        bounds = [(0.0, 1.0)] * (n_bundles + n_pairs) + [(0.0, depth)] * n_events
        res = linprog(cost, A_ub=matrix, b_ub=rhs, bounds=bounds, method="highs")
        if res.status != 0:
            raise RuntimeError(f"the recall programme did not solve: {res.message}")
        out.append(min(1.0, -res.fun / n_bundles))
    return out


def stream_lp_bound(events: EventBatch, partition: str | None, types: Sequence[str],
                    point_key: Sequence, point_tag: Sequence, window: float,
                    budgets: Sequence[tuple[float, float]], min_nodes: int,
                    max_pairs: int | None = None) -> list[float | None]:
    """:func:`lp_recall_bound` of a stream and the unconstrained run's match points: the
    events' partition keys (``acep.events.partition_key`` of the ``partition`` attribute,
    one partition without it), the pattern's letter ``types``, and the bundles of the points
    ([L16] Definition 3)."""
    from acep.events import partition_key

    if partition is None:
        keys, code = np.zeros(len(events), np.int64), {None: 0}
    else:
        values, inverse = np.unique(np.asarray(events.columns[partition], dtype=object),
                                    return_inverse=True)
        code = {partition_key(v): i for i, v in enumerate(values)}
        keys = inverse.astype(np.int64)
    names = np.asarray(events.type_names, dtype=object)
    letter = np.isin(names[events.type_codes], list(types)) & (events.type_codes >= 0)
    pk = np.array([code[k] for k in point_key], np.int64)
    pt = np.asarray(point_tag, np.float64)
    bundle_key, first, last = _bundles_of(pk, pt, window)
    return lp_recall_bound(events.tags, keys, letter, bundle_key, first, last, pk, pt, window,
                           budgets, min_nodes, max_pairs)


def _bundles_of(key: np.ndarray, tag: np.ndarray, window: float):
    """(partition, first, last) of every bundle of the points ([L16] Definition 3)."""
    order = np.lexsort((tag, key))
    key, tag = key[order], tag[order]
    new = np.ones(len(key), dtype=bool)
    new[1:] = (key[1:] != key[:-1]) | (np.diff(tag) > window)
    starts = np.flatnonzero(new)
    ends = np.append(starts[1:], len(key)) - 1
    return key[starts], tag[starts], tag[ends]


def _bundle_events(tags, keys, letter, bundle_key, first, last, point_key, point_tag,
                   window) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The (event position, bundle) pairs of letter events in a bundle's partition between
    its first point minus ``window`` and its last point, and whether the event is a point."""
    idx = np.flatnonzero(letter)
    order = idx[np.lexsort((idx, keys[idx]))]  # letter events by partition, in stream order
    ks, ts = keys[order], tags[order]
    lo = _find(ks, ts, bundle_key, first - window, "left")
    hi = _find(ks, ts, bundle_key, last, "right")
    owner = np.repeat(np.arange(len(first)), hi - lo)
    pos = order[np.concatenate([np.arange(a, b) for a, b in zip(lo, hi)]) if len(lo)
                else np.zeros(0, np.int64)]
    points = set(zip(point_key.tolist(), point_tag.tolist()))
    at_point = np.fromiter(((k, t) in points for k, t in zip(keys[pos].tolist(),
                                                            tags[pos].tolist())),
                           dtype=bool, count=len(pos))
    return pos, owner, at_point


def _find(ks: np.ndarray, ts: np.ndarray, key: np.ndarray, tag: np.ndarray,
          side: str) -> np.ndarray:
    """Per bundle, the index of ``tag`` among its partition's events in the arrays sorted by
    (partition, stream order)."""
    out = np.empty(len(key), np.int64)
    for k in np.unique(key):
        sel = key == k
        a, b = np.searchsorted(ks, k, side="left"), np.searchsorted(ks, k, side="right")
        out[sel] = a + np.searchsorted(ts[a:b], tag[sel], side=side)
    return out
