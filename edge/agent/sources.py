"""Event sources for the agent: a followed file, standard input, a Python iterator.

Each source yields *chunks*: lists of ``(event, resume offset)`` where the offset is
where reading resumes after that event (a byte offset for a file, an event count for an
iterator, None for stdin, which cannot be re-read). An event is a dict, or, from a file or
stdin read by the compiled JSON Lines reader, its line: such a chunk carries its events'
columns as that reader read them (``edge.agent.lines``), :func:`chunk_batch` makes its
batch of them and :func:`chunk_events` gives the dicts of any chunk. A chunk ends after
``batch_events`` events or ``batch_seconds`` after its first event, whichever comes first,
so a slow stream still moves. Lines that are not JSON objects are skipped, counted in ``bad_lines``
and logged with where they are (a device must not stop on one bad line; :class:`LogLimiter`
keeps a flood of them from filling the log).
"""

from __future__ import annotations

import hashlib
import io
import itertools
import logging
import math
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator

from acep.utils import live_descriptor, readable

from ..logs import LogLimiter
from .lines import (
    READ_BYTES,
    Chunk,
    Item,
    _LongLine,
    chunk_batch,
    chunk_events,
    parse_blocks,
    parse_line,
    parse_lines,
    read_line,
    stream_lines,
    why_bad,
)

__all__ = ["Source", "FileSource", "StdinSource", "IteratorSource", "LogLimiter",
           "parse_line", "parse_lines", "fingerprint", "find_file", "open_file",
           "FINGERPRINT_BYTES", "Chunk", "chunk_batch", "chunk_events"]

log = logging.getLogger("edge.agent")
_READ_BYTES = 1 << 16  # a file is read this much at a time (whole lines)
RATE_WINDOW = 1.0  # seconds: a file's arrival rate is its growth over at least this long
_CUT = object()  # from _blocks: close the chunk here (the events after it are another file's)
FINGERPRINT_BYTES = 1024  # a file is told from another by the SHA-256 of its first bytes


def fingerprint(file: int | str | os.PathLike, size: int) -> str | None:
    """The SHA-256 (hex) of the first ``size`` bytes of a file (an open descriptor or a
    path), or None when it has fewer: told apart by it, two files with the same inode
    number (a deleted file's reused, a file truncated and written again) are not taken
    for one."""
    if isinstance(file, int):
        data = os.pread(file, size, 0)
    else:
        with open(file, "rb") as fh:
            data = fh.read(size)
    return hashlib.sha256(data).hexdigest() if len(data) == size else None


def find_file(directory: str, identity: dict) -> str | None:
    """The path of the file in ``directory`` with ``identity``'s device, inode and
    fingerprint (``fp`` of its first ``fp_bytes`` bytes) and at least ``end`` bytes: where a
    file renamed away by log rotation is now, or None (deleted, compressed, moved)."""
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return None
    for entry in entries:
        try:
            if entry.inode() != identity["ino"] or not entry.is_file():
                continue
            st = entry.stat()
            if (st.st_dev == identity["dev"] and st.st_size >= identity["end"]
                    and fingerprint(entry.path, identity["fp_bytes"]) == identity["fp"]):
                return entry.path
        except OSError:
            continue
    return None


def open_file(directory: str, identity: dict) -> io.BufferedReader | None:
    """The file :func:`find_file` finds, open (held open, it is read whatever becomes of
    its name), or None. One that moves between being found and being opened (logrotate
    renaming ``.1`` to ``.2``, or deleting the oldest) is looked for once more."""
    for _ in range(2):
        path = find_file(directory, identity)
        if path is None:
            return None
        try:
            fh = open(path, "rb")
        except FileNotFoundError:
            continue
        except OSError as e:  # not a move: say what it is, not "not found"
            log.warning("cannot open %s (%s)", path, e)
            return None
        st = os.fstat(fh.fileno())
        if (st.st_dev, st.st_ino) == (identity["dev"], identity["ino"]) and \
                fingerprint(fh.fileno(), identity["fp_bytes"]) == identity["fp"]:
            return fh
        fh.close()  # another file took the name meanwhile
    return None


