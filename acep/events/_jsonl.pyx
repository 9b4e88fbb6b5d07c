# cython: language_level=3, boundscheck=False, wraparound=False
"""The compiled JSON Lines reader and value conversion (the pure-Python ones are in
``rows.py`` and ``values.py``; the results are the same).

:class:`Reader` splits lines and reads a flat object of strings without escapes, numbers,
``true``, ``false`` and ``null`` in C, straight into one list of values per field. Any
other line (nested, escaped, not UTF-8, a long integer, bad JSON, over a limit) is decoded
by ``rows._json_record`` as before and its values taken from the decoded object.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.long cimport PyLong_FromLongLong
from cpython.unicode cimport PyUnicode_AsUTF8AndSize, PyUnicode_DecodeASCII, PyUnicode_DecodeUTF8
from libc.math cimport isfinite
from libc.string cimport memchr, memcmp, memcpy

import numpy as np

from .values import _fits_float, _float_or_nan, _is_number, _parse_tag
from .values import _column_from_values as _py_column_from_values

cdef extern from "Python.h":
    double PyOS_string_to_double(const char *s, char **endptr, void *overflow) except? -1.0
    long long PyLong_AsLongLongAndOverflow(object v, int *overflow) except? -1

cdef enum:
    MAX_KEYS = 64  # keys of one line read in C; a line with more is decoded by Python
    MAX_NUMBER = 63  # characters of one number read in C
    MAX_IGNORED = 4096  # distinct keys remembered when the spec names the attributes

cdef double NAN = float("nan")
cdef long long EXACT = 2 ** 53
cdef long long BIG_DIGITS = 18  # an integer of at most 18 digits fits 64 bits


cdef inline bint _ws(unsigned char c):
    return c == 32 or c == 9 or c == 10 or c == 13


cdef inline Py_ssize_t _skip(const unsigned char *p, Py_ssize_t i, Py_ssize_t n):
    """The first position from ``i`` that is not JSON whitespace (``i`` when negative)."""
    while 0 <= i < n and _ws(p[i]):
        i += 1
    return i


cdef inline bint _space(unsigned char c):
    """What ``bytes.strip`` removes: a line of only these is blank."""
    return c == 32 or 9 <= c <= 13


cdef class Reader:
    """Lines of JSON Lines into one list of values per field, a chunk at a time."""

    cdef object decode, undecodable, _drop
    cdef bint all_keys
    cdef Py_ssize_t max_line
    cdef dict by_bytes, by_name
    cdef list names, keys, cols, order
    cdef bytearray keep, listed
    cdef int type_field, tag_field
    cdef public Py_ssize_t n, size
    cdef long long line
    cdef object lines
    cdef long long[::1] line_view
    cdef dict problems
    cdef int guess[MAX_KEYS]
    cdef int fields[MAX_KEYS]
    cdef list vals

    def __init__(self, str type_name, tag_name, attributes, set drop, Py_ssize_t size,
                 decode, undecodable, Py_ssize_t max_line):
        self.decode, self.undecodable, self.max_line = decode, undecodable, max_line
        self._drop = drop
        self.all_keys = attributes is None
        self.by_bytes, self.by_name = {}, {}
        self.names, self.keys, self.cols, self.order = [], [], [], []
        self.keep, self.listed = bytearray(), bytearray()
        self.size, self.n, self.line = size, 0, 0
        self.lines = np.zeros(min(size, 4096), np.int64)
        self.line_view = self.lines
        self.problems, self.vals = {}, []
        for j in range(MAX_KEYS):
            self.guess[j] = -1
        self.type_field = self._add(type_name, True, type_name in drop)
        self.tag_field = -1 if tag_name is None else self._add(tag_name, True, tag_name in drop)
        if not self.all_keys:
            for name in attributes:
                self.order.append(self._add(name, True, False))

    cdef int _add(self, str name, bint keep, bint never_listed):
        """The field number of ``name``, added if new."""
        f = self.by_name.get(name)
        if f is not None:
            if keep and not self.keep[f]:
                self.keep[f] = 1
            return f
        f = len(self.names)
        self.names.append(name)
        key = name.encode("utf-8", "surrogatepass")
        self.keys.append(key)
        self.by_name[name] = f
        self.by_bytes[key] = f
        self.cols.append([])
        self.keep.append(1 if keep or self.all_keys else 0)
        self.listed.append(1 if never_listed or not self.all_keys else 0)
        return f

    cdef int _lookup(self, const unsigned char *p, Py_ssize_t size, int j) except -3:
        """The field of a key's bytes (its j-th in the line); -2 when they are not UTF-8."""
        cdef int g = self.guess[j]
        cdef bytes key
        if g >= 0:
            key = <bytes>self.keys[g]
            if PyBytes_GET_SIZE(key) == size and memcmp(PyBytes_AS_STRING(key), p, size) == 0:
                return g
        key = PyBytes_FromStringAndSize(<const char *>p, size)
        f = self.by_bytes.get(key)
        if f is None:
            try:
                name = key.decode("utf-8")
            except UnicodeDecodeError:
                return -2
            if not self.all_keys and len(self.names) >= MAX_IGNORED:
                return -1  # a key not read: not remembered past this many
            f = self._add(name, False, name in self._drop)
        self.guess[j] = f
        return f

    def feed(self, const unsigned char[::1] buf, Py_ssize_t pos, bint eof):
        """Read lines of ``buf`` from ``pos`` until the chunk is full or no whole line is
        left (at ``eof`` the last line needs no newline); the position reached."""
        cdef Py_ssize_t end = buf.shape[0], stop, i
        cdef const unsigned char *p = &buf[0] if end else NULL
        cdef const unsigned char *nl
        cdef bint blank
        while self.n < self.size and pos < end:
            nl = <const unsigned char *>memchr(p + pos, 10, end - pos)
            if nl == NULL:
                if not eof:
                    break
                stop = end
            else:
                stop = nl - p + 1
            self.line += 1
            blank = True
            for i in range(pos, stop):
                if not _space(p[i]):
                    blank = False
                    break
            if not blank:
                if self.n == self.line_view.shape[0]:
                    self.lines = np.resize(self.lines, min(2 * self.n, self.size))
                    self.line_view = self.lines
                self.line_view[self.n] = self.line
                if stop - pos > self.max_line or not self._parse(p + pos, stop - pos):
                    self._record(self.decode(PyBytes_FromStringAndSize(<const char *>p + pos, stop - pos)))
                self.n += 1
            pos = stop
        return pos

    cdef bint _parse(self, const unsigned char *p, Py_ssize_t n) except -1:
        """Read one line of a flat object into the row's fields; False to leave it to
        Python (nothing is kept then)."""
        cdef Py_ssize_t i = _skip(p, 0, n)
        cdef int nk = 0
        del self.vals[:]
        if i >= n or p[i] != b'{':
            return False
        i = _skip(p, i + 1, n)
        if i < n and p[i] == b'}':
            i += 1
        else:
            while True:
                if nk == MAX_KEYS:
                    return False
                i = _skip(p, self._pair(p, i, n, nk), n)
                if i < 0:
                    return False
                nk += 1
                if i < n and p[i] == b',':
                    i = _skip(p, i + 1, n)
                    continue
                if i < n and p[i] == b'}':
                    i += 1
                    break
                return False
        if _skip(p, i, n) != n:
            return False
        self._commit(nk)
        return True

    cdef Py_ssize_t _pair(self, const unsigned char *p, Py_ssize_t i, Py_ssize_t n,
                          int nk) except -2:
        """Read the line's ``nk``-th ``"key": value`` at ``i``; the position after it, or
        -1."""
        cdef Py_ssize_t start = i + 1
        cdef int f
        if i >= n or p[i] != b'"':
            return -1
        i = _string_end(p, start, n)
        if i < 0:
            return -1
        f = self._lookup(p + start, i - start, nk)
        if f == -2:
            return -1
        i = _skip(p, i + 1, n)
        if i >= n or p[i] != b':':
            return -1
        self.fields[nk] = f
        return self._value(p, _skip(p, i + 1, n), n)

    cdef Py_ssize_t _value(self, const unsigned char *p, Py_ssize_t i, Py_ssize_t n) except -2:
        """Append the value at ``i`` to ``vals``; the position after it, or -1."""
        cdef unsigned char c
        cdef Py_ssize_t start, j
        cdef bint ascii = True
        if i >= n:
            return -1
        c = p[i]
        if c == b'"':
            start = i + 1
            j = start
            while j < n:
                c = p[j]
                if c == b'"':
                    break
                if c == b'\\' or c < 32:
                    return -1
                if c >= 128:
                    ascii = False
                j += 1
            if j >= n:
                return -1
            if ascii:
                self.vals.append(PyUnicode_DecodeASCII(<const char *>p + start, j - start, NULL))
            else:
                try:
                    self.vals.append(PyUnicode_DecodeUTF8(<const char *>p + start, j - start, NULL))
                except UnicodeDecodeError:
                    return -1
            return j + 1
        if c == b'-' or b'0' <= c <= b'9':
            return self._number(p, i, n)
        if c == b't' and n - i >= 4 and memcmp(p + i, b"true", 4) == 0:
            self.vals.append(True)
            return i + 4
        if c == b'f' and n - i >= 5 and memcmp(p + i, b"false", 5) == 0:
            self.vals.append(False)
            return i + 5
        if c == b'n' and n - i >= 4 and memcmp(p + i, b"null", 4) == 0:
            self.vals.append(None)
            return i + 4
        return -1

    cdef Py_ssize_t _number(self, const unsigned char *p, Py_ssize_t i, Py_ssize_t n) except -2:
        """A JSON number as ``json`` reads it: int when it has no fraction or exponent."""
        cdef Py_ssize_t start = i, digits
        cdef bint negative = False, is_float = False
        cdef long long whole = 0
        cdef char text[MAX_NUMBER + 1]
        if p[i] == b'-':
            negative = True
            i += 1
        if i >= n or not (b'0' <= p[i] <= b'9'):
            return -1
        if p[i] == b'0':
            i += 1
        else:
            while i < n and b'0' <= p[i] <= b'9':
                i += 1
        digits = i - start - negative
        if i < n and p[i] == b'.':
            is_float = True
            i += 1
            if i >= n or not (b'0' <= p[i] <= b'9'):
                return -1
            while i < n and b'0' <= p[i] <= b'9':
                i += 1
        if i < n and (p[i] == b'e' or p[i] == b'E'):
            is_float = True
            i += 1
            if i < n and (p[i] == b'+' or p[i] == b'-'):
                i += 1
            if i >= n or not (b'0' <= p[i] <= b'9'):
                return -1
            while i < n and b'0' <= p[i] <= b'9':
                i += 1
        if is_float:
            if i - start > MAX_NUMBER:
                return -1
            memcpy(text, p + start, i - start)
            text[i - start] = 0
            self.vals.append(PyOS_string_to_double(text, NULL, NULL))
            return i
        if digits > BIG_DIGITS:
            return -1
        for j in range(start + negative, i):
            whole = whole * 10 + (p[j] - 48)
        self.vals.append(PyLong_FromLongLong(-whole if negative else whole))
        return i

    cdef void _commit(self, int nk):
        """Give the row's values to their fields (a repeated key: the last value, as a
        dict keeps it)."""
        cdef int j, f
        cdef list col
        cdef Py_ssize_t have, r = self.n
        for j in range(nk):
            f = self.fields[j]
            if f < 0 or not self.keep[f]:
                continue
            col = <list>self.cols[f]
            have = len(col)
            if have == r + 1:
                col[r] = self.vals[j]
                continue
            if have < r:
                col.extend([None] * (r - have))
            col.append(self.vals[j])
            if not self.listed[f]:
                self.listed[f] = 1
                self.order.append(f)

    cdef _record(self, rec):
        """Take a row's values from a record decoded by Python (or its reason)."""
        if isinstance(rec, self.undecodable):
            self.problems[self.n] = (None, rec.reason)
            return
        if not isinstance(rec, dict):
            self.problems[self.n] = (None, f"record is not an object ({type(rec).__name__})")
            return
        nk = 0
        del self.vals[:]
        for k, v in (<dict>rec).items():
            f = self.by_name.get(k)
            if f is None:
                if not self.all_keys:
                    continue
                f = self._add(k, False, k in self._drop)
            if nk == MAX_KEYS:
                self._commit(nk)
                nk = 0
                del self.vals[:]
            self.fields[nk] = f
            self.vals.append(v)
            nk += 1
        self._commit(nk)

    def take(self):
        """The chunk read so far: (n, lines, problems, type values, tag values or None,
        attribute name -> values); the reader starts a new chunk."""
        n = self.n
        for col in self.cols:
            if len(col) < n:
                (<list>col).extend([None] * (n - len(col)))
        cols = self.cols
        tags = None if self.tag_field < 0 else cols[self.tag_field]
        attrs = {self.names[f]: cols[f] for f in self.order}
        out = (n, self.lines[:n].copy(), self.problems, cols[self.type_field], tags, attrs)
        self.cols = [[] for _ in cols]
        self.problems, self.n = {}, 0
        if self.all_keys:
            self.order = []
            for f in range(len(self.names)):
                self.listed[f] = 1 if self.names[f] in self._drop else 0
        return out


