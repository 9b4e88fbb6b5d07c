"""Events and the readers that turn files into columnar event batches.

An event is a *type* (a string such as ``"a"`` or ``"late"``), a *tag* ``t`` (a number or a
timestamp; for count windows the event's index in the stream) and attributes. The engine
reads events in columns, as :class:`EventBatch` (numpy arrays, one batch at a time);
:class:`Event` is the row form for small inputs and the Python API.

:func:`read_events` reads JSON Lines (``.jsonl``, ``.ndjson``, ``.json``, or ``-`` for
stdin), CSV, Parquet and msgpack streams, in batches. An :class:`EventSpec` says which
column is the tag, how the type is derived (a column, or :class:`TypeClasses` of a numeric
column) and which columns are attributes; the default is tag ``t``, type ``type`` and every
other column an attribute::

    {"type": "a", "t": 3, "price": 10.5}

Conversions: numeric (and boolean, as 1/0) columns become float64 with NaN for missing
values, timestamps become float64 seconds since the Unix epoch (naive ones are taken as UTC),
other columns become object arrays (``None`` when missing). A column mixing numbers and text
(JSON Lines, msgpack) keeps each value's kind: numbers stay ``int``/``float``, text ``str``.
Integers beyond 2**53, which a float64 cannot hold exactly, stay exact Python ``int`` in an
object column (a tag or type-class column is converted to float64, lossy). A tag may also
be an ISO 8601 string (``"2001-01-01T00:05:00"``); the first good tag decides whether a
stream's tags are timestamps or numbers. Type codes index the batch's own ``type_names``,
which differ between batches; :meth:`EventBatch.concat` merges them.

Lines: 1-based, as a text editor counts them. JSON Lines count every line of the file; a CSV
row's line is the one it starts on, found in the bytes pyarrow reads (:mod:`acep._csvlines`:
the header, blank lines and line breaks inside quoted values count; ``\\n``, ``\\r\\n`` and a
lone ``\\r`` each end a line); Parquet and msgpack have none (``lines`` is None). A CSV value
may hold line breaks (pyarrow's ``newlines_in_values``). CSV column types are inferred by
pyarrow from the first block of rows (the type column is always text); from a later block on
where a value does not fit, the file is read as text and each block cast back
where it fits, so that value is one value of text (a bad event where a number is needed).

Bad events (a record that is not an object, an undecodable line, a missing type, a missing or
non-numeric tag, a value outside every type class) raise :class:`EventError` naming the file,
line, field and position, after the good events before it were yielded; with
``on_bad_event="skip"`` they are dropped and listed instead. Positions are 0-based indices of
the *accepted* events, so they are continuous across batches; a bad event's position is the
one the next accepted event gets.
"""

from __future__ import annotations

import contextlib
import csv
import gc
import io
import json
import math
import numbers
import os
import stat
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

import msgpack
import numpy as np

from . import _checks as check
from . import storage
from ._bounds import MAX_DEPTH, depth_problem, json_problem
from ._csvlines import LineTap
from ._jsonread import loads
from ._text import one_line

__all__ = [
    "EventError", "Event", "EventBatch", "TypeClasses", "EventSpec", "PRESETS",
    "read_events", "read_all", "read_chunks", "RowChunk", "file_size_hint", "partition_key",
    "as_object_column", "EXACT_INT", "iso_texts", "tag_text",
]


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


# --------------------------------------------------------------------------- event model


@dataclass
class Event:
    """One event in row form."""

    type: str
    t: float
    attrs: dict[str, object] = field(default_factory=dict)


@dataclass
class EventBatch:
    """Events in columns. Event ``i`` has global position ``position + i``."""

    type_codes: np.ndarray
    type_names: list[str]
    tags: np.ndarray
    columns: dict[str, np.ndarray]
    position: int = 0
    source: str = "<events>"
    lines: np.ndarray | None = None
    tag_is_time: bool = False
    tag_field: str = "t"  # the tag's name in the input, for messages

    def __len__(self) -> int:
        return len(self.type_codes)

    def line_of(self, i: int) -> int | None:
        """The file line of local event ``i`` (None when the format has no lines)."""
        return None if self.lines is None else int(self.lines[i])

    def slice(self, start: int, stop: int) -> EventBatch:
        """Events ``start..stop-1`` of this batch (local indices) as a batch of their own."""
        start, stop, _ = slice(start, stop).indices(len(self))
        lines = None if self.lines is None else self.lines[start:stop]
        return EventBatch(self.type_codes[start:stop], self.type_names, self.tags[start:stop],
                          {k: v[start:stop] for k, v in self.columns.items()},
                          self.position + start, self.source, lines, self.tag_is_time,
                          self.tag_field)

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
        return EventBatch(codes, names, np.concatenate([b.tags for b in batches]),
                          _merge_columns(batches), first.position, first.source, lines,
                          first.tag_is_time, first.tag_field)


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


def _empty_batch(position: int, source: str, tag_is_time: bool) -> EventBatch:
    return EventBatch(np.zeros(0, np.int32), [], np.zeros(0), {}, position, source, None,
                      tag_is_time)


# --------------------------------------------------------------------------- the spec


@dataclass(frozen=True)
class TypeClasses:
    """Derive the event type from a numeric column by classes: type = labels[j] where
    bins[j] <= value < bins[j+1]. e.g. delay classes of flights."""

    column: str
    bins: tuple[float, ...]
    labels: tuple[str, ...]

    def __post_init__(self):
        bins = tuple(float(b) for b in self.bins)
        labels = tuple(self.labels)
        object.__setattr__(self, "bins", bins)
        object.__setattr__(self, "labels", labels)
        if not labels or len(bins) != len(labels) + 1:
            raise ValueError(f"type classes of {self.column!r}: need len(labels) + 1 bins, "
                             f"got {len(bins)} bins for {len(labels)} labels")
        if any(not (a < b) for a, b in zip(bins, bins[1:])):
            raise ValueError(f"type classes of {self.column!r}: bins must increase: {bins}")
        if not all(isinstance(x, str) and x for x in labels):
            raise ValueError(f"type classes of {self.column!r}: labels must be non-empty "
                             f"strings: {labels}")



