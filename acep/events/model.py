"""The event model: :class:`Event` (row form), :class:`EventBatch` (columns),
:class:`TextCodes` (a text column's dictionary encoding) and :class:`EventError` (a bad
event, naming its file, line and field).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from .. import _checks as check
from .. import storage
from .spec import _DEFAULT
from .values import _missing, _py, _TagKind, as_object_column


class EventError(ValueError):
    """A bad event/row: message names the source, line (1-based, of the file) and field."""

    def __init__(self, message: str, source: str = "<events>", line: int | None = None,
                 field: str | None = None, position: int | None = None):
        self.message, self.source, self.line = message, source, line
        self.field, self.position = field, position
        where = [storage.redact(str(source))]  # no credentials of a URI in messages
        if line is not None:
            where.append(f"line {line}")
        elif position is not None:
            where.append(f"event {position}")
        if field is not None:
            where.append(f"field {field!r}")
        super().__init__(f"{', '.join(where)}: {message}")


@dataclass
class Event:
    """One event in row form."""

    type: str
    t: float
    attrs: dict[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class TextCodes:
    """A text column's dictionary encoding: ``column[i]`` is ``values[codes[i]]``, or None
    where ``codes[i]`` is -1.

    The readers of Arrow formats keep it next to the column they build from it, so that a
    consumer can group or format the column once per distinct value. ``column`` is that
    column: the encoding holds only while ``batch.columns[name] is column``
    (:meth:`EventBatch.codes_of`), so a consumer that replaces a column cannot be misled.
    """

    column: np.ndarray
    codes: np.ndarray  # int32, -1 where missing
    values: np.ndarray  # object: the distinct texts (no duplicates needed)

    def take(self, rows, column: np.ndarray) -> TextCodes:
        """The encoding of ``column``, which is this one's ``column[rows]``."""
        return TextCodes(column, self.codes[rows], self.values)


def text_column(codes: np.ndarray, values: list) -> tuple[np.ndarray, TextCodes]:
    """The object column of a dictionary encoding (one str object per distinct text, shared
    by its rows) and its :class:`TextCodes`."""
    table = np.empty(len(values) + 1, dtype=object)
    table[:-1] = values
    column = table[codes]  # code -1 takes the None at the end
    return column, TextCodes(column, codes, table[:-1])


@dataclass
class EventBatch:
    """Events in columns. Event ``i`` has global position ``position + i``.

    ``text_codes`` may hold the dictionary encoding of text columns (see :class:`TextCodes`);
    it is a shortcut, never the only copy: ``columns`` has every value.
    """

    type_codes: np.ndarray
    type_names: list[str]
    tags: np.ndarray
    columns: dict[str, np.ndarray]
    position: int = 0
    source: str = "<events>"
    lines: np.ndarray | None = None
    tag_is_time: bool = False
    tag_field: str = "t"  # the tag's name in the input, for messages
    text_codes: dict[str, TextCodes] = field(default_factory=dict, repr=False, compare=False)

    def __len__(self) -> int:
        return len(self.type_codes)

    def line_of(self, i: int) -> int | None:
        """The file line of local event ``i`` (None when the format has no lines)."""
        return None if self.lines is None else int(self.lines[i])

    def codes_of(self, name: str) -> TextCodes | None:
        """The dictionary encoding of column ``name``, if the batch has one that still
        matches the column (None otherwise: read ``columns[name]``)."""
        codes = self.text_codes.get(name)
        if codes is None or self.columns.get(name) is not codes.column:
            return None
        return codes

    def slice(self, start: int, stop: int) -> EventBatch:
        """Events ``start..stop-1`` of this batch (local indices) as a batch of their own."""
        start, stop, _ = slice(start, stop).indices(len(self))
        lines = None if self.lines is None else self.lines[start:stop]
        columns = {k: v[start:stop] for k, v in self.columns.items()}
        return EventBatch(self.type_codes[start:stop], self.type_names, self.tags[start:stop],
                          columns, self.position + start, self.source, lines,
                          self.tag_is_time, self.tag_field,
                          _take_codes(self, slice(start, stop), columns))

    def types(self) -> np.ndarray:
        """The type name of each event (object array)."""
        return np.array(self.type_names, dtype=object)[self.type_codes]

    def to_events(self) -> list[Event]:
        """Row form; missing attributes (NaN / None) are left out of ``attrs``."""
        names = self.types()
        out = []
        for i in range(len(self)):
            attrs = {k: _py(col[i]) for k, col in self.columns.items() if not _missing(col[i])}
            out.append(Event(names[i], float(self.tags[i]), attrs))
        return out

    @classmethod
    def from_events(cls, events: Iterable[Event | dict], position: int = 0,
                    source: str = "<events>") -> EventBatch:
        """Columns from row events; dicts have keys ``"type"``, ``"t"`` plus attributes.

        A bad event raises :class:`EventError` (``position`` counts from ``position``).
        """
        from .chunks import _accept, _Sink  # the readers build on the model
        from .rows import _event_parts, _rows_chunk

        _check_rows(events)
        position = check.whole(position, "position", 0)
        rows = [(None, _event_parts(e)) for e in events]
        chunk = _rows_chunk(rows, _DEFAULT, _TagKind())
        batch, error = _accept(chunk, _Sink(source, "error", None), position)
        if error is not None:
            raise error
        return batch

    @staticmethod
    def concat(batches: list[EventBatch]) -> EventBatch:
        """One batch of all events; position/source of the first, columns unioned.

        A column that is numeric in one batch and objects in another becomes objects, its
        numbers kept as numbers.
        """
        if isinstance(batches, EventBatch):
            raise check.ParameterError("batches must be a list of EventBatch, got one "
                                       "EventBatch (write concat([batch]))")
        batches = list(batches)
        for b in batches:
            check.instance(b, "each of batches", EventBatch, "an acep.EventBatch")
        if not batches:
            return _empty_batch(0, "<events>", False)
        if len({b.tag_is_time for b in batches}) > 1:
            raise ValueError("cannot concatenate batches of timestamp and numeric tags")
        codes, names = _merge_types(batches)
        lines = None
        if all(b.lines is not None for b in batches):
            lines = np.concatenate([b.lines for b in batches]).astype(np.int64)
        first = batches[0]
        columns = _merge_columns(batches)
        return EventBatch(codes, names, np.concatenate([b.tags for b in batches]),
                          columns, first.position, first.source, lines,
                          first.tag_is_time, first.tag_field, _merge_codes(batches, columns))