cdef Py_ssize_t _string_end(const unsigned char *p, Py_ssize_t i, Py_ssize_t n):
    """The closing quote of a key without escapes or control characters, or -1."""
    cdef unsigned char c
    while i < n:
        c = p[i]
        if c == b'"':
            return i
        if c == b'\\' or c < 32:
            return -1
        i += 1
    return -1


def types_from_values(list values):
    """``values._types_from_values``."""
    cdef Py_ssize_t i, n = len(values)
    cdef dict index = {}
    codes = np.full(n, -1, dtype=np.int32)
    cdef int[::1] c = codes
    bad = {}
    for i in range(n):
        v = values[i]
        if type(v) is str and len(<str>v):
            code = index.get(v)
            if code is None:
                code = index[v] = len(index)
            c[i] = code
            continue
        if isinstance(v, int) and not isinstance(v, bool):
            v = str(v)
        if isinstance(v, str) and v:
            c[i] = index.setdefault(v, len(index))
        else:
            bad[i] = "type is missing" if v in (None, "") else f"type is not a string ({v!r})"
    return codes, list(index), bad


cdef bint _small_int(v, double *out) except -1:
    """Whether ``v`` (an int) is within 2**53, then its value in ``out``."""
    cdef int overflow = 0
    cdef long long x = PyLong_AsLongLongAndOverflow(v, &overflow)
    if overflow or x > EXACT or x < -EXACT:
        return False
    out[0] = <double>x
    return True