@dataclass(frozen=True)
class EventSpec:
    """Which column is the tag, how the type is derived, which columns are attributes.

    ``PRESETS["flights"]`` is the spec of the embedded flights; ``acep match --spec`` reads
    one from a JSON or TOML file with the same fields.

    Parameters
    ----------
    tag : str or None
        The column of the tags (timestamps or numbers); None numbers the events 0, 1, ...
        (count windows).
    type : str or TypeClasses
        The column of the event types, or classes of a numeric column.
    attributes : tuple of str, optional
        The columns kept as attributes (None: every other column).

    Examples
    --------
    >>> import json, os, tempfile
    >>> from acep import EventSpec, read_events
    >>> from acep.events import TypeClasses
    >>> path = os.path.join(tempfile.mkdtemp(), "trades.jsonl")
    >>> with open(path, "w") as f:
    ...     for row in [{"time": 1, "price": 10.5}, {"time": 2, "price": 12.0}]:
    ...         print(json.dumps(row), file=f)
    >>> cheap = TypeClasses("price", bins=(0, 11, 100), labels=("low", "high"))
    >>> batch = next(read_events(path, EventSpec(tag="time", type=cheap)))
    >>> [batch.type_names[c] for c in batch.type_codes], batch.tags.tolist()
    (['low', 'high'], [1.0, 2.0])
    """

    tag: str | None = "t"
    type: str | TypeClasses = "type"
    attributes: tuple[str, ...] | None = None

    def __post_init__(self):
        if self.attributes is not None:
            object.__setattr__(self, "attributes", check.texts(
                self.attributes, "event spec: attributes", "column names"))
        if not (self.tag is None or isinstance(self.tag, str)):
            raise ValueError(f"event spec: tag must be a column name or None, not {self.tag!r}")
        if not isinstance(self.type, (str, TypeClasses)):
            raise ValueError(f"event spec: type must be a column name or TypeClasses, "
                             f"not {self.type!r}")

    @classmethod
    def from_dict(cls, d: dict) -> EventSpec:
        """``{"tag": "date", "type": "kind" | {"column", "bins", "labels"}, "attributes"}``.

        Bins may be written ``"-inf"`` / ``"inf"``; ``"tag": null`` means count windows.
        """
        check.instance(d, "event spec", dict, 'a dict such as {"tag": "t", "type": "type"}')
        unknown = set(d) - {"tag", "type", "attributes"}
        if unknown:
            raise ValueError(f"event spec: unknown keys {sorted(unknown)}")
        kind = d.get("type", "type")
        if isinstance(kind, dict):
            if set(kind) != {"column", "bins", "labels"}:
                raise ValueError("event spec: type classes need exactly 'column', 'bins', "
                                 f"'labels', got {sorted(kind)}")
            kind = TypeClasses(kind["column"], tuple(_bin(b) for b in kind["bins"]),
                               tuple(kind["labels"]))
        attrs = d.get("attributes")
        if isinstance(attrs, str):  # one column, not its letters
            attrs = [attrs]
        elif attrs is not None and not isinstance(attrs, (list, tuple)):
            raise ValueError(f"event spec: attributes must be a list of column names, not "
                             f"{attrs!r}")
        return cls(d.get("tag", "t"), kind, None if attrs is None else tuple(attrs))

    @classmethod
    def load(cls, path_or_name: str) -> EventSpec:
        """A preset name (see ``PRESETS``) or a JSON (or TOML) file holding the dict form."""
        path_or_name = check.path(path_or_name, "event spec", " (a preset name or a file)")
        if path_or_name in PRESETS:
            return PRESETS[path_or_name]
        if not os.path.isfile(path_or_name):
            raise ValueError(f"event spec {path_or_name!r} is neither a file nor a preset "
                             f"({', '.join(PRESETS)})")
        try:
            with open(path_or_name, "rb") as f:
                d = _toml_load(f) if path_or_name.endswith(".toml") else json.load(f)
            return cls.from_dict(d)
        except (ValueError, TypeError, KeyError, AttributeError) as e:
            raise ValueError(f"event spec {path_or_name}: {e}") from None


def not_an_attribute(spec: EventSpec, name: str) -> str | None:
    """Why ``name`` is never read as an attribute under ``spec`` (not in the spec's
    attributes; without them, the tag or the type column), or None."""
    if spec.attributes is not None:
        if name in spec.attributes:
            return None
        return (f"{name!r} is not among the event spec's 'attributes' "
                f"({', '.join(spec.attributes)})")
    if name == spec.tag:
        return f"{name!r} is the tag (the event spec's 'tag'), not an attribute"
    if name == spec.type:
        return (f"{name!r} is the column the event type is read from (the event spec's "
                "'type'), not an attribute; a spec with another type column reads it")
    return None


def _type_column(spec: EventSpec) -> str:
    """The column the type is read from (the classified column for TypeClasses)."""
    return spec.type if isinstance(spec.type, str) else spec.type.column


def _needed_columns(spec: EventSpec) -> list[str] | None:
    """The columns to read, or None for all of them."""
    if spec.attributes is None:
        return None
    tag = [] if spec.tag is None else [spec.tag]
    return list(dict.fromkeys([*tag, _type_column(spec), *spec.attributes]))


def _not_attributes(spec: EventSpec) -> set[str | None]:
    """Columns that are not attributes when the spec does not list them: tag and type."""
    return {spec.tag, spec.type if isinstance(spec.type, str) else None}


def _attribute_names(spec: EventSpec, columns: Iterable[str]) -> list[str]:
    """The attributes: the spec's list, or every column but the tag and the type column."""
    if spec.attributes is not None:
        return list(spec.attributes)
    drop = _not_attributes(spec)
    return [c for c in columns if c not in drop]


def _bin(b: object) -> float:
    if isinstance(b, str) and math.isinf(_float_or_nan(b)):
        return float(b)
    if isinstance(b, numbers.Real) and not isinstance(b, bool):
        return float(b)
    raise ValueError(f"event spec: bin {b!r} is not a number, '-inf' or 'inf'")


def _toml_load(f) -> dict:
    import tomllib  # Python 3.11+

    return tomllib.load(f)


_DEFAULT = EventSpec()
PRESETS: dict[str, EventSpec] = {
    "default": _DEFAULT,
    "flights": EventSpec(
        tag="date",
        type=TypeClasses("delay", (-math.inf, 0.0, 15.0, 60.0, math.inf),
                         ("early", "ontime", "late", "verylate")),
        attributes=("delay", "distance", "origin", "destination"),
    ),
}


