"""Build a history graph from an unconstrained, traced ACEP run (docs/SHEDDING.md section 6).

Bins. When ``bins`` is not given they come from the data, as quantiles of what the cells
will discretise, in a first traced pass:

- the remaining window ``w - (tag - start)`` is exact from the node log;
- the time since the previous matched event (gap) is not in the log (the prev node's tag is
  not logged), so the first pass runs with ``F = 256`` uniform gap bins over ``[0, w]`` and
  the gap edges are chosen among those fine edges at the quantiles of the fine histogram.
  Every chosen edge is a fine edge, so the coarse bins are exact unions of fine bins.

Edges that would leave the lowest bin empty are dropped, so there are at most ``n_bins`` bins
per time and fewer when the values are concentrated.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from acep import EventBatch, Matcher, Pattern
from acep.shedding import VectorBins

from .graph import HistoryGraph

__all__ = ["build_history", "choose_bins", "traced_run", "TracedRun"]

FINE_BINS = 256
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


def _batches(events) -> list[EventBatch] | Iterable[EventBatch]:
    if isinstance(events, EventBatch):
        return [events]
    return events


def traced_run(pattern: str | Pattern, events, window: float, k: int, *,
               where: str | Sequence[str] = (), partition: str | None = None,
               bins: VectorBins | None = None, merge: bool = True,
               all_trajectories: bool = False, fields: Sequence[str] | None = KEEP,
               keep_matches: bool = False, backend: str | None = None) -> TracedRun:
    """Run ``Matcher(..., trace=True)`` without a budget over one batch or many.

    ``fields``: the node-log fields kept (None: all of them). Nodes that were merged and
    reached nothing are dropped on the way: they carry no information for a history.
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
        collect(m.match_batch(batch))
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
    return TracedRun(log, part, point, keys, m.pattern.automaton.n_states, m.stats, matches)


def _key_id(key):
    key = key.item() if isinstance(key, np.generic) else key
    return (type(key).__name__, key)


def _kept_edges(edges: np.ndarray, values_min: float) -> tuple[float, ...]:
    """Distinct edges above the smallest value (an edge at or below it empties bin 0)."""
    edges = np.unique(np.asarray(edges, dtype=np.float64))
    return tuple(float(e) for e in edges[edges > values_min])


def choose_bins(rem: np.ndarray, gap_fine_counts: np.ndarray, window: float,
                n_bins: int = 8) -> VectorBins:
    """Quantile edges: exact for ``rem`` values, from a fine histogram for the gaps.

    ``gap_fine_counts[j]`` counts gaps in ``[j w / F, (j + 1) w / F)`` (``F`` fine bins).
    """
    qs = np.linspace(0.0, 1.0, n_bins + 1)[1:-1]
    rem = np.asarray(rem, dtype=np.float64)
    rem = rem[np.isfinite(rem)]
    rem_edges = _kept_edges(np.quantile(rem, qs), rem.min()) if len(rem) and n_bins > 1 else ()
    counts = np.asarray(gap_fine_counts, dtype=np.int64)
    total = int(counts.sum())
    gap_edges: tuple[float, ...] = ()
    if total and window > 0 and n_bins > 1:
        fine = len(counts)
        cum = np.cumsum(counts)
        ranks = np.floor(qs * (total - 1)).astype(np.int64)  # the sample's order statistics
        j = np.searchsorted(cum, ranks, side="right")  # fine bin holding each rank
        lowest = int(np.flatnonzero(counts)[0])
        gap_edges = _kept_edges(j * (window / fine), lowest * window / fine)
    return VectorBins(rem_edges, gap_edges)


def build_history(pattern: str | Pattern, events, window: float, k: int, *,
                  where: str | Sequence[str] = (), partition: str | None = None,
                  bins: VectorBins | None = None, n_bins: int = 8, merge: bool = True,
                  backend: str | None = None) -> HistoryGraph:
    """The history of one unconstrained run ([L16] Definition 4) over ``events``.

    ``events`` is an ``EventBatch`` or an iterable of them; without ``bins`` it is read twice
    (an iterator is materialised first). ``merge=False`` turns dominance merging off (the
    tests compare with all trajectories; a device runs with merging, so histories should too).
    """
    if bins is None and not isinstance(events, (EventBatch, list, tuple)):
        events = list(events)
    common = {"where": where, "partition": partition, "backend": backend, "merge": merge}
    if bins is None:
        fine = tuple(window * np.arange(1, FINE_BINS) / FINE_BINS) if window > 0 else ()
        first = traced_run(pattern, events, window, k, bins=VectorBins((), fine),
                           fields=("tag", "start", "cell"), **common)
        rem = window - (first.log["tag"] - first.log["start"])
        counts = np.bincount(first.log["cell"] % (len(fine) + 1), minlength=len(fine) + 1)
        bins = choose_bins(rem, counts, window, n_bins)
    run = traced_run(pattern, events, window, k, bins=bins, **common)
    text = pattern if isinstance(pattern, str) else pattern.text
    where_list = [where] if isinstance(where, str) else list(where)
    return HistoryGraph.from_node_log(
        run.log, {"partition": run.partition, "point": run.point}, window, k, bins, text,
        run.n_states, where=where_list, partition_keys=run.partition_keys)
