"""The reading pipeline: :func:`read_events` (batches, bad events raised or skipped),
:func:`read_all` and :func:`read_chunks` (bad rows kept aside, for the trainer), each
file's format chosen by its extension.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from .. import _checks as check
from .. import storage
from . import rows
from .arrow import _arrow_chunks, _csv_chunks, _parquet_batches, _parquet_chunks, _parquet_file
from .chunks import _accept_all, _Chunk, _error, _select, _Sink
from .files import _kind
from .model import EventBatch, EventError, _empty_batch
from .rows import _jsonl_records, _msgpack_records, _rows_chunks
from .spec import _DEFAULT, EventSpec, _needed_columns

_FORMATS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl", ".csv": "csv",
            ".parquet": "parquet", ".pq": "parquet", ".msgpack": "msgpack", ".mpk": "msgpack"}


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
    if format_of(source) != "parquet":
        raise EventError("row groups can only be read from Parquet files", source)
    pf = _parquet_file(source, spec)
    first = sum(pf.metadata.row_group(i).num_rows for i in range(min(row_groups, default=0)))
    batches = pf.iter_batches(batch_size=batch_size, row_groups=row_groups,
                              columns=_needed_columns(spec))
    return _arrow_chunks(_parquet_batches(batches, source), spec, source, batch_size), first


def file_size_hint(path: str | os.PathLike) -> int | None:
    """The number of rows if cheaply known (Parquet metadata), else None."""
    if format_of(os.fspath(path)) != "parquet":
        return None
    try:
        import pyarrow.parquet as pq

        with storage.arrow_file(os.fspath(path)) as source:
            return pq.ParquetFile(source).metadata.num_rows
    except Exception:  # noqa: BLE001 - only a hint (missing file, no pyarrow, ...)
        return None


def format_of(source: str) -> str | None:
    """The format a path's suffix names (``jsonl``, ``csv``, ``parquet``...), or None."""
    if source == "-":
        return "jsonl"
    return _FORMATS.get(storage.suffix(source))


def _open_chunks(source: str, spec: EventSpec, batch_size: int) -> Iterator[_Chunk]:
    """Check the file and return its raw chunks (bad events not yet handled)."""
    local_dir = not storage.is_uri(source) and os.path.isdir(source)  # no remote call yet
    fmt = format_of(source)
    if fmt is None and not local_dir:
        raise EventError(f"unknown file type; accepted: {', '.join(_FORMATS)} or '-' (stdin)",
                         source)
    kind = "file" if source == "-" else "dir" if local_dir else _kind(source)
    if kind == "dir":
        raise EventError("a directory, not a file of events", source)
    if kind != "file":
        raise EventError("no such file", source)
    if fmt == "jsonl" and rows._compiled is not None:
        return rows._compiled_jsonl_chunks(source, spec, batch_size)
    if fmt == "jsonl":
        # stdin may wait for lines for hours: never with the collector paused
        return _rows_chunks(_jsonl_records(source), spec, batch_size, pause=source != "-")
    if fmt == "msgpack":
        return _rows_chunks(_msgpack_records(source), spec, batch_size)
    if fmt == "parquet":
        return _parquet_chunks(source, spec, batch_size)
    return _csv_chunks(source, spec, batch_size)
