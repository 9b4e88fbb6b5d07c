"""Ground truth and the metrics of one shed run against it.

Points are compared as (partition key, match point) pairs. Bundles are those of the
unconstrained run ([L16] Definition 3, ``acep.bundles``); a true bundle counts as found when
at least one of its match points is found.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from acep.events import EventBatch
from acep.matcher import MatchBatch, Matcher, bundles

from .workloads import Workload

DAY = 86400.0


@dataclass
class Truth:
    """The unconstrained run on the test stream."""

    events: int
    ops: int
    seconds: float
    point_bundle: dict  # (partition, point) -> bundle id
    bundle_first: np.ndarray  # first point of each bundle (for time slices)
    bundle_last: np.ndarray
    summary: dict


def run_matcher(workload: Workload, events: EventBatch, **options) -> tuple[MatchBatch, Matcher,
                                                                         float]:
    """(matches, matcher, seconds) of one pass over ``events`` and the flush."""
    m = Matcher(**workload.matcher_args(), **options)
    start = time.perf_counter()
    found = MatchBatch.concat([m.match_batch(events), m.flush()])
    return found, m, time.perf_counter() - start


def partition_days(workload: Workload, events: EventBatch) -> int:
    """Distinct (partition, day) pairs with at least one event (day = one window-scaled unit:
    a calendar day for flights, 1000 time units for the sensors)."""
    unit = DAY if events.tag_is_time else 1000.0
    _, part = np.unique(events.columns[workload.partition], return_inverse=True)
    pairs = part.astype(np.int64) * (1 << 32) + (events.tags // unit).astype(np.int64)
    return int(len(np.unique(pairs)))


def ground_truth(workload: Workload, events: EventBatch) -> Truth:
    """The unconstrained run: points, bundles, operations, and their densities."""
    found, m, seconds = run_matcher(workload, events)
    rows = bundles(found, workload.window)
    point_bundle, first, last = _assign(found, rows)
    n, ops = len(events), int(m.stats["candidates"])
    pdays = partition_days(workload, events)
    active = len({(k, int(p // (DAY if events.tag_is_time else 1000.0)))
                  for k, p in point_bundle})
    summary = {"events": n, "ops": ops, "ops_per_event": ops / n, "seconds": seconds,
               "match_points": len(point_bundle), "bundles": len(rows),
               "points_per_bundle": len(point_bundle) / max(len(rows), 1),
               "partition_days": pdays, "partition_days_with_match": active,
               "points_per_partition_day": len(point_bundle) / pdays,
               "bundles_per_partition_day": len(rows) / pdays,
               "bundles_per_active_partition_day": len(rows) / max(active, 1),
               "peak_live": int(m.stats["peak_live"]), "partitions": int(m.stats["partitions"]),
               "day_unit": "calendar day" if events.tag_is_time else "1000 time units"}
    return Truth(n, ops, seconds, point_bundle, first, last, summary)


def _assign(found: MatchBatch, rows: list) -> tuple[dict, np.ndarray, np.ndarray]:
    """Each true point's bundle id, and the first and last point of every bundle."""
    first = np.array([b.first for b in rows])
    last = np.array([b.last for b in rows])
    starts: dict = {}
    for bid, b in enumerate(rows):  # bundles() groups one partition's bundles, in order
        starts.setdefault(b.partition, (bid, []))[1].append(b.first)
    point_bundle = {}
    by_key: dict = {}
    for key, point in zip(found.partition.tolist(), found.point.tolist()):
        by_key.setdefault(key, []).append(point)
    for key, points in by_key.items():
        base, firsts = starts[key]
        ids = base + np.searchsorted(np.array(firsts), points, side="right") - 1
        point_bundle.update(zip(((key, p) for p in points), ids.tolist()))
    return point_bundle, first, last


def found_points(found: MatchBatch) -> set:
    return set(zip(found.partition.tolist(), found.point.tolist()))


