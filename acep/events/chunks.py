"""Accepting: the chunk every reader yields (converted rows, bad ones marked) becomes a
batch of the good events, its bad events raised or listed (``on_bad_event``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from .model import EventBatch, EventError, TextCodes


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
    text_codes: dict[str, TextCodes] = field(default_factory=dict)


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
    rows = slice(None) if every else keep
    text_codes = {k: c.take(rows, columns[k]) for k, c in chunk.text_codes.items()}
    return EventBatch(codes, names, tags, columns, position, source, lines, chunk.tag_is_time,
                      chunk.tag_field or "t", text_codes)


def _compact(codes: np.ndarray, names: list[str]) -> tuple[np.ndarray, list[str]]:
    """Drop names no event uses, renumbering the codes."""
    used = np.bincount(codes, minlength=len(names)) > 0
    if used.all():
        return codes.astype(np.int32), list(names)
    remap = np.cumsum(used) - 1
    return remap[codes].astype(np.int32), [n for n, u in zip(names, used) if u]


def _add(problems: dict, column: str, reasons: dict[int, str]) -> None:
    for i, reason in reasons.items():
        problems.setdefault(i, (column, reason))
