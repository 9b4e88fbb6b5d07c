"""The ACEP matcher kernel: Algorithm 1 (ACEPMatch) of the ACEP paper over flat arrays.

Written in Cython's pure-Python mode: compiled by ``setup.py`` it is the fast engine; on a
machine where it could not be compiled the very same file runs as plain Python (slowly),
so both backends have one behaviour by construction. No Python object per match node:
nodes live in preallocated arrays, linked per (partition, state) and by ``prev``.

How it maps to the paper (Section 3.1, Algorithm 1):

* A match node is (state, loc, err, start_win, prev). Only *L-state* nodes (nodes created
  by matching an event at an L-state) are stored. The ε-state and error nodes that
  ``propagate`` would create are replaced by the precomputed table ``src_cost``: for an
  L-state σ and a state q, the fewest errors of moving from q to ``pre(σ)`` without
  consuming events (each L-state skipped is one error). ``propagate`` of the seed is
  ``seed_cost``; reaching the final state from σ is ``final_cost``.
* An event e of type x, tag t, at L-state σ with label x extends every live node ν at a
  source state q of σ whose window is open (t - ν.start <= w): the new node at σ has
  err = ν.err + cost(q, σ) <= k, start = ν.start, prev = ν. The seed gives start = t.
  Candidates are collected before any is inserted, so an event is used once per trajectory.
* A new node reports a match when err + final_cost[σ] <= k; its match point is t.
* Nodes expire when t - start > w (lazily, when a list is walked, and in a full sweep
  before the arena grows).
* Dominance (DESIGN.md): at the same state and with equal bound predicate values, a node
  with no more errors and no earlier start finds every match point the other finds. With
  ``merge`` on, a dominated node is dropped on insertion. Merging is exact for match
  points, bundles and the best (err, start) per point; ``merge`` off is Algorithm 1.
* Trajectories: ``prev`` links are reference-counted, so a trajectory survives the removal
  of its nodes from the live lists for as long as a live node or a pending match uses it.

Output per (partition, match point): the best node (least err, then latest start) among
the events with that tag, emitted when a later tag arrives in the partition or on flush.
In all-trajectories mode every final node is emitted at once.
"""

try:
    import cython
except ImportError:  # pragma: no cover - exercised on machines without Cython
    from . import _cython_shim as cython

import numpy as np

NO_NODE = -1
NAN = cython.declare(cython.double, float("nan"))
BAD_TAG_BACK = 1
BAD_MISSING_ATTR = 2
BAD_NO_PARTITION = 3