# --------------------------------------------------------------------------- reading

_FORMATS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl", ".csv": "csv",
            ".parquet": "parquet", ".pq": "parquet", ".msgpack": "msgpack", ".mpk": "msgpack"}
_MSGPACK_MAX_RECORD = 16 << 20  # bytes; no single event is bigger


def read_events(path: str | os.PathLike, spec: EventSpec | None = None, *,
                batch_size: int = 65536, on_bad_event: str = "error",
                bad_events: list | None = None) -> Iterator[EventBatch]:
    """Batches of at most ``batch_size`` events from a file (``"-"``: JSON Lines on stdin).

    The file, format and needed columns are checked at once; bad events are met while
    iterating. ``on_bad_event="skip"`` drops them and appends ``(position, line, reason)``
    to ``bad_events`` (line is None for Parquet / msgpack).

    Parameters
    ----------
    path : str or os.PathLike
        A JSON Lines, CSV, Parquet or msgpack file (by extension), an object storage URI
        (``s3://...``) or ``"-"`` for JSON Lines on stdin. CSV and Parquet need pyarrow
        (``pip install "acep[files]"``).
    spec : EventSpec, optional
        How columns map to events (default: ``t``, ``type``, every other column).
    batch_size : int
        The most events per batch.
    on_bad_event : {"error", "skip"}
        Raise :class:`acep.EventError` naming the file, line and field, or skip the event.
    bad_events : list, optional
        With ``"skip"``, receives ``(position, line, reason)`` per skipped event.

    Returns
    -------
    iterator of EventBatch
        The batches in file order; their ``position`` numbers the events across batches.

    Examples
    --------
    >>> from importlib.resources import files
    >>> from acep import read_events
    >>> from acep.events import PRESETS
    >>> week = files("acep") / "data" / "flights-week.parquet"
    >>> [len(b) for b in read_events(week, PRESETS["flights"], batch_size=50_000)]
    [50000, 50000, 13493]
    """
    source, spec, batch_size = _check_reading(path, spec, batch_size)
    check.choice(on_bad_event, "on_bad_event", ("error", "skip"))
    if bad_events is not None:
        check.instance(bad_events, "bad_events", list, "a list or None")
    sink = _Sink("<stdin>" if source == "-" else source, on_bad_event, bad_events)
    return _accept_all(_open_chunks(source, spec, batch_size), sink)


def _check_reading(path, spec, batch_size) -> tuple[str, EventSpec, int]:
    """The arguments every reader takes: the path as text, the spec and the batch size."""
    source = check.path(path, "path")
    if spec is None:
        spec = _DEFAULT
    hint = (f" (EventSpec.load({spec!r}) or PRESETS[{spec!r}])" if isinstance(spec, str) else
            " (EventSpec.from_dict(...))" if isinstance(spec, dict) else "")
    check.instance(spec, "spec", EventSpec, "an acep.EventSpec or None", hint)
    return source, spec, check.whole(batch_size, "batch_size", 1)


def read_all(path: str | os.PathLike, spec: EventSpec | None = None, **kw) -> EventBatch:
    """All events of a file as one batch (see :func:`read_events` for the options)."""
    batches = list(read_events(path, spec, **kw))
    if not batches:
        source = os.fspath(path)
        return _empty_batch(0, "<stdin>" if source == "-" else source, False)
    return EventBatch.concat(batches)


@dataclass
class RowChunk:
    """Rows of a file after conversion, for readers that keep bad rows aside (the trainer).

    ``events`` holds the good rows (its positions count from 0 within the chunk); ``rows``
    each good event's row index in the file; ``bad`` one ``(row, line, field, reason)`` per
    bad row (line is None for Parquet and msgpack, field None when no column is to blame).
    """

    events: EventBatch
    rows: np.ndarray
    bad: list[tuple[int, int | None, str | None, str]]


def read_chunks(path: str | os.PathLike, spec: EventSpec | None = None, *,
                batch_size: int = 65536,
                row_groups: Sequence[int] | None = None) -> Iterator[RowChunk]:
    """A file's rows in chunks, bad rows listed instead of raised (see :class:`RowChunk`).

    ``row_groups`` reads only those row groups of a Parquet file (sorted, contiguous row
    indices are counted from the file's first row, so pieces of a file read apart agree).
    """
    source, spec, batch_size = _check_reading(path, spec, batch_size)
    if row_groups is None:
        chunks, row = _open_chunks(source, spec, batch_size), 0
    else:
        chunks, row = _row_group_chunks(source, spec, batch_size, list(row_groups))
    for chunk in chunks:
        keep = np.ones(chunk.n, dtype=bool)
        bad = []
        for i in sorted(chunk.problems):
            keep[i] = False
            err = _error(chunk, i, row + i, source)
            bad.append((row + i, err.line, err.field, err.message))
        yield RowChunk(_select(chunk, keep, 0, source),
                       row + np.flatnonzero(keep).astype(np.int64), bad)
        row += chunk.n


def _row_group_chunks(source: str, spec: EventSpec, batch_size: int,
                      row_groups: list[int]) -> tuple[Iterator[_Chunk], int]:
    """Chunks of some row groups of a Parquet file, and the file row index they start at."""
    if _format_of(source) != "parquet":
        raise EventError("row groups can only be read from Parquet files", source)
    pf = _parquet_file(source, spec)
    first = sum(pf.metadata.row_group(i).num_rows for i in range(min(row_groups, default=0)))
    batches = pf.iter_batches(batch_size=batch_size, row_groups=row_groups,
                              columns=_needed_columns(spec))
    return _arrow_chunks(_parquet_batches(batches, source), spec, source, batch_size), first


def file_size_hint(path: str | os.PathLike) -> int | None:
    """The number of rows if cheaply known (Parquet metadata), else None."""
    if _format_of(os.fspath(path)) != "parquet":
        return None
    try:
        import pyarrow.parquet as pq

        with storage.arrow_file(os.fspath(path)) as source:
            return pq.ParquetFile(source).metadata.num_rows
    except Exception:  # noqa: BLE001 - only a hint (missing file, no pyarrow, ...)
        return None


def _format_of(source: str) -> str | None:
    if source == "-":
        return "jsonl"
    return _FORMATS.get(storage.suffix(source))