def _take_codes(batch: EventBatch, rows, columns: dict[str, np.ndarray]) -> dict:
    """The encodings of ``batch`` still valid, for the ``rows`` taken into ``columns``."""
    out = {}
    for name in batch.text_codes:
        codes = batch.codes_of(name)
        if codes is not None:
            out[name] = codes.take(rows, columns[name])
    return out


def _check_rows(events: object) -> None:
    """Row events: an iterable of :class:`Event` or dicts, not one row, a path or text."""
    hint = ""
    if isinstance(events, (str, bytes, os.PathLike)):
        hint = " (to read a file, use acep.read_events or acep.events.read_all)"
    elif isinstance(events, (dict, Event)):
        hint = " (one event: put it in a list)"
    elif isinstance(events, Iterable):
        return
    raise check.ParameterError(f"events must be an EventBatch or a list (any iterable) of "
                               f"Event or dict rows, got {check.shown(events)}{hint}")


def _merge_types(batches: list[EventBatch]) -> tuple[np.ndarray, list[str]]:
    index: dict[str, int] = {}
    parts = []
    for b in batches:
        lut = np.array([index.setdefault(n, len(index)) for n in b.type_names], dtype=np.int32)
        parts.append(lut[b.type_codes] if len(b) else np.zeros(0, np.int32))
    return np.concatenate(parts).astype(np.int32), list(index)


def _merge_columns(batches: list[EventBatch]) -> dict[str, np.ndarray]:
    out = {}
    for name in dict.fromkeys(c for b in batches for c in b.columns):
        parts = [b.columns.get(name) for b in batches]
        mixed = any(p is not None and p.dtype == object for p in parts)
        filled = []
        for b, p in zip(batches, parts):
            if p is None:
                p = np.full(len(b), None, dtype=object) if mixed else np.full(len(b), np.nan)
            elif mixed and p.dtype != object:
                p = as_object_column(p)
            filled.append(p)
        out[name] = np.concatenate(filled)
    return out


def _merge_codes(batches: list[EventBatch], columns: dict[str, np.ndarray]) -> dict:
    """One encoding per column that every batch encodes: the values unioned, codes mapped."""
    out = {}
    for name in batches[0].text_codes:
        parts = [b.codes_of(name) for b in batches]
        if any(p is None for p in parts):
            continue
        index: dict = {}
        codes = []
        for p in parts:  # code -1 maps to the -1 at the end of the lookup
            lut = np.array([index.setdefault(v, len(index)) for v in p.values] + [-1],
                           dtype=np.int32)
            codes.append(lut[p.codes])
        values = np.empty(len(index), dtype=object)
        values[:] = list(index)
        out[name] = TextCodes(columns[name], np.concatenate(codes), values)
    return out


def _empty_batch(position: int, source: str, tag_is_time: bool) -> EventBatch:
    return EventBatch(np.zeros(0, np.int32), [], np.zeros(0), {}, position, source, None,
                      tag_is_time)