@cython.cclass
class Kernel:
    # pattern tables
    n_states: cython.int
    k: cython.int
    w: cython.double
    merge: cython.bint
    all_trajectories: cython.bint
    n_slots: cython.int
    l_ptr: cython.int[::1]
    l_state: cython.int[::1]
    src_ptr: cython.int[::1]
    src_state: cython.int[::1]
    src_cost: cython.int[::1]
    seed_cost: cython.int[::1]
    final_cost: cython.int[::1]
    next_cost: cython.int[::1]
    var_bit: cython.longlong[::1]
    slot_bit: cython.longlong[::1]
    bind_ptr: cython.int[::1]
    bind_slot: cython.int[::1]
    bind_col: cython.int[::1]
    check_ptr: cython.int[::1]
    check_pred: cython.int[::1]
    pred_mask: cython.longlong[::1]
    code_ptr: cython.int[::1]
    code_op: cython.int[::1]
    code_arg: cython.int[::1]
    consts: cython.double[::1]
    stack: cython.double[::1]
    # match nodes
    capacity: cython.int
    free_head: cython.int
    n_used: cython.int
    n_state: cython.int[::1]
    n_err: cython.int[::1]
    n_start: cython.double[::1]
    n_loc: cython.longlong[::1]
    n_tag: cython.double[::1]
    n_prev: cython.int[::1]
    n_refc: cython.int[::1]
    n_next: cython.int[::1]
    n_bound: cython.longlong[::1]
    n_vals: cython.double[:, ::1]
    # partitions
    n_parts: cython.int
    heads: cython.int[::1]
    last_tag: cython.double[::1]
    pend_node: cython.int[::1]
    pend_point: cython.double[::1]
    pend_err: cython.int[::1]
    # candidates of the current event
    c_cap: cython.int
    c_state: cython.int[::1]
    c_err: cython.int[::1]
    c_start: cython.double[::1]
    c_prev: cython.int[::1]
    c_tag: cython.double
    # output
    o_n: cython.int
    o_tn: cython.longlong
    o_part: cython.int[::1]
    o_point: cython.double[::1]
    o_start: cython.double[::1]
    o_err: cython.int[::1]
    o_tptr: cython.longlong[::1]
    o_traj: cython.longlong[::1]
    o_ttag: cython.double[::1]
    # counters
    created: cython.longlong
    merged: cython.longlong
    expired: cython.longlong
    live: cython.longlong
    peak_live: cython.longlong
    skipped: cython.longlong
    bad_index: cython.longlong
    bad_code: cython.int
    bad_col: cython.int
    ev_created: cython.longlong
    ev_merged: cython.longlong
    ev_expired: cython.longlong

    def __init__(self, tables, k, w, merge, all_trajectories, capacity=1024):
        self.n_states = int(tables["n_states"])
        self.k, self.w = k, w
        self.merge, self.all_trajectories = merge, all_trajectories
        self.n_slots = int(tables["n_slots"])
        self.l_ptr, self.l_state = _i32(tables, "l_ptr"), _i32(tables, "l_state")
        self.src_ptr, self.src_state = _i32(tables, "src_ptr"), _i32(tables, "src_state")
        self.src_cost, self.seed_cost = _i32(tables, "src_cost"), _i32(tables, "seed_cost")
        self.final_cost, self.next_cost = _i32(tables, "final_cost"), _i32(tables, "next_cost")
        self.bind_ptr, self.bind_slot = _i32(tables, "bind_ptr"), _i32(tables, "bind_slot")
        self.bind_col, self.check_ptr = _i32(tables, "bind_col"), _i32(tables, "check_ptr")
        self.check_pred, self.code_ptr = _i32(tables, "check_pred"), _i32(tables, "code_ptr")
        self.code_op, self.code_arg = _i32(tables, "code_op"), _i32(tables, "code_arg")
        self.var_bit = np.ascontiguousarray(tables["var_bit"], dtype=np.int64)
        self.slot_bit = np.ascontiguousarray(tables["slot_bit"], dtype=np.int64)
        self.pred_mask = np.ascontiguousarray(tables["pred_mask"], dtype=np.int64)
        self.consts = np.ascontiguousarray(tables["consts"], dtype=np.float64)
        self.stack = np.zeros(64, dtype=np.float64)
        self.capacity, self.free_head, self.n_used = 0, NO_NODE, 0
        self._alloc_nodes(max(capacity, 16))
        self.n_parts = 0
        self.heads = np.zeros(0, dtype=np.int32)
        self.last_tag = np.zeros(0, dtype=np.float64)
        self.pend_node = np.zeros(0, dtype=np.int32)
        self.pend_point = np.zeros(0, dtype=np.float64)
        self.pend_err = np.zeros(0, dtype=np.int32)
        self.c_cap = 0
        self._grow_candidates(64)
        self.o_n, self.o_tn = 0, 0
        self._reset_output(256)
        self.created = self.merged = self.expired = self.live = self.peak_live = 0
        self.skipped = 0
        self.bad_index, self.bad_code, self.bad_col = -1, 0, -1

    # ------------------------------------------------------------------ storage

    def _alloc_nodes(self, new_cap):
        old = self.capacity
        grown = old > 0  # the arrays exist only after the first allocation
        self.n_state = _resized(self.n_state if grown else None, new_cap, np.int32)
        self.n_err = _resized(self.n_err if grown else None, new_cap, np.int32)
        self.n_start = _resized(self.n_start if grown else None, new_cap, np.float64)
        self.n_loc = _resized(self.n_loc if grown else None, new_cap, np.int64)
        self.n_tag = _resized(self.n_tag if grown else None, new_cap, np.float64)
        self.n_prev = _resized(self.n_prev if grown else None, new_cap, np.int32)
        self.n_refc = _resized(self.n_refc if grown else None, new_cap, np.int32)
        self.n_next = _resized(self.n_next if grown else None, new_cap, np.int32)
        self.n_bound = _resized(self.n_bound if grown else None, new_cap, np.int64)
        self.n_vals = _resized(self.n_vals if grown else None, new_cap, np.float64,
                               max(self.n_slots, 1))
        nxt = np.asarray(self.n_next)
        nxt[old:new_cap - 1] = np.arange(old + 1, new_cap, dtype=np.int32)
        nxt[new_cap - 1] = self.free_head
        self.free_head = old
        self.capacity = new_cap

    def _grow_candidates(self, new_cap):
        grown = self.c_cap > 0
        self.c_state = _resized(self.c_state if grown else None, new_cap, np.int32)
        self.c_err = _resized(self.c_err if grown else None, new_cap, np.int32)
        self.c_start = _resized(self.c_start if grown else None, new_cap, np.float64)
        self.c_prev = _resized(self.c_prev if grown else None, new_cap, np.int32)
        self.c_cap = new_cap

    def reserve_partitions(self, n):
        """Make room for partition ids ``0..n-1``."""
        if n <= self.n_parts:
            return
        cap = max(n, 2 * self.n_parts)
        ns = self.n_states
        heads = np.full(cap * ns, NO_NODE, dtype=np.int32)
        heads[: self.n_parts * ns] = np.asarray(self.heads)[: self.n_parts * ns]
        self.heads = heads
        self.last_tag = _grown(self.last_tag, cap, -np.inf)
        self.pend_node = _grown(self.pend_node, cap, NO_NODE)
        self.pend_point = _grown(self.pend_point, cap, 0.0)
        self.pend_err = _grown(self.pend_err, cap, 0)
        self.n_parts = cap

    def _reset_output(self, cap):
        self.o_n, self.o_tn = 0, 0
        self.o_part = np.zeros(cap, dtype=np.int32)
        self.o_point = np.zeros(cap, dtype=np.float64)
        self.o_start = np.zeros(cap, dtype=np.float64)
        self.o_err = np.zeros(cap, dtype=np.int32)
        self.o_tptr = np.zeros(cap + 1, dtype=np.int64)
        self.o_traj = np.zeros(4 * cap, dtype=np.int64)
        self.o_ttag = np.zeros(4 * cap, dtype=np.float64)

    def take_matches(self) -> dict:
        """Return the matches emitted so far as arrays, and clear them."""
        n, tn = self.o_n, self.o_tn
        out = {
            "partition": np.asarray(self.o_part)[:n].copy(),
            "point": np.asarray(self.o_point)[:n].copy(),
            "start": np.asarray(self.o_start)[:n].copy(),
            "errors": np.asarray(self.o_err)[:n].copy(),
            "trajectory_ptr": np.asarray(self.o_tptr)[: n + 1].copy(),
            "trajectory": np.asarray(self.o_traj)[:tn].copy(),
            "trajectory_tags": np.asarray(self.o_ttag)[:tn].copy(),
        }
        self._reset_output(max(256, min(n, 1 << 16)))
        return out

    # ------------------------------------------------------------------ node lifetime

    @cython.cfunc
    def _new_node(self) -> cython.int:
        nd: cython.int
        if self.free_head == NO_NODE:
            self._sweep()
            if self.free_head == NO_NODE or self.n_used > (self.capacity * 3) // 4:
                self._alloc_nodes(2 * self.capacity)
        nd = self.free_head
        self.free_head = self.n_next[nd]
        self.n_used += 1
        self.n_refc[nd] = 0
        return nd

    @cython.cfunc
    @cython.exceptval(check=False)
    def _release(self, nd: cython.int) -> cython.void:
        """Drop one reference; free the node, and its trajectory prefix, when none remain."""
        prev: cython.int
        while nd != NO_NODE:
            self.n_refc[nd] -= 1
            if self.n_refc[nd] > 0:
                return
            prev = self.n_prev[nd]
            self.n_next[nd] = self.free_head
            self.free_head = nd
            self.n_used -= 1
            nd = prev

    @cython.cfunc
    @cython.exceptval(check=False)
    def _free_if_unused(self, nd: cython.int) -> cython.void:
        if self.n_refc[nd] == 0:
            self.n_refc[nd] = 1
            self._release(nd)

    @cython.cfunc
    @cython.exceptval(check=False)
    def _unlink(self, head: cython.int, before: cython.int, nd: cython.int) -> cython.void:
        if before == NO_NODE:
            self.heads[head] = self.n_next[nd]
        else:
            self.n_next[before] = self.n_next[nd]
        self.live -= 1
        self._release(nd)

    def _sweep(self):
        """Expire every node whose window has closed (before growing the arena)."""
        p: cython.int
        q: cython.int
        for p in range(self.n_parts):
            for q in range(self.n_states):
                self._expire_list(p * self.n_states + q, self.last_tag[p])

    @cython.cfunc
    @cython.exceptval(check=False)
    def _expire_list(self, head: cython.int, t: cython.double) -> cython.void:
        before: cython.int = NO_NODE
        nd: cython.int = self.heads[head]
        nxt: cython.int
        while nd != NO_NODE:
            nxt = self.n_next[nd]
            if t - self.n_start[nd] > self.w:
                self._unlink(head, before, nd)
                self.ev_expired += 1
                self.expired += 1
            else:
                before = nd
            nd = nxt

    # ------------------------------------------------------------------ predicates

    @cython.cfunc
    @cython.exceptval(check=False)
    def _same_values(self, a: cython.int, b: cython.int) -> cython.bint:
        s: cython.int
        if self.n_bound[a] != self.n_bound[b]:
            return False
        for s in range(self.n_slots):
            if (self.n_bound[a] & self.slot_bit[s]) != 0 and \
                    self.n_vals[a, s] != self.n_vals[b, s]:
                return False
        return True

    @cython.cfunc
    @cython.exceptval(check=False)
    def _predicates_hold(self, nd: cython.int, x: cython.int) -> cython.bint:
        j: cython.int
        pr: cython.int
        for j in range(self.check_ptr[x], self.check_ptr[x + 1]):
            pr = self.check_pred[j]
            if (self.n_bound[nd] & self.pred_mask[pr]) != self.pred_mask[pr]:
                continue
            if self._evaluate(nd, pr) == 0.0:
                return False
        return True

    @cython.cfunc
    @cython.exceptval(check=False)
    def _evaluate(self, nd: cython.int, pr: cython.int) -> cython.double:
        sp: cython.int = 0
        c: cython.int
        op: cython.int
        a: cython.double
        b: cython.double
        r: cython.double
        for c in range(self.code_ptr[pr], self.code_ptr[pr + 1]):
            op = self.code_op[c]
            if op == 0:
                self.stack[sp] = self.n_vals[nd, self.code_arg[c]]
                sp += 1
                continue
            if op == 1:
                self.stack[sp] = self.consts[self.code_arg[c]]
                sp += 1
                continue
            b = self.stack[sp - 1]
            if op == 6:
                self.stack[sp - 1] = -b
                continue
            if op == 15:
                self.stack[sp - 1] = 1.0 if b == 0.0 else 0.0
                continue
            if op == 16:
                self.stack[sp - 1] = -b if b < 0.0 else b
                continue
            a = self.stack[sp - 2]
            sp -= 1
            r = _binary(op, a, b)
            self.stack[sp - 1] = r
        return self.stack[0]

    # ------------------------------------------------------------------ matching

    def process(self, types: cython.int[::1], tags: cython.double[::1],
                parts: cython.int[::1], vals: cython.double[:, ::1], pos0: cython.longlong,
                skip_bad: cython.bint, load: cython.longlong[:, ::1]) -> int:
        """Match events ``pos0..``; return how many were consumed.

        Stops early at a bad event unless ``skip_bad`` (then ``bad_index``/``bad_code``
        tell which). ``load`` (n x 4, or 0 rows) receives per event: nodes created,
        merged, expired, and live nodes after the event.
        """
        i: cython.Py_ssize_t
        n: cython.Py_ssize_t = types.shape[0]
        record: cython.bint = load.shape[0] >= n and n > 0
        p: cython.int
        code: cython.int
        for i in range(n):
            p = parts[i]
            self.ev_created = self.ev_merged = self.ev_expired = 0
            code = BAD_NO_PARTITION if p < 0 else self._validate(types[i], tags[i], p, vals, i)
            if code != 0:
                if not skip_bad:
                    self.bad_index, self.bad_code = pos0 + i, code
                    return i
                self.skipped += 1
            else:
                self.last_tag[p] = tags[i]
                if self.pend_node[p] != NO_NODE and self.pend_point[p] < tags[i]:
                    self._flush_partition(p)
                if types[i] >= 0:
                    self._step(types[i], tags[i], p, vals, i, pos0 + i)
            if record:
                load[i, 0] = self.ev_created
                load[i, 1] = self.ev_merged
                load[i, 2] = self.ev_expired
                load[i, 3] = self.live
        return n

    @cython.cfunc
    def _validate(self, x: cython.int, t: cython.double, p: cython.int,
                  vals: cython.double[:, ::1], i: cython.Py_ssize_t) -> cython.int:
        j: cython.int
        v: cython.double
        if t < self.last_tag[p]:
            return BAD_TAG_BACK
        if x >= 0:
            for j in range(self.bind_ptr[x], self.bind_ptr[x + 1]):
                v = vals[i, self.bind_col[j]]
                if v != v:
                    self.bad_col = self.bind_col[j]
                    return BAD_MISSING_ATTR
        return 0

    @cython.cfunc
    def _step(self, x: cython.int, t: cython.double, p: cython.int,
              vals: cython.double[:, ::1], i: cython.Py_ssize_t,
              loc: cython.longlong) -> cython.void:
        nc: cython.int = self._collect(x, t, p)
        self.c_tag = t
        best: cython.int = NO_NODE
        best_err: cython.int = 0
        total: cython.int
        c: cython.int
        nd: cython.int
        sigma: cython.int
        for c in range(nc):
            sigma = self.c_state[c]
            nd = self._make_node(c, x, vals, i, loc)
            if nd == NO_NODE:
                continue
            total = self.n_err[nd] + self.final_cost[sigma]  # letters inserted after σ
            if total <= self.k:
                if self.all_trajectories:
                    self._emit(nd, p, t, total)
                elif best == NO_NODE or _better(total, self.n_start[nd],
                                                best_err, self.n_start[best]):
                    self.n_refc[nd] += 1
                    if best != NO_NODE:
                        self._release(best)
                    best, best_err = nd, total
            if self.n_err[nd] + self.next_cost[sigma] <= self.k:
                self._insert(nd, p * self.n_states + sigma, t)
            self._free_if_unused(nd)
        if best != NO_NODE:
            self._offer_pending(best, best_err, p, t)

    @cython.cfunc
    def _collect(self, x: cython.int, t: cython.double, p: cython.int) -> cython.int:
        """Phase 1: the (state, err, start, prev) of every node the event can create."""
        nc: cython.int = 0
        j: cython.int
        s: cython.int
        sigma: cython.int
        head: cython.int
        before: cython.int
        nd: cython.int
        nxt: cython.int
        e: cython.int
        for j in range(self.l_ptr[x], self.l_ptr[x + 1]):
            sigma = self.l_state[j]
            if self.seed_cost[sigma] <= self.k:
                nc = self._add_candidate(nc, sigma, self.seed_cost[sigma], t, NO_NODE)
            for s in range(self.src_ptr[sigma], self.src_ptr[sigma + 1]):
                head = p * self.n_states + self.src_state[s]
                before = NO_NODE
                nd = self.heads[head]
                while nd != NO_NODE:
                    nxt = self.n_next[nd]
                    if t - self.n_start[nd] > self.w:
                        self._unlink(head, before, nd)
                        self.ev_expired += 1
                        self.expired += 1
                    else:
                        e = self.n_err[nd] + self.src_cost[s]
                        if e <= self.k:
                            nc = self._add_candidate(nc, sigma, e, self.n_start[nd], nd)
                        before = nd
                    nd = nxt
        return nc

    @cython.cfunc
    def _add_candidate(self, nc: cython.int, sigma: cython.int, e: cython.int,
                       start: cython.double, prev: cython.int) -> cython.int:
        if nc == self.c_cap:
            self._grow_candidates(2 * self.c_cap)
        self.c_state[nc] = sigma
        self.c_err[nc] = e
        self.c_start[nc] = start
        self.c_prev[nc] = prev
        if prev != NO_NODE:
            self.n_refc[prev] += 1  # held until the new node takes it over as its prev
        return nc + 1

    @cython.cfunc
    def _make_node(self, c: cython.int, x: cython.int, vals: cython.double[:, ::1],
                   i: cython.Py_ssize_t, loc: cython.longlong) -> cython.int:
        """Phase 2: create candidate ``c``'s node; NO_NODE if a predicate rejects it."""
        nd: cython.int = self._new_node()
        prev: cython.int = self.c_prev[c]
        j: cython.int
        self.n_state[nd] = self.c_state[c]
        self.n_err[nd] = self.c_err[c]
        self.n_start[nd] = self.c_start[c]
        self.n_loc[nd] = loc
        self.n_tag[nd] = self.c_tag
        self.n_prev[nd] = prev
        if prev != NO_NODE:
            self.n_bound[nd] = self.n_bound[prev]
            for j in range(self.n_slots):
                self.n_vals[nd, j] = self.n_vals[prev, j]
        else:
            self.n_bound[nd] = 0
        for j in range(self.bind_ptr[x], self.bind_ptr[x + 1]):
            self.n_vals[nd, self.bind_slot[j]] = vals[i, self.bind_col[j]]
        self.n_bound[nd] |= self.var_bit[x]
        if not self._predicates_hold(nd, x):
            self.n_refc[nd] = 1
            self._release(nd)
            return NO_NODE
        self.created += 1
        self.ev_created += 1
        return nd

    @cython.cfunc
    @cython.exceptval(check=False)
    def _insert(self, nd: cython.int, head: cython.int, t: cython.double) -> cython.void:
        """Add a node to its (partition, state) list, merging dominated nodes if enabled."""
        before: cython.int = NO_NODE
        m: cython.int
        nxt: cython.int
        if self.merge:
            m = self.heads[head]
            while m != NO_NODE:
                nxt = self.n_next[m]
                if t - self.n_start[m] > self.w:
                    self._unlink(head, before, m)
                    self.ev_expired += 1
                    self.expired += 1
                elif self._same_values(m, nd) and self.n_err[m] <= self.n_err[nd] \
                        and self.n_start[m] >= self.n_start[nd]:
                    self.merged += 1
                    self.ev_merged += 1
                    return
                elif self._same_values(m, nd) and self.n_err[nd] <= self.n_err[m] \
                        and self.n_start[nd] >= self.n_start[m]:
                    self._unlink(head, before, m)
                    self.merged += 1
                    self.ev_merged += 1
                else:
                    before = m
                m = nxt
        self.n_next[nd] = self.heads[head]
        self.heads[head] = nd
        self.n_refc[nd] += 1
        self.live += 1
        if self.live > self.peak_live:
            self.peak_live = self.live

    # ------------------------------------------------------------------ output

    @cython.cfunc
    def _offer_pending(self, nd: cython.int, err: cython.int, p: cython.int,
                       t: cython.double) -> cython.void:
        """Keep the best match of partition ``p`` at point ``t`` (the reference is ours)."""
        old: cython.int = self.pend_node[p]
        if old != NO_NODE and not _better(err, self.n_start[nd],
                                          self.pend_err[p], self.n_start[old]):
            self._release(nd)
            return
        if old != NO_NODE:
            self._release(old)
        self.pend_node[p] = nd
        self.pend_point[p] = t
        self.pend_err[p] = err

    @cython.cfunc
    def _flush_partition(self, p: cython.int) -> cython.void:
        nd: cython.int = self.pend_node[p]
        self._emit(nd, p, self.pend_point[p], self.pend_err[p])
        self.pend_node[p] = NO_NODE
        self._release(nd)

    def flush(self):
        """Emit the pending best match of every partition (end of stream)."""
        p: cython.int
        for p in range(self.n_parts):
            if self.pend_node[p] != NO_NODE:
                self._flush_partition(p)

    @cython.cfunc
    def _emit(self, nd: cython.int, p: cython.int, point: cython.double,
              err: cython.int) -> cython.void:
        length: cython.longlong = 0
        m: cython.int = nd
        pos: cython.longlong
        while m != NO_NODE:
            length += 1
            m = self.n_prev[m]
        if self.o_n + 1 >= self.o_part.shape[0] or self.o_tn + length > self.o_traj.shape[0]:
            self._grow_output(length)
        self.o_part[self.o_n] = p
        self.o_point[self.o_n] = point
        self.o_start[self.o_n] = self.n_start[nd]
        self.o_err[self.o_n] = err
        pos = self.o_tn + length
        m = nd
        while m != NO_NODE:
            pos -= 1
            self.o_traj[pos] = self.n_loc[m]
            self.o_ttag[pos] = self.n_tag[m]
            m = self.n_prev[m]
        self.o_tn += length
        self.o_n += 1
        self.o_tptr[self.o_n] = self.o_tn

    def _grow_output(self, length):
        cap = 2 * self.o_part.shape[0]
        self.o_part = _grown(self.o_part, cap)
        self.o_point = _grown(self.o_point, cap)
        self.o_start = _grown(self.o_start, cap)
        self.o_err = _grown(self.o_err, cap)
        self.o_tptr = _grown(self.o_tptr, cap + 1)
        tcap = max(2 * self.o_traj.shape[0], self.o_tn + length)
        self.o_traj = _grown(self.o_traj, tcap)
        self.o_ttag = _grown(self.o_ttag, tcap)

    # ------------------------------------------------------------------ introspection

    def stats(self) -> dict:
        return {"created": self.created, "merged": self.merged, "expired": self.expired,
                "live": self.live, "peak_live": self.peak_live, "skipped": self.skipped,
                "arena_nodes": self.n_used, "arena_capacity": self.capacity}

    def bad_event(self) -> tuple:
        return self.bad_index, self.bad_code, self.bad_col

    def live_nodes(self) -> dict:
        """The live nodes as arrays (for tests and the history builder)."""
        ids = []
        for head in range(self.n_parts * self.n_states):
            nd = self.heads[head]
            while nd != NO_NODE:
                ids.append(nd)
                nd = self.n_next[nd]
        ids = np.array(ids, dtype=np.int64)
        return {"state": np.asarray(self.n_state)[ids], "err": np.asarray(self.n_err)[ids],
                "start": np.asarray(self.n_start)[ids], "loc": np.asarray(self.n_loc)[ids]}