def _open_chunks(source: str, spec: EventSpec, batch_size: int) -> Iterator[_Chunk]:
    """Check the file and return its raw chunks (bad events not yet handled)."""
    local_dir = not storage.is_uri(source) and os.path.isdir(source)  # no remote call yet
    fmt = _format_of(source)
    if fmt is None and not local_dir:
        raise EventError(f"unknown file type; accepted: {', '.join(_FORMATS)} or '-' (stdin)",
                         source)
    kind = "file" if source == "-" else "dir" if local_dir else _kind(source)
    if kind == "dir":
        raise EventError("a directory, not a file of events", source)
    if kind != "file":
        raise EventError("no such file", source)
    if fmt == "jsonl":
        # stdin may wait for lines for hours: never with the collector paused
        return _rows_chunks(_jsonl_records(source), spec, batch_size, pause=source != "-")
    if fmt == "msgpack":
        return _rows_chunks(_msgpack_records(source), spec, batch_size)
    if fmt == "parquet":
        return _parquet_chunks(source, spec, batch_size)
    return _csv_chunks(source, spec, batch_size)


# --------------------------------------------------------------------------- accepting


@dataclass
class _Chunk:
    """Converted rows before bad-event handling; ``problems``: row -> (field, reason)."""

    n: int
    lines: np.ndarray | None
    tags: np.ndarray | None  # None: count windows (tags are positions)
    tag_is_time: bool
    type_codes: np.ndarray  # -1 where the type is bad
    type_names: list[str]
    columns: dict[str, np.ndarray]
    problems: dict[int, tuple[str | None, str]]
    tag_field: str | None = None


@dataclass
class _Sink:
    """Where bad events go: raised ("error") or listed in ``bad_events`` ("skip")."""

    source: str
    mode: str
    bad_events: list | None


def _accept_all(chunks: Iterator[_Chunk], sink: _Sink) -> Iterator[EventBatch]:
    position = 0
    for chunk in chunks:
        batch, error = _accept(chunk, sink, position)
        if len(batch):
            yield batch
            position += len(batch)
        if error is not None:
            raise error


def _accept(chunk: _Chunk, sink: _Sink, position: int) -> tuple[EventBatch, EventError | None]:
    """The chunk's good events (a prefix of them when an error is raised) and the error."""
    keep = np.ones(chunk.n, dtype=bool)
    error = None
    bad_rows = sorted(chunk.problems)
    if bad_rows and sink.mode == "error":
        first = bad_rows[0]
        keep[first:] = False
        error = _error(chunk, first, position + first, sink.source)
    elif bad_rows:
        keep[bad_rows] = False
        before = np.cumsum(keep) - keep  # accepted events before each row
        for i in bad_rows:
            err = _error(chunk, i, position + int(before[i]), sink.source)
            if sink.bad_events is not None:
                sink.bad_events.append((err.position, err.line, str(err)))
    return _select(chunk, keep, position, sink.source), error


def _error(chunk: _Chunk, i: int, position: int, source: str) -> EventError:
    column, reason = chunk.problems[i]
    line = None if chunk.lines is None else int(chunk.lines[i])
    return EventError(reason, source, line, column, position)


def _select(chunk: _Chunk, keep: np.ndarray, position: int, source: str) -> EventBatch:
    every = bool(keep.all())

    def take(a: np.ndarray) -> np.ndarray:
        return a if every else a[keep]

    codes, names = _compact(take(chunk.type_codes), chunk.type_names)
    n = len(codes)
    tags = np.arange(position, position + n, dtype=np.float64) if chunk.tags is None \
        else take(chunk.tags).astype(np.float64)
    lines = None if chunk.lines is None else take(chunk.lines)
    columns = {k: take(v) for k, v in chunk.columns.items()}
    return EventBatch(codes, names, tags, columns, position, source, lines, chunk.tag_is_time,
                      chunk.tag_field or "t")


def _compact(codes: np.ndarray, names: list[str]) -> tuple[np.ndarray, list[str]]:
    """Drop names no event uses, renumbering the codes."""
    used = np.bincount(codes, minlength=len(names)) > 0
    if used.all():
        return codes.astype(np.int32), list(names)
    remap = np.cumsum(used) - 1
    return remap[codes].astype(np.int32), [n for n, u in zip(names, used) if u]


# --------------------------------------------------------------------------- row formats


class _Undecodable:
    """Stands for a line that is not valid JSON."""

    def __init__(self, reason: str):
        self.reason = reason


# What stdin has sent so far goes on as a batch once it stays this long without a line:
# a live pipe (tail -f | acep match -) shows matches as they come, not at 65,536 events.
STDIN_IDLE_SECONDS = 0.2
_PAUSE = object()


def _jsonl_records(source: str) -> Iterator[tuple[int | None, object] | object]:
    """(line, parsed object) for each non-blank line; on a live stdin also ``_PAUSE``
    when it goes quiet (see :func:`_groups`)."""
    f = sys.stdin.buffer if source == "-" else _open_binary(source)
    lines = _live_lines(f) if source == "-" and _is_live(f) else f
    try:
        line = 0
        for raw in lines:
            if raw is _PAUSE:
                yield _PAUSE
                continue
            line += 1
            if raw.strip():
                yield line, _json_record(raw)
    finally:
        if f is not sys.stdin.buffer:
            f.close()


def _json_record(raw: bytes) -> object:
    if problem := json_problem(raw):
        return _Undecodable(problem)
    try:
        return loads(raw)
    except ValueError as e:  # includes UnicodeDecodeError
        return _Undecodable(f"line is not valid JSON ({e})")


def _is_live(f) -> bool:
    """A pipe, socket or terminal that ``select`` can wait on (not a file: it never waits;
    off POSIX, stdin is read in whole batches)."""
    if os.name != "posix":
        return False
    try:
        return not stat.S_ISREG(os.fstat(f.fileno()).st_mode)
    except (OSError, ValueError, io.UnsupportedOperation):
        return False


def _live_lines(f) -> Iterator[bytes | object]:
    """The lines of ``f``'s descriptor as they arrive, ``_PAUSE`` after a quiet spell."""
    from ._readable import readable

    fd, rest, wait = f.fileno(), b"", STDIN_IDLE_SECONDS
    while True:
        if not readable(fd, wait):
            yield _PAUSE
            wait = None  # nothing new to hand on until more comes
            continue
        data = os.read(fd, 1 << 16)
        if not data:
            break
        wait = STDIN_IDLE_SECONDS
        *complete, rest = (rest + data).split(b"\n")
        yield from (raw + b"\n" for raw in complete)
    if rest:
        yield rest


