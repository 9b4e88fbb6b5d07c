"""The compiled loop of the shared-buffer engine (``docs/EXACT.md`` 6.1-6.5; [A08] 4-5).

Written in Cython's pure-Python mode, as ``acep/_kernel.py``: compiled by ``setup.py``, the
same file runs as plain Python where no compiler exists. It is the loop of
:class:`acep.nfab.shared.Stream` with merging off, over columns: event rows as float64,
runs, buffer nodes and Dewey labels in arrays, edge formulas as programs of a small stack
machine (:mod:`acep.nfab.core` compiles them and prepares the columns).
"""

try:
    import cython
except ImportError:  # a device without Cython: the same loop, run as Python
    from .. import _cython_shim as cython

import numpy as np

if cython.compiled:
    from cython.cimports.cpython.exc import PyErr_CheckSignals
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
INF = float("inf")


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


@cython.cfunc
@cython.boundscheck(False)
@cython.wraparound(False)
def _eval(code: cython.int[:], consts: cython.double[:], st: cython.double[:],
          E: cython.double[:], erow: cython.Py_ssize_t, V: cython.double[:],
          vrow: cython.Py_ssize_t, pc: cython.int) -> cython.double:
    """What the program at ``pc`` gives on the event row at ``erow`` and the state row at
    ``vrow`` (5.2): 0.0 at a failing CHECK, else the value left on the stack at END (a
    predicate leaves none: 1.0)."""
    sp: cython.int = 0
    op: cython.int
    arg: cython.int
    n: cython.int
    x: cython.double
    y: cython.double
    nan: cython.bint
    i: cython.int
    while True:
        op = code[pc]
        arg = code[pc + 1]
        pc += 2
        if op == OP_STATE:
            st[sp] = V[vrow + arg]
            sp += 1
        elif op == OP_EVENT:
            st[sp] = E[erow + arg]
            sp += 1
        elif op == OP_CONST:
            st[sp] = consts[arg]
            sp += 1
        elif op == OP_CHECK:
            sp -= 1
            if st[sp] == 0.0:
                return 0.0
        elif op == OP_END:
            return st[sp - 1] if sp > 0 else 1.0
        elif op == OP_NEG:
            st[sp - 1] = -st[sp - 1]
        elif op == OP_NOT:
            st[sp - 1] = 1.0 if st[sp - 1] == 0.0 else 0.0
        elif op == OP_ABS:
            st[sp - 1] = fabs(st[sp - 1])
        elif op == OP_MIN or op == OP_MAX:
            n = arg
            sp -= n
            x = st[sp]
            nan = x != x
            for i in range(1, n):
                y = st[sp + i]
                if y != y:
                    nan = True
                elif (op == OP_MIN and y < x) or (op == OP_MAX and y > x):
                    x = y
            st[sp] = NAN if nan else x
            sp += 1
        else:
            sp -= 1
            y = st[sp]
            x = st[sp - 1]
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
            st[sp - 1] = x


@cython.cfunc
def _updates(V: cython.double[:], vrow: cython.Py_ssize_t, E: cython.double[:],
             erow: cython.Py_ssize_t, up_start: cython.int[:], up_col: cython.int[:],
             up_op: cython.int[:], up_slot: cython.int[:], which: cython.int) -> cython.void:
    """The column updates ``which`` (2j + begin) of the state row at ``vrow`` for the event
    row at ``erow`` (6.3)."""
    u: cython.int
    c: cython.Py_ssize_t
    op: cython.int
    x: cython.double
    cur: cython.double
    for u in range(up_start[which], up_start[which + 1]):
        c = vrow + up_col[u]
        op = up_op[u]
        x = E[erow + up_slot[u]] if up_slot[u] >= 0 else 0.0
        if op == UP_SET:
            V[c] = x
        elif op == UP_SUM0:
            V[c] = 0.0 + x
        elif op == UP_SUM:
            V[c] = V[c] + x
        elif op == UP_COUNT0:
            V[c] = 1.0
        elif op == UP_COUNT:
            V[c] = V[c] + 1.0
        else:
            cur = V[c]
            if cur != cur or x != x:
                V[c] = NAN
            elif (op == UP_MIN and x < cur) or (op == UP_MAX and x > cur):
                V[c] = x


