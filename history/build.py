"""Build a history graph from an unconstrained, traced ACEP run (docs/SHEDDING.md section 6).

Bins. When ``bins`` is not given they come from the data: a first traced pass without bins
logs every node's remaining window ``w - (tag - start)`` and gap (time since the previous
matched event), and the edges are their quantiles (``n_bins`` bins per time). Edges at or
below the smallest value are dropped (they would leave the lowest bin empty; seed nodes all
have gap 0), so concentrated values get fewer bins.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from acep import EventBatch, Matcher, Pattern
from acep.events import EventError
from acep.shedding import CONTEXT_FEATURES, MAX_BINS, ContextTree, VectorBins

from .graph import HistoryGraph, _key_id

__all__ = ["build_history", "choose_bins", "fit_context", "traced_run", "TracedRun"]

KEEP = ("partition", "cell", "prev_cell", "reach", "merged")


@dataclass
class TracedRun:
    """One unconstrained traced run: node log, match points and the kernel's partition keys."""

    log: dict[str, np.ndarray]
    partition: np.ndarray  # kernel partition id of each match
    point: np.ndarray
    partition_keys: list
    n_states: int
    stats: dict
    matches: object = None  # the MatchBatch, when kept
    partition_by: str | None = None  # the attribute the matcher partitioned by


def _batches(events) -> list[EventBatch] | Iterable[EventBatch]:
    if isinstance(events, EventBatch):
        return [events]
    return events


def traced_run(pattern: str | Pattern, events, window: float, k: int, *,
               where: str | Sequence[str] = (), partition: str | None = None,
               bins: VectorBins | None = None, merge: bool = True,
               all_trajectories: bool = False, fields: Sequence[str] | None = KEEP,
               keep_matches: bool = False, backend: str | None = None,
               bad_events: list | None = None) -> TracedRun:
    """Run ``Matcher(..., trace=True)`` without a budget over one batch or many.

    ``fields``: the node-log fields kept (None: all of them). Nodes that were merged and
    reached nothing are dropped on the way: they carry no information for a history.
    ``bad_events``: when a list, a bad event (a missing partition key or predicate
    attribute, a tag going back) is skipped and its ``EventError`` appended, instead of
    raised.
    """
    m = Matcher(pattern, window, k, where=where if isinstance(pattern, str) else (),
                partition=partition, merge=merge, all_trajectories=all_trajectories,
                bins=bins, trace=True, backend=backend)
    logs, found = [], []

    def collect(batch_matches):
        raw = m.take_node_log()
        useful = ~((raw["merged"] != 0) & np.isnan(raw["reach"]))
        logs.append({f: v[useful] for f, v in raw.items() if fields is None or f in fields})
        found.append(batch_matches)

    for batch in _batches(events):
        while len(batch):
            try:
                collect(m.match_batch(batch))
                break
            except EventError as exc:
                if bad_events is None:
                    raise
                collect(exc.matches)
                bad_events.append(exc)
                batch = batch.slice(exc.position - batch.position + 1, len(batch))
    collect(m.flush())
    names = list(logs[0])
    log = {f: np.concatenate([x[f] for x in logs]) for f in names}
    keys = m.partition_keys()
    index = {_key_id(x): i for i, x in enumerate(keys)}
    part = np.array([index[_key_id(x)] for b in found for x in b.partition], dtype=np.int32)
    point = np.concatenate([b.point for b in found]).astype(np.float64)
    matches = None
    if keep_matches:
        from acep import MatchBatch

        matches = MatchBatch.concat(found)
    return TracedRun(log, part, point, keys, m.pattern.automaton.n_states, m.stats, matches,
                     m.partition)


def _kept_edges(edges: np.ndarray, values_min: float) -> tuple[float, ...]:
    """Distinct edges above the smallest value (an edge at or below it empties bin 0)."""
    edges = np.unique(np.asarray(edges, dtype=np.float64))
    return tuple(float(e) for e in edges[edges > values_min])


def choose_bins(rem: np.ndarray, gap: np.ndarray, n_bins: int = 8) -> VectorBins:
    """Quantile edges of observed remaining windows and gaps, at most ``n_bins`` bins each."""
    qs = np.linspace(0.0, 1.0, n_bins + 1)[1:-1]

    def edges(values):
        values = np.asarray(values, dtype=np.float64)
        values = values[np.isfinite(values)]
        if not len(values) or n_bins < 2:
            return ()
        return _kept_edges(np.quantile(values, qs), values.min())
    return VectorBins(edges(rem), edges(gap))


