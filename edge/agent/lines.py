"""Lines of JSON Lines input and the events in them, for the agent's sources.

A stream is cut into whole lines as its bytes arrive (:func:`stream_lines`), a line over
:data:`acep._bounds.MAX_LINE_BYTES` kept as a :class:`_LongLine`. :func:`parse_blocks`
parses the lines of one read, with the compiled JSON Lines reader into columns where it is
built (``acep.events.lines``), else by Python into dicts, in blocks no larger than what
the chunk being filled can still take; both give the same events and the same bad lines.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from acep.events import EventBatch
from acep.utils import bounds as _bounds
from acep.utils import json_lines, json_problem
from acep.utils import json_loads as loads

__all__ = ["Item", "Chunk", "read_line", "stream_lines", "parse_line", "why_bad",
           "parse_lines", "parse_blocks", "chunk_batch", "chunk_events"]

Item = tuple["dict | bytes", "int | None"]
READ_BYTES = 1 << 16  # a stream is read at most this much at a time


class _LongLine(bytes):
    """A line longer than :data:`acep._bounds.MAX_LINE_BYTES`, not held in memory: its first
    bytes (with its newline, if it has one), and its length, which offsets count."""

    def __new__(cls, head: bytes, size: int):
        line = super().__new__(cls, head)
        line.size = size
        return line

    def __len__(self) -> int:
        return self.size


def read_line(fh) -> bytes:
    """The next line of ``fh`` (b"" at its end), read in bounded pieces: a line over the
    limit is read to its end but kept as a :class:`_LongLine`."""
    line = fh.readline(_bounds.MAX_LINE_BYTES + 1)
    if len(line) <= _bounds.MAX_LINE_BYTES:
        return line
    size, ended = len(line), line.endswith(b"\n")
    while not ended and (piece := fh.readline(READ_BYTES)):
        size += len(piece)
        ended = piece.endswith(b"\n")
    return _LongLine(line[:60] + (b"\n" if ended else b""), size)


def stream_lines(read: Callable[[int], bytes | None], size: int = READ_BYTES
                 ) -> Iterator[list[bytes]]:
    """The lines of a stream as they arrive: ``read(size)`` gives what is there (at least
    a byte, waiting for it; b"" at the end; None when nothing came in time, which gives an
    empty list), and each list holds the whole lines it completed, the same lines as
    :func:`read_line` reads one by one. A line over the limit comes alone, as a
    :class:`_LongLine`; a last line without its newline comes at the end."""
    pending: list[bytes] = []  # the start of a line whose newline has not come
    held = 0  # its length (counted on past the limit, where only its head is kept)
    while (data := read(size)) != b"":
        if data is None:
            yield []
            continue
        end = data.rfind(b"\n") + 1
        if not end:
            held = _hold(pending, held, data)
            continue
        first = data.find(b"\n") + 1 if pending else 0
        done = []
        if pending:
            done = [_whole(pending, held + first, data[:first])]
            pending, held = [], 0
        lines = data[first:end - 1].split(b"\n") if first < end else []
        yield from _runs(done, lines)
        held = _hold(pending, held, data[end:])
    if pending:
        yield [_whole(pending, held, b"")]


def _hold(pending: list[bytes], held: int, data: bytes) -> int:
    """Add ``data`` to the start of a line; once past the limit only its length counts."""
    if data and held <= _bounds.MAX_LINE_BYTES:
        pending.append(data)
    return held + len(data)


def _whole(pending: list[bytes], size: int, rest: bytes) -> bytes:
    """The line held in ``pending`` ended by ``rest`` (with its newline, or b"" at the end
    of the stream), ``size`` bytes long: a :class:`_LongLine` when over the limit."""
    if size <= _bounds.MAX_LINE_BYTES:
        return b"".join(pending) + rest
    head = (b"".join(pending) + rest[:60])[:60]
    return _LongLine(head + (b"\n" if rest.endswith(b"\n") else b""), size)


def _runs(done: list[bytes], lines: list[bytes]) -> Iterator[list[bytes]]:
    """The lines ``done``, then ``lines`` with their newlines, in lists; a line over the
    limit alone."""
    limit = _bounds.MAX_LINE_BYTES - 1
    if max(map(len, lines), default=0) <= limit and not any(
            isinstance(x, _LongLine) for x in done):
        yield done + [line + b"\n" for line in lines]
        return
    run: list[bytes] = []
    for line in done + [_LongLine(x[:60] + b"\n", len(x) + 1) if len(x) > limit else x + b"\n"
                        for x in lines]:
        if not isinstance(line, _LongLine):
            run.append(line)
            continue
        if run:
            yield run
            run = []
        yield [line]
    if run:
        yield run


def parse_line(line: bytes | str) -> dict | None:
    """An event dict from one JSON Lines line, or None when it is not a JSON object or is
    over a limit of :func:`acep._bounds.json_problem`."""
    if json_problem(line):
        return None
    try:
        doc = loads(line)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    return doc if isinstance(doc, dict) else None


def why_bad(line: bytes | str) -> str:
    """Why :func:`parse_line` refused a line, for the log."""
    return json_problem(line) or "not a JSON object"


def parse_lines(lines: list[bytes]) -> list[dict | None]:
    """:func:`parse_line` of each line, in one ``json.loads`` call when every line is a
    JSON object (the per-call cost of ``json.loads`` is most of a short line's).

    Each line is wrapped in its own array, ``[[line1],\\n[line2],...]``: JSON strings cannot
    hold a raw newline, so no value can reach from one line into the next without changing
    the number of elements or their shape, which are both checked. Anything else (a bad
    line, a non-object, bytes that are not UTF-8) falls back to one line at a time."""
    if not lines:
        return []
    if any(map(json_problem, lines)):
        return [parse_line(line) for line in lines]
    try:
        docs = loads(b"[[" + b"],\n[".join(lines) + b"]]")
    except (ValueError, RecursionError):
        docs = None
    if (docs is not None and len(docs) == len(lines)
            and all(type(d) is list and len(d) == 1 and type(d[0]) is dict for d in docs)):
        return [d[0] for d in docs]
    return [parse_line(line) for line in lines]


class Chunk(list):
    """A chunk: its items, and ``parts``, the columns of its events in order when every
    one was read by the compiled reader in whole blocks (else None)."""

    def __init__(self, items=(), parts: list | None = None):
        super().__init__(items)
        self.parts = [] if parts is None else parts


def chunk_batch(chunk: list[Item], position: int, name: str) -> EventBatch:
    """The events of a chunk as a batch numbered from ``position``, as
    :meth:`EventBatch.from_events` makes it of their dicts (a bad event raises its
    :class:`EventError`); from the columns the compiled reader read, when it read them."""
    parts = getattr(chunk, "parts", None)
    if parts:
        return json_lines.columns_batch(parts, position, name)
    return EventBatch.from_events(chunk_events(chunk), position, name)


def chunk_events(chunk: list[Item]) -> list[dict]:
    """The event dicts of a chunk (a line the compiled reader read is decoded again)."""
    return [loads(e) if isinstance(e, bytes) else e for e, _ in chunk]




def parse_blocks(lines: list[bytes], room: Callable[[], int], bad: Callable[[int], None]
                 ) -> Iterator[tuple[list[int], list[dict] | None, object]]:
    """The events of whole lines, in blocks of at most ``room()`` non-blank lines (asked
    before each block): ``(good, docs, columns)``, the index of each event's line, and
    either their dicts or, from the compiled reader, their columns. Blank lines are
    skipped; ``bad(k)`` is called for each other line ``k`` that is not an event, as its
    block is made."""
    if not lines:
        return
    # a line over the limit comes alone: Python says why it is refused
    if json_lines.compiled() and not isinstance(lines[0], _LongLine):
        blocks = json_lines.LineBlocks(lines)
        while not blocks.done:
            columns, good, refused = blocks.next(room())
            for k in refused:
                bad(k)
            if good:
                yield good, None, columns
        return
    kept = [k for k, line in enumerate(lines) if line.strip()]
    docs = parse_lines([lines[k] for k in kept])
    i = 0
    while i < len(kept):
        j = i + room()
        block = list(zip(kept[i:j], docs[i:j]))
        for k, doc in block:
            if doc is None:
                bad(k)
        good = [(k, doc) for k, doc in block if doc is not None]
        if good:
            yield [k for k, _ in good], [doc for _, doc in good], None
        i = j