@cython.cclass
class Core:
    """One run of the loop over a finite stream; built by :func:`acep.nfab.core.run`."""

    # the plan
    k: cython.int
    ncol: cython.int
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
    code: cython.int[:]
    consts: cython.double[:]
    up_start: cython.int[:]     # updates of component j: up_start[2j+b] .. up_start[2j+b+1]
    up_col: cython.int[:]
    up_op: cython.int[:]
    up_slot: cython.int[:]
    stack: cython.double[:]
    # the event being processed
    E: cython.double[:]
    erow: cython.Py_ssize_t
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
    V: cython.double[:]
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
    found: list
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
        self.found = []
        self.active = []
        self.nlive = self.initiations = self.runs_created = 0
        self.pointers_written = self.events_visited = self.max_live_runs = 0
        self.prune_at = float("-inf") if self.has_window else float("inf")

    # ------------------------------------------------------------------ storage

    def _allocate(self, nparts: int, runs: int, nodes: int):
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
        self.p_head = np.full(nparts, -1, dtype=i64)
        self.p_tail = np.full(nparts, -1, dtype=i64)
        self.p_count = np.zeros(nparts, dtype=i64)
        self.p_active = np.zeros(nparts, dtype=np.int32)
        self.n_pos = np.zeros(max(nodes, 16), dtype=i64)
        self.n_comp = np.zeros(max(nodes, 16), dtype=np.int32)
        self.n_prev = np.zeros(max(nodes, 16), dtype=i64)
        self.nn = 0
        self.l_prev = np.zeros(max(nodes, 16), dtype=i64)
        self.l_val = np.zeros(max(nodes, 16), dtype=i64)
        self.nl = 0

    def _grow_runs(self):
        old = self.rcap
        cap = 2 * old
        self.r_state = np.concatenate([self.r_state, np.zeros(old, dtype=np.int32)])
        self.r_start = np.concatenate([self.r_start, np.zeros(old)])
        self.r_node = np.concatenate([self.r_node, np.zeros(old, dtype=np.int64)])
        self.r_label = np.concatenate([self.r_label, np.zeros(old, dtype=np.int64)])
        self.r_clones = np.concatenate([self.r_clones, np.zeros(old, dtype=np.int64)])
        nxt = np.arange(old + 1, cap + 1, dtype=np.int64)
        nxt[old - 1] = -1
        self.r_next = np.concatenate([self.r_next, nxt])
        self.V = np.concatenate([self.V, np.zeros(old * max(self.ncol, 1))])
        self.rcap = cap
        self.free = old

    def _grow_nodes(self):
        n = self.n_pos.shape[0]
        self.n_pos = np.concatenate([self.n_pos, np.zeros(n, dtype=np.int64)])
        self.n_comp = np.concatenate([self.n_comp, np.zeros(n, dtype=np.int32)])
        self.n_prev = np.concatenate([self.n_prev, np.zeros(n, dtype=np.int64)])

    def _grow_labels(self):
        n = self.l_prev.shape[0]
        self.l_prev = np.concatenate([self.l_prev, np.zeros(n, dtype=np.int64)])
        self.l_val = np.concatenate([self.l_val, np.zeros(n, dtype=np.int64)])

    @cython.cfunc
    def _new_run(self) -> cython.longlong:
        if self.free < 0:
            self._grow_runs()
        r: cython.longlong = self.free
        self.free = self.r_next[r]
        return r

    @cython.cfunc
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
        return _eval(self.code, self.consts, self.stack, self.E, self.erow, self.V,
                     r * self.ncol, pc) != 0.0

    @cython.cfunc
    def _update(self, r: cython.longlong, j: cython.int, begin: cython.int) -> cython.void:
        """The columns of component j after run r selects the event (6.3)."""
        _updates(self.V, r * self.ncol, self.E, self.erow, self.up_start, self.up_col,
                 self.up_op, self.up_slot, 2 * j + begin)

    # ------------------------------------------------------------------ moves (6.1)

    @cython.cfunc
    def _write(self, r: cython.longlong, j: cython.int) -> cython.void:
        if self.nn == self.n_pos.shape[0]:
            self._grow_nodes()
        n: cython.Py_ssize_t = self.nn
        self.n_pos[n] = self.pos
        self.n_comp[n] = j
        self.n_prev[n] = self.r_node[r]
        self.r_node[r] = n
        self.nn = n + 1
        self.pointers_written += 1

    @cython.cfunc
    def _reach_f(self, r: cython.longlong) -> cython.void:
        """A match, if the run is still inside its window ([A08] l.280)."""
        if not self.has_window or self.t - self.r_start[r] <= self.window:
            self.found.append((int(self.pos), int(self.r_node[r]), int(self.r_label[r]),
                               float(self.r_start[r])))  # Python numbers, also uncompiled

    @cython.cfunc
    def _final(self, r: cython.longlong, j: cython.int) -> cython.void:
        """A trailing Kleene component: a branch reaches F if θ_proceed holds (5.6)."""
        if self._holds(self.prog_close[j], r):
            self.runs_created += 1
            self._reach_f(r)

    @cython.cfunc
    def _begin(self, r: cython.longlong, j: cython.int) -> cython.void:
        self._update(r, j, 1)
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

    @cython.cfunc
    def _take(self, r: cython.longlong, j: cython.int) -> cython.void:
        self._update(r, j, 0)
        self._write(r, j)
        self._append(r)
        if j + 1 == self.k:
            self._final(r, j)

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
        V: cython.double[:] = self.V
        i: cython.int
        for i in range(self.ncol):
            V[c * self.ncol + i] = V[r * self.ncol + i]
        return c

    @cython.cfunc
    def _step(self, r: cython.longlong) -> cython.void:
        """Run r takes its enabled moves, in the order of shared.Stream._step."""
        if self.has_window and self.t - self.r_start[r] > self.window:
            self._release(r)
            return
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
            return
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

    @cython.cfunc
    def _initiate(self) -> cython.void:
        r: cython.longlong = self._new_run()
        self.initiations += 1
        self.runs_created += 1
        self.r_state[r] = 0
        self.r_start[r] = self.t
        self.r_node[r] = -1
        self.r_clones[r] = 0
        self.r_label[r] = self._label(-1, self.initiations)
        V: cython.double[:] = self.V
        i: cython.int
        for i in range(self.ncol):
            V[r * self.ncol + i] = NAN
        self._begin(r, 0)

    @cython.cfunc
    def _sweep(self, t: cython.double) -> cython.void:
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

    # ------------------------------------------------------------------ the loop

    def run(self, E: np.ndarray, ty: np.ndarray, tags: np.ndarray, keys: np.ndarray,
            nkeys: int) -> list:
        """Process the events; the raw matches ``(end, node, label, start)`` (6.1)."""
        n: cython.Py_ssize_t = tags.shape[0]
        tyv: cython.int[:] = ty
        tagv: cython.double[:] = tags
        keyv: cython.longlong[:] = keys
        i: cython.Py_ssize_t
        nb: cython.Py_ssize_t = 0
        self.E = E
        self._allocate(nkeys + n + 1, 64, 64)
        begins: cython.longlong[:] = np.zeros(n + 1, dtype=np.int64)
        self.ety = self.types[0]
        for i in range(n):  # the events that begin a run (6.1 step 3)
            if tyv[i] == self.ety:
                self.erow = i * self.nslot
                if self._holds(self.prog_begin[0], -1):
                    begins[nb] = i
                    nb += 1
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
            i += 1
        if n and self.has_window and self.nlive and tagv[n - 1] > self.prune_at:
            self._sweep(tagv[n - 1])
        return self.found

    def positions(self, node: cython.longlong, k: cython.int) -> tuple:
        """The positions per component of the match ending at buffer node ``node`` (6.2)."""
        blocks = [[] for _ in range(k)]
        while node >= 0:
            blocks[self.n_comp[node]].append(int(self.n_pos[node]))
            node = self.n_prev[node]
        for b in blocks:
            b.reverse()
        return tuple([tuple(b) for b in blocks])

    def matches(self, k: cython.int, tags: list, partitions: list, make) -> list:
        """``make(positions, start, end, partition, None)`` per match, in the order found;
        ``partitions``: the equivalence columns as the output gives them (8)."""
        out = []
        for f in self.found:
            blocks = self.positions(f[1], k)
            first = blocks[0][0]
            key = tuple([col[first] for col in partitions]) if partitions else None
            out.append(make(blocks, tags[first], tags[f[0]], key, None))
        return out

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