def fit_context(log: dict[str, np.ndarray], bins: VectorBins, k: int, window: float,
                features: Sequence[str] = CONTEXT_FEATURES, leaves: int = 8,
                min_leaf: float = 0.02, sample: int = 400_000, seed: int = 0) -> ContextTree:
    """A regression tree over the event context that best splits the cells' outcomes.

    ``log``: an unconstrained traced run's node log (fields ``state, err, tag, start, gap,
    reach, merged`` and the ``features``). The target is a node's outcome (1 if it reached
    a match point) minus its cell's success rate under ``bins``, so the tree finds what
    the context adds to the cell. ``leaves`` leaves at most, each holding at least
    ``min_leaf`` of the nodes (at most ``sample`` of them, drawn with ``seed``, are fitted).
    """
    try:
        from sklearn.tree import DecisionTreeRegressor
    except ImportError:
        raise ImportError("a context tree needs scikit-learn: pip install 'acep[learn]'") \
            from None

    unknown = [f for f in features if f not in CONTEXT_FEATURES]
    if unknown or not features:
        raise ValueError(f"context features must be some of {', '.join(CONTEXT_FEATURES)}, "
                         f"got {', '.join(map(str, features)) or 'none'}")
    counted = ~((log["merged"] != 0) & np.isnan(log["reach"]))
    cells = bins.cells(log["state"][counted], log["err"][counted],
                       window - (log["tag"][counted] - log["start"][counted]),
                       log["gap"][counted], k)
    success = ~np.isnan(log["reach"][counted])
    visits = np.bincount(cells)
    rate = np.bincount(cells, success) / np.maximum(visits, 1)
    target = success - rate[cells]
    x = np.column_stack([log[f][counted] for f in features])
    rows = np.random.default_rng(seed).permutation(len(x))[:sample]
    tree = DecisionTreeRegressor(max_leaf_nodes=max(leaves, 2), random_state=seed,
                                 min_samples_leaf=max(1, int(min_leaf * len(rows))))
    tree.fit(x[rows], target[rows])
    t = tree.tree_
    is_leaf = t.children_left < 0
    leaf_id = np.cumsum(is_leaf) - 1
    index = np.array([CONTEXT_FEATURES.index(f) for f in features])
    return ContextTree(np.where(is_leaf, -1, index[np.maximum(t.feature, 0)]),
                       np.where(is_leaf, 0.0, t.threshold),
                       np.where(is_leaf, leaf_id, t.children_left),
                       np.where(is_leaf, 0, t.children_right))


def build_history(pattern: str | Pattern, events, window: float, k: int, *,
                  where: str | Sequence[str] = (), partition: str | None = None,
                  bins: VectorBins | None = None, n_bins: int = 8, merge: bool = True,
                  backend: str | None = None, bad_events: list | None = None,
                  context: Sequence[str] = (), context_leaves: int = 8) -> HistoryGraph:
    """Build the history of one unconstrained run over ``events`` ([L16] Definition 4).

    The run records every match node: its cell (state, errors, remaining-window bin, gap
    bin) and whether it led to a match point. The graph counts visits and successes per
    cell, and which bundles each cell reached.

    Parameters
    ----------
    pattern : str or acep.matcher.Pattern
        The pattern, as for :class:`acep.Matcher`.
    events : acep.events.EventBatch or iterable of EventBatch
        The training stream. Without ``bins`` it is read twice (an iterator is read into a
        list first).
    window : float
        The window, in the units of the tag.
    k : int
        Errors allowed.
    where : str or sequence of str
        The pattern's conditions (default none).
    partition : str, optional
        The attribute to partition by (default: one partition).
    bins : acep.shedding.VectorBins, optional
        The remaining-window and gap bins (default: quantiles of the run's own nodes).
    n_bins : int
        Quantile bins per time when ``bins`` is not given (default 8; 1: no time bins).
    merge : bool
        Dominance merging, as a device runs (default True). False keeps every trajectory.
    backend : str, optional
        The kernel, as for :class:`acep.Matcher` (default: the compiled one if built).
    bad_events : list, optional
        Skip bad events and append their errors here (default: a bad event raises).
    context : sequence of str
        Event-context features (some of ``CONTEXT_FEATURES``) whose decision tree, of at
        most ``context_leaves`` leaves, splits every cell (docs/SHEDDING.md 13; needs
        scikit-learn). Default none: cells as the bins make them.
    context_leaves : int
        The context tree's leaves at most (default 8).

    Returns
    -------
    HistoryGraph

    Examples
    --------
    >>> from acep.demo import DEMO, demo_events
    >>> from history import build_history
    >>> graph = build_history(DEMO["pattern"], demo_events(), DEMO["window"], DEMO["k"],
    ...                       where=DEMO["where"], partition="origin")
    >>> graph.shape            # states, errors 0..k, remaining-window bins, gap bins
    (8, 2, 8, 8)
    >>> graph.n_bundles
    215
    """
    if bins is None and (isinstance(n_bins, bool) or not isinstance(n_bins, int)
                         or not 1 <= n_bins <= MAX_BINS):
        raise ValueError(f"n_bins must be an integer >= 1 (1: no time bins) and <= "
                         f"{MAX_BINS}, got {n_bins!r}")
    context = tuple(x for x in context.split(",") if x) if isinstance(context, str) \
        else tuple(context)
    if (bins is None or context) and not isinstance(events, (EventBatch, list, tuple)):
        events = list(events)
    common = {"where": where, "partition": partition, "backend": backend, "merge": merge,
              "bad_events": bad_events}
    if bins is None or context:
        if bins is not None and bad_events is not None:
            common["bad_events"] = []  # the second run reports them
        fields = ("tag", "start", "gap") + (("state", "err", "reach", "merged", *context)
                                            if context else ())
        first = traced_run(pattern, events, window, k, fields=fields, **common)
        if bins is None:
            bins = choose_bins(window - (first.log["tag"] - first.log["start"]),
                               first.log["gap"], n_bins)
        if context:
            tree = fit_context(first.log, VectorBins(bins.rem_edges, bins.gap_edges), k,
                               window, context, context_leaves)
            bins = VectorBins(bins.rem_edges, bins.gap_edges, tree)
    common["bad_events"] = bad_events
    run = traced_run(pattern, events, window, k, bins=bins, **common)
    text = pattern if isinstance(pattern, str) else pattern.text
    where_list = [where] if isinstance(where, str) else list(where)
    return HistoryGraph.from_node_log(
        run.log, {"partition": run.partition, "point": run.point}, window, k, bins, text,
        run.n_states, where=where_list, partition_keys=run.partition_keys,
        partition_by=run.partition_by)
