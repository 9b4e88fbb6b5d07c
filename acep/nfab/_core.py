# cython: boundscheck=False, wraparound=False
"""The compiled loop of the shared-buffer engine (``docs/EXACT.md`` 6.1-6.5; [A08] 4-5).

Written in Cython's pure-Python mode, as ``acep/_kernel.py``: compiled by ``setup.py``, the
same file runs as plain Python where no compiler exists. It is the loop of
:class:`acep.nfab.shared.Stream` with merging off, over columns: event rows as float64,
runs, buffer nodes and Dewey labels in arrays, edge formulas as programs of a small stack
machine (:class:`Machine`, which ``_postpone.py`` shares; :mod:`acep.nfab.core` compiles
them and prepares the columns).
"""

try:
    import cython
except ImportError:  # a device without Cython: the same loop, run as Python
    from .. import _cython_shim as cython

import numpy as np

if cython.compiled:
    from cython.cimports.libc.math import copysign, fabs, fmod
else:
    from math import copysign, fabs, fmod

# opcodes of the predicate programs: (opcode, argument) pairs
OP_END = cython.declare(cython.int, 0)
OP_CHECK = cython.declare(cython.int, 1)
OP_CONST = cython.declare(cython.int, 2)
OP_EVENT = cython.declare(cython.int, 3)
OP_STATE = cython.declare(cython.int, 4)
OP_NEG = cython.declare(cython.int, 5)
OP_NOT = cython.declare(cython.int, 6)
OP_ABS = cython.declare(cython.int, 7)
OP_ADD = cython.declare(cython.int, 8)
OP_SUB = cython.declare(cython.int, 9)
OP_MUL = cython.declare(cython.int, 10)
OP_DIV = cython.declare(cython.int, 11)
OP_MOD = cython.declare(cython.int, 12)
OP_EQ = cython.declare(cython.int, 13)
OP_NE = cython.declare(cython.int, 14)
OP_LT = cython.declare(cython.int, 15)
OP_LE = cython.declare(cython.int, 16)
OP_GT = cython.declare(cython.int, 17)
OP_GE = cython.declare(cython.int, 18)
OP_AND = cython.declare(cython.int, 19)
OP_OR = cython.declare(cython.int, 20)
OP_MIN = cython.declare(cython.int, 21)
OP_MAX = cython.declare(cython.int, 22)

# column updates (EXACT.md 6.3)
UP_SET = cython.declare(cython.int, 0)
UP_SUM0 = cython.declare(cython.int, 1)
UP_SUM = cython.declare(cython.int, 2)
UP_COUNT0 = cython.declare(cython.int, 3)
UP_COUNT = cython.declare(cython.int, 4)
UP_MIN = cython.declare(cython.int, 5)
UP_MAX = cython.declare(cython.int, 6)

STRICT = cython.declare(cython.int, 0)
PARTITION = cython.declare(cython.int, 1)
NEXT = cython.declare(cython.int, 2)
ANY = cython.declare(cython.int, 3)

_IGNORE = cython.declare(cython.int, 0)
_PROCEED_BEGIN = cython.declare(cython.int, 1)
_TAKE = cython.declare(cython.int, 2)
_BEGIN = cython.declare(cython.int, 3)

STACK = 64
NAN = float("nan")


@cython.cfunc
@cython.inline
def _py_mod(x: cython.double, y: cython.double) -> cython.double:
    """``x % y`` as Python computes it on floats (the sign of the divisor)."""
    if not cython.compiled:
        return x % y
    r: cython.double = fmod(x, y)
    if r != 0.0:
        if (y < 0.0) != (r < 0.0):
            r += y
    else:
        r = copysign(0.0, y)
    return r


def _twice(a) -> np.ndarray:
    """An array twice as long, the new half zeros."""
    a = np.asarray(a)
    return np.concatenate([a, np.zeros_like(a)])


@cython.cfunc
def _compare(off: cython.longlong[:, :], flat: cython.longlong[:], a: cython.longlong,
             b: cython.longlong) -> cython.int:
    """Match a's positions against match b's, as tuples of tuples compare (-1, 0, 1)."""
    c: cython.Py_ssize_t
    i: cython.Py_ssize_t
    la: cython.Py_ssize_t
    lb: cython.Py_ssize_t
    for c in range(off.shape[1] - 1):
        la = off[a, c + 1] - off[a, c]
        lb = off[b, c + 1] - off[b, c]
        for i in range(min(la, lb)):
            if flat[off[a, c] + i] != flat[off[b, c] + i]:
                return -1 if flat[off[a, c] + i] < flat[off[b, c] + i] else 1
        if la != lb:
            return -1 if la < lb else 1
    return 0