# --------------------------------------------------------------------------- postponing (7)

# what an early filter makes of a conjunct (7.3), and the kinds of its spec
_SAFE = cython.declare(cython.int, 0)
_DISCARD = cython.declare(cython.int, 1)
_UNSAFE = cython.declare(cython.int, 2)
SPEC_NONE = cython.declare(cython.int, 0)   # inconsistent: left to the search
SPEC_EXACT = cython.declare(cython.int, 1)  # TF, independent of the earlier choices
SPEC_BOUND = cython.declare(cython.int, 2)  # X op f(T), T bounded by a running min/max
AGG_ANY = cython.declare(cython.int, 0)
AGG_MAX = cython.declare(cython.int, 1)
AGG_MIN = cython.declare(cython.int, 2)


@cython.cfunc
@cython.inline
def _cmp(op: cython.int, x: cython.double, y: cython.double) -> cython.bint:
    if op == OP_GT:
        return x > y
    if op == OP_GE:
        return x >= y
    if op == OP_LT:
        return x < y
    return x <= y


def _grown(a: np.ndarray, need: int) -> np.ndarray:
    """``a`` with room for at least ``need`` entries (doubling)."""
    if need <= a.shape[0]:
        return a
    return np.concatenate([a, np.zeros(max(need, 2 * a.shape[0]) - a.shape[0], a.dtype)])