# a JSON text's first byte read as msgpack: a positive fixint ('{', '['), never a record
_JSON_STARTS = (ord("{"), ord("["))


def _msgpack_records(source: str) -> Iterator[tuple[int | None, object]]:
    """(None, decoded object) for each msgpack object of the stream."""
    with _open_binary(source) as f:
        unpacker = msgpack.Unpacker(f, raw=False, max_buffer_size=_MSGPACK_MAX_RECORD,
                                    timestamp=3, strict_map_key=True)
        end = 0
        try:
            for obj in unpacker:
                if end == 0 and obj in _JSON_STARTS:
                    raise EventError(f"JSON text, not msgpack (it starts with {chr(obj)!r}); a "
                                     "JSON Lines file's name ends in .jsonl", source)
                end = unpacker.tell()
                problem = depth_problem(obj)
                yield None, _Undecodable(problem) if problem else obj
        except EventError:
            raise
        except msgpack.StackError:
            raise EventError(f"msgpack data nested too deep to decode after byte {end} (the "
                             f"limit of an event is {MAX_DEPTH} levels)", source) from None
        except (ValueError, msgpack.UnpackException) as e:
            raise EventError(f"undecodable msgpack data after byte {end} "
                             f"({str(e) or type(e).__name__})", source) from None
        if unpacker.tell() != end:
            raise EventError(f"truncated msgpack data after byte {end}", source)


def _open_binary(source: str):
    try:
        return storage.open_binary(source)
    except OSError as e:
        raise EventError(f"cannot read ({_why(e)})", source) from None


def _kind(source: str) -> str | None:
    try:
        return storage.kind(source)
    except OSError as e:
        raise EventError(f"cannot read ({_why(e)})", source) from None


def _arrow_source(source: str):
    """What pyarrow's readers take for ``source``: the path, or a remote file opened (it
    closes when the reader is done with it)."""
    try:
        return storage.open_arrow(source)
    except OSError as e:
        raise EventError(f"cannot read ({_why(e)})", source) from None


def _why(e: OSError) -> str:
    return e.reason if isinstance(e, storage.StorageError) else e.strerror or str(e)


def _rows_chunks(records: Iterator[tuple[int | None, object]], spec: EventSpec,
                 batch_size: int, pause: bool = True) -> Iterator[_Chunk]:
    kind = _TagKind()
    groups = _groups(records, batch_size)
    paused = _collector_paused if pause else contextlib.nullcontext
    while True:
        with paused():  # never across a yield: the caller's code runs with the collector
            group = next(groups, None)
            if group is None:
                return
            rows = [(line, _record_parts(rec, spec)) for line, rec in group]
            chunk = _rows_chunk(rows, spec, kind)
        yield chunk


@contextlib.contextmanager
def _collector_paused():
    """Python's cyclic garbage collector off while a chunk's records are decoded: each of
    its many new dicts would count towards a collection that walks every live object, and
    decoded records hold no cycles (reading took 1.75x the time with it on)."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


def _groups(items: Iterator, size: int) -> Iterator[list]:
    """Lists of up to ``size`` items, cut short at a ``_PAUSE``; a stream error comes after
    the items read before it."""
    group = []
    try:
        for item in items:
            if item is _PAUSE:
                if group:
                    yield group
                    group = []
                continue
            group.append(item)
            if len(group) == size:
                yield group
                group = []
    except EventError:
        if group:
            yield group
        raise
    if group:
        yield group


def _record_parts(rec: object, spec: EventSpec) -> tuple | str:
    """(type value, tag value, attribute dict) of a record, or the reason it is bad."""
    if isinstance(rec, _Undecodable):
        return rec.reason
    if not isinstance(rec, dict):
        return f"record is not an object ({type(rec).__name__})"
    kind = rec.get(_type_column(spec))
    tag = None if spec.tag is None else rec.get(spec.tag)
    if spec.attributes is None:
        drop = _not_attributes(spec)
        rec = {k: v for k, v in rec.items() if k not in drop}
    return kind, tag, rec


def _event_parts(e: object) -> tuple | str:
    if not isinstance(e, Event):
        return _record_parts(e, _DEFAULT)
    if not isinstance(e.attrs, dict):
        return f"Event.attrs is not a dict ({type(e.attrs).__name__})"
    return e.type, e.t, e.attrs


@dataclass
class _TagKind:
    """Whether the stream's tags are timestamps; fixed by the first good tag."""

    is_time: bool | None = None


def _rows_chunk(rows: list[tuple[int | None, tuple | str]], spec: EventSpec,
                kind: _TagKind) -> _Chunk:
    """Columns of row-form records; ``rows`` holds (line, parts or reason) per record."""
    problems: dict[int, tuple[str | None, str]] = {}
    parts = []
    for i, (_, p) in enumerate(rows):
        if isinstance(p, str):
            problems[i] = (None, p)
            p = (None, None, {})
        parts.append(p)
    type_values = [p[0] for p in parts]
    if isinstance(spec.type, str):
        codes, names, type_bad = _types_from_values(type_values)
    else:
        codes, names, type_bad = _classes_from_values(type_values, spec.type)
    _add(problems, _type_column(spec), type_bad)
    tags = None
    if spec.tag is not None:
        tags, tag_bad = _tags_from_values([p[1] for p in parts], kind)
        _add(problems, spec.tag, tag_bad)
    attrs = [p[2] for p in parts]
    keys = spec.attributes
    if keys is None:
        keys = dict.fromkeys(k for a in attrs for k in a)
    columns = {k: _column_from_values([a.get(k) for a in attrs]) for k in keys}
    lines = None if not rows or rows[0][0] is None else np.array([r[0] for r in rows], np.int64)
    return _Chunk(len(rows), lines, tags, bool(kind.is_time), codes, names, columns, problems,
                  spec.tag)


def _add(problems: dict, column: str, reasons: dict[int, str]) -> None:
    for i, reason in reasons.items():
        problems.setdefault(i, (column, reason))


# --------------------------------------------------------------------------- Arrow formats


