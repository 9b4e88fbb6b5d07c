"""The file line each CSV row starts on, found in the bytes pyarrow reads.

pyarrow's CSV reader gives rows, not where they are, and ``row + 2`` is wrong once a file
has blank lines or line breaks inside quoted values. :class:`LineTap` is the file object
pyarrow reads from: it passes each block on and records the line each row starts on, so a
remote file is not read twice. The rules and the fast paths are in docs/DESIGN.md, "As
built: the ACEP engine", Lines.
"""

from __future__ import annotations

import re
from collections import deque

import numpy as np

__all__ = ["LineTap"]

_BOM = b"\xef\xbb\xbf"
_QUOTE, _COMMA, _CR, _LF = 34, 44, 13, 10
_FIELD_END = re.compile(rb"[,\r\n]")
_EMPTY = np.zeros(0, np.int64)


class LineTap:
    """A binary file for pyarrow to read that notes the line each CSV data row starts on.

    :meth:`take` hands out the lines of the next rows in file order; pyarrow has read a
    row's bytes before it yields the row, so its line is known by then."""

    def __init__(self, raw):
        self._raw = raw
        self._tail = b""  # the last line read so far, not yet ended
        self._line = 1  # the line ``_tail`` starts on
        self._quoted = False  # whether ``_tail`` starts inside a quoted value
        self._cr = False  # the lines so far end with \r: a \n next is the rest of \r\n
        self._first = True  # no byte read yet (a byte order mark may come)
        self._header = True  # the next row found is the header
        self._found: deque[np.ndarray] | None = deque()  # lines of rows not yet taken
        self._head = _EMPTY  # the rest of the first of them, being taken

    # -- the file pyarrow reads
    closed = property(lambda self: self._raw.closed)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def close(self) -> None:
        self._raw.close()

    def read(self, size: int = -1) -> bytes:
        block = self._raw.read(size)
        self._scan(block)
        return block

    # -- the lines
    def take(self, n: int) -> np.ndarray | None:
        """The lines of the next ``n`` data rows; None once pyarrow has yielded more rows
        than were found here (which would be a bug: their lines are then unknown)."""
        parts, need = [_EMPTY], n
        while need and self._found is not None:
            if not len(self._head):
                if not self._found:
                    self._found = None
                    break
                self._head = self._found.popleft()
            part, self._head = self._head[:need], self._head[need:]
            parts.append(part)
            need -= len(part)
        if need:
            return None
        return parts[-1] if len(parts) == 2 else np.concatenate(parts)

    # -- scanning
    def _scan(self, block: bytes) -> None:
        if not block:  # the end: a last line without its line break
            if self._tail:
                self._unit(self._tail, len(self._tail))
                self._tail = b""
            return
        if self._first:
            self._first = False
            if block.startswith(_BOM):  # pyarrow drops it; it ends no line
                block = block[len(_BOM):]
        if self._cr and block.startswith(b"\n"):
            block = block[1:]
        self._cr = False
        data = self._tail + block if self._tail else block
        end = max(data.rfind(b"\n"), data.rfind(b"\r")) + 1  # the lines complete so far
        self._tail = data[end:]
        if end:
            self._cr = end == len(data) and data[-1] == _CR
            self._unit(data, end)

    def _unit(self, data: bytes, end: int) -> None:
        """Scan the whole lines ``data[:end]`` (the last may lack its line break only at the
        end of the file)."""
        a = np.frombuffer(data, np.uint8, end)
        rows = None
        if not self._quoted and data.find(b'"', 0, end) < 0 and data.find(b"\r", 0, end) < 0:
            lf = a == _LF
            if not lf[0] and not (lf[1:] & lf[:-1]).any():  # no empty line: each a row
                breaks = int(np.count_nonzero(lf))
                rows = np.arange(breaks + (not lf[-1]), dtype=np.int64)
        if rows is None:
            rows, breaks, self._quoted = _scan_lines(a, data, self._quoted)
        rows += self._line
        self._line += breaks
        if self._header and len(rows):
            self._header, rows = False, rows[1:]
        found = self._found  # None once take() gave up (on pyarrow's thread: read once)
        if found is not None and len(rows):
            found.append(rows)


