"""Match lines written into one buffer: the compiled path of :func:`acep._output.match_lines`.

The texts of partition keys and tags come in formatted (ASCII bytes, each distinct one
once); this module only lays them out with the integers, as ``json.dumps`` of each match's
dict would, without a Python object per fragment.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.dict cimport PyDict_GetItem, PyDict_SetItem
from cpython.object cimport PyObject
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
                const long long[:] positions) -> bytes:
    """The lines of ``n`` matches as one ASCII text.

    ``keys`` and ``tags`` are the distinct JSON texts (bytes); match ``i`` has the key
    ``keys[key_of[i]]``, the start ``tags[tag_of[i]]``, the point ``tags[tag_of[n + i]]``
    and the events ``tags[tag_of[2n + j]]`` with positions ``positions[j]`` for ``j`` in
    ``ptr[i]:ptr[i + 1]``.
    """
    cdef Py_ssize_t n = key_of.shape[0], i, j, total = 0
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
            total += fixed + kl[key_of[i]] + tl[tag_of[i]] + tl[tag_of[n + i]]
            total += _digits(errors[i])
            for j in range(ptr[i], ptr[i + 1]):
                total += tl[tag_of[2 * n + j]] + _digits(positions[j])
                if j > ptr[i]:
                    total += 4  # ", " in both lists
        out = PyBytes_FromStringAndSize(NULL, total)
        p = PyBytes_AS_STRING(out)
        for i in range(n):
            p = _text(p, PARTITION, len(PARTITION))
            p = _text(p, kp[key_of[i]], kl[key_of[i]])
            p = _text(p, START, len(START))
            p = _text(p, tp[tag_of[i]], tl[tag_of[i]])
            p = _text(p, POINT, len(POINT))
            p = _text(p, tp[tag_of[n + i]], tl[tag_of[n + i]])
            p = _text(p, ERRORS, len(ERRORS))
            p = _int(p, errors[i])
            p = _text(p, EVENTS, len(EVENTS))
            for j in range(ptr[i], ptr[i + 1]):
                if j > ptr[i]:
                    p = _text(p, b", ", 2)
                p = _text(p, tp[tag_of[2 * n + j]], tl[tag_of[2 * n + j]])
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
