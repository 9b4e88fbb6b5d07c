# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The compiled listing of :mod:`edge.collector.fastcheck`: the first matches ending at one event.

The same depth-first walk as ``edge.collector.fastcheck._Window.first_matches`` (its docstring
says what it lists and in which order), over flat arrays instead of numpy rows and Python
recursion. Each match comes out as its compact JSON text (``[[7],[9,12],[15]]``, the form
the collector stores), written into one C buffer that grows and shrinks with the walk, so
no Python list is made per block or match. ``tests/test_edge_fastcheck.py`` checks that
both walks give the same matches.

Component ``j`` has ``n_j = co[j + 1] - co[j]`` candidates at ``co[j]`` of the flat
arrays ``cand`` (local positions), ``names`` (labels) and ``reach`` (1 when the end can
still be reached from ``l_j`` = that candidate). ``valid`` and ``elig`` hold component
``j``'s matrix (rows: the candidates of ``j - 1``, or of ``0`` for ``j = 0``; ``n_j``
columns) from offset ``vo[j]``.
"""

from array import array

from cpython.unicode cimport PyUnicode_DecodeASCII
from libc.stdio cimport snprintf
from libc.stdlib cimport free, malloc, realloc


cdef class _Walk:
    cdef int m, ce, limit, single_end
    cdef double floor
    cdef const unsigned char[:] kleene
    cdef const long long[:] co
    cdef const long long[:] cand
    cdef const long long[:] names
    cdef const double[:] tags
    cdef const unsigned char[:] valid
    cdef const unsigned char[:] elig
    cdef const long long[:] vo
    cdef const unsigned char[:] reach
    cdef unsigned char[:] ok
    cdef long long[:] grows
    cdef long long[:] ngrows
    cdef long long[:] block
    cdef list out
    cdef char* buf  # "[" then the open blocks' JSON, comma-separated
    cdef Py_ssize_t size, cap
    cdef int nblocks

    def __cinit__(self):
        self.cap = 256
        self.buf = <char*> malloc(self.cap)
        if self.buf == NULL:
            raise MemoryError()
        self.buf[0] = b'['
        self.size = 1

    def __dealloc__(self):
        free(self.buf)

    cdef int reserve(self, Py_ssize_t extra) except -1:
        cdef Py_ssize_t cap = self.cap
        cdef char* grown
        if self.size + extra <= cap:
            return 0
        while self.size + extra > cap:
            cap *= 2
        grown = <char*> realloc(self.buf, cap)
        if grown == NULL:
            raise MemoryError()
        self.buf, self.cap = grown, cap
        return 0

    cdef Py_ssize_t open_block(self) except -1:
        """Start a block; the size to go back to when it is closed for good."""
        cdef Py_ssize_t before = self.size
        self.reserve(2)
        if self.nblocks:
            self.buf[self.size] = b','
            self.size += 1
        self.buf[self.size] = b'['
        self.size += 1
        self.nblocks += 1
        return before

    cdef int put(self, long long label, bint comma) except -1:
        self.reserve(24)
        if comma:
            self.buf[self.size] = b','
            self.size += 1
        self.size += snprintf(self.buf + self.size, 22, "%lld", label)
        return 0

    cdef int close_block(self) except -1:
        self.reserve(1)
        self.buf[self.size] = b']'
        self.size += 1
        return 0

    cdef void drop_block(self, Py_ssize_t before):
        self.size = before
        self.nblocks -= 1

    cdef Py_ssize_t push_one(self, long long label) except -1:
        cdef Py_ssize_t before = self.open_block()
        self.put(label, False)
        self.close_block()
        return before

    cdef int emit(self) except -1:
        self.reserve(1)
        self.buf[self.size] = b']'
        self.out.append(PyUnicode_DecodeASCII(self.buf, self.size + 1, NULL))
        return 0

    cdef inline long long n(self, int j):
        return self.co[j + 1] - self.co[j]

    cdef int finish(self, int j, long long b) except -1:
        cdef int last = self.m - 1
        cdef Py_ssize_t before
        if j == last:
            self.emit()
        elif self.single_end and j == last - 1:
            if self.valid[self.vo[last] + b * self.n(last) + self.ce]:
                before = self.push_one(self.names[self.co[last] + self.ce])
                self.emit()
                self.drop_block(before)
        else:
            self.level(j + 1, b)
        return 0

    cdef int level(self, int j, long long a) except -1:
        cdef long long n = self.n(j), base = self.co[j], b, z, f, x = 0, cnt = 0, i
        cdef long long row
        cdef Py_ssize_t before
        cdef bint later = False
        if j == 0:
            for b in range(n):
                self.ok[base + b] = self.valid[self.vo[0] + b * n + b] and self.reach[base + b]
        elif j == self.m - 1 and not self.kleene[j]:
            if self.valid[self.vo[j] + a * n + self.ce]:
                before = self.push_one(self.names[base + self.ce])
                self.emit()
                self.drop_block(before)
            return 0
        else:
            row = self.vo[j] + a * n
            for b in range(n):
                self.ok[base + b] = self.valid[row + b] and self.reach[base + b]
        if not self.kleene[j]:
            for b in range(n):
                if not self.ok[base + b]:
                    continue
                if j == 0 and self.tags[self.cand[base + b]] < self.floor:
                    continue
                before = self.push_one(self.names[base + b])
                self.finish(j, b)
                self.drop_block(before)
                if len(self.out) >= self.limit:
                    return 0
            return 0
        row = self.vo[j] + (0 if j == 0 else a * n)
        # a block whose latest element is z can still be finished iff l_j = z is allowed or
        # an eligible later element can: those are the elements worth adding
        z = n - 1
        while z >= 0:
            if (self.ok[base + z] or later) and self.elig[row + z]:
                later = True
                self.grows[base + cnt] = z
                cnt += 1
            z -= 1
        for i in range(cnt // 2):
            z = self.grows[base + i]
            self.grows[base + i] = self.grows[base + cnt - 1 - i]
            self.grows[base + cnt - 1 - i] = z
        self.ngrows[j] = cnt
        if j > 0:
            x = self.cand[self.co[j - 1] + a]
        for i in range(cnt):
            f = self.grows[base + i]
            if j == 0:
                if self.tags[self.cand[base + f]] < self.floor:
                    continue
            elif self.cand[base + f] <= x:
                continue
            self.block[base] = f
            self.grow(j, 1, i)
            if len(self.out) >= self.limit:
                return 0
        return 0

    cdef int grow(self, int j, long long depth, long long gi) except -1:
        cdef long long n = self.n(j), base = self.co[j], cur = self.block[base + depth - 1]
        cdef long long k, g
        cdef Py_ssize_t before
        if self.ok[base + cur] and (j > 0 or self.valid[self.vo[0] + self.block[base] * n + cur]):
            before = self.open_block()
            for k in range(depth):
                self.put(self.names[base + self.block[base + k]], k > 0)
            self.close_block()
            self.finish(j, cur)
            self.drop_block(before)
            if len(self.out) >= self.limit:
                return 0
        for g in range(gi + 1, self.ngrows[j]):
            self.block[base + depth] = self.grows[base + g]
            self.grow(j, depth + 1, g)
            if len(self.out) >= self.limit:
                return 0
        return 0


def first_matches(const unsigned char[:] kleene, const long long[:] co,
                  const long long[:] cand, const long long[:] names,
                  const double[:] tags, const unsigned char[:] valid,
                  const unsigned char[:] elig, const long long[:] vo,
                  const unsigned char[:] reach, long long ce, double floor,
                  long long limit, unsigned char[:] ok, long long[:] grows,
                  long long[:] block):
    """Up to ``limit`` matches ending at candidate ``ce`` of the last component, each as
    the JSON text of its list of blocks (lists of labels). ``ok``, ``grows`` and ``block``
    are scratch space of ``co[m]`` entries."""
    cdef _Walk w = _Walk()
    cdef int m = kleene.shape[0]
    w.m, w.ce, w.limit, w.floor = m, ce, limit, floor
    w.single_end = m > 1 and not kleene[m - 1]
    w.kleene, w.co, w.cand, w.names, w.tags = kleene, co, cand, names, tags
    w.valid, w.elig, w.vo, w.reach = valid, elig, vo, reach
    w.ok, w.grows, w.block = ok, grows, block
    w.ngrows = array("q", [0] * m)
    w.out = []
    if limit > 0:
        w.level(0, -1)
    return w.out