def _pyarrow(fmt: str, source: str):
    try:
        import pyarrow
    except ImportError:
        raise EventError(f"reading {fmt} needs pyarrow (pip install 'acep[files]')",
                         source) from None
    return pyarrow


def _check_columns(spec: EventSpec, names: list[str], source: str) -> None:
    for name in _needed_columns(spec) or [c for c in (spec.tag, _type_column(spec)) if c]:
        if name not in names:
            raise EventError(f"no such column (columns: {', '.join(names)})", source,
                             field=name)


def _parquet_file(source: str, spec: EventSpec):
    """The opened ``pyarrow.parquet.ParquetFile``, its columns checked against the spec."""
    _pyarrow("Parquet", source)
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(_arrow_source(source))
    except Exception as e:  # noqa: BLE001 - pyarrow raises several kinds for a bad file
        raise EventError(f"not a readable Parquet file ({e})", source) from None
    _check_columns(spec, pf.schema_arrow.names, source)
    return pf


def _parquet_chunks(source: str, spec: EventSpec, batch_size: int) -> Iterator[_Chunk]:
    pf = _parquet_file(source, spec)
    batches = pf.iter_batches(batch_size=batch_size, columns=_needed_columns(spec))
    return _arrow_chunks(_parquet_batches(batches, source), spec, source, batch_size)


def _parquet_batches(batches: Iterator, source: str) -> Iterator[tuple[object, None]]:
    """``(record batch, None)`` of a Parquet file's reader; a page that does not decode (a
    corrupt file, past its readable footer) is an EventError naming the file, in one line."""
    import pyarrow as pa

    try:
        for rb in batches:
            yield rb, None
    except (OSError, pa.ArrowException) as e:
        raise EventError(f"unreadable Parquet data ({one_line(e)})",
                         source) from None


def _csv_chunks(source: str, spec: EventSpec, batch_size: int) -> Iterator[_Chunk]:
    pa = _pyarrow("CSV", source)
    import pyarrow.csv as pcsv

    with io.TextIOWrapper(_open_binary(source), newline="", encoding="utf-8-sig",
                          errors="replace") as f:
        header = next(csv.reader(f), [])
    _check_columns(spec, header, source)
    types = {spec.type: pa.string()} if isinstance(spec.type, str) else {}
    convert = pcsv.ConvertOptions(column_types=types, strings_can_be_null=True,
                                  include_columns=_needed_columns(spec))
    return _arrow_chunks(_csv_batches(source, convert), spec, source, batch_size)


@contextlib.contextmanager
def _open_csv(source: str, convert):
    """pyarrow's reader of the CSV and the :class:`LineTap` it reads the file through, which
    knows the line each row starts on (the tap is closed after the block)."""
    import pyarrow as pa
    import pyarrow.csv as pcsv

    with contextlib.closing(LineTap(_open_binary(source))) as tap:
        try:  # a value may hold a line break: the reader must not cut a block inside it
            reader = pcsv.open_csv(tap, convert_options=convert,
                                   parse_options=pcsv.ParseOptions(newlines_in_values=True))
        except (pa.ArrowException, OSError) as e:  # OSError: the tap's reading of the file
            raise EventError(f"unreadable CSV ({e})", source) from None
        yield reader, tap


_INFERRED = b"acep.inferred"  # a text column's type before a value did not fit it


def _csv_batches(source: str, convert):
    """The CSV's record batches, each with the line of each row. pyarrow infers each
    column's type from the first rows (about 1 MB), and a later value that does not fit
    ends its read: the rest is then read again as text, cast back batch by batch where it
    fits, so such a value is one bad event (``--on-bad-event skip`` goes on), not the end
    of the file."""
    import pyarrow as pa

    done = 0
    with _open_csv(source, convert) as (reader, tap):
        try:
            for rb in reader:
                done += rb.num_rows
                yield rb, tap.take(rb.num_rows)
            return
        except (pa.ArrowException, OSError) as e:
            if "conversion error" not in str(e):
                raise EventError(f"unreadable CSV ({e})", source) from None
    yield from _csv_as_text(source, reader.schema, done)


def _csv_as_text(source: str, inferred, skip: int):
    """The CSV's batches after its first ``skip`` rows, every column read as text and cast
    back to its ``inferred`` type where the batch's values fit it."""
    import pyarrow as pa
    import pyarrow.csv as pcsv

    as_text = pcsv.ConvertOptions(column_types={f.name: pa.string() for f in inferred},
                                  strings_can_be_null=True, include_columns=inferred.names)
    with _open_csv(source, as_text) as (reader, tap):
        try:
            for rb in reader:
                lines = tap.take(rb.num_rows)
                if skip >= rb.num_rows:
                    skip -= rb.num_rows
                    continue
                yield _cast_back(rb.slice(skip), inferred), None if lines is None \
                    else lines[skip:]
                skip = 0
        except (pa.ArrowException, OSError) as e:
            raise EventError(f"unreadable CSV ({e})", source) from None


def _cast_back(rb, inferred):
    import pyarrow as pa

    fields, arrays = [], []
    for name, text in zip(rb.schema.names, rb.columns):
        target = inferred.field(name).type
        try:
            arrays.append(text.cast(target))
            fields.append(pa.field(name, target))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            arrays.append(text)
            fields.append(pa.field(name, pa.string(), metadata={_INFERRED: str(target)}))
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))


def _arrow_chunks(batches, spec: EventSpec, source: str, batch_size: int) -> Iterator[_Chunk]:
    """Chunks of Arrow record batches, each with its rows' lines (or None), sliced to at
    most ``batch_size`` rows."""
    kind = _TagKind()
    for rb, lines in batches:
        for start in range(0, rb.num_rows, batch_size):
            yield _arrow_chunk(rb.slice(start, batch_size), spec,
                               None if lines is None else lines[start:start + batch_size],
                               kind, source)


def _arrow_chunk(rb, spec: EventSpec, lines: np.ndarray | None, kind: _TagKind,
                 source: str) -> _Chunk:
    cols = dict(zip(rb.schema.names, rb.columns))
    n = rb.num_rows
    problems: dict[int, tuple[str | None, str]] = {}
    if isinstance(spec.type, str):
        codes, names, bad = _types_from_arrow(cols[spec.type])
    else:
        column = spec.type.column
        codes, names, bad = _classes_from_arrow(cols[column], spec.type, source,
                                                rb.schema.field(column).metadata)
    _add(problems, _type_column(spec), bad)
    tags, is_time = None, False
    if spec.tag is not None:
        tags, is_time, bad = _tags_from_arrow(cols[spec.tag], kind, spec.tag, source)
        _add(problems, spec.tag, bad)
    columns = {a: _attribute_column(rb, a) for a in _attribute_names(spec, cols)}
    return _Chunk(n, lines, tags, is_time, codes, names, columns, problems, spec.tag)