@cython.cfunc
@cython.exceptval(check=False)
def _better(err_a: cython.int, start_a: cython.double,
            err_b: cython.int, start_b: cython.double) -> cython.bint:
    """The output order of matches at one point: least errors, then latest start."""
    if err_a != err_b:
        return err_a < err_b
    return start_a > start_b


@cython.cfunc
@cython.exceptval(check=False)
def _binary(op: cython.int, a: cython.double, b: cython.double) -> cython.double:
    if op == 2:
        return a + b
    if op == 3:
        return a - b
    if op == 4:
        return a * b
    if op == 5:
        return NAN if b == 0.0 else a / b
    if op == 7:
        return 1.0 if a < b else 0.0
    if op == 8:
        return 1.0 if a <= b else 0.0
    if op == 9:
        return 1.0 if a > b else 0.0
    if op == 10:
        return 1.0 if a >= b else 0.0
    if op == 11:
        return 1.0 if a == b else 0.0
    if op == 12:
        return 1.0 if a != b else 0.0
    if op == 13:
        return 1.0 if a != 0.0 and b != 0.0 else 0.0
    if op == 14:
        return 1.0 if a != 0.0 or b != 0.0 else 0.0
    if op == 17:
        return b if b < a else a
    return b if b > a else a  # op == 18, max


def _i32(tables, name):
    return np.ascontiguousarray(tables[name], dtype=np.int32)


def _resized(arr, new_len, dtype, width=None):
    """``arr`` grown to ``new_len`` rows (zeros), or a new zero array when ``arr`` is None."""
    if arr is None:
        return np.zeros((new_len, width) if width else new_len, dtype=dtype)
    return _grown(arr, new_len)


def _grown(arr, new_len, fill=0):
    arr = np.asarray(arr)
    out = np.full((new_len,) + arr.shape[1:], fill, dtype=arr.dtype)
    out[: min(len(arr), new_len)] = arr[:new_len]
    return out