def _upto(lines: list[bytes], size: int) -> list[bytes]:
    """The first ``size`` bytes of ``lines``, as lines (the last one cut)."""
    out = []
    for line in lines:
        if size <= 0:
            break
        out.append(_LongLine(line, size) if isinstance(line, _LongLine) and size < len(line)
                   else line[:size])
        size -= len(line)
    return out


def read_lines(fh: io.BufferedReader) -> list[bytes]:
    """The whole lines of the next :data:`_READ_BYTES` of a file (``fh`` is left after
    them), or the next line alone when none ends there: a long one, or the file's last
    bytes. Like ``readlines`` with a hint, but no line is held longer than the limit."""
    block = fh.read(_READ_BYTES)
    end = block.rfind(b"\n") + 1
    fh.seek(end - len(block), io.SEEK_CUR)
    if end == 0:
        line = read_line(fh)
        return [line] if line else []
    return [line + b"\n" for line in block[:end - 1].split(b"\n")]


def _items(lines: list[bytes], ends: list[int], good: list[int]) -> list[Item]:
    """``(line, offset after it)`` of the lines numbered ``good`` (``ends[k + 1]`` is where
    line ``k`` ends)."""
    first, last = good[0], good[-1]
    if last - first + 1 == len(good):  # no bad or blank line among them
        return list(zip(lines[first:last + 1], ends[first + 1:last + 2]))
    return [(lines[k], ends[k + 1]) for k in good]


class Source:
    """Base: :meth:`chunks` groups the events of :meth:`_items` by count and time."""

    replayable = False
    name = "<source>"

    def __init__(self, batch_events: int = 1000, batch_seconds: float = 1.0):
        self.batch_events, self.batch_seconds = int(batch_events), float(batch_seconds)
        self.bad_lines = 0
        self.room = self.batch_events  # events the chunk being filled can still take
        self.bad_log = LogLimiter(log)
        self.eof = False  # the source has ended for good (never in follow mode)
        self.chunk_started = time.monotonic()  # when the last chunk's first event came
        # events per second arriving, and events waiting unread, as of the last chunk
        # (:meth:`_measure`); None until measured
        self.arrival_rate: float | None = None
        self.backlog_events = 0.0

    def _items(self, stop: threading.Event) -> Iterator[Item | None]:
        """Events, and None when nothing is available right now (lets a chunk close)."""
        raise NotImplementedError

    def taken(self, n: int) -> dict:
        """The next ``n`` events handed out are in a chunk about to be committed: what the
        source adds to the progress committed with it (nothing by default)."""
        return {}

    def durable(self, n: int) -> None:
        """The chunk of the next ``n`` events taken is committed (the writer thread says
        so): an MQTT source acknowledges their messages now."""

    def close(self) -> None:
        """Let go of what the source holds, after the last commit."""

    def _measure(self, chunk: list[Item], seconds: float) -> None:
        """At each chunk (``seconds`` since the one before). An iterator or a pipe cannot
        tell events that waited from new ones: what is read has arrived."""
        self.arrival_rate = len(chunk) / seconds

    def where(self, start: int | None, end: int | None, position: int) -> str:
        """Where an event is, for a log line: ``start``/``end`` are the resume offsets
        before and after it, ``position`` its stream position."""
        return f"{self.name}, event {position}"

    def _blocks(self, stop: threading.Event) -> Iterator[list[Item] | None]:
        """Lists of events that were available together, and None when nothing is
        available right now. By default one event per block (a live iterator or stdin
        delivers one at a time); a file hands over what one read gave."""
        for item in self._items(stop):
            yield None if item is None else [item]

    def chunks(self, stop: threading.Event | None = None) -> Iterator[list[Item]]:
        """Chunks until the source ends or ``stop`` is set (a started chunk is finished
        with what is already available, never cut from a half-read line)."""
        stop = stop or threading.Event()
        size = self.room = self.batch_events
        chunk = Chunk()
        started = 0.0
        previous = time.monotonic()
        for block in self._blocks(stop):
            if block is _CUT:
                if chunk:
                    self.chunk_started = started
                    yield chunk
                    chunk = Chunk()
                self.room = size
                continue
            i, n = 0, 0 if block is None else len(block)
            while True:
                if i < n:
                    if not chunk:
                        started = time.monotonic()
                    take = size - len(chunk)
                    whole = not i and take >= n
                    chunk.extend(block if whole else block[i:i + take])
                    parts = getattr(block, "parts", None) if whole else None
                    chunk.parts = None if parts is None or chunk.parts is None else \
                        chunk.parts + parts
                    i += take
                full = len(chunk) >= size
                late = chunk and time.monotonic() - started >= self.batch_seconds
                if full or late or (chunk and stop.is_set()):
                    now = time.monotonic()
                    self.chunk_started = started
                    self._measure(chunk, max(now - previous, 1e-6))
                    previous = now
                    yield chunk
                    chunk = Chunk()
                if stop.is_set() and not chunk:
                    return
                if i >= n:
                    break
            self.room = size - len(chunk)
        if chunk:
            self.chunk_started = started
            yield chunk