# --------------------------------------------------------------------------- value conversion


def _is_number(v: object) -> bool:
    return isinstance(v, numbers.Real)  # bool counts: True -> 1.0


def _float_or_nan(v: object) -> float:
    try:
        return float(v)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        return math.nan


def _missing(v: object) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def _py(v: object) -> object:
    return v.item() if isinstance(v, np.generic) else v


def _text(v: object) -> str:
    if isinstance(v, str):
        return v
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


def as_object_column(values: np.ndarray) -> np.ndarray:
    """A float64 column as objects (floats, None for NaN), to join an object column."""
    out = np.empty(len(values), dtype=object)
    out[:] = [None if v != v else v for v in values.tolist()]
    return out


EXACT_INT = 2**53  # float64 holds every integer up to this exactly: beyond, ids stay int


def _fits_float(v: object) -> bool:
    kind = type(v)  # JSON's own kinds first: the ABC checks cost a device ~8% of a read
    if kind is float:
        return True
    if kind is int:
        return -EXACT_INT <= v <= EXACT_INT
    return _is_number(v) and (not isinstance(v, numbers.Integral) or isinstance(v, bool)
                              or -EXACT_INT <= v <= EXACT_INT)


def _cell(v: object) -> object:
    """One value of an object column: numbers as numbers (ints exact), the rest as text."""
    if v is None or isinstance(v, str):
        return v
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, numbers.Integral):
        return int(v)
    if _is_number(v):
        return float(v)
    return _text(v)


def _column_from_values(values: list) -> np.ndarray:
    """float64 (NaN = missing) when every present value is a number that float64 holds
    exactly, else objects (see :func:`_cell`): a text value never turns the numbers of its
    column into text, and a big integer id stays exact."""
    if all(v is None or _fits_float(v) for v in values):
        return np.array([math.nan if v is None else float(v) for v in values], np.float64)
    out = np.empty(len(values), dtype=object)
    out[:] = [_cell(v) for v in values]
    return out


def iso_texts(seconds: np.ndarray) -> list[str]:
    """ISO 8601 UTC texts: whole seconds as before, a fraction in milliseconds or, when it
    needs them, microseconds."""
    micros = np.round(np.asarray(seconds, dtype=np.float64) * 1e6).astype(np.int64)
    frac = micros % 1_000_000
    stamps = micros.astype("datetime64[us]")
    if not frac.any():
        return np.datetime_as_string(stamps, unit="s").tolist()
    unit = np.where(frac == 0, 0, np.where(frac % 1000 == 0, 1, 2))
    out = np.datetime_as_string(stamps, unit="s").astype(object)
    for code, name in ((1, "ms"), (2, "us")):
        pick = unit == code
        if pick.any():
            out[pick] = np.datetime_as_string(stamps[pick], unit=name)
    return out.tolist()


def tag_text(t: float, is_time: bool) -> str:
    """A tag as messages show it: ISO 8601 UTC text for a timestamp, else the number."""
    return iso_texts(np.array([t], dtype=np.float64))[0] if is_time else f"{t:g}"


def partition_key(v: object) -> object:
    """The key of a partition attribute's value: an integral number as ``int`` (7 and 7.0
    are one key, printed as 7), other numbers as ``float``, text as itself; None when
    missing (None, NaN)."""
    if isinstance(v, np.generic):
        v = v.item()
    if v is None or isinstance(v, str):
        return v
    if isinstance(v, float):
        if v != v:
            return None
        return int(v) if v.is_integer() else v
    return int(v) if isinstance(v, numbers.Integral) else v


def _types_from_values(values: list) -> tuple[np.ndarray, list[str], dict[int, str]]:
    """Dictionary-encode type names; -1 and a reason for a missing or non-string type."""
    index: dict[str, int] = {}
    codes = np.full(len(values), -1, dtype=np.int32)
    bad = {}
    for i, v in enumerate(values):
        if isinstance(v, int) and not isinstance(v, bool):
            v = str(v)
        if isinstance(v, str) and v:
            codes[i] = index.setdefault(v, len(index))
        else:
            bad[i] = "type is missing" if v in (None, "") else f"type is not a string ({v!r})"
    return codes, list(index), bad


def _classes_from_values(values: list, classes: TypeClasses):
    numeric = np.array([_float_or_nan(v) if _is_number(v) else math.nan for v in values])
    return _classify(numeric, classes, values)


def _classify(numeric: np.ndarray, classes: TypeClasses, raw=None):
    """Type codes from classes of ``numeric``; reasons name the raw value where known."""
    j = np.searchsorted(np.asarray(classes.bins), numeric, side="right") - 1
    ok = (j >= 0) & (j < len(classes.labels)) & ~np.isnan(numeric)
    codes = np.where(ok, j, -1).astype(np.int32)
    bad = {}
    for i in np.flatnonzero(codes < 0).tolist():
        v = numeric[i] if raw is None else raw[i]
        if _missing(v):
            bad[i] = "value for the type classes is missing"
        elif not _is_number(v):
            bad[i] = f"value for the type classes is not a number ({v!r})"
        else:
            bad[i] = (f"value {float(v):g} is outside the type classes "
                      f"[{classes.bins[0]:g}, {classes.bins[-1]:g})")
    return codes, list(classes.labels), bad


def _tags_from_values(values: list, kind: _TagKind) -> tuple[np.ndarray, dict[int, str]]:
    tags = np.full(len(values), np.nan)
    bad = {}
    parsed: dict[str, tuple[float, bool]] = {}  # events often share a timestamp's text
    for i, v in enumerate(values):
        try:
            if type(v) is str:
                known = parsed.get(v)
                if known is None:
                    known = parsed[v] = _parse_tag(v)
                tags[i], is_time = known
            else:
                tags[i], is_time = _parse_tag(v)
        except ValueError as e:
            bad[i] = str(e)
            continue
        if kind.is_time is None:
            kind.is_time = is_time
        elif is_time != kind.is_time:
            first = "timestamps" if kind.is_time else "numbers"
            bad[i] = f"tag {v!r} does not match the earlier tags, which are {first}"
    return tags, bad


