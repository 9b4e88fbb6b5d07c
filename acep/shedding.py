"""Capacity and shedding: the budget, match vectors, and the policy interface the engine calls.

The contract is docs/SHEDDING.md, sections 1-3. A :class:`Budget` is a token bucket of
operations (candidate match nodes) per input event; when an event's candidates exceed the
credit, the engine asks its policy which to keep. A policy is a :class:`ScorePolicy` (a
score table over cells, :class:`VectorBins`, read by the compiled kernel in O(1) per
candidate) or a :class:`CallbackPolicy` (Python code called with :class:`Candidates`). The
engine never imports ``history``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from . import _checks as check

__all__ = ["Budget", "BudgetError", "check_buckets", "VectorBins", "Candidates", "ScorePolicy",
           "CallbackPolicy", "RandomPolicy", "OldestFirstPolicy", "KeepFirstPolicy", "cell_index",
           "cell_parts", "ContextTree", "CONTEXT_FEATURES"]


@dataclass(frozen=True)
class Budget:
    """``ops_per_event`` candidate operations per input event, banked up to ``burst`` events.

    The credit starts full. Every valid event adds ``ops_per_event``; kept candidates spend
    one each; the credit never exceeds ``ops_per_event * burst``.

    Parameters
    ----------
    ops_per_event : float
        The operations (candidate match nodes) each event adds to the credit, at least 0.
    burst : float
        The bucket's depth, in events' worth of credit, at least 1.

    Examples
    --------
    >>> from acep import Matcher
    >>> from acep.demo import DEMO, demo_events
    >>> from acep.shedding import Budget
    >>> m = Matcher(DEMO["pattern"], DEMO["window"], DEMO["k"], where=DEMO["where"],
    ...             partition="origin", budget=Budget(ops_per_event=1.0))
    >>> found = m.match(demo_events())     # 20,000 flights, about 105 candidates each
    >>> m.stats["candidates"], m.stats["shed"]
    (270381, 250448)
    """

    ops_per_event: float
    burst: float = 64.0

    def __post_init__(self):
        object.__setattr__(self, "ops_per_event",
                           check.number(self.ops_per_event, "budget ops_per_event", 0.0))
        object.__setattr__(self, "burst", check.number(self.burst, "budget burst", 1.0))

    @property
    def depth(self) -> float:
        return self.ops_per_event * self.burst


class BudgetError(ValueError):
    """Budgets whose bucket cannot hold one operation: every policy would keep nothing."""


def smallest_burst(ops_per_event: float) -> int:
    """The smallest whole burst (events) whose bucket holds one operation."""
    need = math.ceil(1 / ops_per_event)
    while ops_per_event * need < 1:  # 1 / x rounded down
        need += 1
    return need


def check_buckets(ratios: Sequence[float], ops_per_event: float, burst: float) -> None:
    """Refuse (:class:`BudgetError`) the budget ``ratios`` of ``ops_per_event`` whose bucket
    of ``burst`` events holds less than one operation. A candidate costs one, so such a
    budget sheds every candidate (0% for any policy); the message names the budgets and the
    smallest whole burst whose bucket holds one operation at each of them."""
    if isinstance(ratios, str):
        ratios = [ratios]  # refused below, by its name
    ratios = [check.number(r, "budget ratios", 0.0, open_low=True) for r in ratios]
    ops_per_event = check.number(ops_per_event, "ops_per_event", 0.0, open_low=True)
    short = sorted(r for r in ratios if Budget(r * ops_per_event, burst).depth < 1)
    if not short:
        return
    low = Budget(short[0] * ops_per_event, burst)
    need = smallest_burst(low.ops_per_event)
    names = ", ".join(f"{r:g}" for r in short)
    whose = f"the bucket of {short[0]:g}" if len(short) > 1 else "the bucket"
    events = f"{burst:g} event{'' if burst == 1 else 's'}"
    raise BudgetError(
        f"budget{'s' if len(short) > 1 else ''} {names} x {ops_per_event:.4g} operations per "
        f"event with a burst of {events}: {whose} holds {low.depth:.3g} operations, less "
        "than the one a match node costs, so nothing would be kept; give --burst "
        f"{need} or more (or a larger budget)")


# the context features a kernel computes per event (docs/SHEDDING.md 13), by their index
CONTEXT_FEATURES = ("act", "idle")
MAX_LEAVES = 64


@dataclass(frozen=True)
class ContextTree:
    """A small decision tree over an event's context whose leaves split every cell.

    The features are those of :data:`CONTEXT_FEATURES`: ``act``, the partition's events in
    about the last window (exponentially weighted, time constant ``w``, this event
    included), and ``idle``, the time since the partition's previous event (at most ``w``).
    Node ``i`` splits on ``feature[i]`` (``left[i]`` when the value is at most
    ``threshold[i]``, else ``right[i]``), or is a leaf when ``feature[i]`` is -1, its leaf
    number in ``left[i]``. Children come after their parent, so a walk always ends.

    Parameters
    ----------
    feature, threshold, left, right : sequences of one entry per tree node.
    """

    feature: tuple[int, ...]
    threshold: tuple[float, ...]
    left: tuple[int, ...]
    right: tuple[int, ...]

    def __post_init__(self):
        bad = _tree_problem(self.feature, self.threshold, self.left, self.right)
        if bad:
            raise check.ParameterError(f"context tree: {bad}")
        for name, kind in (("feature", int), ("threshold", float), ("left", int),
                           ("right", int)):
            object.__setattr__(self, name, tuple(kind(v) for v in getattr(self, name)))

    @property
    def n_leaves(self) -> int:
        return sum(1 for f in self.feature if f < 0)

    def leaves(self, act, idle) -> np.ndarray:
        """The leaf of each event context, exactly as the kernel computes it."""
        values = np.stack([np.asarray(act, np.float64), np.asarray(idle, np.float64)])
        feature, threshold = np.asarray(self.feature), np.asarray(self.threshold)
        left, right = np.asarray(self.left, np.int64), np.asarray(self.right, np.int64)
        node = np.zeros(values.shape[1], dtype=np.int64)
        rows = np.arange(len(node))
        while (split := feature[node] >= 0).any():  # children come after: at most n steps
            go_left = values[np.maximum(feature[node], 0), rows] <= threshold[node]
            node = np.where(split, np.where(go_left, left[node], right[node]), node)
        return left[node]

    def describe(self) -> list[str]:
        """One line per leaf: the conditions that lead to it."""
        paths: dict[int, list[str]] = {}

        def walk(i, path):
            if self.feature[i] < 0:
                paths[self.left[i]] = path
                return
            name = CONTEXT_FEATURES[self.feature[i]]
            walk(self.left[i], path + [f"{name} <= {self.threshold[i]:.4g}"])
            walk(self.right[i], path + [f"{name} > {self.threshold[i]:.4g}"])
        walk(0, [])
        return [f"leaf {leaf}: " + (" and ".join(paths[leaf]) or "every event")
                for leaf in sorted(paths)]


def _tree_problem(feature, threshold, left, right) -> str | None:
    """Why four arrays are not a context tree (None if they are one)."""
    try:
        arrays = [np.asarray(a, dtype=np.float64).reshape(-1)
                  for a in (feature, threshold, left, right)]
    except (TypeError, ValueError):
        return "feature, threshold, left and right must be numbers"
    f, t, lo, hi = arrays
    n = len(f)
    if not 1 <= n <= 2 * MAX_LEAVES - 1 or any(len(a) != n for a in arrays):
        return f"feature, threshold, left and right must have one entry per node (1 to " \
               f"{2 * MAX_LEAVES - 1}), got lengths {[len(a) for a in arrays]}"
    if not all(np.all(a == np.round(a)) for a in (f, lo, hi)) or not np.all(np.isfinite(t)):
        return "feature, left and right must be whole numbers and thresholds finite"
    split = f >= 0
    if np.any(f >= len(CONTEXT_FEATURES)) or np.any(f < -1):
        return f"feature must be -1 (a leaf) or 0..{len(CONTEXT_FEATURES) - 1}"
    idx = np.arange(n)
    if np.any(split & ((lo <= idx) | (hi <= idx) | (lo >= n) | (hi >= n))):
        return "a split node's children must come after it, within the tree"
    leaf_ids = np.sort(lo[~split])
    if not np.array_equal(leaf_ids, np.arange(len(leaf_ids))):
        return "the leaves must be numbered 0, 1, ... once each"
    return None


# bins per time of a match vector at most: cells grow with their square (remaining window x
# gap), so 64 already make a history 4096 times one without time bins
MAX_BINS = 64


@dataclass(frozen=True)
class VectorBins:
    """Bin edges of the two times of a match vector ([L16] Definition 4).

    ``rem_edges`` discretise the remaining window ``w - (t - start)``, ``gap_edges`` the time
    since the previous matched event; ``bin = searchsorted(edges, x, side="right")``.
    """

    rem_edges: tuple[float, ...]
    gap_edges: tuple[float, ...]
    context: ContextTree | None = None

    def __post_init__(self):
        if self.context is not None:
            check.instance(self.context, "context", ContextTree, "an acep.shedding.ContextTree")
        for name in ("rem_edges", "gap_edges"):
            value = getattr(self, name)
            try:
                edges = np.asarray(value, dtype=np.float64)
            except (TypeError, ValueError):
                edges = None
            if isinstance(value, (str, bytes)) or edges is None or edges.ndim != 1 or \
                    not np.all(np.isfinite(edges)) or np.any(np.diff(edges) <= 0):
                raise check.ParameterError(f"{name} must be a list of finite, strictly "
                                           f"increasing numbers, got {check.shown(value)}")
            object.__setattr__(self, name, tuple(float(e) for e in edges))

    @classmethod
    def from_quantiles(cls, rem_values, gap_values, n_bins: int = 8) -> VectorBins:
        """Edges at the quantiles of observed values (duplicates removed); ``n_bins`` in
        1..:data:`MAX_BINS`."""
        n_bins = check.whole(n_bins, "n_bins", 1, MAX_BINS)
        qs = np.linspace(0, 1, n_bins + 1)[1:-1]

        def edges(values, name):
            try:
                values = np.asarray(values, dtype=np.float64).ravel()
            except (TypeError, ValueError):
                raise check.ParameterError(f"{name} must be numbers, got "
                                           f"{check.shown(values)}") from None
            values = values[np.isfinite(values)]
            return tuple(np.unique(np.quantile(values, qs))) if len(values) else ()
        return cls(edges(rem_values, "rem_values"), edges(gap_values, "gap_values"))

    @property
    def n_rem(self) -> int:
        return len(self.rem_edges) + 1

    @property
    def n_gap(self) -> int:
        return len(self.gap_edges) + 1

    @property
    def n_ctx(self) -> int:
        """Context leaves per (state, err, rem bin, gap bin): 1 without a context tree."""
        return 1 if self.context is None else self.context.n_leaves

    def n_cells(self, n_states: int, k: int) -> int:
        return n_states * (k + 1) * self.n_rem * self.n_gap * self.n_ctx

    def cells(self, state, err, rem, gap, k: int, act=None, idle=None) -> np.ndarray:
        """The cell of each vector, exactly as the kernel computes it (``act`` and ``idle``:
        the event's context, needed with a context tree)."""
        r = np.searchsorted(np.asarray(self.rem_edges), rem, side="right")
        g = np.searchsorted(np.asarray(self.gap_edges), gap, side="right")
        ctx = 0 if self.context is None else self.context.leaves(act, idle)
        return cell_index(state, err, r, g, k, self.n_rem, self.n_gap, ctx, self.n_ctx)

    def decode(self, cells, k: int) -> dict[str, np.ndarray]:
        """The inverse of :meth:`cells`: state, err, rem bin, gap bin and context leaf."""
        state, err, rem_bin, gap_bin = cell_parts(cells, k, self.n_rem, self.n_gap, self.n_ctx)
        ctx = np.asarray(cells, dtype=np.int64) % self.n_ctx
        return {"state": state, "err": err, "rem_bin": rem_bin, "gap_bin": gap_bin, "ctx": ctx}


def cell_index(state, err, rem_bin, gap_bin, k: int, n_rem: int, n_gap: int, ctx=0,
               n_ctx: int = 1) -> np.ndarray:
    """The cell of binned match vectors (docs/SHEDDING.md section 2; the kernel's ``_cell``)."""
    state, err = np.asarray(state, np.int64), np.asarray(err, np.int64)
    base = ((state * (k + 1) + err) * n_rem + np.asarray(rem_bin, np.int64)) * n_gap + \
        np.asarray(gap_bin, np.int64)
    return base * n_ctx + np.asarray(ctx, np.int64)


def cell_parts(cells, k: int, n_rem: int, n_gap: int, n_ctx: int = 1) -> tuple[np.ndarray, ...]:
    """``(state, err, rem_bin, gap_bin)`` of cells: the inverse of :func:`cell_index` (the
    context leaf is ``cells % n_ctx``)."""
    rest, gap_bin = np.divmod(np.asarray(cells, dtype=np.int64) // n_ctx, n_gap)
    rest, rem_bin = np.divmod(rest, n_rem)
    state, err = np.divmod(rest, k + 1)
    return state, err, rem_bin, gap_bin


@dataclass
class Candidates:
    """The candidates of one event that exceed the credit (numpy views, valid during the call).

    ``state``, ``err``, ``start``, ``gap`` (time since the previous matched event, 0 from the
    seed), ``cell`` (-1 without bins) and ``prev`` (the node advanced, -1 for the seed) have
    one entry per candidate. The policy returns the indices of at most ``budget`` of them.
    """

    state: np.ndarray
    err: np.ndarray
    start: np.ndarray
    gap: np.ndarray
    cell: np.ndarray
    prev: np.ndarray
    partition: int
    tag: float
    position: int
    budget: int

    def __len__(self) -> int:
        return len(self.state)


class ScorePolicy:
    """Keep the candidates of highest ``score[cell]``: the kernel's O(1)-per-node fast path.

    ``score`` (float64, one per cell) may be None: every candidate then scores 0 and the
    tie-breaks decide (later start, then fewer errors, then candidate order), i.e. the
    oldest windows are dropped first. ``proxy_class`` (int64 per cell, -1 = none): at most one
    candidate per class is kept before the others fill the remaining budget ([L16] 3.2, the
    proxy match). ``explore``: the probability that a candidate's score is replaced by a
    uniform draw in [0, 1). ``learning_rate``: the online update of ``score`` (in place, the
    array passed in), ``docs/SHEDDING.md`` section 5.

    Deferred candidates come after all the others: scores below ``min_score``, proxy classes
    already kept and, with ``proxy_live``, candidates whose partition already has a live node
    at the same state with no more errors (it stands in for them: same region, same bundle).
    ``ahead`` (a fraction of the bucket, 0 = off): the policy is consulted on every event
    under a budget and deferred candidates may only spend the credit above that reserve, so
    credit is saved for candidates no live node stands in for. ``seed_reserve`` (0 = off): a
    candidate from the seed in cell ``c`` is shed unless the credit left after it stays above
    ``seed_reserve * (1 - clip(score[c], 0, 1))**reserve_power`` x the bucket (a table fixed
    from the scores given here; learning does not move it); ``advance_reserve`` (0 = off) is
    the same for candidates that advance a live node. ``reserve_score`` (float per cell, None:
    ``score``) is the table the reserves are computed from instead, e.g. success rates
    measured under the budget the policy will run at (``history.fit``), while ``score``
    still ranks the candidates and is what learning updates.

    ``cover`` (None = off, else in [0, 1]): a candidate whose window starts at or before the
    last match point its partition found is *covered* (every point it can reach lies within
    ``w`` of a point found: the same bundle) and is shed unless the credit left after it
    stays above ``cover`` x the bucket (1: always shed); ``cover_slack`` extends this to
    windows starting up to ``cover_slack * w`` after that point. A candidate that surely
    completes a match at this event (its errors allow the final state and the event's type
    has no predicates) is covered exactly when that point lies within ``w`` of the last one
    found, whatever its start; when such a candidate is shed, the bundle is known to reach
    this point and the partition's last match point moves to it. ``live_need`` (float per cell, with
    ``proxy_live``): a live node stands in for a candidate of cell ``c`` only if it has at
    least ``live_need[c]`` of its window left (otherwise it expires before the candidate's
    trajectory would typically complete).

    ``probe`` (0 = off): the share of window starts made *probes*: kept whatever the
    credit, and every advance of a probe too, so a probe's outcome is the one it would
    have without shedding. With ``probe`` > 0 learning updates only from probes (an unbiased
    sample, ``docs/SHEDDING.md`` section 5). Probes start only while they have spent less
    than ``probe_share`` of the credit granted so far; when they pass twice that share,
    the live probes of the partition spending become ordinary nodes and none of their
    samples is learned (``Matcher.stats``: ``probes_void``, ``samples_void``). With
    ``probe_activity`` > 0 a partition more than ``probe_activity`` times as busy as the
    mean is probed ``2**j`` times less often and its samples weigh ``2**j`` (the node
    log's ``probe`` is ``2 + j``).
    ``visits`` sums, per cell, the weights learned from; an outcome of weight ``v`` moves the
    score by ``v * max(learning_rate, 1 / (prior_visits + visits))``: a weighted running
    mean that starts from the given score as worth ``prior_visits`` outcomes (None:
    ``1 / learning_rate``, a constant step).

    ``defer`` (0 = off): deferred window starts (``docs/SHEDDING.md`` section 8). Up to
    ``defer`` shed starts per partition and state are set aside instead of forgotten; a
    later event that would advance one makes a candidate costing two operations (the start
    and the advance), scored by the advanced cell, whose gap is the evidence the start lacked.

    Parameters
    ----------
    score : numpy.ndarray, optional
        float64 scores, one per match-vector cell (None: every candidate scores 0).
    proxy_class : numpy.ndarray, optional
        int64 proxy classes, one per cell (-1: none).
    explore : float
        The probability that a candidate's score is replaced by a uniform draw.
    learning_rate : float
        The step of the online update of ``score`` (0: no learning).
    seed : int
        The seed of the draws.
    min_score, proxy_live, ahead, seed_reserve, advance_reserve, reserve_power, cover
        Deferring and reserves, as described above.
    live_need, cover_slack, defer, reserve_score, probe, probe_share, prior_visits, probe_activity
        Coverage, deferred starts and probes, as described above.

    Examples
    --------
    >>> from acep import Matcher
    >>> from acep.demo import DEMO, demo_events
    >>> from acep.shedding import Budget, ScorePolicy
    >>> m = Matcher(DEMO["pattern"], DEMO["window"], DEMO["k"], where=DEMO["where"],
    ...             partition="origin", budget=Budget(1.0), policy=ScorePolicy())
    >>> len(m.match(demo_events()))   # no scores: oldest first, 1,489 of 4,804 points
    1489
    """

    name = "score"

    def __init__(self, score=None, proxy_class=None, explore: float = 0.0,
                 learning_rate: float = 0.0, seed: int = 0, min_score: float | None = None,
                 proxy_live: bool = False, ahead: float = 0.0, seed_reserve: float = 0.0,
                 advance_reserve: float = 0.0, reserve_power: float = 4.0,
                 cover: float | None = None, live_need=None, cover_slack: float = 0.0,
                 defer: int = 0, reserve_score=None, probe: float = 0.0,
                 probe_share: float = 0.05, prior_visits: float | None = None,
                 probe_activity: float = 0.0):
        explore, learning_rate, ahead, seed_reserve, advance_reserve, cover_slack, probe, \
            probe_share = (check.number(value, name, 0.0, 1.0) for value, name in (
                (explore, "explore"), (learning_rate, "learning_rate"), (ahead, "ahead"),
                (seed_reserve, "seed_reserve"), (advance_reserve, "advance_reserve"),
                (cover_slack, "cover_slack"), (probe, "probe"), (probe_share, "probe_share")))
        reserve_power = check.number(reserve_power, "reserve_power", 0.0, 16.0, open_low=True)
        if learning_rate > 0 and score is None:
            raise ValueError("learning needs a score table to update")
        self.score = None if score is None else _float_table(score, "score")
        self.proxy_class = None if proxy_class is None else _int_table(proxy_class,
                                                                       "proxy_class")
        if self.proxy_class is not None and self.score is not None \
                and len(self.proxy_class) != len(self.score):
            raise ValueError("proxy_class and score must have one entry per cell")
        self.explore, self.learning_rate = explore, learning_rate
        self.probe, self.probe_share = probe, probe_share
        self.probe_activity = check.number(probe_activity, "probe_activity", 0.0)
        self.prior_visits = None if prior_visits is None else \
            check.number(prior_visits, "prior_visits", 0.0)
        # per cell, the outcomes learned from (samples, with probes): the kernel counts them
        self.visits = None if self.score is None or learning_rate == 0.0 else \
            np.zeros(len(self.score), dtype=np.float64)
        self.seed = check.whole(seed, "seed")
        self.min_score = -1.0 if min_score is None else check.number(min_score, "min_score")
        self.proxy_live, self.ahead = check.flag(proxy_live, "proxy_live"), ahead
        self.seed_reserve = seed_reserve
        self.advance_reserve, self.reserve_power = advance_reserve, reserve_power
        # fixed when the policy is made: learning moves the scores, not the reserves
        if reserve_score is not None:
            reserve_score = _float_table(reserve_score, "reserve_score")
            if self.score is None or len(reserve_score) != len(self.score):
                raise ValueError("reserve_score needs a score table and one entry per cell")
        else:
            reserve_score = self.score
        slack = None if reserve_score is None else \
            (1.0 - np.clip(reserve_score, 0.0, 1.0)) ** self.reserve_power
        self.reserve = None if self.seed_reserve == 0.0 or slack is None else \
            self.seed_reserve * slack
        self.reserve_adv = None if self.advance_reserve == 0.0 or slack is None else \
            self.advance_reserve * slack
        self.cover = -1.0 if cover is None else check.number(cover, "cover", 0.0, 1.0,
                                                             what=" or None")
        self.cover_slack = cover_slack
        self.live_need = None if live_need is None else _float_table(live_need, "live_need")
        self.defer = check.whole(defer, "defer", 0, 1024)
        if self.live_need is not None and (self.score is None
                                           or len(self.live_need) != len(self.score)):
            raise ValueError("live_need needs a score table and one entry per cell")

    @property
    def n_cells(self) -> int | None:
        table = self.score if self.score is not None else self.proxy_class
        return None if table is None else len(table)

    def attach(self, kernel, n_cells: int | None) -> None:
        """Install the policy in a kernel (called by :class:`acep.Matcher`)."""
        if self.n_cells is not None and self.n_cells != n_cells:
            have = "no bins" if n_cells is None else f"{n_cells} cells"
            raise ValueError(f"{type(self).__name__} has {self.n_cells} cells but the matcher "
                             f"has {have} (pass bins= the policy was built with)")
        empty_f, empty_i = np.zeros(0, np.float64), np.zeros(0, np.int64)
        kernel.set_table_policy(
            empty_f if self.score is None else self.score,
            empty_i if self.proxy_class is None else self.proxy_class,
            self.explore, self.learning_rate, int(self.seed) & 0xFFFFFFFFFFFFFFFF,
            self.min_score, self.proxy_live, self.ahead, self.reserve, self.reserve_adv,
            self.cover, self.live_need, self.cover_slack, self.defer, self.probe,
            self.probe_share, self.visits,
            self._prior_visits(), self.probe_activity)

    def _prior_visits(self) -> float:
        if self.prior_visits is not None:
            return self.prior_visits
        return 1.0 / self.learning_rate if self.learning_rate > 0 else 0.0


class RandomPolicy(ScorePolicy):
    """Random drop: every candidate equally likely to be kept (seeded, deterministic).

    Parameters
    ----------
    seed : int
        The seed of the draws.

    Examples
    --------
    >>> from acep import Matcher
    >>> from acep.demo import DEMO, demo_events
    >>> def points_found(budget, policy):   # one match per (partition, match point)
    ...     m = Matcher(DEMO["pattern"], DEMO["window"], DEMO["k"], where=DEMO["where"],
    ...                 partition="origin", budget=budget, policy=policy)
    ...     return len(m.match(demo_events()))
    >>> from acep.shedding import Budget, RandomPolicy
    >>> points_found(None, None), points_found(Budget(1.0), RandomPolicy(seed=1))
    (4804, 2383)
    """

    name = "random"

    def __init__(self, seed: int = 0):
        super().__init__(explore=1.0, seed=seed)


class OldestFirstPolicy(ScorePolicy):
    """Drop the candidates with the oldest window start first (keep the latest starts).

    The default policy of a :class:`acep.Matcher` with a budget.

    Examples
    --------
    >>> from acep import Matcher
    >>> from acep.demo import DEMO, demo_events
    >>> def points_found(budget, policy):   # one match per (partition, match point)
    ...     m = Matcher(DEMO["pattern"], DEMO["window"], DEMO["k"], where=DEMO["where"],
    ...                 partition="origin", budget=budget, policy=policy)
    ...     return len(m.match(demo_events()))
    >>> from acep.shedding import Budget, OldestFirstPolicy
    >>> points_found(Budget(1.0), OldestFirstPolicy())
    1489
    """

    name = "oldest-first"

    def __init__(self):
        super().__init__()


class KeepFirstPolicy:
    """Keep the first candidates in the engine's own order (no decision at all).

    Examples
    --------
    >>> from acep import Matcher
    >>> from acep.demo import DEMO, demo_events
    >>> def points_found(budget, policy):   # one match per (partition, match point)
    ...     m = Matcher(DEMO["pattern"], DEMO["window"], DEMO["k"], where=DEMO["where"],
    ...                 partition="origin", budget=budget, policy=policy)
    ...     return len(m.match(demo_events()))
    >>> from acep.shedding import Budget, KeepFirstPolicy
    >>> points_found(Budget(1.0), KeepFirstPolicy())
    1246
    """

    name = "keep-first"

    def attach(self, kernel, n_cells: int | None) -> None:
        kernel.set_keep_first()


class CallbackPolicy:
    """Base class of policies written in Python: implement :meth:`select`.

    By default the engine calls it only when an event's candidates exceed the credit; with
    ``every_event = True`` (a class or instance attribute) on every event with candidates,
    so the policy may also shed ahead, to save credit (offline references do).

    :meth:`select` gets the event's :class:`Candidates` and returns the indices of at most
    ``candidates.budget`` of them to keep.

    Examples
    --------
    >>> import numpy as np
    >>> from acep.shedding import Budget, CallbackPolicy
    >>> class FewestErrors(CallbackPolicy):
    ...     def select(self, candidates):
    ...         order = np.argsort(candidates.err, kind="stable")
    ...         return order[:candidates.budget]
    >>> from acep import Matcher
    >>> from acep.demo import DEMO, demo_events
    >>> def points_found(budget, policy):   # one match per (partition, match point)
    ...     m = Matcher(DEMO["pattern"], DEMO["window"], DEMO["k"], where=DEMO["where"],
    ...                 partition="origin", budget=budget, policy=policy)
    ...     return len(m.match(demo_events()))
    >>> points_found(Budget(1.0), FewestErrors())
    1469
    """

    name = "callback"
    every_event = False

    def select(self, candidates: Candidates) -> np.ndarray:
        raise NotImplementedError(f"{type(self).__name__} must implement select(candidates): "
                                  "CallbackPolicy is a base class")

    def attach(self, kernel, n_cells: int | None) -> None:
        kernel.set_callback(self._call, bool(self.every_event))

    def _call(self, state, err, start, gap, cell, prev, partition, tag, position, budget):
        cands = Candidates(np.asarray(state), np.asarray(err), np.asarray(start),
                           np.asarray(gap), np.asarray(cell), np.asarray(prev),
                           int(partition), float(tag), int(position), int(budget))
        keep = np.asarray(self.select(cands))
        if keep.dtype == np.bool_:
            keep = np.flatnonzero(keep)
        return self._checked(keep, len(cands), budget)

    def _checked(self, keep: np.ndarray, n: int, budget: int) -> np.ndarray:
        who = type(self).__name__
        if keep.ndim != 1 or (len(keep) and not np.issubdtype(keep.dtype, np.integer)):
            raise ValueError(f"{who}.select must return indices or a boolean mask, "
                             f"got {keep.dtype} of shape {keep.shape}")
        if len(keep) > budget:
            raise ValueError(f"{who}.select kept {len(keep)} candidates, budget is {budget}")
        if len(keep) and (keep.min() < 0 or keep.max() >= n):
            raise ValueError(f"{who}.select returned an index outside 0..{n - 1}")
        if len(np.unique(keep)) != len(keep):
            raise ValueError(f"{who}.select returned an index twice")
        return np.ascontiguousarray(keep, dtype=np.int32)


def _int_table(values, name: str) -> np.ndarray:
    """A 1-d table of whole numbers (integral floats taken) as C-ordered int64."""
    table = np.asarray(values)
    if table.ndim != 1 or table.dtype.kind not in "iuf" or (
            table.dtype.kind == "f" and not np.all(np.mod(table, 1) == 0)):
        raise check.ParameterError(f"{name} must be a 1-d array of whole numbers, got "
                                   f"{check.shown(values)}")
    return np.ascontiguousarray(table, dtype=np.int64)


def _float_table(values, name: str) -> np.ndarray:
    table = np.asarray(values)
    if table.ndim != 1 or not np.issubdtype(table.dtype, np.floating):
        raise check.ParameterError(f"{name} must be a 1-d float array, got "
                                   f"{check.shown(values)}")
    if not np.all(np.isfinite(table)):
        raise check.ParameterError(f"{name} must be finite")
    return table if table.dtype == np.float64 and table.flags.c_contiguous \
        else np.ascontiguousarray(table, dtype=np.float64)
