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
    ``point_tag``. The programme, in which ``y_b`` is the share of bundle ``b`` found,
    ``x_e`` the node its trajectory has at event ``e`` and ``paid_e`` the operations that
    event pays for it:

    - a trajectory of ``b`` has at least ``min_nodes`` nodes, at distinct letter events of
      ``b``'s partition between ``first_b - w`` and ``last_b``, the last one at one of its
      points: ``sum x_e >= min_nodes * y_b``, ``x_e <= y_b``, ``sum_{e point} x_e >= y_b``;
    - a node is paid for at its event or later, and at most one node's operation waits (a
      deferred window start, paid with the node that revives it, SHEDDING.md 8): the
      operations still to pay after an event lie in ``[0, y_b]``, and none after the
      bundle's last event;
    - the bucket, full at the start: each event adds ``ops_per_event`` up to ``depth``,
      then what it pays is taken, and the credit never falls below 0.

    Every policy's run is a feasible point (its found bundles at ``y = 1``, the nodes of one
    trajectory of each at ``x = 1``, paid as the engine charged them), so the optimum of
    ``sum y_b`` bounds the bundles any policy finds, knowing the future or not. Within one
    partition the spans of two bundles are disjoint (their points lie more than ``w``
    apart), so each event belongs to one bundle at most.

    ``max_pairs``: with more (bundle, event) pairs than this, nothing is solved and every
    bound is None (HiGHS: 16 s over three budgets for 35,280 pairs, 97 s over six for
    36,022 of the sensors; their whole test stream, 362,290, took over 15 minutes for two).
    """
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
    x, paid, late = (n_bundles + i * n_pairs + np.arange(n_pairs) for i in range(3))
    c = n_bundles + 3 * n_pairs + np.arange(n_events)
    n_vars = c[-1] + 1
    ub, eq = _Rows(), _Rows()
    # min_nodes * y_b <= sum x; y_b <= sum of x at points; x_e <= y_b; late_e <= y_b
    ub.add(y, y, float(min_nodes)), ub.add(owner, x, -1.0)
    ub.add(n_bundles + y, y, 1.0), ub.add(n_bundles + owner[at_point], x[at_point], -1.0)
    base = 2 * n_bundles
    for var in (x, late):
        ub.add(base + np.arange(n_pairs), var, 1.0), ub.add(base + np.arange(n_pairs),
                                                             y[owner], -1.0)
        base += n_pairs
    # the credit: c_e + paid_e - c_{e-1} <= ops_per_event * (events since e-1), and
    # c_e + paid_e <= depth (at most a full bucket is spent at an event)
    ub.add(base + at, paid, 1.0), ub.add(base + np.arange(n_events), c, 1.0)
    ub.add(base + np.arange(1, n_events), c[:-1], -1.0)
    ub.add(base + n_events + at, paid, 1.0), ub.add(base + n_events + np.arange(n_events), c,
                                                    1.0)
    # what is still to pay after each event: late_e = late_{e-1} + x_e - paid_e
    ub_rows = base + 2 * n_events
    same = np.flatnonzero(owner[1:] == owner[:-1]) + 1
    eq.add(np.arange(n_pairs), late, 1.0), eq.add(same, late[same - 1], -1.0)
    eq.add(np.arange(n_pairs), x, -1.0), eq.add(np.arange(n_pairs), paid, 1.0)
    upper = ub.matrix(ub_rows, n_vars)
    equal = eq.matrix(n_pairs, n_vars)
    gaps = np.diff(events, prepend=events[0]).astype(np.float64)
    cost = np.zeros(n_vars)
    cost[y] = -1.0
    last_pair = np.ones(n_pairs, dtype=bool)
    last_pair[same - 1] = False  # a pair followed by one of its bundle is not its last
    out = []
    for rate, depth in budgets:
        carried = rate * gaps
        carried[0] = depth  # the bucket starts full
        rhs = np.concatenate([np.zeros(2 * n_bundles + 2 * n_pairs), carried,
                              np.full(n_events, depth)])
        high = np.ones(n_vars)
        high[paid] = 2.0
        high[late[last_pair]] = 0.0  # a trajectory is paid for by its last node
        high[c] = depth
        res = linprog(cost, A_ub=upper, b_ub=rhs, A_eq=equal, b_eq=np.zeros(n_pairs),
                      bounds=np.column_stack([np.zeros(n_vars), high]), method="highs")
        if res.status != 0:
            raise RuntimeError(f"the recall programme did not solve: {res.message}")
        out.append(min(1.0, -res.fun / n_bundles))
    return out


class _Rows:
    """The (row, column, value) triples of a sparse constraint matrix, added in blocks."""

    def __init__(self):
        self.rows, self.cols, self.vals = [], [], []

    def add(self, row, col, value) -> None:
        self.rows.append(np.asarray(row))
        self.cols.append(np.asarray(col))
        self.vals.append(np.broadcast_to(np.asarray(value, np.float64), np.shape(col)))

    def matrix(self, n_rows: int, n_cols: int):
        from scipy import sparse

        return sparse.csr_matrix((np.concatenate(self.vals), (np.concatenate(self.rows),
                                                              np.concatenate(self.cols))),
                                 shape=(n_rows, n_cols))


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