_OPENS = np.zeros(256, bool)  # the bytes after which a quote opens a quoted value
_OPENS[[_COMMA, _LF, _CR, _QUOTE]] = True  # the last: the second quote of "" inside one


def _scan_lines(a: np.ndarray, data: bytes, quoted: bool) -> tuple[np.ndarray, int, bool]:
    """(the 0-based line of ``a`` (whole lines, the start of ``data``) that each row
    starting in it starts on, the line breaks in it, whether it ends inside a quoted value);
    ``quoted``: it starts inside one."""
    n = len(a)
    lf = a == _LF
    if data.find(b"\r", 0, n) >= 0:  # the last byte of each line break: \n, or a \r not before \n
        cr = a == _CR
        lf[:-1] |= cr[:-1] & ~lf[1:]
        lf[-1] |= cr[-1]
    ends = np.flatnonzero(lf)
    starts = np.concatenate(([0], ends + 1))
    if starts[-1] == n:
        starts = starts[:-1]
    if data.find(b'"', 0, n) >= 0:
        quotes = np.flatnonzero(a == _QUOTE)
        opening = quotes[int(quoted)::2]  # by parity: those with an even number before
        opens = _OPENS[a[opening - 1]]
        opens[:1] |= opening[:1] == 0  # at the start of a line
        if not opens.all():
            return _walk_lines(data, n, quoted)
        inside = (np.searchsorted(quotes, starts) + quoted) % 2 == 1
        quoted = (len(quotes) + quoted) % 2 == 1
    else:
        inside = np.full(len(starts), quoted)
    first = a[starts]
    rows = np.flatnonzero(~inside & (first != _LF) & (first != _CR))
    return rows.astype(np.int64), len(ends), quoted


def _walk_lines(unit: bytes, n: int, quoted: bool) -> tuple[np.ndarray, int, bool]:
    """:func:`_scan_lines` of ``unit[:n]`` field by field, as pyarrow parses (quotes that
    are text too)."""
    rows, line, i = [], 0, 0
    state = "quoted" if quoted else "line"
    while i < n:
        c = unit[i]
        if state == "quoted":
            j = unit.find(b'"', i, n)
            stop = n if j < 0 else j
            line += _breaks(unit, i, stop)
            if j < 0:
                i = n
            elif j + 1 < n and unit[j + 1] == _QUOTE:  # "" is a quote
                i = j + 2
            else:
                i, state = j + 1, "field"
        elif state == "field":  # a value's text, quotes included, up to , or a line break
            m = _FIELD_END.search(unit, i, n)
            if m is None:
                i = n
            elif unit[m.start()] == _COMMA:
                i, state = m.end(), "start"
            else:
                i, state = _after_break(unit, m.start(), n), "line"
                line += 1
        elif c in (_CR, _LF):  # a line break at a line's or a field's start
            i, state = _after_break(unit, i, n), "line"
            line += 1
        else:
            if state == "line":
                rows.append(line)
            if c == _QUOTE:
                i, state = i + 1, "quoted"
            elif c == _COMMA:
                i, state = i + 1, "start"
            else:
                state = "field"
    return np.array(rows, np.int64), line, state == "quoted"


def _after_break(unit: bytes, i: int, n: int) -> int:
    return i + 2 if unit[i] == _CR and i + 1 < n and unit[i + 1] == _LF else i + 1


def _breaks(unit: bytes, start: int, stop: int) -> int:
    """The line breaks in ``unit[start:stop]`` (``stop`` never splits a \\r\\n)."""
    part = unit[start:stop]
    return part.count(b"\n") + part.count(b"\r") - part.count(b"\r\n")
