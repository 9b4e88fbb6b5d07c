"""The events of match windows (docs/WIRE.md, "Which events are sent").

The window of a match is every event of its partition with a tag in ``[point - window,
point]``: every event that a match ending at that point could use. The agent uploads these
events with its matches (``edge.wire.batch_from_matches``), the collector archives them, and
the fit rates the sketch's cells on the windows of a training stream's own matches
(``history.fit``, docs/SHEDDING.md section 10).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from .events import EventBatch

__all__ = ["partition_groups", "value_groups", "window_mask", "match_windows"]


def partition_groups(events: EventBatch, partition_by: str | None) -> dict:
    """{partition key: local indices of its events, in stream order}; events without a key
    (None, NaN) are in no group."""
    n = len(events.tags)
    if partition_by is None:
        return {None: np.arange(n)}
    col = events.columns.get(partition_by)
    if col is None:
        raise ValueError(f"events have no attribute {partition_by!r} to partition by")
    return value_groups(col)


def value_groups(column: np.ndarray) -> dict:
    """{value: indices of the entries holding it, in order} of a partition column; None and
    NaN, a missing partition key, are in no group."""
    groups: dict = {}
    for i, v in enumerate(column.tolist()):
        if v is not None and v == v:
            groups.setdefault(v, []).append(i)
    return {k: np.array(v, dtype=np.int64) for k, v in groups.items()}


def window_mask(events: EventBatch, keys: Sequence, points: np.ndarray, window: float,
                groups: Mapping) -> np.ndarray:
    """Which of ``events`` lie in the window of some match (partition key ``keys[i]``, a
    plain Python value, and match point ``points[i]``); ``groups`` as
    :func:`partition_groups` gives them, for at least the matches' partitions."""
    keep = np.zeros(len(events.tags), dtype=bool)
    tags = np.asarray(events.tags, dtype=float)
    points = np.asarray(points, dtype=float)
    by_key: dict = {}
    for i, key in enumerate(keys):
        by_key.setdefault(key, []).append(i)
    for key, rows in by_key.items():
        idx = groups.get(key)
        if idx is None:
            continue
        gtags, p = tags[idx], points[rows]
        lo = np.searchsorted(gtags, p - window, "left")
        hi = np.searchsorted(gtags, p, "right")
        m = len(idx) + 1  # +1 at each window's first event, -1 after its last
        cover = np.bincount(lo, minlength=m) - np.bincount(hi, minlength=m)
        keep[idx[np.cumsum(cover[:-1]) > 0]] = True
    return keep


def match_windows(events: EventBatch, keys: Sequence, points: np.ndarray, window: float,
                  partition_by: str | None) -> EventBatch:
    """The events of the matches' windows as a stream of their own (positions from 0):
    what the agent would upload for these matches, without the rest of the stream."""
    keep = np.flatnonzero(window_mask(events, keys, points, window,
                                      partition_groups(events, partition_by)))
    lines = None if events.lines is None else events.lines[keep]
    return EventBatch(events.type_codes[keep], events.type_names, events.tags[keep],
                      {k: v[keep] for k, v in events.columns.items()}, 0, events.source,
                      lines, events.tag_is_time)