def class_numbers(list values):
    """The numbers of ``values`` for type classes, NaN where there is none."""
    cdef Py_ssize_t i, n = len(values)
    cdef double x
    out = np.empty(n, dtype=np.float64)
    cdef double[::1] o = out
    for i in range(n):
        v = values[i]
        if type(v) is float:
            o[i] = <double>v
        elif type(v) is int and _small_int(v, &x):
            o[i] = x
        elif v is None or type(v) is str:
            o[i] = NAN
        else:
            o[i] = _float_or_nan(v) if _is_number(v) else NAN
    return out


def tags_from_values(list values, kind):
    """``values._tags_from_values``."""
    cdef Py_ssize_t i, n = len(values)
    cdef double x
    cdef dict parsed = {}
    tags = np.full(n, NAN)
    cdef double[::1] t = tags
    bad = {}
    for i in range(n):
        v = values[i]
        try:
            if type(v) is str:
                known = parsed.get(v)
                if known is None:
                    known = _iso_seconds(<str>v)
                    if known is None:
                        known = _parse_tag(v)
                    parsed[v] = known
                x, is_time = known
            elif type(v) is float and isfinite(<double>v):
                x, is_time = <double>v, False
            elif type(v) is int and _small_int(v, &x):
                is_time = False
            else:
                x, is_time = _parse_tag(v)
        except ValueError as e:
            bad[i] = str(e)
            continue
        t[i] = x
        if kind.is_time is None:
            kind.is_time = is_time
        elif is_time != kind.is_time:
            first = "timestamps" if kind.is_time else "numbers"
            bad[i] = f"tag {v!r} does not match the earlier tags, which are {first}"
    return tags, bad