@cython.cclass
class Postpone:
    """The main runs of postponing over a finite stream (7.1, 7.3): the early filters, the
    candidate lists and the (main run, end event) pairs to construct, in arrays; built by
    :mod:`acep.nfab.postpone.core`, which also builds the matches from them (7.2)."""

    # the plan
    k: cython.int
    nslot: cython.int
    nb: cython.int
    has_window: cython.bint
    window: cython.double
    filters: cython.bint
    last_kleene: cython.bint
    first_type: cython.int
    prog_start: cython.int
    code: cython.int[:]
    consts: cython.double[:]
    stack: cython.double[:]
    t_start: cython.int[:]      # roles of type code y: t_start[y] .. t_start[y + 1]
    role_j: cython.int[:]
    role_take: cython.int[:]
    role_needs: cython.int[:]
    role_c0: cython.int[:]      # its conjuncts: role_c0[q] .. role_c0[q] + role_nc[q]
    role_nc: cython.int[:]
    c_kind: cython.int[:]
    c_prog: cython.int[:]       # SPEC_EXACT: the predicate; SPEC_BOUND: X's value
    c_op: cython.int[:]
    c_agg: cython.int[:]
    c_bound: cython.int[:]
    c_s0: cython.int[:]         # its monotone steps: c_s0[c] .. c_s0[c] + c_ns[c]
    c_ns: cython.int[:]
    s_op: cython.int[:]
    s_prog: cython.int[:]
    s_left: cython.int[:]
    b_comp: cython.int[:]       # bound b: running min/max of slot b_slot[b] over comp.
    b_slot: cython.int[:]
    # the event
    E: cython.double[:]
    erow: cython.Py_ssize_t
    pos: cython.longlong
    v_ok: cython.int[:]
    v_mask: cython.longlong[:]
    # main runs, partitions (linked lists of runs by start)
    nruns: cython.Py_ssize_t
    r_pos: cython.longlong[:]
    r_t: cython.double[:]
    r_key: cython.longlong[:]
    r_next: cython.longlong[:]
    r_n: cython.longlong[:]       # per run and component: candidates
    r_last: cython.longlong[:]    # ... the last one's position
    r_first: cython.longlong[:]   # ... the index of the first with role begin (-1: none)
    r_bcnt: cython.longlong[:]    # per run and bound
    r_bmin: cython.double[:]
    r_bmax: cython.double[:]
    r_breg: cython.int[:]
    p_head: cython.longlong[:]
    p_tail: cython.longlong[:]
    # candidates and constructions
    ncand: cython.Py_ssize_t
    k_run: cython.longlong[:]
    k_pos: cython.longlong[:]
    k_j: cython.int[:]
    k_flags: cython.int[:]        # 1: role begin, 2: role take
    k_bu: cython.longlong[:]      # bit n: conjunct n of the role left to the search
    k_tu: cython.longlong[:]
    ncons: cython.Py_ssize_t
    x_run: cython.longlong[:]
    x_end: cython.longlong[:]
    x_hi: cython.longlong[:]      # per construction and component: the end of its range
    # the search (7.2): the shared core's edge programs and column updates over a stack of
    # state rows, one per element chosen
    ncol: cython.int
    kleene: cython.int[:]
    prog_begin: cython.int[:]
    prog_take: cython.int[:]
    prog_close: cython.int[:]
    up_start: cython.int[:]
    up_col: cython.int[:]
    up_op: cython.int[:]
    up_slot: cython.int[:]
    S: cython.double[:]
    path: cython.longlong[:]
    pathc: cython.int[:]
    cs_idx: cython.longlong[:]
    cs_start: cython.longlong[:]
    s_base: cython.longlong[:]
    s_lo: cython.longlong[:]
    s_hi: cython.longlong[:]
    end: cython.longlong
    nout: cython.Py_ssize_t
    nmatch: cython.Py_ssize_t
    o_pos: cython.longlong[:]
    o_comp: cython.int[:]
    o_start: cython.longlong[:]
    # counters (PostponeStats)
    main_runs: cython.longlong
    candidates: cython.longlong
    discarded: cython.longlong
    safe: cython.longlong
    constructions: cython.longlong

    def __init__(self, k, nslot, window, filters, last_kleene, first_type, prog_start, code,
                 consts, t_start, roles, conjuncts, steps, bounds, search):
        i32 = np.int32
        (self.ncol, self.kleene, self.prog_begin, self.prog_take, self.prog_close,
         self.up_start, self.up_col, self.up_op, self.up_slot) = [
            x if n == 0 else np.asarray(x, dtype=i32) for n, x in enumerate(search)]
        self.k, self.nslot = k, nslot
        self.has_window = window is not None
        self.window = 0.0 if window is None else window
        self.filters, self.last_kleene = filters, last_kleene
        self.first_type, self.prog_start = first_type, prog_start
        self.code = np.asarray(code, dtype=i32)
        self.consts = np.asarray(consts, dtype=np.float64)
        self.stack = np.zeros(STACK, dtype=np.float64)
        self.t_start = np.asarray(t_start, dtype=i32)
        cols = [np.asarray(c, dtype=i32) for c in zip(*roles)] if roles else [
            np.zeros(0, dtype=i32)] * 5
        self.role_j, self.role_take, self.role_needs, self.role_c0, self.role_nc = cols
        cols = [np.asarray(c, dtype=i32) for c in zip(*conjuncts)] if conjuncts else [
            np.zeros(0, dtype=i32)] * 7
        (self.c_kind, self.c_prog, self.c_op, self.c_agg, self.c_bound, self.c_s0,
         self.c_ns) = cols
        cols = [np.asarray(c, dtype=i32) for c in zip(*steps)] if steps else [
            np.zeros(0, dtype=i32)] * 3
        self.s_op, self.s_prog, self.s_left = cols
        self.nb = len(bounds)
        cols = [np.asarray(c, dtype=i32) for c in zip(*bounds)] if bounds else [
            np.zeros(0, dtype=i32)] * 2
        self.b_comp, self.b_slot = cols
        self.v_ok = np.zeros(max(len(roles), 1), dtype=i32)
        self.v_mask = np.zeros(max(len(roles), 1), dtype=np.int64)
        self.main_runs = self.candidates = self.discarded = self.safe = 0
        self.constructions = 0

    # ------------------------------------------------------------------ storage

    def _allocate(self, nparts: int):
        i64 = np.int64
        self.nruns = self.ncand = self.ncons = 0
        self._grow_runs(16)
        self._grow_cands(64)
        self._grow_cons(16)
        self.p_head = np.full(nparts, -1, dtype=i64)
        self.p_tail = np.full(nparts, -1, dtype=i64)

    def _grow_runs(self, need: int):
        k, nb = self.k, max(self.nb, 1)
        if self.nruns == 0:
            i64 = np.int64
            self.r_pos, self.r_key, self.r_next = (np.zeros(need, i64) for _ in range(3))
            self.r_t = np.zeros(need)
            self.r_n, self.r_last, self.r_first = (np.zeros(need * k, i64) for _ in range(3))
            self.r_bcnt = np.zeros(need * nb, i64)
            self.r_bmin, self.r_bmax = np.zeros(need * nb), np.zeros(need * nb)
            self.r_breg = np.zeros(need * nb, np.int32)
            return
        self.r_pos = _grown(np.asarray(self.r_pos), need)
        self.r_key = _grown(np.asarray(self.r_key), need)
        self.r_next = _grown(np.asarray(self.r_next), need)
        self.r_t = _grown(np.asarray(self.r_t), need)
        self.r_n = _grown(np.asarray(self.r_n), need * k)
        self.r_last = _grown(np.asarray(self.r_last), need * k)
        self.r_first = _grown(np.asarray(self.r_first), need * k)
        self.r_bcnt = _grown(np.asarray(self.r_bcnt), need * nb)
        self.r_bmin = _grown(np.asarray(self.r_bmin), need * nb)
        self.r_bmax = _grown(np.asarray(self.r_bmax), need * nb)
        self.r_breg = _grown(np.asarray(self.r_breg), need * nb)

    def _grow_cands(self, need: int):
        if self.ncand == 0 and need <= 64:
            i64 = np.int64
            self.k_run, self.k_pos, self.k_bu, self.k_tu = (np.zeros(need, i64)
                                                            for _ in range(4))
            self.k_j, self.k_flags = np.zeros(need, np.int32), np.zeros(need, np.int32)
            return
        self.k_run = _grown(np.asarray(self.k_run), need)
        self.k_pos = _grown(np.asarray(self.k_pos), need)
        self.k_bu = _grown(np.asarray(self.k_bu), need)
        self.k_tu = _grown(np.asarray(self.k_tu), need)
        self.k_j = _grown(np.asarray(self.k_j), need)
        self.k_flags = _grown(np.asarray(self.k_flags), need)

    def _grow_cons(self, need: int):
        if self.ncons == 0 and need <= 16:
            i64 = np.int64
            self.x_run, self.x_end = np.zeros(need, i64), np.zeros(need, i64)
            self.x_hi = np.zeros(need * self.k, i64)
            return
        self.x_run = _grown(np.asarray(self.x_run), need)
        self.x_end = _grown(np.asarray(self.x_end), need)
        self.x_hi = _grown(np.asarray(self.x_hi), need * self.k)

    # ------------------------------------------------------------------ early filters (7.3)

    @cython.cfunc
    def _value(self, pc: cython.int, r: cython.longlong) -> cython.double:
        """A program on the current event (EVENT) and the start of run r (STATE)."""
        if pc < 0:
            return 1.0
        srow: cython.Py_ssize_t = self.r_pos[r] * self.nslot if r >= 0 else 0
        return _eval(self.code, self.consts, self.stack, self.E, self.erow, self.E, srow, pc)

    @cython.cfunc
    def _apply(self, c: cython.int, value: cython.double, r: cython.longlong) -> cython.double:
        """f(value) through conjunct c's monotone steps; NaN when a step is not a finite
        shift or a finite positive scale (filters.py's ``_apply``)."""
        s: cython.int
        op: cython.int
        x: cython.double
        left: cython.double
        right: cython.double
        for s in range(self.c_s0[c], self.c_s0[c] + self.c_ns[c]):
            x = self._value(self.s_prog[s], r)
            op = self.s_op[s]
            if not (x - x == 0.0) or ((op == OP_MUL or op == OP_DIV) and x <= 0.0):
                return NAN
            if self.s_left[s]:
                left, right = value, x
            else:
                left, right = x, value
            if op == OP_ADD:
                value = left + right
            elif op == OP_SUB:
                value = left - right
            elif op == OP_MUL:
                value = left * right
            else:
                value = left / right
        return value

    @cython.cfunc
    def _decide(self, c: cython.int, r: cython.longlong) -> cython.int:
        """SAFE, DISCARD or UNSAFE for a bounded conjunct (engine.py's ``decide``)."""
        b: cython.Py_ssize_t = r * self.nb + self.c_bound[c]
        if self.r_bcnt[b] == 0:
            return _DISCARD
        if not self.r_breg[b]:
            return _UNSAFE
        lo: cython.double = self._apply(c, self.r_bmin[b], r)
        hi: cython.double = self._apply(c, self.r_bmax[b], r)
        if lo != lo or hi != hi:
            return _UNSAFE
        x: cython.double = self._value(self.c_prog[c], r)
        op: cython.int = self.c_op[c]
        agg: cython.int = self.c_agg[c]
        if op == OP_GT or op == OP_GE:
            if agg != AGG_MIN and _cmp(op, x, hi):
                return _SAFE
            if agg != AGG_MAX and not _cmp(op, x, lo):
                return _DISCARD
        else:
            if agg != AGG_MAX and _cmp(op, x, lo):
                return _SAFE
            if agg != AGG_MIN and not _cmp(op, x, hi):
                return _DISCARD
        return _UNSAFE

    @cython.cfunc
    def _classify(self, r: cython.longlong, q: cython.int) -> cython.int:
        """Whether role q of the event survives in run r; its postponed conjuncts go to
        ``v_mask[q]`` (engine.py's ``classify``)."""
        nc: cython.int = self.role_nc[q]
        mask: cython.longlong = 0
        one: cython.longlong = 1
        n: cython.int
        c: cython.int
        kind: cython.int
        verdict: cython.int
        if not self.filters:
            self.v_mask[q] = (one << nc) - 1
            return 1
        if self.r_n[r * self.k + self.role_needs[q]] == 0:
            self.discarded += 1
            return 0
        for n in range(nc):
            c = self.role_c0[q] + n
            kind = self.c_kind[c]
            if kind == SPEC_EXACT:
                verdict = _SAFE if self._value(self.c_prog[c], r) != 0.0 else _DISCARD
            elif kind == SPEC_BOUND:
                verdict = self._decide(c, r)
            else:
                verdict = _UNSAFE
            if verdict == _DISCARD:
                self.discarded += 1
                return 0
            if verdict == _SAFE:
                self.safe += 1
            else:
                mask |= one << n
        self.v_mask[q] = mask
        return 1

    # ------------------------------------------------------------------ lists (7.1)

    @cython.cfunc
    def _append(self, r: cython.longlong, j: cython.int, flags: cython.int,
                bu: cython.longlong, tu: cython.longlong) -> cython.void:
        if self.ncand == self.k_run.shape[0]:
            self._grow_cands(self.ncand + 1)
        n: cython.Py_ssize_t = self.ncand
        self.k_run[n], self.k_pos[n], self.k_j[n], self.k_flags[n] = r, self.pos, j, flags
        self.k_bu[n], self.k_tu[n] = bu, tu
        self.ncand = n + 1
        self.candidates += 1
        at: cython.Py_ssize_t = r * self.k + j
        if self.r_first[at] < 0 and flags & 1:
            self.r_first[at] = self.r_n[at]
        self.r_n[at] += 1
        self.r_last[at] = self.pos
        b: cython.int
        x: cython.double
        at2: cython.Py_ssize_t
        for b in range(self.nb):
            if self.b_comp[b] != j:
                continue
            at2 = r * self.nb + b
            x = self.E[self.erow + self.b_slot[b]]
            self.r_bcnt[at2] += 1
            if x != x:
                self.r_breg[at2] = 0
            elif self.r_breg[at2]:
                if x < self.r_bmin[at2]:
                    self.r_bmin[at2] = x
                if x > self.r_bmax[at2]:
                    self.r_bmax[at2] = x

    @cython.cfunc
    def _construct(self, r: cython.longlong) -> cython.void:
        """Note (run r, this event) for the search (engine.py's ``construct``), unless a
        component has no begin candidate in its range."""
        k: cython.int = self.k
        j: cython.int
        at: cython.Py_ssize_t
        n: cython.longlong
        hi: cython.longlong
        for j in range(k):
            at = r * k + j
            n = self.r_n[at]
            hi = n if j == k - 1 or n == 0 or self.r_last[at] != self.pos else n - 1
            if not (0 <= self.r_first[at] < hi):
                return
        if self.ncons == self.x_run.shape[0]:
            self._grow_cons(self.ncons + 1)
        c: cython.Py_ssize_t = self.ncons
        self.x_run[c], self.x_end[c] = r, self.pos
        for j in range(k):
            at = r * k + j
            n = self.r_n[at]
            self.x_hi[c * k + j] = n if j == k - 1 or n == 0 or self.r_last[at] != self.pos \
                else n - 1
        self.ncons = c + 1
        self.constructions += 1

    @cython.cfunc
    def _offer(self, r: cython.longlong, ty: cython.int) -> cython.void:
        """Classify every role of the event first (the lists before it), then append."""
        q: cython.int
        j: cython.int
        flags: cython.int
        bu: cython.longlong
        tu: cython.longlong
        first: cython.int = self.t_start[ty]
        stop: cython.int = self.t_start[ty + 1]
        for q in range(first, stop):
            self.v_ok[q] = self._classify(r, q)
        end: cython.bint = False
        q = first
        while q < stop:
            j = self.role_j[q]
            flags, bu, tu = 0, 0, 0
            while q < stop and self.role_j[q] == j:
                if self.v_ok[q]:
                    if self.role_take[q]:
                        flags |= 2
                        tu = self.v_mask[q]
                    else:
                        flags |= 1
                        bu = self.v_mask[q]
                q += 1
            if flags:
                self._append(r, j, flags, bu, tu)
                if j == self.k - 1 and (flags & 1 or self.last_kleene):
                    end = True
        if end:
            self._construct(r)

    @cython.cfunc
    def _start(self, key: cython.longlong, t: cython.double) -> cython.void:
        if self.nruns == self.r_pos.shape[0]:
            self._grow_runs(2 * self.nruns)
        r: cython.Py_ssize_t = self.nruns
        self.nruns = r + 1
        self.main_runs += 1
        self.r_pos[r], self.r_t[r], self.r_key[r], self.r_next[r] = self.pos, t, key, -1
        j: cython.int
        for j in range(self.k):
            self.r_n[r * self.k + j] = 0
            self.r_last[r * self.k + j] = -1
            self.r_first[r * self.k + j] = -1
        b: cython.int
        for b in range(self.nb):
            self.r_bcnt[r * self.nb + b] = 0
            self.r_bmin[r * self.nb + b] = INF
            self.r_bmax[r * self.nb + b] = -INF
            self.r_breg[r * self.nb + b] = 1
        if self.p_tail[key] >= 0:
            self.r_next[self.p_tail[key]] = r
        else:
            self.p_head[key] = r
        self.p_tail[key] = r
        self._append(r, 0, 1, 0, 0)
        if self.k == 1:
            self._construct(r)

    # ------------------------------------------------------------------ the loop

    def run(self, E: np.ndarray, ty: np.ndarray, tags: np.ndarray, keys: np.ndarray,
            nkeys: int) -> None:
        """Process the events (7.1): ``ty`` type codes (-1: no component's), ``keys``
        partition codes (-1: a key of its own, offered nothing)."""
        n: cython.Py_ssize_t = tags.shape[0]
        tyv: cython.int[:] = ty
        tagv: cython.double[:] = tags
        keyv: cython.longlong[:] = keys
        i: cython.Py_ssize_t
        y: cython.int
        p: cython.longlong
        r: cython.longlong
        t: cython.double
        expire: cython.Py_ssize_t = 0
        fresh: cython.longlong = nkeys
        self.E = E
        self._allocate(nkeys + n + 1)
        for i in range(n):
            t = tagv[i]
            if self.has_window:
                while expire < self.nruns and t - self.r_t[expire] > self.window:
                    p = self.r_key[expire]
                    self.p_head[p] = self.r_next[expire]
                    if self.p_head[p] < 0:
                        self.p_tail[p] = -1
                    expire += 1
            y = tyv[i]
            if y < 0:
                continue
            self.pos = i
            self.erow = i * self.nslot
            p = keyv[i]
            if p >= 0 and self.t_start[y] < self.t_start[y + 1]:
                r = self.p_head[p]
                while r >= 0:
                    self._offer(r, y)
                    r = self.r_next[r]
            if y == self.first_type and self._value(self.prog_start, -1) != 0.0:
                if p < 0:
                    p = fresh
                    fresh += 1
                self._start(p, t)

    def output(self) -> tuple:
        """The candidates ``(run, position, component, flags, begin mask, take mask)``,
        the constructions ``(run, end, his)`` and the runs' start positions, as arrays."""
        nc, nx, k = self.ncand, self.ncons, self.k
        return ((np.asarray(self.k_run)[:nc], np.asarray(self.k_pos)[:nc],
                 np.asarray(self.k_j)[:nc], np.asarray(self.k_flags)[:nc],
                 np.asarray(self.k_bu)[:nc], np.asarray(self.k_tu)[:nc]),
                (np.asarray(self.x_run)[:nx], np.asarray(self.x_end)[:nx],
                 np.asarray(self.x_hi)[:nx * k].reshape(nx, k)),
                np.asarray(self.r_pos)[:self.nruns])

    def counters(self) -> dict:
        return {"main_runs": self.main_runs, "candidates": self.candidates,
                "discarded": self.discarded, "safe": self.safe,
                "constructions": self.constructions}

    # ------------------------------------------------------------------ the search (7.2)

    def begin_search(self, cs_idx: np.ndarray, cs_start: np.ndarray) -> None:
        """Prepare :meth:`search`: ``cs_idx[cs_start[r k + j]:cs_start[r k + j + 1]]`` are
        the candidates of run r and component j, in order."""
        k: cython.int = self.k
        self.cs_idx = cs_idx
        self.cs_start = cs_start
        self.s_base = np.zeros(k, dtype=np.int64)
        self.s_lo = np.zeros(k, dtype=np.int64)
        self.s_hi = np.zeros(k, dtype=np.int64)
        self.nout = self.nmatch = 0
        self.o_pos = np.zeros(64, dtype=np.int64)
        self.o_comp = np.zeros(64, dtype=np.int32)
        self.o_start = np.zeros(16, dtype=np.int64)
        self.S = np.zeros(0)

    def search(self, c: cython.Py_ssize_t) -> None:
        """The matches of construction c, by search.py's ``_search`` with the edge programs
        of the shared core (a SAFE conjunct holds, so checking it again changes nothing)."""
        k: cython.int = self.k
        j: cython.int
        i: cython.Py_ssize_t
        r: cython.longlong = self.x_run[c]
        starts: cython.longlong[:] = self.cs_start
        self.end = self.x_end[c]
        for j in range(k):
            self.s_base[j] = starts[r * k + j]
            self.s_hi[j] = self.x_hi[c * k + j]
            self.s_lo[j] = self.s_hi[j] - 1 if j == k - 1 and not self.kleene[j] else 0
        need: cython.Py_ssize_t = starts[r * k + k] - starts[r * k] + 2
        if self.S.shape[0] < need * max(self.ncol, 1):
            self.S = np.zeros(2 * need * max(self.ncol, 1))
            self.path = np.zeros(2 * need, dtype=np.int64)
            self.pathc = np.zeros(2 * need, dtype=np.int32)
        for i in range(self.ncol):
            self.S[i] = NAN
        self._sbegin(0, -1, 0)

    def matches(self) -> tuple:
        """The elements found (positions, components) and each match's first element."""
        self.o_start[self.nmatch] = self.nout
        return (np.asarray(self.o_pos)[:self.nout], np.asarray(self.o_comp)[:self.nout],
                np.asarray(self.o_start)[:self.nmatch + 1])

    @cython.cfunc
    def _choose(self, g: cython.longlong, j: cython.int, depth: cython.int,
                begin: cython.int) -> cython.void:
        """Candidate g as element ``depth`` of component j: its state row from the last."""
        i: cython.int
        nc: cython.int = self.ncol
        for i in range(nc):
            self.S[(depth + 1) * nc + i] = self.S[depth * nc + i]
        _updates(self.S, (depth + 1) * nc, self.E, self.erow, self.up_start, self.up_col,
                 self.up_op, self.up_slot, 2 * j + begin)
        self.path[depth] = self.k_pos[g]
        self.pathc[depth] = j

    @cython.cfunc
    def _holds_at(self, pc: cython.int, depth: cython.int) -> cython.bint:
        if pc < 0:
            return True
        return _eval(self.code, self.consts, self.stack, self.E, self.erow, self.S,
                     depth * self.ncol, pc) != 0.0

    @cython.cfunc
    def _sbegin(self, j: cython.int, after: cython.longlong, depth: cython.int) -> cython.void:
        base: cython.longlong = self.s_base[j]
        idx: cython.longlong
        g: cython.longlong
        for idx in range(self.s_lo[j], self.s_hi[j]):
            g = self.cs_idx[base + idx]
            if self.k_pos[g] <= after or not (self.k_flags[g] & 1):
                continue
            self.erow = self.k_pos[g] * self.nslot
            if not self._holds_at(self.prog_begin[j], depth):
                continue
            self._choose(g, j, depth, 1)
            if self.kleene[j]:
                self._sextend(j, idx, depth + 1)
            elif j == self.k - 1:
                self._emit(depth + 1)
            else:
                self._sbegin(j + 1, self.k_pos[g], depth + 1)

    @cython.cfunc
    def _sextend(self, j: cython.int, idx: cython.longlong, depth: cython.int) -> cython.void:
        last: cython.bint = j == self.k - 1
        p: cython.longlong = self.path[depth - 1]
        if not last or p == self.end:
            if self._holds_at(self.prog_close[j], depth):
                if last:
                    self._emit(depth)
                else:
                    self._sbegin(j + 1, p, depth)
        if last and p == self.end:
            return
        base: cython.longlong = self.s_base[j]
        idx2: cython.longlong
        g: cython.longlong
        for idx2 in range(idx + 1, self.s_hi[j]):
            g = self.cs_idx[base + idx2]
            if not (self.k_flags[g] & 2):
                continue
            self.erow = self.k_pos[g] * self.nslot
            if not self._holds_at(self.prog_take[j], depth):
                continue
            self._choose(g, j, depth, 0)
            self._sextend(j, idx2, depth + 1)

    @cython.cfunc
    def _emit(self, depth: cython.int) -> cython.void:
        i: cython.int
        if self.nout + depth > self.o_pos.shape[0]:
            self.o_pos = _grown(np.asarray(self.o_pos), self.nout + depth)
            self.o_comp = _grown(np.asarray(self.o_comp), self.nout + depth)
        if self.nmatch + 2 > self.o_start.shape[0]:
            self.o_start = _grown(np.asarray(self.o_start), self.nmatch + 2)
        self.o_start[self.nmatch] = self.nout
        for i in range(depth):
            self.o_pos[self.nout + i] = self.path[i]
            self.o_comp[self.nout + i] = self.pathc[i]
        self.nout += depth
        self.nmatch += 1
        if self.nmatch % 4096 == 0 and cython.compiled:
            PyErr_CheckSignals()  # a timer's handler may stop an exponential enumeration