class FileSource(Source):
    """JSON Lines from a file; with ``follow`` it waits for more like ``tail -F``.

    A last line without its newline is left unread until the newline arrives (a writer may
    be half-way through it); at the end of a file that is not followed it is read as is.
    ``start`` is the byte offset to resume from; the file may not exist yet when followed.
    A followed file that is renamed away (log rotation) is read to its end, then the new
    file at ``path`` is read from its start; one that shrinks below the offset (rotation by
    truncation) is read again from its start, and so is one whose first bytes change
    (truncated and written past the offset): checked at each poll and after each read, so
    no line read from the middle of a rewritten file is taken. Each such switch
    adds one to ``generation`` and the chunks never mix events of two files.

    ``before`` lists files renamed away from ``path`` that a restart reads again first, as
    ``(the file, open for reading, end)``: open since they were found (:func:`open_file`),
    so a rotation that renames or deletes them meanwhile takes nothing; closed once read.
    Each is read up to ``end``, the byte where the run before left it, the first from
    ``start``; then the file at ``path`` is read from its start. Their bad lines were
    counted by that run (``counted`` is an offset in the file at ``path``). The last one
    may have ``end`` None: the file the progress is of, renamed away while the agent was
    stopped; it is read to its end (its rest was never read), ``counted`` is an offset in
    it, and the file at ``path`` after it is new (nothing in it counted).

    ``identity`` names the file being read: its device, inode and ``fp``, the
    :func:`fingerprint` of its first ``fp_bytes`` bytes, which are the bytes read so far up
    to :data:`FINGERPRINT_BYTES` (a file shorter than that at first has its fingerprint
    taken again, over more bytes, as it grows; then never again).
    """

    replayable = True

    def __init__(self, path: str | os.PathLike, follow: bool = True, start: int = 0,
                 poll_seconds: float = 0.1, counted: int = 0,
                 before: Iterable[tuple[io.BufferedReader, int | None]] = (), **kw):
        super().__init__(**kw)
        self.path, self.follow, self.offset = os.fspath(path), follow, int(start)
        # bad lines before this offset were counted and logged by an earlier run (a replay
        # after a restart reads them again); only for the file read first
        self.counted = int(counted)
        self.name = self.path
        self.poll_seconds = float(poll_seconds)
        self.before = list(before)
        if any(end is None for _, end in self.before[:-1]):
            raise ValueError("before: only the last file may be read to its end")
        self.reading = self.path  # the file read now (a renamed one while reading before)
        # one per switch, in order: a file renamed away as its identity with "end", the
        # byte where reading it stopped; None for a file truncated (its bytes are gone)
        self.left: list[dict | None] = []
        self.identity: dict | None = None  # {"dev", "ino", "fp", "fp_bytes"}: see above
        self._fh: io.BufferedReader | None = None
        self._line_mark = (0, 1)  # (byte offset, 1-based line number there) of that file
        self._sizes: tuple[int, int, int] | None = None  # (generation, size, offset) then
        self._window: tuple[float, int] | None = None  # (time, size) the rate is taken from
        self._read = [0, 0]  # bytes and events read, for the bytes per event

    @property
    def generation(self) -> int:
        return len(self.left)

    def _blocks(self, stop: threading.Event) -> Iterator[list[Item] | None]:
        left = (yield from self._read_before()) if self.before else None
        fh = self._open(stop)
        if fh is None:
            return
        if self.before:
            self._switch(fh, left, counted=self.counted)
        else:
            self._use(fh)
        try:
            fh.seek(self.offset)
            finishing = False  # the path names another file now: read this one to its end
            while True:
                lines = read_lines(fh)
                if lines and self.follow and (why := self._truncated(fh)):
                    # rewritten while the reader was busy (no poll saw it short): the
                    # lines may be the new file's from the middle; checked after the
                    # read, so none of them is ever taken
                    yield from self._restart(fh, why)
                    continue
                partial = bool(lines) and not lines[-1].endswith(b"\n")
                if partial and self.follow and not finishing:
                    lines.pop()  # half a line: re-read it once its newline is there
                if lines:
                    yield from self._parse(lines)
                    if not partial:
                        continue
                if not self.follow:  # the last line of a finished file needs no newline
                    self.eof = True
                    return
                if finishing:
                    finishing = False
                    try:
                        new = open(self.path, "rb")
                    except OSError:
                        continue  # gone again: wait for the next file at the path
                    yield _CUT
                    log.info("%s was rotated: the old file is read to its end (byte %d); "
                             "reading the new one from its start", self.path, self.offset)
                    fh.close()
                    fh = new
                    self._switch(fh, {**self.identity, "end": self.offset})
                    continue
                yield None  # nothing (or half a line) more for now: re-read it later
                # checked after the wait, right before the next read: a file rewritten
                # during the wait is not read from the old offset
                if stop.wait(self.poll_seconds):
                    return
                if why := self._truncated(fh):
                    yield from self._restart(fh, why)
                elif self._replaced(fh):
                    finishing = True  # read what was written before the rename, now
                fh.seek(self.offset)
        finally:
            self._fh = None
            fh.close()

    def _restart(self, fh: io.BufferedReader, why: str) -> Iterator[object]:
        """The file open was truncated (and maybe written again): read it from its start,
        in a chunk of its own."""
        yield _CUT
        log.warning("%s %s: reading it again from its start", self.path, why)
        self._switch(fh, None)
        fh.seek(0)

    def _read_before(self) -> Iterator[list[Item] | object]:
        """The events of the files in ``before`` (see the class); returns what is left of
        the last one for :attr:`left`."""
        counted, left = self.counted, None
        try:
            for i, (fh, end) in enumerate(self.before):
                if i:
                    self._switch(fh, left)
                else:
                    self._use(fh)
                self.reading = fh.name
                # read by the run before up to ``end``; the progress' own file up to counted
                self.counted = math.inf if end is not None else counted
                fh.seek(self.offset)
                while (end is None or self.offset < end) and \
                        (lines := read_lines(fh)):
                    yield from self._parse(lines if end is None else
                                           _upto(lines, end - self.offset))
                yield _CUT
                left = {**self.identity, "end": self.offset}
                fh.close()
        finally:
            for fh, _ in self.before:
                fh.close()
        self._fh, self.reading = None, self.path
        # after the progress' own file, the file at the path is a new one
        self.counted = 0 if self.before[-1][1] is None else counted
        return left

    def _use(self, fh: io.BufferedReader) -> None:
        st = os.fstat(fh.fileno())
        self._fh, self.identity = fh, {"dev": st.st_dev, "ino": st.st_ino}
        self._fingerprint()
        self._line_mark = (0, 1)

    def _switch(self, fh: io.BufferedReader, left: dict | None, counted: float = 0) -> None:
        """Go on with ``fh`` from its start: another file, or the same one truncated
        (``left``: what is kept of the file read until now, see :attr:`left`)."""
        self.left.append(left)
        self.offset, self.counted = 0, counted
        self._use(fh)

    def _fingerprint(self) -> None:
        """Take the fingerprint of the bytes read, at most :data:`FINGERPRINT_BYTES` (a new
        dict: the agent keeps the one of each chunk)."""
        size = min(self.offset, FINGERPRINT_BYTES)
        fp = fingerprint(self._fh.fileno(), size)
        if fp is None:  # shorter than the start offset: the agent has said why
            size = 0
            fp = fingerprint(self._fh.fileno(), 0)
        self.identity = {**self.identity, "fp": fp, "fp_bytes": size}

    def _parse(self, lines: list[bytes]) -> Iterator[list[Item]]:
        """The events of whole lines read at ``self.offset``, each with the offset after
        it, in blocks of at most :attr:`room` non-blank lines (so that a chunk never takes
        part of a block); the offset moves past them all at once. Blank lines are skipped,
        bad ones counted and logged as their block is made."""
        if not lines:
            return
        ends = list(itertools.accumulate(map(len, lines), initial=self.offset))
        self.offset = ends[-1]
        if self.identity["fp_bytes"] < FINGERPRINT_BYTES:
            self._fingerprint()
        for good, docs, columns in parse_blocks(
                lines, lambda: self.room, lambda k: self._bad_line(lines[k], ends[k + 1])):
            if columns is not None:
                yield Chunk(_items(lines, ends, good), [columns])
            else:
                yield [(doc, ends[k + 1]) for k, doc in zip(good, docs)]

    def _bad_line(self, line: bytes, end: int) -> None:
        """Count and log a line that is not a JSON object, unless an earlier run did."""
        if end > self.counted:
            self.bad_lines += 1
            self.bad_log.warning("%s: %s, skipped: %.60r", self.where(end - len(line), end, -1),
                                 why_bad(line), line)

    def where(self, start: int | None, end: int | None, position: int) -> str:
        # the line holding the event's last byte: the offset before an event is the end of
        # the event before it, which bad or blank lines may separate from it
        line = self.line_at(end - 1) if end else None
        return f"{self.reading}, line {line}" if line is not None else \
            f"{self.reading}, event {position}"

    def line_at(self, offset: int) -> int | None:
        """The 1-based number of the line that holds byte ``offset`` of the file read
        last. Counted from the last answer onwards, so a run counts each byte once."""
        at, line = self._line_mark
        if offset < at:
            at, line = 0, 1
        try:
            fd = self._fh.fileno() if self._fh is not None else os.open(self.path, os.O_RDONLY)
        except OSError:
            return None
        try:
            while at < offset:
                data = os.pread(fd, min(offset - at, 1 << 20), at)
                if not data:
                    break
                line += data.count(b"\n")
                at += len(data)
        finally:
            if self._fh is None:
                os.close(fd)
        self._line_mark = (at, line)
        return line

    def _open(self, stop: threading.Event) -> io.BufferedReader | None:
        while True:
            try:
                return open(self.path, "rb")
            except FileNotFoundError:
                if not self.follow:
                    raise
                if stop.wait(self.poll_seconds):
                    return None

    def _truncated(self, fh) -> str | None:
        """Why the file open is not the one read until now (log rotation by truncation):
        it shrank below the offset, or its first bytes changed (truncated and written
        past the offset since the last poll). None when it is the same."""
        try:
            if os.fstat(fh.fileno()).st_size < self.offset:
                return f"shrank below byte {self.offset} (truncated)"
            if fingerprint(fh.fileno(), self.identity["fp_bytes"]) != self.identity["fp"]:
                return (f"changed in its first {self.identity['fp_bytes']} bytes (truncated "
                        "and written again)")
        except OSError:
            pass
        return None

    def _replaced(self, fh) -> bool:
        """The path names another file than the one open (rotation by rename); False while
        no file is at the path (the new one is not created yet)."""
        try:
            st = os.stat(self.path)
        except OSError:
            return False
        return (st.st_dev, st.st_ino) != (self.identity["dev"], self.identity["ino"])

    def _measure(self, chunk: list[Item], seconds: float) -> None:
        """Arrivals are the file's growth, not the reading: after an outage the reader
        runs through a backlog far faster than the events came. The growth is taken over
        at least :data:`RATE_WINDOW` (chunks read from a backlog come milliseconds apart,
        and a writer appends in bursts). Both are converted from bytes with the mean line
        length read so far (from the chunks' end offsets); a switch to another file
        (rotation) starts over."""
        try:
            size = os.fstat(self._fh.fileno()).st_size if self._fh is not None else None
        except OSError:
            size = None
        last, self._sizes = self._sizes, None
        if size is None:
            return
        end = chunk[-1][1]
        self._sizes = (self.generation, size, end)
        now = time.monotonic()
        if last is None or last[0] != self.generation:
            self._window = (now, size)
            return
        self._read[0] += max(end - last[2], 0)
        self._read[1] += len(chunk)
        per_event = self._read[0] / max(self._read[1], 1)
        if per_event <= 0:
            return
        self.backlog_events = max(size - end, 0) / per_event
        since, at = self._window
        if now - since >= RATE_WINDOW:
            self.arrival_rate = max(size - at, 0) / per_event / (now - since)
            self._window = (now, size)

    def backlog(self) -> int | None:
        """Bytes written to the file but not read yet."""
        try:
            return max(os.stat(self.path).st_size - self.offset, 0)
        except OSError:
            return None


