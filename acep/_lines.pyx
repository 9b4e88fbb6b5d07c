"""Match lines written into one buffer: the compiled path of :func:`acep._output.match_lines`.

The texts of partition keys and tags come in formatted (ASCII bytes, each distinct one
once); this module only lays them out with the integers, as ``json.dumps`` of each match's
dict would, without a Python object per fragment.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.dict cimport PyDict_GetItem, PyDict_SetItem
from cpython.object cimport PyObject
from libc.math cimport rint
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy

cdef bytes PARTITION = b'{"partition": '
cdef bytes START = b', "start": '
cdef bytes POINT = b', "point": '
cdef bytes ERRORS = b', "errors": '
cdef bytes EVENTS = b', "events": ['
cdef bytes POSITIONS = b'], "positions": ['
cdef bytes END = b']}\n'


cdef Py_ssize_t _digits(long long v) noexcept:
    cdef Py_ssize_t n = 1
    if v < 0:
        n += 1
        v = -v
    while v >= 10:
        v //= 10
        n += 1
    return n


cdef char* _int(char* p, long long v) noexcept:
    cdef char tmp[24]
    cdef int n = 0
    if v < 0:
        p[0] = 45  # '-'
        p += 1
        v = -v
    while True:
        tmp[n] = <char>(48 + v % 10)
        n += 1
        v //= 10
        if v == 0:
            break
    while n:
        n -= 1
        p[0] = tmp[n]
        p += 1
    return p


cdef char* _text(char* p, const char* s, Py_ssize_t n) noexcept:
    memcpy(p, s, n)
    return p + n


cdef int _pointers(list texts, const char** at, Py_ssize_t* size) except -1:
    cdef Py_ssize_t i
    cdef bytes b
    for i in range(len(texts)):
        b = texts[i]
        at[i] = PyBytes_AS_STRING(b)
        size[i] = len(b)
    return 0


# whole seconds from 0001-01-01T00:00:00 to 9999-12-31T23:59:59, in microseconds
cdef double _FIRST_US = -62135596800e6
cdef double _LAST_US = 253402300799e6
cdef enum:
    ISO = 21  # "YYYY-MM-DDTHH:MM:SS" with its quotes


def whole_seconds(const double[:] tags, long long[:] seconds) -> bool:
    """Fill ``seconds`` with the tags (seconds since the epoch) when every one rounds to a
    whole second of the years 1-9999 at microseconds, as :func:`acep.events.iso_texts`
    rounds; False (``seconds`` partly filled) when one does not."""
    cdef Py_ssize_t i
    cdef double us
    cdef long long whole
    for i in range(tags.shape[0]):
        us = rint(tags[i] * 1e6)
        if not (_FIRST_US <= us <= _LAST_US):  # NaN fails too
            return False
        whole = <long long>us
        if whole % 1000000:
            return False
        seconds[i] = whole // 1000000
    return True


cdef char* _two(char* p, long long v) noexcept:
    p[0] = <char>(48 + v // 10)
    p[1] = <char>(48 + v % 10)
    return p + 2


cdef char* _iso(char* p, long long s) noexcept:
    """The quoted ISO text of ``s`` seconds since the epoch (civil date: H. Hinnant's
    days_from_civil inverse), as numpy's ``datetime_as_string(..., unit="s")``."""
    cdef long long days = s // 86400, rest = s % 86400  # C division: toward zero
    if rest < 0:
        days -= 1
        rest += 86400
    cdef long long z = days + 719468
    cdef long long era = (z if z >= 0 else z - 146096) // 146097
    cdef long long doe = z - era * 146097
    cdef long long yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    cdef long long doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    cdef long long mp = (5 * doy + 2) // 153
    cdef long long day = doy - (153 * mp + 2) // 5 + 1
    cdef long long month = mp + 3 if mp < 10 else mp - 9
    cdef long long year = yoe + era * 400 + (1 if month <= 2 else 0)
    p[0] = 34  # '"'
    p = _two(p + 1, year // 100)
    p = _two(p, year % 100)
    p[0] = 45  # '-'
    p = _two(p + 1, month)
    p[0] = 45
    p = _two(p + 1, day)
    p[0] = 84  # 'T'
    p = _two(p + 1, rest // 3600)
    p[0] = 58  # ':'
    p = _two(p + 1, rest // 60 % 60)
    p[0] = 58
    p = _two(p + 1, rest % 60)
    p[0] = 34
    return p + 1


cdef inline char* _tag(char* p, Py_ssize_t k, const char** tp, Py_ssize_t* tl,
                       const long long* tag_of, const long long* seconds) noexcept:
    if seconds != NULL:
        return _iso(p, seconds[k])
    return _text(p, tp[tag_of[k]], tl[tag_of[k]])


cdef inline Py_ssize_t _tag_size(Py_ssize_t k, Py_ssize_t* tl, const long long* tag_of,
                                 const long long* seconds) noexcept:
    return ISO if seconds != NULL else tl[tag_of[k]]


def first_seen(list keys, long long[:] index) -> list:
    """The distinct ``keys`` in the order they first appear; ``index[i]`` receives key
    ``i``'s place among them (keys are told apart as a dict tells them)."""
    cdef dict seen = {}
    cdef list order = []
    cdef Py_ssize_t i
    cdef PyObject* at
    for i in range(len(keys)):
        at = PyDict_GetItem(seen, keys[i])
        if at is NULL:
            index[i] = len(order)
            PyDict_SetItem(seen, keys[i], len(order))
            order.append(keys[i])
        else:
            index[i] = <object>at
    return order


def match_lines(list keys, const long long[:] key_of, list tags, const long long[:] tag_of,
                const long long[:] errors, const long long[:] ptr,
                const long long[:] positions, const long long[:] seconds=None) -> bytes:
    """The lines of ``n`` matches as one ASCII text.

    ``keys`` and ``tags`` are the distinct JSON texts (bytes); match ``i`` has the key
    ``keys[key_of[i]]``, the start ``tags[tag_of[i]]``, the point ``tags[tag_of[n + i]]``
    and the events ``tags[tag_of[2n + j]]`` with positions ``positions[j]`` for ``j`` in
    ``ptr[i]:ptr[i + 1]``. With ``seconds`` (see :func:`whole_seconds`), tag ``k`` is
    instead the ISO text of ``seconds[k]`` and ``tags``, ``tag_of`` are not read.
    """
    cdef Py_ssize_t n = key_of.shape[0], i, j, total = 0
    cdef const long long* sec = NULL
    cdef const long long* of = NULL
    if seconds is not None and seconds.shape[0]:
        sec = &seconds[0]
    elif tag_of.shape[0]:
        of = &tag_of[0]
    cdef Py_ssize_t fixed = (len(PARTITION) + len(START) + len(POINT) + len(ERRORS)
                             + len(EVENTS) + len(POSITIONS) + len(END))
    cdef const char** kp = <const char**>malloc((len(keys) + 1) * sizeof(char*))
    cdef Py_ssize_t* kl = <Py_ssize_t*>malloc((len(keys) + 1) * sizeof(Py_ssize_t))
    cdef const char** tp = <const char**>malloc((len(tags) + 1) * sizeof(char*))
    cdef Py_ssize_t* tl = <Py_ssize_t*>malloc((len(tags) + 1) * sizeof(Py_ssize_t))
    cdef bytes out
    cdef char* p
    try:
        if not (kp and kl and tp and tl):
            raise MemoryError()
        _pointers(keys, kp, kl)
        _pointers(tags, tp, tl)
        for i in range(n):
            total += fixed + kl[key_of[i]] + _tag_size(i, tl, of, sec)
            total += _tag_size(n + i, tl, of, sec) + _digits(errors[i])
            for j in range(ptr[i], ptr[i + 1]):
                total += _tag_size(2 * n + j, tl, of, sec) + _digits(positions[j])
                if j > ptr[i]:
                    total += 4  # ", " in both lists
        out = PyBytes_FromStringAndSize(NULL, total)
        p = PyBytes_AS_STRING(out)
        for i in range(n):
            p = _text(p, PARTITION, len(PARTITION))
            p = _text(p, kp[key_of[i]], kl[key_of[i]])
            p = _text(p, START, len(START))
            p = _tag(p, i, tp, tl, of, sec)
            p = _text(p, POINT, len(POINT))
            p = _tag(p, n + i, tp, tl, of, sec)
            p = _text(p, ERRORS, len(ERRORS))
            p = _int(p, errors[i])
            p = _text(p, EVENTS, len(EVENTS))
            for j in range(ptr[i], ptr[i + 1]):
                if j > ptr[i]:
                    p = _text(p, b", ", 2)
                p = _tag(p, 2 * n + j, tp, tl, of, sec)
            p = _text(p, POSITIONS, len(POSITIONS))
            for j in range(ptr[i], ptr[i + 1]):
                if j > ptr[i]:
                    p = _text(p, b", ", 2)
                p = _int(p, positions[j])
            p = _text(p, END, len(END))
        return out
    finally:
        free(kp)
        free(kl)
        free(tp)
        free(tl)
