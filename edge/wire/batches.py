"""Building batches on the device: :func:`batch_from_matches` from a matcher's output,
:class:`Condenser` for the summary kind, and the splitting of a batch too large.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence

import numpy as np

from acep.windows import partition_groups, value_groups, window_mask

from .decode import decode, slot_of, value_key
from .encode import encode_batch, plain, plain_list
from .model import Limits, PatternRef, SummaryBatch, UploadBatch, WireError


def batch_from_matches(matches, events, *, device: str, seq: int, pattern: PatternRef,
                       created_at: float | None = None,
                       columns: Sequence[str] | None = None,
                       groups: Mapping | None = None,
                       sample: np.ndarray | None = None) -> UploadBatch:
    """An upload batch from an ``acep.MatchBatch`` and the ``acep.EventBatch`` it came from.

    The window of match i is every event of its partition with a tag in
    ``[point_i - window, point_i]``. Windows are cut to the events given, so the agent passes
    a batch that also holds the last ``window`` of earlier events; a trajectory that reaches
    outside ``events`` raises ``ValueError``. ``columns`` picks the attributes to send
    (default: all). ``groups`` may give, for at least the matches' partitions, the indices
    of each partition's events in ``events`` in stream order (what the agent keeps up to
    date); by default they are computed from the ``partition_by`` column. ``sample``, a
    boolean per event of ``events``, adds events to send whatever the matches: the agent's
    sample of its stream (``acep.windows.sample_mask``); with it ``matches`` may be empty.
    """
    import time

    n_ev = len(events.tags)
    base = int(events.position)
    traj = np.asarray(matches.trajectory, dtype=np.int64)
    if len(traj) and (traj.min() < base or traj.max() >= base + n_ev):
        raise ValueError(f"a trajectory reaches outside events {base}..{base + n_ev - 1}; "
                         "pass the events of the whole windows")
    if groups is None:
        groups = partition_groups(events, pattern.partition_by)
    tags = np.asarray(events.tags, dtype=float)
    points = np.asarray(matches.point, dtype=float)
    keys = plain_list(matches.partition)
    keep = window_mask(events, keys, points, pattern.window, groups)
    names = list(columns) if columns is not None else list(events.columns)
    keep[traj - base] = True
    if sample is not None:
        if len(sample) != n_ev:
            raise ValueError(f"sample has {len(sample)} entries for {n_ev} events")
        keep |= np.asarray(sample, dtype=bool)
    local = np.flatnonzero(keep)
    used, codes = np.unique(np.asarray(events.type_codes)[local], return_inverse=True)
    return UploadBatch(
        device=device, seq=seq, pattern=pattern,
        created_at=time.time() if created_at is None else created_at,
        tag_is_time=bool(events.tag_is_time or matches.tag_is_time),
        partition=keys, point=points.copy(),
        start=np.asarray(matches.start, dtype=float).copy(),
        errors=np.asarray(matches.errors, dtype=np.int32).copy(),
        trajectory_ptr=np.asarray(matches.trajectory_ptr, dtype=np.int64).copy(),
        trajectory=traj.copy(), event_position=local.astype(np.int64) + base,
        event_tag=tags[local], event_type=codes.astype(np.int32).reshape(-1),
        type_names=[events.type_names[c] for c in used.tolist()],
        columns={name: np.asarray(events.columns[name])[local] for name in names})


def derived_seq(seq: int, part: int) -> int:
    """The ``seq`` of part ``part`` (0 or 1) of the batch ``seq`` split in two: a hash of both
    with bit 62 set, so the same split (a retry after a crash) gives the same ids, and none
    is a seq the agent counts up to (from the Unix time in microseconds, below 2**52)."""
    digest = hashlib.sha256(f"acep-split:{int(seq)}:{int(part)}".encode()).digest()
    return (1 << 62) | (int.from_bytes(digest[:8], "big") & ((1 << 62) - 1))


def sub_batch(batch: UploadBatch, rows: Sequence[int], seq: int) -> UploadBatch:
    """The matches ``rows`` of ``batch`` under ``seq``, each with the events of its window
    (and its trajectory), as :func:`batch_from_matches` would have sent them alone: the
    batch holds every event of each of its matches' windows."""
    rows = np.asarray(rows, dtype=np.int64)
    ptr = np.asarray(batch.trajectory_ptr, dtype=np.int64)
    pieces = [np.arange(ptr[i], ptr[i + 1]) for i in rows.tolist()]
    idx = np.concatenate(pieces) if pieces else np.zeros(0, np.int64)
    lengths = np.diff(ptr)[rows]
    traj = np.asarray(batch.trajectory, dtype=np.int64)[idx]
    keys = [batch.partition[i] for i in rows.tolist()]
    points = np.asarray(batch.point, dtype=float)[rows]
    attr = batch.pattern.partition_by
    n_ev = len(batch.event_position)
    groups = {None: np.arange(n_ev)} if attr is None else value_groups(batch.columns[attr])
    keep = window_mask(_Tags(batch.event_tag), keys, points, batch.pattern.window, groups)
    keep[np.searchsorted(batch.event_position, traj)] = True
    local = np.flatnonzero(keep)
    used, codes = np.unique(np.asarray(batch.event_type)[local], return_inverse=True)
    return UploadBatch(
        device=batch.device, seq=seq, pattern=batch.pattern, created_at=batch.created_at,
        tag_is_time=batch.tag_is_time, partition=keys, point=points,
        start=np.asarray(batch.start, dtype=float)[rows],
        errors=np.asarray(batch.errors, dtype=np.int32)[rows],
        trajectory_ptr=np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
        trajectory=traj, event_position=np.asarray(batch.event_position)[local],
        event_tag=np.asarray(batch.event_tag, dtype=float)[local],
        event_type=codes.astype(np.int32).reshape(-1),
        type_names=[batch.type_names[c] for c in used.tolist()],
        columns={k: np.asarray(v)[local] for k, v in batch.columns.items()})