@cython.cfunc
def _merge_sort(order: cython.longlong[:], tmp: cython.longlong[:], lo: cython.Py_ssize_t,
                hi: cython.Py_ssize_t, off: cython.longlong[:, :],
                flat: cython.longlong[:]) -> cython.int:
    """Sort ``order[lo:hi]`` by :func:`_compare`, stable (bottom-up merges)."""
    width: cython.Py_ssize_t = 1
    a: cython.Py_ssize_t
    mid: cython.Py_ssize_t
    end: cython.Py_ssize_t
    i: cython.Py_ssize_t
    j: cython.Py_ssize_t
    w: cython.Py_ssize_t
    while width < hi - lo:
        a = lo
        while a < hi:
            mid = min(a + width, hi)
            end = min(a + 2 * width, hi)
            i, j = a, mid
            for w in range(a, end):  # the left one first on a tie: stable
                if j >= end or (i < mid and _compare(off, flat, order[j], order[i]) >= 0):
                    tmp[w] = order[i]
                    i += 1
                else:
                    tmp[w] = order[j]
                    j += 1
            a = end
        for i in range(lo, hi):
            order[i] = tmp[i]
        width *= 2
    return 0


@cython.cclass
class Machine:
    """The stack machine of the edge programs (5.2) and column updates (6.3) of :class:`Core`
    and ``_postpone.py``, on the event rows ``E`` and the state rows ``V`` (``ncol`` wide):
    its fields and methods are declared in ``_core.pxd``."""

    def _eval(self, pc: cython.int, vrow: cython.Py_ssize_t) -> cython.double:
        """The program at ``pc`` on the event row ``erow`` and the state row ``vrow`` (5.2):
        0.0 at a failing CHECK, else what END finds on the stack (none: 1.0)."""
        sp: cython.int = 0
        op: cython.int
        arg: cython.int
        n: cython.int
        x: cython.double
        y: cython.double
        nan: cython.bint
        i: cython.int
        while True:
            op = self.code[pc]
            arg = self.code[pc + 1]
            pc += 2
            if op == OP_STATE:
                self.stack[sp] = self.V[vrow + arg]
                sp += 1
            elif op == OP_EVENT:
                self.stack[sp] = self.E[self.erow + arg]
                sp += 1
            elif op == OP_CONST:
                self.stack[sp] = self.consts[arg]
                sp += 1
            elif op == OP_CHECK:
                sp -= 1
                if self.stack[sp] == 0.0:
                    return 0.0
            elif op == OP_END:
                return self.stack[sp - 1] if sp > 0 else 1.0
            elif op == OP_NEG:
                self.stack[sp - 1] = -self.stack[sp - 1]
            elif op == OP_NOT:
                self.stack[sp - 1] = 1.0 if self.stack[sp - 1] == 0.0 else 0.0
            elif op == OP_ABS:
                self.stack[sp - 1] = fabs(self.stack[sp - 1])
            elif op == OP_MIN or op == OP_MAX:
                n = arg
                sp -= n
                x = self.stack[sp]
                nan = x != x
                for i in range(1, n):
                    y = self.stack[sp + i]
                    if y != y:
                        nan = True
                    elif (op == OP_MIN and y < x) or (op == OP_MAX and y > x):
                        x = y
                self.stack[sp] = NAN if nan else x
                sp += 1
            else:
                sp -= 1
                y = self.stack[sp]
                x = self.stack[sp - 1]
                if op == OP_ADD:
                    x = x + y
                elif op == OP_SUB:
                    x = x - y
                elif op == OP_MUL:
                    x = x * y
                elif op == OP_DIV:
                    x = NAN if y == 0.0 else x / y
                elif op == OP_MOD:
                    x = NAN if y == 0.0 else _py_mod(x, y)
                elif op == OP_EQ:
                    x = 1.0 if x == y else 0.0
                elif op == OP_NE:
                    x = 1.0 if x != y else 0.0
                elif op == OP_LT:
                    x = 1.0 if x < y else 0.0
                elif op == OP_LE:
                    x = 1.0 if x <= y else 0.0
                elif op == OP_GT:
                    x = 1.0 if x > y else 0.0
                elif op == OP_GE:
                    x = 1.0 if x >= y else 0.0
                elif op == OP_AND:
                    x = 1.0 if (x != 0.0 and y != 0.0) else 0.0
                else:  # OP_OR
                    x = 1.0 if (x != 0.0 or y != 0.0) else 0.0
                self.stack[sp - 1] = x

    def _updates(self, vrow: cython.Py_ssize_t, which: cython.int) -> cython.void:
        """The column updates ``which`` (2j + begin) of the state row at ``vrow`` of ``V``
        for the current event row (6.3)."""
        lo: cython.int = self.up_start[which]
        hi: cython.int = self.up_start[which + 1]
        if lo == hi:
            return
        u: cython.int
        c: cython.Py_ssize_t
        op: cython.int
        x: cython.double
        cur: cython.double
        for u in range(lo, hi):
            c = vrow + self.up_col[u]
            op = self.up_op[u]
            x = self.E[self.erow + self.up_slot[u]] if self.up_slot[u] >= 0 else 0.0
            if op == UP_SET:
                self.V[c] = x
            elif op == UP_SUM0:
                self.V[c] = 0.0 + x
            elif op == UP_SUM:
                self.V[c] = self.V[c] + x
            elif op == UP_COUNT0:
                self.V[c] = 1.0
            elif op == UP_COUNT:
                self.V[c] = self.V[c] + 1.0
            else:
                cur = self.V[c]
                if cur != cur or x != x:
                    self.V[c] = NAN
                elif (op == UP_MIN and x < cur) or (op == UP_MAX and x > cur):
                    self.V[c] = x