def score(truth: Truth, found: MatchBatch, until: float | None = None) -> dict:
    """Bundle recall, point recall and precision of ``found``; with ``until``, only over the
    true bundles that end by then and the points up to then (a prefix of the stream)."""
    points = found_points(found)
    true_points = truth.point_bundle
    if until is not None:
        points = {p for p in points if p[1] <= until}
        true_points = {p: b for p, b in true_points.items()
                       if truth.bundle_last[b] <= until}
        n_bundles = int(np.sum(truth.bundle_last <= until))
    else:
        n_bundles = len(truth.bundle_first)
    hit = [true_points[p] for p in points if p in true_points]
    right = sum(1 for p in points if p in truth.point_bundle)
    return {"bundle_recall": len(set(hit)) / n_bundles if n_bundles else 1.0,
            "point_recall": len(hit) / len(true_points) if true_points else 1.0,
            "precision": right / len(points) if points else 1.0,
            "found_points": len(points), "found_bundles": len(set(hit)),
            "true_bundles": n_bundles}


def recall_over_time(truth: Truth, found: MatchBatch, edges: np.ndarray) -> list[float | None]:
    """Bundle recall of the bundles whose first point falls in each slice ``edges[i:i+2]``."""
    hit = np.zeros(len(truth.bundle_first), dtype=bool)
    for p in found_points(found):
        b = truth.point_bundle.get(p)
        if b is not None:
            hit[b] = True
    slot = np.searchsorted(edges, truth.bundle_first, side="right") - 1
    out = []
    for i in range(len(edges) - 1):
        mine = slot == i
        out.append(float(hit[mine].mean()) if mine.any() else None)
    return out


def shed_stats(m: Matcher, seconds: float, events: int) -> dict:
    """What the budget did: ops spent, shed, decisions and the time they took, and the
    deferred window starts (set aside, revived, and scanned by later events)."""
    s = m.stats
    spent = int(s["candidates"] - s["shed"])
    return {"candidates": int(s["candidates"]), "shed": int(s["shed"]), "ops_spent": spent,
            "ops_spent_per_event": spent / max(events, 1), "decisions": int(s["decisions"]),
            "decide_ns_per_event": s["decide_ns"] / max(events, 1),
            "seconds": seconds, "us_per_event": 1e6 * seconds / max(events, 1),
            "deferred_per_event": s.get("deferred", 0) / max(events, 1),
            "revived": int(s.get("revived", 0)),
            "deferred_scans_per_event": s.get("deferred_scans", 0) / max(events, 1)}



def planted_bundles(truth: Truth, events: EventBatch, partition: str,
                    column: str) -> np.ndarray | None:
    """Per true bundle, whether one of its points is an event of a planted motif (the
    synthetic streams' ``column``, 1 for such an event); None for a stream without it."""
    if column not in events.columns:
        return None
    from acep.events import partition_key

    mark = np.flatnonzero(np.asarray(events.columns[column]) != 0)
    planted = {(partition_key(k), float(t))
               for k, t in zip(events.columns[partition][mark], events.tags[mark])}
    out = np.zeros(len(truth.bundle_first), dtype=bool)
    for point, bundle in truth.point_bundle.items():
        if point in planted:
            out[bundle] = True
    return out


def split_recall(truth: Truth, found: MatchBatch, planted: np.ndarray,
                 until: float | None = None) -> dict:
    """Bundle recall over the bundles with a planted motif and over the noise-only ones
    (those ending by ``until`` when given)."""
    hit = np.zeros(len(planted), dtype=bool)
    for p in found_points(found):
        b = truth.point_bundle.get(p)
        if b is not None:
            hit[b] = True
    scope = truth.bundle_last <= until if until is not None else np.ones(len(hit), bool)
    out = {}
    for name, sel in (("motif", planted & scope), ("noise", ~planted & scope)):
        out[name] = float(hit[sel].mean()) if sel.any() else None
        out[f"{name}_bundles"] = int(sel.sum())
    return out
