"""The compiled main runs and search of the postponing engine (``docs/EXACT.md`` 7.1-7.4).

Written in Cython's pure-Python mode, as ``_core.py``: compiled by ``setup.py``, the same
file runs as plain Python where no compiler exists. :class:`Postpone` runs the early
filters and the search's edge formulas on the stack machine of the shared-buffer core
(``_core.py``'s ``Machine``, cimported through ``_core.pxd``: no Python call per event and
edge); :mod:`acep.nfab.postpone.core` compiles the query and builds the matches.
"""

try:
    import cython
except ImportError:  # a device without Cython: the same loop, run as Python
    from .. import _cython_shim as cython

import numpy as np

if cython.compiled:
    from cython.cimports.acep.nfab._core import Machine
    from cython.cimports.cpython.exc import PyErr_CheckSignals
else:
    from acep.nfab.core import pure_core

    Machine = pure_core().Machine

# the opcodes of _core.py the filters read (tests/acep/test_exact_postpone_core.py checks)
OP_ADD = cython.declare(cython.int, 8)
OP_SUB = cython.declare(cython.int, 9)
OP_MUL = cython.declare(cython.int, 10)
OP_DIV = cython.declare(cython.int, 11)
OP_LT = cython.declare(cython.int, 15)
OP_LE = cython.declare(cython.int, 16)
OP_GT = cython.declare(cython.int, 17)
OP_GE = cython.declare(cython.int, 18)

STACK = 64
NAN = float("nan")
INF = float("inf")

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


class Capped(Exception):
    """The search found more matches than its cap (max_entries): the caller raises."""


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
class Postpone(Machine):
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
    kleene: cython.int[:]
    prog_begin: cython.int[:]
    prog_take: cython.int[:]
    prog_close: cython.int[:]
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
    # max_entries (engine.py's held): candidates of the live (compact: or recorded) runs
    held: cython.longlong
    compact: cython.bint
    r_rec: cython.int[:]          # per run: constructed (a compact record holds it)
    h_at: cython.longlong[:]      # per event: held (compact: plus records) after it
    nproc: cython.Py_ssize_t
    cap: cython.longlong          # the search stops past cap matches (-1: never)

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
        self.constructions = self.held = self.nproc = 0
        self.cap = -1

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
            self.r_rec = np.zeros(need, np.int32)
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
        self.r_rec = _grown(np.asarray(self.r_rec), need)

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
        return self._eval(pc, srow)  # V is E while the main runs run

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
        self.held += 1
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
        self.r_rec[r] = 1

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
        self.r_rec[r] = 0
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

    @cython.cfunc
    def _over(self, i: cython.Py_ssize_t, limit: cython.longlong) -> cython.bint:
        """Note what engine.py holds after event i; true past ``limit``."""
        h: cython.longlong = self.held + (self.ncons if self.compact else 0)
        self.h_at[i] = h
        self.nproc = i + 1
        return h > limit

    @cython.cfunc
    def _expire(self, r: cython.longlong) -> cython.void:
        j: cython.int
        if not (self.compact and self.r_rec[r]):
            for j in range(self.k):
                self.held -= self.r_n[r * self.k + j]

    def run(self, E: np.ndarray, ty: np.ndarray, tags: np.ndarray, keys: np.ndarray,
            nkeys: int, limit: cython.longlong = -1, compact: cython.bint = False) -> None:
        """Process the events (7.1): ``ty`` type codes (-1: no component's), ``keys``
        partition codes (-1: a key of its own, offered nothing). With ``limit`` >= 0 it
        stops after the first event past it (:meth:`held_at`)."""
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
        self.V = E  # the filters' STATE operands: the start event's row
        self._allocate(nkeys + n + 1)
        self.compact, self.held, self.nproc = compact, 0, 0
        self.h_at = np.zeros(n if limit >= 0 else 0, dtype=np.int64)
        for i in range(n):
            if limit >= 0 and i and self._over(i - 1, limit):
                return
            t = tagv[i]
            if self.has_window:
                while expire < self.nruns and t - self.r_t[expire] > self.window:
                    if limit >= 0:
                        self._expire(expire)
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
        if limit >= 0 and n:
            self._over(n - 1, limit)

    def held_at(self) -> np.ndarray:
        """Per event run (all, or up to the first past the limit): what engine.py holds."""
        if self.nproc == 0:  # no event run: h_at may be unset
            return np.zeros(0, dtype=np.int64)
        return np.asarray(self.h_at)[:self.nproc]

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

    def begin_search(self, cs_idx: np.ndarray, cs_start: np.ndarray, cap: int = -1) -> None:
        """Prepare :meth:`search`: ``cs_idx[cs_start[r k + j]:cs_start[r k + j + 1]]`` are
        the candidates of run r and component j, in order; past ``cap`` matches (>= 0) the
        search raises :class:`Capped`."""
        self.cap = cap
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

    def search(self, c: cython.Py_ssize_t) -> int:
        """The matches of construction c, by search.py's ``_search`` with the edge programs
        of the shared core (a SAFE conjunct holds, so checking it again changes nothing);
        the number of matches found so far."""
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
            self.V = self.S  # the search's STATE operands: its stack of state rows
        for i in range(self.ncol):
            self.S[i] = NAN
        self._sbegin(0, -1, 0)
        return self.nmatch

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
        self._updates((depth + 1) * nc, 2 * j + begin)
        self.path[depth] = self.k_pos[g]
        self.pathc[depth] = j

    @cython.cfunc
    def _holds_at(self, pc: cython.int, depth: cython.int) -> cython.bint:
        if pc < 0:
            return True
        return self._eval(pc, depth * self.ncol) != 0.0  # V is S

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
            PyErr_CheckSignals()
        if self.nmatch > self.cap >= 0:
            raise Capped(self.nmatch)  # a timer's handler may stop an exponential enumeration