def _parse_tag(v: object) -> tuple[float, bool]:
    """(seconds or number, is_time) of one tag value; ValueError names the problem."""
    if v is None:
        raise ValueError("tag is missing")
    if isinstance(v, datetime):
        return _epoch(v), True
    if isinstance(v, str):
        f, is_time = _parse_text_tag(v)
    elif _is_number(v) and not isinstance(v, bool):
        f, is_time = _float_or_nan(v), False
    else:
        raise ValueError(f"tag is not a number ({v!r})")
    if not math.isfinite(f):
        raise ValueError(f"tag is not a finite number ({v!r})")
    return f, is_time


def _parse_text_tag(s: str) -> tuple[float, bool]:
    try:
        return float(s), False
    except ValueError:
        pass
    try:
        return _epoch(datetime.fromisoformat(s.strip().replace("Z", "+00:00"))), True
    except ValueError:
        raise ValueError(f"tag is not a number or ISO 8601 timestamp ({s!r})") from None


def _epoch(dt: datetime) -> float:
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp()


def _plain_arrow(arr):
    import pyarrow as pa

    return arr.dictionary_decode() if pa.types.is_dictionary(arr.type) else arr


def _types_from_arrow(arr):
    import pyarrow as pa
    import pyarrow.compute as pc

    arr = _plain_arrow(arr)
    if not _is_text(arr.type):
        arr = arr.cast(pa.string())
    encoded = pc.dictionary_encode(arr)
    codes = encoded.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int32)
    names = encoded.dictionary.to_pylist()
    if "" in names:
        codes[codes == names.index("")] = -1
    bad = {i: "type is missing" for i in np.flatnonzero(codes < 0).tolist()}
    return codes, names, bad


def _classes_from_arrow(arr, classes: TypeClasses, source: str, field_metadata=None):
    arr = _plain_arrow(arr)
    if _is_text(arr.type) and _INFERRED in (field_metadata or {}):
        raw = arr.to_pylist()
        return _classify(np.array([_float_or_nan(v) for v in raw]), classes, raw)
    if not _is_numeric(arr.type):
        raise EventError(f"type classes need a numeric column, not {arr.type}", source,
                         field=classes.column)
    return _classify(_numeric_from_arrow(arr), classes)


def _numeric_from_arrow(arr) -> np.ndarray:
    """float64 of a numeric column; integers beyond 2**53 are rounded (tags, type classes)."""
    import pyarrow as pa

    return arr.cast(pa.float64(), safe=False).to_numpy(zero_copy_only=False).astype(np.float64)


def _attribute_from_arrow(arr) -> np.ndarray:
    """A numeric attribute: float64, or exact Python ints when an integer is beyond 2**53."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if pa.types.is_integer(arr.type) and arr.null_count < len(arr):
        bounds = pc.min_max(arr)
        if bounds["min"].as_py() < -EXACT_INT or bounds["max"].as_py() > EXACT_INT:
            out = np.empty(len(arr), dtype=object)
            out[:] = arr.to_pylist()
            return out
    return _numeric_from_arrow(arr)


def _seconds_from_arrow(arr) -> np.ndarray:
    """Seconds since the epoch of a timestamp/date column, NaN where null."""
    import pyarrow as pa

    if pa.types.is_date(arr.type):
        arr = arr.cast(pa.timestamp("s"))
    scale = {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}[arr.type.unit]
    ticks = arr.cast(pa.int64()).fill_null(0).to_numpy(zero_copy_only=False)
    seconds = ticks / scale
    seconds[arr.is_null().to_numpy(zero_copy_only=False)] = np.nan
    return seconds


def _is_time(t) -> bool:
    import pyarrow as pa

    return pa.types.is_timestamp(t) or pa.types.is_date(t)


def _is_text(t) -> bool:
    import pyarrow as pa

    return pa.types.is_string(t) or pa.types.is_large_string(t)


def _is_numeric(t) -> bool:
    """Numbers, booleans (1/0) and all-null columns: read as float64."""
    import pyarrow as pa

    return (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)
            or pa.types.is_decimal(t) or pa.types.is_null(t))


def _tags_from_arrow(arr, kind: _TagKind, column: str, source: str):
    """(tags, is_time, reasons): typed columns at once, text columns value by value."""
    arr = _plain_arrow(arr)
    if _is_time(arr.type):
        tags, is_time = _seconds_from_arrow(arr), True
    elif _is_text(arr.type):
        tags, bad = _tags_from_values(arr.to_pylist(), kind)
        return tags, bool(kind.is_time), bad
    elif _is_numeric(arr.type):
        tags, is_time = _numeric_from_arrow(arr), False
    else:
        raise EventError(f"a tag column must hold numbers or timestamps, not {arr.type}",
                         source, field=column)
    raw = arr.to_pylist() if not np.isfinite(tags).all() else None
    bad = {}
    for i in np.flatnonzero(~np.isfinite(tags)).tolist():
        bad[i] = "tag is missing" if raw[i] is None else f"tag is not a finite number ({raw[i]})"
    return tags, is_time, bad


def _attribute_column(rb, name: str) -> np.ndarray:
    """An attribute of a record batch; a CSV column read as text where its inferred type
    did not fit keeps its numbers as numbers, value by value, as JSON Lines do."""
    metadata = rb.schema.field(name).metadata or {}
    if _INFERRED not in metadata:
        return _column_from_arrow(rb.column(name))
    return _column_from_values([_number_or_text(v) for v in rb.column(name).to_pylist()])


def _number_or_text(v: str | None) -> object:
    for number in (int, float):
        try:
            return number(v)
        except (TypeError, ValueError):
            pass
    return v


def _column_from_arrow(arr) -> np.ndarray:
    arr = _plain_arrow(arr)
    if _is_time(arr.type):
        return _seconds_from_arrow(arr)
    if _is_numeric(arr.type):
        return _attribute_from_arrow(arr)
    if _is_text(arr.type):
        return np.asarray(arr.to_numpy(zero_copy_only=False), dtype=object)
    out = np.empty(len(arr), dtype=object)
    out[:] = [None if v is None else _text(v) for v in arr.to_pylist()]
    return out
