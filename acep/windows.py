"""The events of match windows (docs/WIRE.md, "Which events are sent").

The window of a match is every event of its partition with a tag in ``[point - window,
point]``: every event that a match ending at that point could use. The agent uploads these
events with its matches (``edge.wire.batch_from_matches``), the collector archives them, and
the fit rates the sketch's cells on the windows of a training stream's own matches
(``history.fit``, docs/SHEDDING.md section 10).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from .events import EventBatch, partition_key

__all__ = ["PartitionCodes", "partition_groups", "value_groups", "window_mask",
           "match_windows", "sample_mask"]


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


@dataclass(frozen=True)
class PartitionCodes:
    """Each event's partition as an integer code (-1: the event has no key) and the code of
    each key: what :func:`window_mask` needs of the partitions, without a group per key."""

    codes: np.ndarray
    index: Mapping


def window_mask(events: EventBatch, keys: Sequence, points: np.ndarray, window: float,
                groups: Mapping | PartitionCodes) -> np.ndarray:
    """Which of ``events`` lie in the window of some match (partition key ``keys[i]``, a
    plain Python value, and match point ``points[i]``). ``groups`` gives the partitions of
    the events, for at least the matches' partitions: as :func:`partition_groups` gives
    them, or as a :class:`PartitionCodes`."""
    tags = np.asarray(events.tags, dtype=float)
    if not isinstance(groups, PartitionCodes):
        groups = _codes_of_groups(groups, len(tags))
    index = groups.index
    match_codes = np.array([index.get(k, -1) for k in keys], dtype=np.int64)
    return _covered(np.asarray(groups.codes, dtype=np.int64), tags, match_codes,
                    np.asarray(points, dtype=float), float(window))


def _codes_of_groups(groups: Mapping, n: int) -> PartitionCodes:
    codes = np.full(n, -1, dtype=np.int64)
    for code, idx in enumerate(groups.values()):
        codes[idx] = code
    return PartitionCodes(codes, {key: code for code, key in enumerate(groups)})


def _covered(codes: np.ndarray, tags: np.ndarray, match_codes: np.ndarray,
             points: np.ndarray, window: float) -> np.ndarray:
    """Events of code ``c`` with a tag in ``[p - window, p]`` for a match ``(c, p)``.

    The windows of one code overlap into intervals. Most codes have one, and their events
    are tested against it elementwise; the events of the others search theirs."""
    keep = np.zeros(len(tags), dtype=bool)
    ok = match_codes >= 0
    match_codes, points = match_codes[ok], points[ok]
    if not len(match_codes) or not len(tags):
        return keep
    order = np.lexsort((points, match_codes))
    match_codes, points = match_codes[order], points[order]
    starts = points - window
    first = np.ones(len(points), dtype=bool)  # the first window of an interval
    first[1:] = (match_codes[1:] != match_codes[:-1]) | (starts[1:] > points[:-1])
    begin = np.flatnonzero(first)
    end = np.append(begin[1:], len(points)) - 1  # its last window, the latest point
    code, lo, hi = match_codes[begin], starts[begin], points[end]
    top = int(max(codes.max(), code.max())) + 2  # indexed by code + 1: code -1 reads 0
    count = np.bincount(code + 1, minlength=top)
    one = count == 1
    at = codes + 1
    only = np.zeros(top, dtype=np.int64)
    only[code[one[code + 1]] + 1] = np.flatnonzero(one[code + 1])
    j = only[at]
    keep = one[at] & (tags >= lo[j]) & (tags <= hi[j])
    many = np.flatnonzero(count[at] > 1)
    if len(many):
        keep[many] = _in_intervals(codes[many], tags[many], code, lo, hi)
    return keep


def _in_intervals(codes: np.ndarray, tags: np.ndarray, code: np.ndarray, lo: np.ndarray,
                  hi: np.ndarray) -> np.ndarray:
    """Whether each ``(codes[i], tags[i])`` lies in an interval ``[lo[j], hi[j]]`` of code
    ``code[j]``; the intervals are sorted by code then ``lo`` and do not overlap. Tags are
    replaced by their ranks among all the values, so (code, rank) is one exact integer."""
    values = np.unique(np.concatenate([tags, lo]))
    span = len(values)
    starts = code * span + np.searchsorted(values, lo)
    j = np.searchsorted(starts, codes * span + np.searchsorted(values, tags), "right") - 1
    inside = j >= 0
    j = np.maximum(j, 0)
    return inside & (code[j] == codes) & (tags <= hi[j])


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


def sample_mask(events: EventBatch, partition_by: str | None, window: float, share: float,
                seed: int = 0) -> np.ndarray:
    """Which of ``events`` lie in a sampled block: a seeded share of each partition's time.

    Each partition's time is cut into blocks of two windows (``floor(tag / (2 * window))``).
    A block is drawn with probability ``share`` by a hash of (``seed``, partition key,
    block), whatever the matches, so the sample shows a trainer the stream as it is, not
    only where the device found something. A window that starts in the first half of a
    sampled block ends within it. docs/TRAINING.md, "When to retrain", has the measurements.

    Parameters
    ----------
    events : acep.events.EventBatch
        The stream.
    partition_by : str or None
        The partition attribute (None: one partition). Events without a key are never drawn.
    window : float
        The pattern's window, > 0.
    share : float
        The probability that a block is drawn, in [0, 1].
    seed : int
        Seed of the draw.

    Returns
    -------
    numpy.ndarray
        A boolean per event.

    Examples
    --------
    >>> from acep import EventBatch
    >>> from acep.windows import sample_mask
    >>> events = EventBatch.from_events([{"type": "a", "t": float(t)} for t in range(8)])
    >>> sample_mask(events, None, 2.0, 0.5, seed=1).tolist()  # blocks [0, 4) and [4, 8)
    [True, True, True, True, False, False, False, False]
    """
    if not (np.isfinite(window) and window > 0):
        raise ValueError(f"sample blocks need a window > 0, got {window!r}")
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"the sample's share must be in [0, 1], got {share!r}")
    tags = np.asarray(events.tags, dtype=float)
    blocks = np.floor(tags / (2.0 * window)).astype(np.int64).view(np.uint64)
    code, hashes = _key_codes(events, partition_by, seed)
    draw = _mix(hashes[np.maximum(code, 0)] ^ (blocks * _GOLDEN))
    return (code >= 0) & ((draw >> np.uint64(11)).astype(np.float64) * 2.0 ** -53 < share)


_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _key_codes(events: EventBatch, partition_by: str | None, seed: int
               ) -> tuple[np.ndarray, np.ndarray]:
    """Per event, the index of its partition key (-1: none), and each key's hash."""
    n = len(events.tags)
    if partition_by is None:
        return np.zeros(n, dtype=np.int64), np.array([_key_hash(seed, None)], np.uint64)
    col = events.columns.get(partition_by)
    if col is None:
        raise ValueError(f"events have no attribute {partition_by!r} to partition by")
    index: dict = {}
    code = np.fromiter((-1 if v is None or v != v else index.setdefault(v, len(index))
                        for v in col.tolist()), dtype=np.int64, count=n)
    hashes = np.array([_key_hash(seed, key) for key in index] or [0], dtype=np.uint64)
    return code, hashes


@lru_cache(maxsize=1 << 14)
def _key_hash(seed: int, key) -> int:
    """A 64-bit hash of (seed, key), whatever the column's storage: 7 and 7.0 are one key."""
    key = partition_key(key)
    digest = hashlib.blake2b(f"{int(seed)}\x00{key!r}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser, elementwise (uint64 arithmetic wraps)."""
    x = x ^ (x >> np.uint64(30))
    x = x * np.uint64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> np.uint64(27))
    x = x * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))