@cython.cclass
class Core(Machine):
    """One run of the loop over a finite stream; built by :func:`acep.nfab.core.run`."""

    # the plan
    k: cython.int
    nslot: cython.int
    strategy: cython.int
    has_window: cython.bint
    window: cython.double
    labels: cython.bint
    types: cython.int[:]
    kleene: cython.int[:]
    prog_begin: cython.int[:]
    prog_take: cython.int[:]
    prog_close: cython.int[:]
    # the event being processed
    pos: cython.longlong
    t: cython.double
    ety: cython.int
    # runs (a pool with a free list) and partitions (linked lists of runs)
    r_state: cython.int[:]
    r_start: cython.double[:]
    r_node: cython.longlong[:]
    r_label: cython.longlong[:]
    r_clones: cython.longlong[:]
    r_next: cython.longlong[:]
    rcap: cython.Py_ssize_t
    free: cython.longlong
    p_head: cython.longlong[:]
    p_tail: cython.longlong[:]
    p_count: cython.longlong[:]
    p_active: cython.int[:]
    active: list
    o_head: cython.longlong
    o_tail: cython.longlong
    o_count: cython.longlong
    # the buffer and the labels
    n_pos: cython.longlong[:]
    n_comp: cython.int[:]
    n_prev: cython.longlong[:]
    nn: cython.Py_ssize_t
    l_prev: cython.longlong[:]
    l_val: cython.longlong[:]
    nl: cython.Py_ssize_t
    # the matches found: end position, last node, label, start tag
    f_end: cython.longlong[:]
    f_node: cython.longlong[:]
    f_label: cython.longlong[:]
    f_start: cython.double[:]
    nf: cython.Py_ssize_t
    # counters
    nlive: cython.longlong
    initiations: cython.longlong
    runs_created: cython.longlong
    pointers_written: cython.longlong
    events_visited: cython.longlong
    max_live_runs: cython.longlong
    prune_at: cython.double

    def __init__(self, k, ncol, nslot, strategy, window, labels, types, kleene, prog_begin,
                 prog_take, prog_close, code, consts, up_start, up_col, up_op, up_slot):
        self.k, self.ncol, self.nslot, self.strategy = k, ncol, nslot, strategy
        self.has_window = window is not None
        self.window = 0.0 if window is None else window
        self.labels = labels
        i32 = np.int32
        self.types = np.asarray(types, dtype=i32)
        self.kleene = np.asarray(kleene, dtype=i32)
        self.prog_begin = np.asarray(prog_begin, dtype=i32)
        self.prog_take = np.asarray(prog_take, dtype=i32)
        self.prog_close = np.asarray(prog_close, dtype=i32)
        self.code = np.asarray(code, dtype=i32)
        self.consts = np.asarray(consts, dtype=np.float64)
        self.up_start = np.asarray(up_start, dtype=i32)
        self.up_col = np.asarray(up_col, dtype=i32)
        self.up_op = np.asarray(up_op, dtype=i32)
        self.up_slot = np.asarray(up_slot, dtype=i32)
        self.stack = np.zeros(STACK, dtype=np.float64)
        self.active = []
        self.nlive = self.initiations = self.runs_created = 0
        self.pointers_written = self.events_visited = self.max_live_runs = 0
        self.prune_at = float("-inf") if self.has_window else float("inf")

    # ------------------------------------------------------------------ storage

    def _partitions(self, nparts: int):
        i64 = np.int64
        self.p_head = np.full(nparts, -1, dtype=i64)
        self.p_tail = np.full(nparts, -1, dtype=i64)
        self.p_count = np.zeros(nparts, dtype=i64)
        self.p_active = np.zeros(nparts, dtype=np.int32)

    def _allocate(self, runs: int, nodes: int):
        i64 = np.int64
        self.rcap = max(runs, 16)
        self.r_state = np.zeros(self.rcap, dtype=np.int32)
        self.r_start = np.zeros(self.rcap)
        self.r_node = np.zeros(self.rcap, dtype=i64)
        self.r_label = np.zeros(self.rcap, dtype=i64)
        self.r_clones = np.zeros(self.rcap, dtype=i64)
        self.r_next = np.arange(1, self.rcap + 1, dtype=i64)
        self.r_next[self.rcap - 1] = -1
        self.V = np.zeros(self.rcap * max(self.ncol, 1))
        self.free = 0
        self.n_pos = np.zeros(max(nodes, 16), dtype=i64)
        self.n_comp = np.zeros(max(nodes, 16), dtype=np.int32)
        self.n_prev = np.zeros(max(nodes, 16), dtype=i64)
        self.nn = 0
        self.l_prev = np.zeros(max(nodes, 16), dtype=i64)
        self.l_val = np.zeros(max(nodes, 16), dtype=i64)
        self.nl = 0
        self.f_end = np.zeros(64, dtype=i64)
        self.f_node = np.zeros(64, dtype=i64)
        self.f_label = np.zeros(64, dtype=i64)
        self.f_start = np.zeros(64)
        self.nf = 0

    def _grow_runs(self):
        old = self.rcap
        cap = 2 * old
        self.r_state, self.r_start, self.r_node, self.r_label, self.r_clones, self.V = map(
            _twice, (self.r_state, self.r_start, self.r_node, self.r_label, self.r_clones, self.V))
        nxt = np.arange(old + 1, cap + 1, dtype=np.int64)
        nxt[old - 1] = -1
        self.r_next = np.concatenate([self.r_next, nxt])
        self.rcap = cap
        self.free = old

    def _grow_nodes(self):
        self.n_pos, self.n_comp, self.n_prev = map(_twice, (self.n_pos, self.n_comp, self.n_prev))

    def _grow_labels(self):
        self.l_prev, self.l_val = map(_twice, (self.l_prev, self.l_val))

    def _grow_found(self):
        self.f_end, self.f_node, self.f_label, self.f_start = map(
            _twice, (self.f_end, self.f_node, self.f_label, self.f_start))

    @cython.cfunc
    def _new_run(self) -> cython.longlong:
        if self.free < 0:
            self._grow_runs()
        r: cython.longlong = self.free
        self.free = self.r_next[r]
        return r

    @cython.cfunc
    @cython.exceptval(check=False)
    def _release(self, r: cython.longlong) -> cython.void:
        self.r_next[r] = self.free
        self.free = r

    @cython.cfunc
    def _label(self, prev: cython.longlong, value: cython.longlong) -> cython.longlong:
        """A new Dewey label: ``prev`` + ``(value,)`` (6.2); -1 when labels are off."""
        if not self.labels:
            return -1
        if self.nl == self.l_prev.shape[0]:
            self._grow_labels()
        n: cython.Py_ssize_t = self.nl
        self.l_prev[n] = prev
        self.l_val[n] = value
        self.nl = n + 1
        return n

    @cython.cfunc
    @cython.exceptval(check=False)
    def _append(self, r: cython.longlong) -> cython.void:
        self.r_next[r] = -1
        if self.o_tail < 0:
            self.o_head = r
        else:
            self.r_next[self.o_tail] = r
        self.o_tail = r
        self.o_count += 1

    # ------------------------------------------------------------------ formulas

    @cython.cfunc
    def _holds(self, pc: cython.int, r: cython.longlong) -> cython.bint:
        """Whether the program at ``pc`` holds on the current event and run ``r`` (5.2)."""
        if pc < 0:
            return True
        return Machine._eval(self, pc, r * self.ncol) != 0.0  # a direct C call

    # ------------------------------------------------------------------ moves (6.1)

    @cython.cfunc
    @cython.exceptval(-1)
    def _write(self, r: cython.longlong, j: cython.int) -> cython.int:
        if self.nn == self.n_pos.shape[0]:
            self._grow_nodes()
        n: cython.Py_ssize_t = self.nn
        self.n_pos[n] = self.pos
        self.n_comp[n] = j
        self.n_prev[n] = self.r_node[r]
        self.r_node[r] = n
        self.nn = n + 1
        self.pointers_written += 1
        return 0

    @cython.cfunc
    @cython.exceptval(-1)
    def _reach_f(self, r: cython.longlong) -> cython.int:
        """A match, if the run is still inside its window ([A08] l.280)."""
        if self.has_window and self.t - self.r_start[r] > self.window:
            return 0
        if self.nf == self.f_end.shape[0]:
            self._grow_found()
        n: cython.Py_ssize_t = self.nf
        self.f_end[n] = self.pos
        self.f_node[n] = self.r_node[r]
        self.f_label[n] = self.r_label[r]
        self.f_start[n] = self.r_start[r]
        self.nf = n + 1
        return 0

    @cython.cfunc
    @cython.exceptval(-1)
    def _final(self, r: cython.longlong, j: cython.int) -> cython.int:
        """A trailing Kleene component: a branch reaches F if θ_proceed holds (5.6)."""
        if self._holds(self.prog_close[j], r):
            self.runs_created += 1
            self._reach_f(r)
        return 0

    @cython.cfunc
    @cython.exceptval(-1)
    def _begin(self, r: cython.longlong, j: cython.int) -> cython.int:
        Machine._updates(self, r * self.ncol, 2 * j + 1)  # 6.3
        self._write(r, j)
        last: cython.bint = j + 1 == self.k
        if self.kleene[j]:
            self.r_label[r] = self._label(self.r_label[r], 0)
            self.r_state[r] = 2 * j + 1
            self._append(r)
            if last:
                self._final(r, j)
        elif last:
            self._reach_f(r)
            self._release(r)
        else:
            self.r_label[r] = self._label(self.r_label[r], 0)
            self.r_state[r] = 2 * j + 2
            self._append(r)
        return 0

    @cython.cfunc
    @cython.exceptval(-1)
    def _take(self, r: cython.longlong, j: cython.int) -> cython.int:
        Machine._updates(self, r * self.ncol, 2 * j)
        self._write(r, j)
        self._append(r)
        if j + 1 == self.k:
            self._final(r, j)
        return 0

    @cython.cfunc
    def _clone(self, r: cython.longlong) -> cython.longlong:
        c: cython.longlong = self._new_run()
        if self.labels:
            self.r_clones[r] += 1
            self.r_label[c] = self._label(self.r_label[r], self.r_clones[r])
        else:
            self.r_label[c] = -1
        self.r_clones[c] = 0
        self.r_state[c] = self.r_state[r]
        self.r_start[c] = self.r_start[r]
        self.r_node[c] = self.r_node[r]
        i: cython.int
        for i in range(self.ncol):
            self.V[c * self.ncol + i] = self.V[r * self.ncol + i]
        return c

    @cython.cfunc
    @cython.exceptval(-1)
    def _step(self, r: cython.longlong) -> cython.int:
        """Run r takes its enabled moves, in the order of shared.Stream._step."""
        if self.has_window and self.t - self.r_start[r] > self.window:
            self._release(r)
            return 0
        s: cython.int = self.r_state[r]
        j: cython.int = s >> 1
        nj: cython.int = j + 1
        moves = cython.declare(cython.int[3])
        targets = cython.declare(cython.longlong[3])
        if not cython.compiled:
            moves, targets = [0, 0, 0], [0, 0, 0]
        m: cython.int = 0
        x: cython.longlong
        selectable: cython.bint
        if s & 1:
            if nj < self.k and self.ety == self.types[nj] and \
                    self._holds(self.prog_close[j], r) and self._holds(self.prog_begin[nj], r):
                moves[m] = _PROCEED_BEGIN
                m += 1
            selectable = self.ety == self.types[j] and self._holds(self.prog_take[j], r)
            if selectable:
                moves[m] = _TAKE
                m += 1
        else:
            selectable = self.ety == self.types[j] and self._holds(self.prog_begin[j], r)
            if selectable:
                moves[m] = _BEGIN
                m += 1
        if self.strategy == ANY or (self.strategy == NEXT and not selectable):
            moves[m] = _IGNORE
            m += 1
        if m == 0:
            self._release(r)
            return 0
        targets[0] = r
        for c in range(1, m):
            targets[c] = self._clone(r)
        self.runs_created += m - 1
        for c in range(m):
            x = targets[c]
            if moves[c] == _IGNORE:
                self._append(x)
            elif moves[c] == _TAKE:
                self._take(x, j)
            elif moves[c] == _BEGIN:
                self._begin(x, j)
            else:
                self.r_label[x] = self._label(self.r_label[x], 0)
                self._begin(x, nj)
        return 0

    @cython.cfunc
    @cython.exceptval(-1)
    def _initiate(self) -> cython.int:
        r: cython.longlong = self._new_run()
        self.initiations += 1
        self.runs_created += 1
        self.r_state[r] = 0
        self.r_start[r] = self.t
        self.r_node[r] = -1
        self.r_clones[r] = 0
        self.r_label[r] = self._label(-1, self.initiations)
        i: cython.int
        if self.ncol:
            for i in range(self.ncol):
                self.V[r * self.ncol + i] = NAN
        self._begin(r, 0)
        return 0

    @cython.cfunc
    @cython.exceptval(-1)
    def _sweep(self, t: cython.double) -> cython.int:
        """Drop the runs whose start is out of the window at tag t (6.5)."""
        q: cython.longlong
        r: cython.longlong
        nxt: cython.longlong
        kept = []
        for p in self.active:
            q = p
            r = self.p_head[q]
            self.o_head = self.o_tail = -1
            self.o_count = 0
            while r >= 0:
                nxt = self.r_next[r]
                if t - self.r_start[r] <= self.window:
                    self._append(r)
                else:
                    self._release(r)
                r = nxt
            self.nlive -= self.p_count[q] - self.o_count
            self.p_head[q], self.p_tail[q], self.p_count[q] = self.o_head, self.o_tail, \
                self.o_count
            if self.o_count:
                kept.append(p)
            else:
                self.p_active[q] = 0
        self.active = kept
        self.prune_at = t + self.window
        return 0

    # ------------------------------------------------------------------ the loop

    def run(self, E: np.ndarray, ty: np.ndarray, tags: np.ndarray, keys: np.ndarray,
            nkeys: int, limit: cython.longlong = -1) -> int:
        """Process the events; the number of matches found (:meth:`found`, :meth:`chains`),
        or ``~i`` where runs plus matches first exceed ``limit`` (>= 0), at event i."""
        n: cython.Py_ssize_t = tags.shape[0]
        tyv: cython.int[:] = ty
        tagv: cython.double[:] = tags
        keyv: cython.longlong[:] = keys
        i: cython.Py_ssize_t
        nb: cython.Py_ssize_t = 0
        self.E = E
        self._allocate(64, 64)
        begins: cython.longlong[:] = np.empty(n + 1, dtype=np.int64)
        self.ety = self.types[0]
        own: cython.Py_ssize_t = 0
        for i in range(n):  # the events that begin a run (6.1 step 3)
            if tyv[i] == self.ety:
                self.erow = i * self.nslot
                if self._holds(self.prog_begin[0], -1):
                    begins[nb] = i
                    nb += 1
                    if keyv[i] < 0:
                        own += 1
        self._partitions(nkeys + own + 1)
        fresh: cython.longlong = nkeys
        bi: cython.Py_ssize_t = 0
        i = 0
        p: cython.longlong
        old: cython.longlong
        starts: cython.bint
        r: cython.longlong
        nxt: cython.longlong
        while i < n:
            if self.nlive == 0:
                if bi >= nb:
                    break
                i = begins[bi]
            self.t = tagv[i]
            if self.t > self.prune_at:
                self._sweep(self.t)
            p = keyv[i]
            old = self.p_count[p] if p >= 0 else 0
            starts = bi < nb and begins[bi] == i
            if old or starts:
                self.events_visited += 1
                self.pos = i
                self.erow = i * self.nslot
                self.ety = tyv[i]
                self.o_head = self.o_tail = -1
                self.o_count = 0
                if old:
                    r = self.p_head[p]
                    while r >= 0:
                        nxt = self.r_next[r]
                        self._step(r)
                        r = nxt
                if starts:
                    bi += 1
                    if p < 0:  # a NaN or unrouted key: a partition of its own
                        p = fresh
                        fresh += 1
                    self._initiate()
                self.p_head[p], self.p_tail[p], self.p_count[p] = self.o_head, self.o_tail, \
                    self.o_count
                if self.o_count and not self.p_active[p]:
                    self.p_active[p] = 1
                    self.active.append(p)
                self.nlive += self.o_count - old
                if self.nlive > self.max_live_runs:
                    self.max_live_runs = self.nlive
                if limit >= 0 and self.nlive + self.nf > limit:
                    return ~i  # one member per run: shared.py's held, merging off
            i += 1
        if n and self.has_window and self.nlive and tagv[n - 1] > self.prune_at:
            self._sweep(tagv[n - 1])
        return self.nf

    def found(self) -> list:
        """The raw matches ``(end, node, label, start)`` in the order found (6.1)."""
        return [(int(self.f_end[m]), int(self.f_node[m]), int(self.f_label[m]),
                 float(self.f_start[m])) for m in range(self.nf)]

    def chains(self, k: cython.int) -> tuple:
        """The positions of every match in the order found, read from the buffer (6.2):
        ``(ends, offsets, flat)``, the positions of component c of match m being
        ``flat[offsets[m, c]:offsets[m, c + 1]]`` (offsets has k + 1 columns)."""
        nf: cython.Py_ssize_t = self.nf
        total: cython.Py_ssize_t = 0
        m: cython.Py_ssize_t
        node: cython.longlong
        for m in range(nf):
            node = self.f_node[m]
            while node >= 0:
                total += 1
                node = self.n_prev[node]
        flat_a = np.zeros(total, dtype=np.int64)
        off_a = np.zeros((nf, k + 1), dtype=np.int64)
        flat: cython.longlong[:] = flat_a
        off: cython.longlong[:, :] = off_a
        base: cython.Py_ssize_t = 0
        w: cython.Py_ssize_t
        c: cython.int
        for m in range(nf):
            node = self.f_node[m]
            w = 0
            while node >= 0:  # the chain runs backwards: count each component's nodes
                off[m, self.n_comp[node] + 1] += 1
                w += 1
                node = self.n_prev[node]
            off[m, 0] = base
            for c in range(k):
                off[m, c + 1] += off[m, c]
            node = self.f_node[m]
            while node >= 0:
                w -= 1
                flat[base + w] = self.n_pos[node]
                node = self.n_prev[node]
            base = off[m, k]
        return np.asarray(self.f_end)[:nf].copy(), off_a, flat_a

    def canonical(self, offsets: np.ndarray, flat: np.ndarray) -> np.ndarray:
        """The order of :meth:`chains`'s matches by (end, positions) (EXACT.md 3.7): they
        come by end position, so each run of equal ends is merge-sorted (stable)."""
        nf: cython.Py_ssize_t = self.nf
        order_a = np.arange(nf, dtype=np.int64)
        tmp_a = np.zeros(nf, dtype=np.int64)
        order: cython.longlong[:] = order_a
        tmp: cython.longlong[:] = tmp_a
        off: cython.longlong[:, :] = offsets
        fl: cython.longlong[:] = flat
        i: cython.Py_ssize_t = 0
        j: cython.Py_ssize_t
        while i < nf:
            j = i + 1
            while j < nf and self.f_end[j] == self.f_end[i]:
                j += 1
            if j - i > 1:
                _merge_sort(order, tmp, i, j, off, fl)
            i = j
        return order_a

    def buffer(self) -> tuple:
        """The buffer nodes (position, component, previous) and labels (previous, value)."""
        nn, nl = self.nn, self.nl
        return (np.asarray(self.n_pos)[:nn], np.asarray(self.n_comp)[:nn],
                np.asarray(self.n_prev)[:nn], np.asarray(self.l_prev)[:nl],
                np.asarray(self.l_val)[:nl])

    def counters(self) -> dict:
        return {"runs_created": self.runs_created, "runs_merged": 0,
                "max_live_runs": self.max_live_runs,
                "pointers_written": self.pointers_written,
                "events_visited": self.events_visited}
