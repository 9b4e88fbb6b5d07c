"""Row formats: JSON Lines (a file or stdin, live or not) and msgpack streams, read record
by record into chunks of columns.
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys
from collections.abc import Callable, Iterator
from types import SimpleNamespace

import msgpack
import numpy as np

from .. import _bounds
from .._bounds import MAX_DEPTH, depth_problem, json_problem
from .._jsonread import loads
from .._readable import live_descriptor, readable
from .chunks import _add, _Chunk
from .files import _open_binary
from .model import Event, EventError
from .spec import _DEFAULT, EventSpec, _not_attributes, _type_column
from .values import (
    _class_numbers,
    _classify,
    _column_from_values,
    _TagKind,
    _tags_from_values,
    _types_from_values,
)

try:
    from . import _jsonl as _compiled  # the compiled reader, when built
except ImportError:
    _compiled = None

_MSGPACK_MAX_RECORD = 16 << 20  # bytes; no single event is bigger


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
    lines = _live_lines(f) if source == "-" and live_descriptor(f) is not None else f
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


def _live_lines(f) -> Iterator[bytes | object]:
    """The lines of ``f``'s descriptor as they arrive, ``_PAUSE`` after a quiet spell (see
    :func:`_live_read`), and a last line without its newline at the end."""
    read, pending = _live_read(f.fileno()), []
    while (data := read(_PIPE)) != b"":
        if data is None:
            yield _PAUSE
            continue
        pending.append(data)
        if b"\n" in data:  # joined once per line end: a long line costs no more than its length
            *complete, rest = b"".join(pending).split(b"\n")
            pending = [rest]
            yield from (raw + b"\n" for raw in complete)
    if rest := b"".join(pending):
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
    attrs = [p[2] for p in parts]
    keys = spec.attributes
    if keys is None:
        keys = dict.fromkeys(k for a in attrs for k in a)
    lines = None if not rows or rows[0][0] is None else np.array([r[0] for r in rows], np.int64)
    tags = None if spec.tag is None else [p[1] for p in parts]
    return _chunk_of(len(rows), lines, problems, [p[0] for p in parts], tags,
                     {k: [a.get(k) for a in attrs] for k in keys}, spec, kind)


def _chunk_of(n: int, lines: np.ndarray | None, problems: dict, type_values: list,
              tag_values: list | None, columns: dict[str, list], spec: EventSpec,
              kind: _TagKind) -> _Chunk:
    """A chunk from the values of its records' type, tag and attributes."""
    convert = _compiled or _PURE
    if isinstance(spec.type, str):
        codes, names, type_bad = convert.types_from_values(type_values)
    else:
        codes, names, type_bad = _classify(convert.class_numbers(type_values), spec.type,
                                           type_values)
    _add(problems, _type_column(spec), type_bad)
    tags = None
    if spec.tag is not None:
        tags, tag_bad = convert.tags_from_values(tag_values, kind)
        _add(problems, spec.tag, tag_bad)
    columns = {k: convert.column_from_values(v) for k, v in columns.items()}
    return _Chunk(n, lines, tags, bool(kind.is_time), codes, names, columns, problems,
                  spec.tag)


_PURE = SimpleNamespace(types_from_values=_types_from_values, class_numbers=_class_numbers,
                        tags_from_values=_tags_from_values,
                        column_from_values=_column_from_values)
_BLOCK = 1 << 20  # bytes read at a time by the compiled reader
_PIPE = 1 << 16  # bytes asked of a pipe in one os.read


def _compiled_jsonl_chunks(source: str, spec: EventSpec, batch_size: int) -> Iterator[_Chunk]:
    """:func:`_rows_chunks` of :func:`_jsonl_records` of a file or stdin, read by the compiled
    reader."""
    if source != "-":
        with _open_binary(source) as f:
            yield from _reader_chunks(f.read, spec, batch_size)
        return
    f = sys.stdin.buffer
    fd = live_descriptor(f)
    yield from _reader_chunks(f.read if fd is None else _live_read(fd), spec, batch_size)


def _reader_chunks(read: Callable[[int], bytes | None], spec: EventSpec,
                   batch_size: int) -> Iterator[_Chunk]:
    """Chunks of the lines ``read(n)`` gives: about ``n`` bytes, b"" at the end, or None
    when a live stream has gone quiet (the lines read so far go on as a chunk)."""
    reader = _compiled.Reader(_type_column(spec), spec.tag, spec.attributes,
                              _not_attributes(spec), batch_size, _json_record, _Undecodable,
                              _bounds.MAX_LINE_BYTES)
    kind = _TagKind()
    buf, pos = b"", 0
    while True:
        # the collector is paused while lines are parsed, never across a read (stdin may
        # wait for hours) or a yield (the caller's code runs with it)
        with _collector_paused():
            pos = reader.feed(buf, pos, False)
        more = read(max(_BLOCK, len(buf) - pos)) if reader.n < batch_size else None
        if more:
            buf, pos = buf[pos:] + more, 0
            continue
        with _collector_paused():
            if more == b"":  # only a last line without its newline can be left
                pos = reader.feed(buf, pos, True)
            chunk = _chunk_of(*reader.take(), spec, kind) if reader.n else None
        if chunk is not None:
            yield chunk
        if more == b"":
            return


def _live_read(fd: int) -> Callable[[int], bytes | None]:
    """``read(n)`` of a live descriptor for :func:`_reader_chunks`: what has come, up to
    ``n`` bytes, or None once nothing has come for :data:`STDIN_IDLE_SECONDS` (then it
    waits for the next bytes as long as it takes)."""
    wait, ended = STDIN_IDLE_SECONDS, False

    def read(n: int) -> bytes | None:
        nonlocal wait, ended
        if ended:  # a terminal's end (Ctrl-D) is read once: kept for the next call
            return b""
        if not readable(fd, wait):
            wait = None
            return None
        wait = STDIN_IDLE_SECONDS
        pieces = [os.read(fd, min(n, _PIPE))]
        size = len(pieces[0])
        while pieces[-1] and size < n and readable(fd, 0):  # a pipe holds 64 KiB at most
            pieces.append(os.read(fd, min(n - size, _PIPE)))
            size += len(pieces[-1])
        ended = not pieces[-1]
        return b"".join(pieces)

    return read