class StdinSource(Source):
    """JSON Lines from standard input (or any binary stream); not replayable. What is
    there is read at once, whole lines parsed together (:func:`parse_blocks`); a half line
    waits for the rest, and the last line needs no newline. On a pipe or a terminal that
    goes quiet, a chunk begun goes on ``batch_seconds`` after its first event all the same,
    and ``stop`` is seen within ``batch_seconds``."""

    name = "<stdin>"

    def __init__(self, stream=None, read_bytes: int = READ_BYTES, **kw):
        super().__init__(**kw)
        self.stream = stream if stream is not None else sys.stdin.buffer
        self.read_bytes = int(read_bytes)
        self.offset = None
        self.lines = 0  # read in this run

    def _blocks(self, stop: threading.Event) -> Iterator[list[Item] | None]:
        # A read of what is there (``read1``: a pipe's events are not held back to fill a
        # read); stdin closing ends the source.
        for lines in stream_lines(self._reader(), self.read_bytes):
            if lines:
                yield from self._parse(lines)
            else:
                yield None  # quiet: the chunk begun may be due
            if stop.is_set():
                return
        self.eof = True

    def _reader(self) -> Callable[[int], bytes | None]:
        """``read(size)``: what the stream has, or None when a pipe or terminal stays
        quiet for ``batch_seconds`` (a regular file or a stream without a descriptor is
        read as it is)."""
        read = getattr(self.stream, "read1", None) or self.stream.read
        fd = live_descriptor(self.stream)
        if fd is None:
            return read
        # read1 of a whole READ_BYTES leaves nothing in the stream's buffer, so the
        # descriptor tells whether anything is left to read
        return lambda size: read(size) if readable(fd, self.batch_seconds) else None

    def _parse(self, lines: list[bytes]) -> Iterator[list[Item]]:
        """The events of the next lines, in blocks (see :meth:`FileSource._parse`)."""
        first, self.lines = self.lines, self.lines + len(lines)
        for good, docs, columns in parse_blocks(
                lines, lambda: self.room, lambda k: self._bad_line(lines[k], first + k + 1)):
            if columns is not None:
                yield Chunk([(lines[k], None) for k in good], [columns])
            else:
                yield [(doc, None) for doc in docs]

    def _bad_line(self, line: bytes, number: int) -> None:
        self.bad_lines += 1
        self.bad_log.warning("<stdin>, line %d of this run: %s, skipped: %.60r", number,
                             why_bad(line), line)


class IteratorSource(Source):
    """Event dicts from a Python iterable. ``start`` events are skipped first (resume); it is
    replayable when the iterable gives the same events each time it is created."""

    replayable = True
    name = "<iterator>"

    def __init__(self, events: Iterable[dict], start: int = 0, **kw):
        super().__init__(**kw)
        self.events, self.offset = events, int(start)

    def _items(self, stop: threading.Event) -> Iterator[Item | None]:
        n = 0
        for event in self.events:
            n += 1
            if n <= self.offset:
                continue
            if not isinstance(event, dict):
                self.bad_lines += 1
                self.bad_log.warning("<iterator>, item %d: not a dict, skipped: %.60r", n,
                                     event)
                self.offset = n
                continue
            self.offset = n
            yield event, n
            if stop.is_set():
                return
        self.eof = True

    def where(self, start: int | None, end: int | None, position: int) -> str:
        return f"<iterator>, item {end}" if end is not None else super().where(
            start, end, position)