cdef object _iso_seconds(str text):
    """(seconds, True) of a text of just the form YYYY-MM-DDTHH:MM:SS (UTC), with a
    fraction of one to six digits after a point or not, that ``datetime.fromisoformat``
    reads, else None (then Python decides). The seconds are the whole microseconds over
    1e6, one correctly rounded division as ``datetime.timestamp`` makes them."""
    cdef Py_ssize_t size, n = len(text)
    cdef const char *c
    cdef int i
    cdef long long y, m, d, hh, mm, ss, seconds, us
    if not (n == 19 or 21 <= n <= 26) or not text.isascii():
        return None
    c = PyUnicode_AsUTF8AndSize(text, &size)
    if c[4] != b'-' or c[7] != b'-' or c[10] != b'T' or c[13] != b':' \
            or c[16] != b':' or (n > 19 and c[19] != b'.'):
        return None
    for i in (0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18):
        if not (b'0' <= c[i] <= b'9'):
            return None
    for i in range(20, n):
        if not (b'0' <= c[i] <= b'9'):
            return None
    y = _digits(c, 0, 4)
    m, d = _digits(c, 5, 2), _digits(c, 8, 2)
    hh, mm, ss = _digits(c, 11, 2), _digits(c, 14, 2), _digits(c, 17, 2)
    if y < 1 or not 1 <= m <= 12 or d < 1 or d > _month_days(y, m) or hh > 23 or mm > 59 \
            or ss > 59:
        return None
    seconds = _days(y, m, d) * 86400 + hh * 3600 + mm * 60 + ss
    if n == 19:
        return <double>seconds, True
    us = _digits(c, 20, n - 20)
    for i in range(n - 20, 6):
        us *= 10
    us += seconds * 1000000
    if not -EXACT < us < EXACT:  # the microseconds must be exact as a double
        return None
    return <double>us / 1e6, True


