"""Shedding policies built from histories, and the baselines (docs/SHEDDING.md sections 3, 6).

:class:`HistoryPolicy` (the sketch's scores, proxy classes and online update),
:class:`CompletionPolicy` (pSPICE style), the offline :class:`HindsightPolicy`, and input
sampling (:func:`sample_events`, :class:`EventSampler`; the frequency operator of [M07] Ma &
Taylor). The field's shedders are in :mod:`history.spice`. :func:`policy_options` builds a
fresh policy by its row name for ``history evaluate`` and ``bench/shedding``. Device side:
imports only numpy, msgpack and ``acep``.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from acep.events import EventBatch
from acep.shedding import (
    Budget,
    CallbackPolicy,
    Candidates,
    KeepFirstPolicy,
    OldestFirstPolicy,
    RandomPolicy,
    ScorePolicy,
)
from acep.utils import checks as check

from .graph import HistoryGraph, bundle_index, compute_bundles
from .sketch import Sketch
from .spice import HSpicePolicy, HybridPolicy, PSpicePolicy

# the history policy's defaults (docs/SHEDDING.md 5 and 8); the agent's config uses them too
LEARNING_RATE, EXPLORE, DEFER = 0.01, 0.01, 4
PROBE, PROBE_SHARE, PROBE_ACTIVITY = 0.005, 0.01, 1.0

__all__ = ["HistoryPolicy", "CompletionPolicy", "HindsightPolicy", "PSpicePolicy",
           "HSpicePolicy", "HybridPolicy", "EventSampler", "sample_events", "policy_options",
           "POLICY_NAMES", "GRAPH_POLICIES"]

# the rows of a shedding comparison: the engine's presets, then the policies of this module
POLICY_NAMES = ("keep-first", "random", "oldest-first", "completion", "pspice", "hspice",
                "hybrid", "history", "history+rl", "hindsight")
# the rows learned from the history graph alone (they need ``graph=``)
GRAPH_POLICIES = ("completion", "pspice", "hspice", "hybrid")


def policy_options(name: str, *, sketch=None, graph=None, hindsight: Mapping | None = None,
                   budget: Budget | None = None, seed: int = 0, defer: int = DEFER) -> dict:
    """The ``acep.Matcher`` options (``policy``, and ``bins`` where cells are needed) of a
    fresh policy of the row ``name`` in :data:`POLICY_NAMES`.

    ``history`` is the sketch's static policy (learning and exploration off), ``history+rl``
    the same with the online update at the defaults; both take the reserves fitted nearest
    ``budget``. ``completion``, ``pspice``, ``hspice`` and ``hybrid`` need the history
    ``graph``;
    ``hindsight`` the unconstrained
    run's ``{"log", "matches"}`` (:func:`history.build.traced_run`) and the sketch's window.
    """
    if name == "keep-first":
        return {"policy": KeepFirstPolicy()}
    if name == "random":
        return {"policy": RandomPolicy(seed)}
    if name == "oldest-first":
        return {"policy": OldestFirstPolicy()}
    if name in GRAPH_POLICIES:
        made = {"completion": CompletionPolicy, "pspice": PSpicePolicy, "hspice": HSpicePolicy,
                "hybrid": HybridPolicy}
        policy = made[name](graph)
        return {"policy": policy, "bins": policy.bins}
    if name == "hindsight":
        if not isinstance(hindsight, Mapping) or not {"log", "matches"} <= set(hindsight) \
                or sketch is None:
            raise check.ParameterError("the hindsight row needs hindsight={'log': ..., "
                                       "'matches': ...} (history.build.traced_run) and the "
                                       "sketch (for its window)")
        return {"policy": HindsightPolicy(hindsight["log"], sketch.window, hindsight["matches"])}
    if name in ("history", "history+rl"):
        learning = {} if name == "history+rl" else {"learning_rate": 0.0, "explore": 0.0}
        policy = HistoryPolicy(sketch, seed=seed, budget=budget, defer=defer, **learning)
        return {"policy": policy, "bins": policy.bins}
    raise ValueError(f"unknown policy {name!r}: choose from {', '.join(POLICY_NAMES)}")


class HistoryPolicy(ScorePolicy):
    """The history policy: rank candidates by the sketch's cell scores (how often the vector
    led to a bundle), keep one per proxy class first ([L16] 3.2, correlated nodes: keep one).

    Proxy match ([L16] 3.2: "if two match trajectories are within the same window, we only
    need to keep one match node"): a candidate whose partition already has a live node at the
    same state with no more errors is deferred (``proxy_live``), and so is one whose proxy
    class is already kept. Under a budget the policy is asked on every event (``ahead``):
    deferred candidates may only spend the credit above ``ahead`` x the bucket, so credit is
    saved for candidates that open a new region of the stream. New window starts (seed
    candidates) of low-scoring cells are shed unless the bucket holds more than
    ``seed_reserve * (1 - score)**reserve_power`` of its depth, so the credit goes to
    advancing the nodes already started; advances likewise with ``advance_reserve``.

    Bundle coverage: once the partition has found a match point ``f``, a candidate whose
    window started at or before ``f`` can only reach points of the same bundle, so it is shed
    unless the bucket holds more than ``cover`` of its depth (None: off); with
    ``cover_slack`` the same holds for windows starting up to ``f + cover_slack * w`` (they
    reach a new bundle only if they complete after ``f + w`` and the bundle has ended by
    then); by default ``cover_slack`` is the one the sketch fitted with the reserves nearest
    ``budget`` (:mod:`history.fit`), else its ``bundle_span`` (the mean bundle length in
    windows) capped at 1: long bundles make an early new window redundant. A
    candidate that surely completes a match now (no predicates on the event) is covered
    exactly when the point is within ``w`` of ``f``, and when one is shed ``f`` moves to its
    point (the bundle surely reaches it), so coverage follows the bundle for free. A live
    node stands in for a candidate only if it has at least ``need`` x the sketch's ``need`` of
    the candidate's cell of its window left (0: any live node).

    Deferred window starts (``docs/SHEDDING.md`` section 8): every window start lies in the
    same cell, so a shed start is set aside (up to ``defer`` per partition and state, the
    latest kept) and revived, for two operations, when a later event would advance it into
    a cell that scores well enough: the gap to its second event is the evidence.

    ``budget`` (the ``acep.shedding.Budget`` the matcher runs under, or its operations per
    event): when the sketch carries reserve tables fitted for budget ratios
    (:mod:`history.fit`), the reserves come from the one fitted nearest this budget instead
    of from the scores, and so does the cover slack (``docs/SHEDDING.md`` section 10); the
    scores still rank.

    ``learning_rate`` and ``explore`` turn on the online update of section 5: the scores
    are a copy of the sketch's and follow the stream; :meth:`learned_sketch` returns them.
    The matcher needs the sketch's bins: ``Matcher(..., bins=policy.bins, policy=policy)``.

    Parameters
    ----------
    sketch : history.Sketch
        The signed sketch, loaded with its key.
    learning_rate, explore : float
        The online update's step and exploration (0 and 0: no learning).
    seed : int
        The seed of the draws.
    budget : acep.shedding.Budget or float, optional
        The budget the matcher runs under, to pick the fitted reserves.
    proxy, ahead, seed_reserve, advance_reserve, reserve_power
        Proxy matches and the reserves, as described above.
    cover, cover_slack, need, defer, probe, probe_share, probe_activity
        Coverage, deferred starts and probes, as described above (``probe_activity``:
        busy partitions probed less, their samples weighted; 0 = off).

    Examples
    --------
    >>> from acep import Matcher
    >>> from acep.demo import DEMO, demo_events
    >>> from acep.shedding import Budget
    >>> from history import HistoryPolicy, Sketch, build_history
    >>> events = demo_events()
    >>> graph = build_history(DEMO["pattern"], events, DEMO["window"], DEMO["k"],
    ...                       where=DEMO["where"], partition="origin")
    >>> budget = Budget(ops_per_event=1.0)
    >>> policy = HistoryPolicy(Sketch.from_graph(graph), budget=budget)
    >>> m = Matcher(DEMO["pattern"], DEMO["window"], DEMO["k"], where=DEMO["where"],
    ...             partition="origin", budget=budget, policy=policy, bins=policy.bins)
    >>> len(m.match(events))   # match points: 4,804 unconstrained, 1,489 oldest-first
    4239
    """

    name = "history"

    def __init__(self, sketch, learning_rate: float = LEARNING_RATE, explore: float = EXPLORE,
                 seed: int = 0, proxy: bool = True, ahead: float = 0.5,
                 seed_reserve: float = 1.0, advance_reserve: float = 0.1,
                 reserve_power: float = 2.0, cover: float | None = 0.5,
                 cover_slack: float | None = None, need: float = 1.0, defer: int = DEFER,
                 budget: Budget | float | None = None, probe: float | None = None,
                 probe_share: float = PROBE_SHARE,
                 probe_activity: float = PROBE_ACTIVITY):
        check.instance(sketch, "sketch", Sketch, "a history.Sketch",
                       " (Sketch.load(path, key=...))")
        proxy, need = check.flag(proxy, "proxy"), check.number(need, "need", 0.0)
        if isinstance(budget, Budget):
            budget = budget.ops_per_event
        elif budget is not None:
            budget = check.number(budget, "budget", 0.0, what=" (operations per event), a "
                                  "Budget or None")
        if cover_slack is None:
            cover_slack = sketch.cover_slack(budget)
        live_need = None if need == 0.0 or not proxy else \
            np.asarray(sketch.need, dtype=np.float64) * need
        super().__init__(np.array(sketch.score, dtype=np.float64),
                         sketch.proxy_class.copy() if proxy else None,
                         explore=explore, learning_rate=learning_rate, seed=seed,
                         proxy_live=proxy, ahead=ahead, seed_reserve=seed_reserve,
                         advance_reserve=advance_reserve, reserve_power=reserve_power,
                         cover=cover, cover_slack=cover_slack, live_need=live_need,
                         defer=defer, reserve_score=sketch.reserve_score(budget),
                         probe=probe_rate(sketch, budget, probe_share) if learning_rate and
                         probe is None else (probe or 0.0), probe_share=probe_share,
                         probe_activity=probe_activity)
        self.sketch = sketch
        self.bins = sketch.bins()

    def learned_sketch(self):
        """The sketch with the scores learned so far (min-hash signatures unchanged)."""
        from dataclasses import replace

        return replace(self.sketch, score=self.score.astype(np.float32))


def probe_rate(sketch: Sketch, budget: float | None, share: float = PROBE_SHARE) -> float:
    """The share of window blocks to sample so that probes spend about ``share`` of the
    budget: a sample block protects itself and the next one, about three blocks' worth of
    the unconstrained operations with what follows them (:data:`PROBE` without a budget
    or the training stream's operations per event)."""
    if budget is None or not sketch.ops_per_event > 0:
        return PROBE
    return float(np.clip(share * budget / sketch.ops_per_event / 3.0, 1e-4, 0.05))


class CompletionPolicy(ScorePolicy):
    """pSPICE-style baseline: P(a node reaches a match | state, remaining-window bin).

    Estimated from a history's counts summed over errors and gaps (``prior``: pseudo-visits
    at the overall rate) and broadcast to every cell: no proxy classes, no learning.
    ``graph_or_counts`` is a :class:`history.graph.HistoryGraph` or a mapping with ``visits``
    and ``successes`` arrays of shape ``(n_states, k + 1, R, G)``.

    Parameters
    ----------
    graph_or_counts : history.HistoryGraph or mapping
        The history, or its ``visits`` and ``successes`` arrays.
    prior : float
        Pseudo-visits of the smoothing, at the overall rate (default 1).
    bins : acep.shedding.VectorBins, optional
        The bins, when ``graph_or_counts`` is a mapping.

    Examples
    --------
    >>> from acep import Matcher
    >>> from acep.demo import DEMO, demo_events
    >>> from acep.shedding import Budget
    >>> from history import CompletionPolicy, build_history
    >>> events = demo_events()
    >>> graph = build_history(DEMO["pattern"], events, DEMO["window"], DEMO["k"],
    ...                       where=DEMO["where"], partition="origin")
    >>> policy = CompletionPolicy(graph)
    >>> m = Matcher(DEMO["pattern"], DEMO["window"], DEMO["k"], where=DEMO["where"],
    ...             partition="origin", budget=Budget(1.0), policy=policy, bins=policy.bins)
    >>> len(m.match(events))   # match points: 4,804 unconstrained
    1333
    """

    name = "completion"

    def __init__(self, graph_or_counts, prior: float = 1.0, bins=None):
        check.instance(graph_or_counts, "graph_or_counts", (HistoryGraph, Mapping),
                       "a history.HistoryGraph or a mapping of 'visits' and 'successes'")
        if isinstance(graph_or_counts, Mapping):
            visits = np.asarray(graph_or_counts["visits"], dtype=np.float64)
            successes = np.asarray(graph_or_counts["successes"], dtype=np.float64)
            if visits.ndim != 4 or visits.shape != successes.shape:
                raise ValueError("visits and successes must both have shape "
                                 "(n_states, k + 1, R, G)")
        else:
            shape = graph_or_counts.shape
            visits = graph_or_counts.visits.reshape(shape).astype(np.float64)
            successes = graph_or_counts.successes.reshape(shape).astype(np.float64)
            bins = bins if bins is not None else graph_or_counts.bins()
        p0 = successes.sum() / visits.sum() if visits.sum() else 0.0
        v = visits.sum(axis=(1, 3), keepdims=True)
        s = successes.sum(axis=(1, 3), keepdims=True)
        p = (s + prior * p0) / (v + prior) if prior > 0 else \
            np.where(v > 0, s / np.maximum(v, 1), p0)
        self.completion = p[:, 0, :, 0]  # (n_states, R)
        super().__init__(np.broadcast_to(p, visits.shape).ravel().copy())
        self.bins = bins


class HindsightPolicy(CallbackPolicy):
    """Offline optimum with hindsight (where tractable): slow, for benchmarks only.

    From the unconstrained run's node log, a candidate's key ``(position, state, start,
    err, gap)`` tells which bundle it leads to (its ``reach``; bundles per [L16] Definition 3 from
    ``matches``, or from the reach points themselves: every match point is the reach of the
    node that completes it). On each shedding event it keeps, for every bundle not yet
    found, the ``per_bundle`` candidates that reach it earliest (ties: later start, fewer
    errors), and nothing else. It is asked on every event (``every_event``), so it sheds
    every useless candidate ahead of need and saves the credit for later events. A bundle
    counts as found once a kept candidate completes it (its reach is the event's own tag)
    and the partition's tag has moved on.

    Give it the log of a run without merging (``traced_run(..., merge=False)``): a merged
    node's outcome is censored, and under a budget the dominating node may be the one shed.
    It is a reference, not a proven optimum: it plans greedily, one event at a time.

    Parameters
    ----------
    node_log : mapping of str to numpy.ndarray
        The node log of the unconstrained run without merging, all fields
        (``traced_run(..., merge=False, fields=None).log``).
    window : float
        The pattern's window.
    matches : mapping, optional
        The run's match points as ``{"partition": ..., "point": ...}`` arrays, whose bundles
        are the targets (default: the bundles of the log's own reach points).
    per_bundle : int
        Candidates kept per bundle not yet found (default 1).
    """

    name = "hindsight"
    every_event = True

    def __init__(self, node_log: Mapping[str, np.ndarray], window: float, matches=None,
                 per_bundle: int = 1):
        reach = np.asarray(node_log["reach"], dtype=np.float64)
        ok = ~np.isnan(reach)
        part = np.asarray(node_log["partition"], dtype=np.int64)[ok]
        reach = reach[ok]
        if matches is None:
            b = compute_bundles(part, reach, window)
        else:
            b = compute_bundles(matches["partition"], matches["point"], window)
        bundle = bundle_index(b["partition"], b["first"], b["last"], part, reach)
        if np.any(bundle < 0):
            raise ValueError("node log 'reach' points outside the matches' bundles")
        keys = zip(np.asarray(node_log["position"])[ok].tolist(),
                   np.asarray(node_log["state"])[ok].tolist(),
                   np.asarray(node_log["start"])[ok].tolist(),
                   np.asarray(node_log["err"])[ok].tolist(),
                   np.asarray(node_log["gap"])[ok].tolist())
        self.outcome: dict[tuple, tuple[int, float]] = {}
        for key, bid, r in zip(keys, bundle.tolist(), reach.tolist()):
            old = self.outcome.get(key)
            if old is None or r < old[1]:
                self.outcome[key] = (bid, r)
        self.n_bundles = len(b["first"])
        self.found = np.zeros(self.n_bundles, dtype=bool)
        self.per_bundle = int(per_bundle)
        self._completing: dict[int, list[tuple[int, float]]] = {}

    def _settle(self, partition: int, tag: float) -> None:
        """Bundles whose kept candidates completed at an earlier tag are found: several
        events can share a tag, and the completing one may come after its ancestor."""
        pending = self._completing.get(partition, [])
        for bid, reach in pending:
            if reach < tag:
                self.found[bid] = True
        self._completing[partition] = [(b, r) for b, r in pending if r >= tag]

    def select(self, c: Candidates) -> np.ndarray:
        self._settle(c.partition, c.tag)
        rows = []
        for i, key in enumerate(zip(c.state.tolist(), c.start.tolist(), c.err.tolist(),
                                    c.gap.tolist())):
            hit = self.outcome.get((c.position, *key))
            if hit is not None and not self.found[hit[0]]:
                rows.append((hit[0], hit[1], -key[1], key[2], i))
        rows.sort(key=lambda r: r[1:])  # the soonest match first: fewest nodes still needed
        keep, taken = [], {}
        for bid, reach, _, _, i in rows:
            if taken.get(bid, 0) < self.per_bundle and len(keep) < c.budget:
                taken[bid] = taken.get(bid, 0) + 1
                keep.append(i)
                if reach == c.tag:
                    self._completing.setdefault(c.partition, []).append((bid, reach))
        return np.array(sorted(keep), dtype=np.int64)


class EventSampler:
    """Input-event sampling: keep every ``keep_every``-th event, counted per partition when
    ``partition`` is given, across consecutive batches. Kept events are renumbered
    (positions of the sampled stream); after each call ``kept_positions`` holds their
    original positions."""

    def __init__(self, keep_every: int, partition: str | None = None, offset: int = 0):
        keep_every = check.whole(keep_every, "keep_every", 1)
        offset = check.whole(offset, "offset", 0, keep_every - 1)
        partition = check.name_or_none(partition, "partition", "the attribute to sample per")
        self.keep_every, self.partition, self.offset = keep_every, partition, offset
        self._seen: dict = {}
        self._total = 0
        self.kept_positions = np.zeros(0, dtype=np.int64)
        self._out = 0

    def __call__(self, batch: EventBatch) -> EventBatch:
        check.instance(batch, "batch", EventBatch, "an acep.EventBatch")
        n = len(batch)
        if self.partition is None:
            rank = self._total + np.arange(n)
        else:
            column = batch.columns.get(self.partition)
            if column is None:
                raise ValueError(f"no attribute {self.partition!r} to sample per partition")
            keys, inverse = _factorize(column)
            order = np.argsort(inverse, kind="stable")
            counts = np.bincount(inverse, minlength=len(keys))
            starts = np.cumsum(counts) - counts
            within = np.empty(n, dtype=np.int64)
            within[order] = np.arange(n) - np.repeat(starts, counts)
            before = np.array([self._seen.get(key, 0) for key in keys], dtype=np.int64)
            rank = before[inverse] + within
            for key, c in zip(keys, counts.tolist()):
                self._seen[key] = self._seen.get(key, 0) + c
        self._total += n
        keep = np.flatnonzero(rank % self.keep_every == self.offset)
        out = EventBatch(batch.type_codes[keep], batch.type_names, batch.tags[keep],
                         {k: v[keep] for k, v in batch.columns.items()}, self._out,
                         batch.source, None if batch.lines is None else batch.lines[keep],
                         batch.tag_is_time)
        self.kept_positions = batch.position + keep
        self._out += len(keep)
        return out


def sample_events(batch: EventBatch, keep_every: int, partition: str | None = None,
                  offset: int = 0) -> EventBatch:
    """One batch sampled by :class:`EventSampler` (for a stream of batches, use the class)."""
    return EventSampler(keep_every, partition, offset)(batch)


def _factorize(column: np.ndarray):
    try:
        keys, inverse = np.unique(column, return_inverse=True)
        keys = [k.item() if isinstance(k, np.generic) else k for k in keys]
        return [(type(k).__name__, k) for k in keys], inverse.ravel()
    except TypeError:  # mixed or missing keys in an object column
        index: dict = {}
        inverse = np.fromiter((index.setdefault((type(v).__name__, v), len(index))
                               for v in column), dtype=np.int64, count=len(column))
        return list(index), inverse