def split_body(body: bytes) -> list[tuple[str, bytes, int]] | None:
    """A batch body of matches cut in two halves (batch id, body, matches each), under
    :func:`derived_seq` ids; None when it holds fewer than two matches or is no batch of
    matches (a condensed summary is not split)."""
    try:
        size = max(len(body), Limits().max_bytes)  # the agent's own body: its sizes go
        batch = decode(body, Limits(max_bytes=size, max_str_len=size))
    except WireError:
        return None
    if not isinstance(batch, UploadBatch) or len(batch) < 2:
        return None
    half = len(batch) // 2
    out = []
    for part, rows in enumerate((range(half), range(half, len(batch)))):
        sub = sub_batch(batch, list(rows), derived_seq(batch.seq, part))
        out.append((sub.batch_id, encode_batch(sub), len(rows)))
    return out


class _Tags:
    """What :func:`acep.windows.window_mask` reads of an event batch: its tags."""

    def __init__(self, tags):
        self.tags = tags


class Condenser:
    """Per-slot summaries of matches: the time-based frequency operator over jumping windows.

    Slot j covers tags ``[origin + j*slot, origin + (j+1)*slot)``. A bundle (Definition 3:
    points of one partition each within ``window`` of the previous one) is counted in the slot
    of its first point; the last point per partition is kept across calls, so a bundle that
    continues into a later batch is not counted twice. Rows of one (partition, slot) may come
    in consecutive batches when a slot spans them; the reader adds them up.
    """

    def __init__(self, slot: float, window: float, origin: float = 0.0):
        if not slot > 0:
            raise ValueError(f"slot must be positive, not {slot!r}")
        self.slot, self.window, self.origin = float(slot), float(window), float(origin)
        self._last: dict = {}

    def summarize(self, matches, *, device: str, seq: int, pattern: PatternRef,
                  created_at: float | None = None) -> SummaryBatch:
        """The summary rows of ``matches`` (an ``acep.MatchBatch``), in (partition, slot)
        order of first appearance."""
        import time

        rows: dict = {}
        order = sorted(range(len(matches.point)),
                       key=lambda i: (value_key(plain(matches.partition[i])), matches.point[i]))
        for i in order:
            key, point = plain(matches.partition[i]), float(matches.point[i])
            err = int(matches.errors[i])
            last = self._last.get(value_key(key))
            new_bundle = last is None or point - last > self.window
            self._last[value_key(key)] = point if last is None else max(last, point)
            j = int(slot_of(point, self.origin, self.slot))
            row = rows.get((value_key(key), j))
            if row is None:
                rows[(value_key(key), j)] = [key, j, 1, int(new_bundle), point, point, err]
            else:
                row[2] += 1
                row[3] += int(new_bundle)
                row[4], row[5] = min(row[4], point), max(row[5], point)
                row[6] = min(row[6], err)
        cols = list(zip(*rows.values())) or [[]] * 7
        return SummaryBatch(
            device=device, seq=seq, pattern=pattern,
            created_at=time.time() if created_at is None else created_at,
            tag_is_time=bool(matches.tag_is_time), slot=self.slot, origin=self.origin,
            partition=list(cols[0]), slot_index=np.array(cols[1], dtype=np.int64),
            matches=np.array(cols[2], dtype=np.int64), bundles=np.array(cols[3], np.int64),
            first=np.array(cols[4], dtype=float), last=np.array(cols[5], dtype=float),
            min_errors=np.array(cols[6], dtype=np.int32))