cdef inline long long _digits(const char *c, int start, int count):
    cdef long long x = 0
    for i in range(start, start + count):
        x = x * 10 + (c[i] - 48)
    return x


cdef inline int _month_days(long long y, long long m):
    if m == 2:
        return 29 if (y % 4 == 0 and y % 100 != 0) or y % 400 == 0 else 28
    return 30 if m in (4, 6, 9, 11) else 31


cdef inline long long _days(long long y, long long m, long long d):
    """Days from 1970-01-01 to a date of the proleptic Gregorian calendar."""
    y -= m <= 2
    cdef long long era = y // 400
    cdef long long yoe = y - era * 400
    cdef long long doy = (153 * (m - 3 if m > 2 else m + 9) + 2) // 5 + d - 1
    return era * 146097 + yoe * 365 + yoe // 4 - yoe // 100 + doy - 719468


def column_from_values(list values):
    """``values._column_from_values``."""
    cdef Py_ssize_t i, n = len(values)
    cdef double x
    out = np.empty(n, dtype=np.float64)
    cdef double[::1] o = out
    for i in range(n):
        v = values[i]
        if v is None:
            o[i] = NAN
        elif type(v) is float:
            o[i] = <double>v
        elif type(v) is int and _small_int(v, &x):
            o[i] = x
        elif type(v) is bool:
            o[i] = 1.0 if v is True else 0.0
        elif type(v) is not str and _fits_float(v):
            o[i] = float(v)
        else:
            return _object_column(values)
    return out


cdef _object_column(list values):
    """An object column: texts and None as they are, anything else as Python makes it."""
    for v in values:
        if v is not None and type(v) is not str:
            return _py_column_from_values(values)
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out
