"""The events the agent keeps for match windows and for a replay after a restart.

The agent keeps, for every partition, the events within ``window`` of its last tag, as one
contiguous run of stream positions. :class:`Retained` holds the run in append-only numpy
arrays with a moving start, so a chunk costs time in proportion to its own events. It shows
the run as an ``acep.EventBatch`` of views (:meth:`Retained.view`) and builds partition
codes for the windows of its matches (:meth:`Retained.partitions`). See docs/WIRE.md, "Agent",
Restart (the kept run).
"""

from __future__ import annotations

import numpy as np

from acep.events import EventBatch, as_object_column, partition_key
from acep.windows import PartitionCodes

__all__ = ["Retained"]

_MIN_CAPACITY = 1024
_GROWTH = 1.5  # storage capacity over the live run when it grows
_MAX_INTERNED = 1 << 16


class Retained:
    """The kept run: every partition's last ``window`` of events, at most ``max_events``."""

    def __init__(self, partition: str | None, window: float, max_events: int):
        self.partition, self.window, self.max_events = partition, float(window), max_events
        self.part_codes: dict = {}  # partition key -> code (-1: the event has no key)
        self.last_tag = np.zeros(0)  # by code: the partition's latest tag
        self.base = 0  # stream position of storage index 0
        self.lo = self.hi = 0  # the kept run is storage[lo:hi]
        self.tag_is_time = False
        self._cap = 0
        self._codes = np.zeros(0, np.int64)
        self._tags = np.zeros(0)
        self._types = np.zeros(0, np.int32)
        self._offsets = np.zeros(0, np.int64)  # -1: none (standard input)
        self._intern: dict = {}  # one object per distinct text value, see _add_column
        self._columns: dict[str, np.ndarray] = {}
        self._type_index: dict[str, int] = {}
        self.type_names: list[str] = []

    def __len__(self) -> int:
        return self.hi - self.lo

    @property
    def position(self) -> int:
        """Stream position of the first kept event (the next position when none is kept)."""
        return self.base + self.lo

    def first_offset(self, default):
        """The resume offset before the first kept event (``default`` when none is kept)."""
        if self.hi == self.lo:
            return default
        offset = int(self._offsets[self.lo])
        return None if offset < 0 else offset

    # ------------------------------------------------------------------ appending

    def append(self, batch: EventBatch, starts: list) -> None:
        """Add a chunk's events (positions right after the kept run's) with the resume
        offset before each. Nothing is dropped until :meth:`trim`, so the run seen by
        :meth:`view` in between also holds the windows of the chunk's matches."""
        if not len(batch):
            return
        if self.hi == self.lo:
            self._restart(batch)
        elif batch.position != self.base + self.hi:
            raise ValueError(f"events at position {batch.position} do not follow the kept "
                             f"run, which ends before {self.base + self.hi}")
        elif batch.tag_is_time != self.tag_is_time:
            raise ValueError("cannot concatenate batches of timestamp and numeric tags")
        self._add(batch, starts)

    def _restart(self, batch: EventBatch) -> None:
        """An empty run forgets its schema (as a concatenation without it would)."""
        self.base, self.lo, self.hi = batch.position, 0, 0
        self.tag_is_time = bool(batch.tag_is_time)
        self._type_index, self.type_names = {}, []
        self._columns = {}
        for name, col in batch.columns.items():
            self._columns[name] = np.empty(self._cap, dtype=col.dtype)

    def _add(self, batch: EventBatch, starts: list) -> None:
        n = len(batch)
        self._reserve(n)
        a, b = self.hi, self.hi + n
        codes = self._partition_codes(batch)
        tags = np.asarray(batch.tags, dtype=float)
        self._codes[a:b] = codes
        self._tags[a:b] = tags
        lut = np.array([self._type_index.setdefault(t, len(self._type_index))
                        for t in batch.type_names] or [0], dtype=np.int32)
        if len(self.type_names) < len(self._type_index):
            self.type_names = list(self._type_index)
        self._types[a:b] = lut[batch.type_codes]
        self._offsets[a:b] = [-1 if o is None else o for o in starts]
        for name in set(self._columns) | set(batch.columns):
            self._add_column(name, batch.columns.get(name), a, b)
        self.hi = b
        if len(self.last_tag) < len(self.part_codes):
            self.last_tag = np.concatenate(
                [self.last_tag, np.full(len(self.part_codes) - len(self.last_tag), -np.inf)])
        ok = codes >= 0
        np.maximum.at(self.last_tag, codes[ok], tags[ok])

    def _partition_codes(self, batch: EventBatch) -> np.ndarray:
        n = len(batch)
        if self.partition is None:
            if not self.part_codes:
                self.part_codes[None] = 0
            return np.zeros(n, dtype=np.int64)
        col = batch.columns.get(self.partition)
        if col is None:
            return np.full(n, -1, dtype=np.int64)
        index = self.part_codes
        out = []
        for v in col.tolist():
            code = index.get(v)
            if code is None:
                key = partition_key(v)  # the matcher's key (7 and 7.0 are one)
                code = -1 if key is None else index.setdefault(key, len(index))
            out.append(code)
        return np.array(out, dtype=np.int64)

    def _add_column(self, name: str, col: np.ndarray | None, a: int, b: int) -> None:
        stored = self._columns.get(name)
        if stored is None:  # a new column: missing for the kept events
            text = col.dtype == object
            stored = np.empty(self._cap, dtype=object if text else np.float64)
            stored[self.lo:a] = None if text else np.nan
            self._columns[name] = stored
        text = stored.dtype == object
        if col is None:
            stored[a:b] = None if text else np.nan
        elif col.dtype == object and not text:  # objects from now on, as concat makes it
            converted = np.empty(self._cap, dtype=object)
            converted[self.lo:a] = as_object_column(stored[self.lo:a])
            converted[a:b] = col
            self._columns[name] = converted
        elif text and col.dtype != object:
            stored[a:b] = as_object_column(col)
        elif text and len(self._intern) < _MAX_INTERNED:
            # JSON gives every event its own copy of a repeated text value (an airport):
            # the kept run holds one per distinct value instead
            intern = self._intern
            stored[a:b] = [intern.setdefault(v, v) if type(v) is str else v
                           for v in col.tolist()]
        else:
            stored[a:b] = col

    def _reserve(self, n: int) -> None:
        """Room for ``n`` more events at ``hi``: move the live run to the front of the
        storage (in place) when that frees enough, else grow; amortized O(n)."""
        if self.hi + n <= self._cap:
            return
        lo, hi, live = self.lo, self.hi, self.hi - self.lo
        arrays = [self._codes, self._tags, self._types, self._offsets, *self._columns.values()]
        if (live + n) * _GROWTH <= self._cap:
            for arr in arrays:
                arr[:live] = arr[lo:hi]  # numpy copies overlapping ranges safely
                if arr.dtype == object:
                    arr[live:hi] = None  # no stale references
        else:
            cap = max(_MIN_CAPACITY, int((live + n) * _GROWTH))
            grown = []
            for arr in arrays:
                out = np.empty(cap, dtype=arr.dtype)
                out[:live] = arr[lo:hi]
                grown.append(out)
            self._codes, self._tags, self._types, self._offsets = grown[:4]
            self._columns = dict(zip(self._columns, grown[4:]))
            self._cap = cap
        self.base += lo
        self.lo, self.hi = 0, live

    def trim(self) -> None:
        """Drop the events before the first one that some window still needs (and more
        when the run is above ``max_events``). An event's
        partition's last tag only grows, so an event once dropped is never needed again:
        the scan only looks at events that are dropped now, plus one block."""
        hi, lo, step = self.hi, self.lo, 256
        while lo < hi:
            end = min(lo + step, hi)
            codes = self._codes[lo:end]
            ok = codes >= 0
            keep = np.zeros(end - lo, dtype=bool)
            keep[ok] = self._tags[lo:end][ok] >= self.last_tag[codes[ok]] - self.window
            if keep.any():
                lo += int(np.argmax(keep))
                break
            lo, step = end, step * 2
        self.lo = max(lo, hi - self.max_events)

    # ------------------------------------------------------------------ reading

    def view(self) -> EventBatch | None:
        """The kept run as an ``EventBatch`` of views (None when empty)."""
        lo, hi = self.lo, self.hi
        if hi == lo:
            return None
        return EventBatch(self._types[lo:hi], self.type_names, self._tags[lo:hi],
                          {k: v[lo:hi] for k, v in self._columns.items()},
                          self.base + lo, "<agent>", None, self.tag_is_time)

    def partitions(self) -> PartitionCodes:
        """The partition code of each event of :meth:`view` and the code of each key, for
        ``acep.windows.window_mask`` (without a partition attribute every event has the
        code of the key None)."""
        if self.partition is None and not self.part_codes:
            self.part_codes[None] = 0
        return PartitionCodes(self._codes[self.lo:self.hi], self.part_codes)
