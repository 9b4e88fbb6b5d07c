"""The ACEP matcher kernel: Algorithm 1 (ACEPMatch) of [L16], Section 3.1, over flat arrays.

Written in Cython's pure-Python mode: compiled by ``setup.py`` it is the fast engine, and
where it could not be compiled the same file runs as plain Python, so both backends behave
alike by construction. Nodes live in preallocated arrays, linked per (partition, state) and
by ``prev``; no Python object per match node. How the kernel maps to Algorithm 1 (stored
nodes, precomputed costs, expiry, dominance, shedding, output) is docs/DESIGN.md, "As built:
the ACEP engine", Kernel representation.
"""

try:
    import cython
except ImportError:  # pragma: no cover - exercised on machines without Cython
    from . import _cython_shim as cython

import time

import numpy as np

if cython.compiled:
    from cython.cimports.libc.math import exp, floor
    from cython.cimports.posix.time import CLOCK_MONOTONIC, clock_gettime, timespec
else:
    from math import exp, floor

# C constants when compiled (a plain module global would be boxed and looked up each use)
NO_NODE = cython.declare(cython.int, -1)
POLICY_KEEP_FIRST = cython.declare(cython.int, 0)
POLICY_TABLE = cython.declare(cython.int, 1)
POLICY_CALLBACK = cython.declare(cython.int, 2)
FLAG_MERGED = cython.declare(cython.int, 1)
FLAG_REJECTED = cython.declare(cython.int, 2)
FLAG_LOGGED = cython.declare(cython.int, 4)
FLAG_DEFERRED = cython.declare(cython.int, 8)
FLAG_PROBE = cython.declare(cython.int, 16)  # kept whatever the credit, and its advances
FLAG_SAMPLE = cython.declare(cython.int, 32)  # a probe whose outcome is the unconstrained one
WEIGHT_SHIFT = cython.declare(cython.int, 8)  # a sample's weight 2**j sits in flag bits 8-10
MAX_WEIGHT_EXP = cython.declare(cython.int, 7)
VOID_SHARE = cython.declare(cython.double, 2.0)  # probes past this x their share void a block
MASK64 = cython.declare(cython.ulonglong, 0xFFFFFFFFFFFFFFFF)
GOLDEN = cython.declare(cython.ulonglong, 0x9E3779B97F4A7C15)
MIX1 = cython.declare(cython.ulonglong, 0xBF58476D1CE4E5B9)
MIX2 = cython.declare(cython.ulonglong, 0x94D049BB133111EB)
RNG_MASK = cython.declare(cython.ulonglong, 0xFFFFFFFF)
NAN = cython.declare(cython.double, float("nan"))
INF = cython.declare(cython.double, float("inf"))
BAD_TAG_BACK = 1
BAD_MISSING_ATTR = 2
BAD_NO_PARTITION = 3


class LimitExceeded(MemoryError):
    """The node pool or the output would grow past ``Kernel.max_entries``; the kernel is left
    mid-event and cannot go on."""

    def __init__(self, what: str, entries: int, limit: int):
        super().__init__(f"{what} would need {entries:,} entries, above the limit of "
                         f"{limit:,}")
        self.what, self.entries, self.limit = what, entries, limit


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
    c_part: cython.int
    c_type: cython.int  # the current event's type (whether its letters have predicates)
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
    # match vectors (docs/SHEDDING.md 2): per node its cell, first point reached, flags
    n_cell: cython.int[::1]
    n_reach: cython.double[::1]
    n_flag: cython.int[::1]
    has_bins: cython.bint
    rem_edges: cython.double[::1]
    gap_edges: cython.double[::1]
    n_rem: cython.int
    n_gap: cython.int
    c_cell: cython.int[::1]
    c_gap: cython.double[::1]
    c_rev: cython.int[::1]
    c_probe: cython.int[::1]
    # context (docs/SHEDDING.md 13): the partition's recent activity, and a tree over it
    p_act: cython.double[::1]
    c_act: cython.double
    c_idle: cython.double
    c_ctx: cython.int
    n_ctx: cython.int
    ctx_on: cython.bint
    t_feat: cython.int[::1]
    t_thr: cython.double[::1]
    t_left: cython.int[::1]
    t_right: cython.int[::1]
    n_act: cython.double[::1]
    n_idle: cython.double[::1]
    # deferred window starts (docs/SHEDDING.md 8): shed starts kept aside per (partition, state)
    defer: cython.int
    g_heads: cython.int[::1]
    g_len: cython.int[::1]
    n_defer: cython.int
    deferred: cython.longlong
    revived: cython.longlong
    deferred_scans: cython.longlong
    # budget and policy (docs/SHEDDING.md 1, 3)
    budget_on: cython.bint
    budget: cython.double
    depth: cython.double
    credit: cython.double
    policy_kind: cython.int
    sh_score: cython.double[::1]
    sh_class: cython.longlong[::1]
    sh_reserve: cython.double[::1]
    sh_reserve_adv: cython.double[::1]
    sh_need: cython.double[::1]
    sh_visits: cython.double[::1]
    prior_visits: cython.double
    found_at: cython.double[::1]
    cover: cython.double
    cover_slack: cython.double
    explore: cython.double
    rate: cython.double
    # probes (docs/SHEDDING.md 5): window starts whose whole subtree is kept, to learn from
    probe: cython.double
    probe_share: cython.double
    probe_act: cython.double
    act_sum: cython.double  # the activity at the blocks decided so far, for probe_act
    act_n: cython.double
    probe_ops: cython.double
    granted: cython.double
    probes: cython.longlong
    probes_void: cython.longlong
    samples_void: cython.longlong
    probe_key: cython.ulonglong
    p_hash: cython.longlong[::1]  # each partition's key hash, so draws follow keys, not ids
    pb_block: cython.double[::1]
    pb_state: cython.int[::1]
    min_score: cython.double
    proxy_live: cython.bint
    ahead: cython.double
    rng: cython.ulonglong
    callback: object
    ask_always: cython.bint
    s_state: cython.int[::1]
    s_err: cython.int[::1]
    s_start: cython.double[::1]
    s_prev: cython.int[::1]
    s_cell: cython.int[::1]
    s_gap: cython.double[::1]
    s_rev: cython.int[::1]
    s_probe: cython.int[::1]
    c_prio: cython.double[::1]
    c_order: cython.int[::1]
    c_pick: cython.int[::1]
    c_flag: cython.int[::1]
    c_seen: cython.longlong[::1]
    candidates: cython.longlong
    shed: cython.longlong
    decisions: cython.longlong
    decide_ns: cython.longlong
    # node log (docs/SHEDDING.md 4) and the reach marks it and learning need
    track: cython.bint
    log_on: cython.bint
    lg_n: cython.longlong
    lg_part: cython.int[::1]
    lg_pos: cython.longlong[::1]
    lg_tag: cython.double[::1]
    lg_state: cython.int[::1]
    lg_err: cython.int[::1]
    lg_start: cython.double[::1]
    lg_cell: cython.int[::1]
    lg_pcell: cython.int[::1]
    lg_reach: cython.double[::1]
    lg_gap: cython.double[::1]
    lg_merged: cython.int[::1]
    lg_probe: cython.int[::1]
    lg_act: cython.double[::1]
    lg_idle: cython.double[::1]
    n_part: cython.int[::1]
    max_entries: cython.longlong  # 0: no limit on node slots and output entries

    def __init__(self, tables, k, w, merge, all_trajectories, capacity=1024):
        self.max_entries = 0
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
        self.has_bins, self.n_rem, self.n_gap = False, 1, 1
        self.rem_edges = np.zeros(0, dtype=np.float64)
        self.gap_edges = np.zeros(0, dtype=np.float64)
        self.p_act = np.zeros(0, dtype=np.float64)
        self.c_act, self.c_idle, self.c_ctx, self.n_ctx, self.ctx_on = 0.0, 0.0, 0, 1, False
        self.t_feat = np.zeros(0, dtype=np.int32)
        self.t_thr = np.zeros(0, dtype=np.float64)
        self.t_left = np.zeros(0, dtype=np.int32)
        self.t_right = np.zeros(0, dtype=np.int32)
        self.budget_on, self.budget, self.depth, self.credit = False, 0.0, 0.0, 0.0
        self.policy_kind, self.explore, self.rate, self.rng = POLICY_KEEP_FIRST, 0.0, 0.0, 1
        self.probe, self.probe_share, self.probe_ops, self.granted = 0.0, 0.0, 0.0, 0.0
        self.probe_act, self.act_sum, self.act_n = 0.0, 0.0, 0.0
        self.probes = self.probes_void = self.samples_void = 0
        self.probe_key = 0
        self.p_hash = np.zeros(0, dtype=np.int64)
        self.pb_block = np.zeros(0, dtype=np.float64)
        self.pb_state = np.zeros(0, dtype=np.int32)
        self.sh_score = np.zeros(0, dtype=np.float64)
        self.sh_class = np.zeros(0, dtype=np.int64)
        self.sh_reserve = np.zeros(0, dtype=np.float64)
        self.sh_reserve_adv = np.zeros(0, dtype=np.float64)
        self.sh_need = np.zeros(0, dtype=np.float64)
        self.sh_visits = np.zeros(0, dtype=np.float64)
        self.prior_visits = 0.0
        self.found_at = np.zeros(0, dtype=np.float64)  # per partition: last match point
        self.cover, self.cover_slack = -1.0, 0.0
        self.c_type = 0
        self.callback, self.ask_always = None, False
        self.min_score, self.proxy_live, self.ahead = -1.0, False, 0.0
        self.candidates = self.shed = self.decisions = self.decide_ns = 0
        self.track, self.log_on = False, False
        self._reset_log(0)
        self.defer, self.n_defer = 0, 0
        self.g_heads = np.zeros(0, dtype=np.int32)
        self.g_len = np.zeros(0, dtype=np.int32)
        self.deferred = self.revived = self.deferred_scans = 0

    # ------------------------------------------------------------------ storage

    def _alloc_nodes(self, new_cap):
        if self.max_entries and new_cap > self.max_entries:
            raise LimitExceeded("the live match nodes", new_cap, self.max_entries)
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
        self.n_cell = _resized(self.n_cell if grown else None, new_cap, np.int32)
        self.n_reach = _resized(self.n_reach if grown else None, new_cap, np.float64)
        self.n_flag = _resized(self.n_flag if grown else None, new_cap, np.int32)
        self.n_part = _resized(self.n_part if grown else None, new_cap, np.int32)
        self.n_act = _resized(self.n_act if grown else None, new_cap, np.float64)
        self.n_idle = _resized(self.n_idle if grown else None, new_cap, np.float64)
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
        self.c_cell = _resized(self.c_cell if grown else None, new_cap, np.int32)
        self.c_gap = _resized(self.c_gap if grown else None, new_cap, np.float64)
        self.c_rev = _resized(self.c_rev if grown else None, new_cap, np.int32)
        self.c_probe = _resized(self.c_probe if grown else None, new_cap, np.int32)
        self.s_state = np.zeros(new_cap, dtype=np.int32)
        self.s_err = np.zeros(new_cap, dtype=np.int32)
        self.s_start = np.zeros(new_cap, dtype=np.float64)
        self.s_prev = np.zeros(new_cap, dtype=np.int32)
        self.s_cell = np.zeros(new_cap, dtype=np.int32)
        self.s_gap = np.zeros(new_cap, dtype=np.float64)
        self.s_rev = np.zeros(new_cap, dtype=np.int32)
        self.s_probe = np.zeros(new_cap, dtype=np.int32)
        self.c_prio = np.zeros(new_cap, dtype=np.float64)
        self.c_order = np.zeros(new_cap, dtype=np.int32)
        self.c_pick = np.zeros(new_cap, dtype=np.int32)
        self.c_flag = np.zeros(new_cap, dtype=np.int32)
        self.c_seen = np.zeros(new_cap, dtype=np.int64)
        self.c_cap = new_cap

    def set_partition_hash(self, p, key_hash):
        """Name partition ``p`` by a 64-bit hash of its key (as a signed int64): probe
        draws then follow the key, whatever id the order of the batches gave it."""
        self.p_hash[p] = key_hash

    def reserve_partitions(self, n):
        """Make room for partition ids ``0..n-1``."""
        if n <= self.n_parts:
            return
        cap = max(n, 2 * self.n_parts)
        ns = self.n_states
        heads = np.full(cap * ns, NO_NODE, dtype=np.int32)
        heads[: self.n_parts * ns] = np.asarray(self.heads)[: self.n_parts * ns]
        self.heads = heads
        g_heads = np.full(cap * ns, NO_NODE, dtype=np.int32)
        g_heads[: self.n_parts * ns] = np.asarray(self.g_heads)[: self.n_parts * ns]
        self.g_heads = g_heads
        self.g_len = _grown(self.g_len, cap * ns, 0)
        self.last_tag = _grown(self.last_tag, cap, -np.inf)
        self.pend_node = _grown(self.pend_node, cap, NO_NODE)
        self.pend_point = _grown(self.pend_point, cap, 0.0)
        self.pend_err = _grown(self.pend_err, cap, 0)
        self.found_at = _grown(self.found_at, cap, -np.inf)
        self.p_hash = _grown(self.p_hash, cap, 0)
        self.pb_block = _grown(self.pb_block, cap, -np.inf)
        self.pb_state = _grown(self.pb_state, cap, 0)
        self.p_act = _grown(self.p_act, cap, 0.0)
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
            if self.track:
                self._retire(nd)
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
                self._expire_list(p * self.n_states + q, self.last_tag[p], False)
                if self.defer > 0:
                    self._expire_list(p * self.n_states + q, self.last_tag[p], True)

    @cython.cfunc
    @cython.exceptval(check=False)
    def _expire_list(self, head: cython.int, t: cython.double,
                     deferred: cython.bint) -> cython.void:
        """Drop the nodes of one live (or deferred) list whose window has closed at ``t``."""
        before: cython.int = NO_NODE
        nd: cython.int = self.g_heads[head] if deferred else self.heads[head]
        nxt: cython.int
        while nd != NO_NODE:
            nxt = self.n_next[nd]
            if t - self.n_start[nd] <= self.w:
                before = nd
            elif deferred:
                self._drop_deferred(head, before, nd)
            else:
                self._unlink(head, before, nd)
                self.ev_expired += 1
                self.expired += 1
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
                if self.budget_on:
                    self.credit = min(self.credit + self.budget, self.depth)
                    self.granted += self.budget
                if self.ctx_on or self.log_on or self.probe_act > 0.0:
                    self._context(p, tags[i])
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
    def _context(self, p: cython.int, t: cython.double) -> cython.void:
        """The event's context: the partition's activity (its events in about the last
        window, exponentially weighted, this one included), the time since its previous
        event (at most ``w``), and the context tree's leaf for them."""
        last: cython.double = self.last_tag[p]
        if last == -INF:
            self.c_act, self.c_idle = 1.0, self.w
        else:
            self.c_idle = min(t - last, self.w)
            self.c_act = 1.0 + (self.p_act[p] * exp(-(t - last) / self.w) if self.w > 0.0
                                else 0.0)
        self.p_act[p] = self.c_act
        if self.ctx_on:
            self.c_ctx = self._leaf(self.c_act, self.c_idle)

    @cython.cfunc
    @cython.exceptval(check=False)
    def _leaf(self, act: cython.double, idle: cython.double) -> cython.int:
        """The context tree's leaf (children come after their parent: the walk ends)."""
        node: cython.int = 0
        v: cython.double
        while self.t_feat[node] >= 0:
            v = act if self.t_feat[node] == 0 else idle
            node = self.t_left[node] if v <= self.t_thr[node] else self.t_right[node]
        return self.t_left[node]

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
        nc: cython.int
        best: cython.int = NO_NODE
        best_err: cython.int = 0
        total: cython.int
        c: cython.int
        nd: cython.int
        sigma: cython.int
        probed: cython.bint = False
        self.c_tag = t
        self.c_part = p
        self.c_type = x
        nc = self._collect(x, t, p)
        self.candidates += nc
        self.n_defer = 0
        if self.budget_on:
            if nc + self._revivals(nc) > self.credit or \
                    ((self.ask_always or self.ahead > 0.0) and nc > 0):
                nc = self._shed(nc, p, t, loc)
            self.credit -= nc
        for c in range(nc):
            sigma = self.c_state[c]
            if self.c_rev[c] and self.n_flag[self.c_prev[c]] & FLAG_DEFERRED:
                self._revive(self.c_prev[c], p, t)
            if self.c_probe[c]:
                self.probe_ops += 1.0
                probed = True
            nd = self._make_node(c, x, vals, i, loc)
            if nd == NO_NODE:
                continue
            if self.c_probe[c]:
                self.n_flag[nd] |= FLAG_PROBE if self.c_probe[c] == 1 else \
                    FLAG_PROBE | FLAG_SAMPLE | ((self.c_probe[c] - 2) << WEIGHT_SHIFT)
            self.created += 1
            self.ev_created += 1
            total = self.n_err[nd] + self.final_cost[sigma]  # letters inserted after σ
            if total <= self.k:
                self.found_at[p] = t
                if self.track:
                    self._mark_reached(nd, t)
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
        for c in range(nc, nc + self.n_defer):
            self._defer_start(c, x, vals, i, loc, p)
        if probed and self.probe_ops > VOID_SHARE * self.probe_share * (self.granted + self.depth):
            self._void_probes(p)

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
                if self.defer > 0:
                    nc = self._collect_deferred(nc, sigma, s, head, t)
        return nc

    @cython.cfunc
    def _collect_deferred(self, nc: cython.int, sigma: cython.int, s: cython.int,
                          head: cython.int, t: cython.double) -> cython.int:
        """Candidates that advance a deferred start (each costs 2: the start and the advance)."""
        before: cython.int = NO_NODE
        nd: cython.int = self.g_heads[head]
        nxt: cython.int
        e: cython.int
        while nd != NO_NODE:
            nxt = self.n_next[nd]
            self.deferred_scans += 1
            if t - self.n_start[nd] > self.w:
                self._drop_deferred(head, before, nd)
            else:
                e = self.n_err[nd] + self.src_cost[s]
                if e <= self.k:
                    nc = self._add_candidate(nc, sigma, e, self.n_start[nd], nd)
                    self.c_rev[nc - 1] = 1
                before = nd
            nd = nxt
        return nc

    @cython.cfunc
    def _add_candidate(self, nc: cython.int, sigma: cython.int, e: cython.int,
                       start: cython.double, prev: cython.int) -> cython.int:
        if nc == self.c_cap:
            self._grow_candidates(2 * self.c_cap)
        gap: cython.double = 0.0
        self.c_state[nc] = sigma
        self.c_err[nc] = e
        self.c_start[nc] = start
        self.c_prev[nc] = prev
        self.c_rev[nc] = 0
        self.c_probe[nc] = 0
        if prev != NO_NODE:
            self.n_refc[prev] += 1  # held until the new node takes it over as its prev
            gap = self.c_tag - self.n_tag[prev]
            if self.n_flag[prev] & FLAG_PROBE:  # a probe's subtree is kept whole
                self.c_probe[nc] = 1 if not self.n_flag[prev] & FLAG_SAMPLE else \
                    2 + ((self.n_flag[prev] >> WEIGHT_SHIFT) & MAX_WEIGHT_EXP)
        elif self.probe > 0.0 and self.budget_on:
            self.c_probe[nc] = self._probe_start()
        self.c_gap[nc] = gap
        self.c_cell[nc] = self._cell(sigma, e, self.w - (self.c_tag - start), gap) \
            if self.has_bins else -1
        return nc + 1

    @cython.cfunc
    def _make_node(self, c: cython.int, x: cython.int, vals: cython.double[:, ::1],
                   i: cython.Py_ssize_t, loc: cython.longlong) -> cython.int:
        """Phase 2: create candidate ``c``'s node; NO_NODE if a predicate rejects it. The
        caller counts it as created (a deferred start is not)."""
        nd: cython.int = self._new_node()
        prev: cython.int = self.c_prev[c]
        j: cython.int
        self.n_state[nd] = self.c_state[c]
        self.n_err[nd] = self.c_err[c]
        self.n_start[nd] = self.c_start[c]
        self.n_loc[nd] = loc
        self.n_tag[nd] = self.c_tag
        self.n_prev[nd] = prev
        self.n_cell[nd] = self.c_cell[c]
        self.n_reach[nd] = NAN
        self.n_flag[nd] = 0
        self.n_part[nd] = self.c_part
        self.n_act[nd] = self.c_act
        self.n_idle[nd] = self.c_idle
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
            self.n_flag[nd] = FLAG_REJECTED
            self.n_refc[nd] = 1
            self._release(nd)
            return NO_NODE
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
                    self.n_flag[nd] |= FLAG_MERGED
                    self.merged += 1
                    self.ev_merged += 1
                    return
                elif self._same_values(m, nd) and self.n_err[nd] <= self.n_err[m] \
                        and self.n_start[nd] >= self.n_start[m]:
                    self.n_flag[m] |= FLAG_MERGED
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

    # ------------------------------------------------------------------ deferred window starts

    @cython.cfunc
    @cython.exceptval(check=False)
    def _revivals(self, nc: cython.int) -> cython.int:
        """How many of the ``nc`` candidates would revive a deferred start."""
        c: cython.int
        n: cython.int = 0
        if self.defer == 0:
            return 0
        for c in range(nc):
            n += self.c_rev[c]
        return n

    @cython.cfunc
    def _defer_start(self, c: cython.int, x: cython.int, vals: cython.double[:, ::1],
                     i: cython.Py_ssize_t, loc: cython.longlong, p: cython.int) -> cython.void:
        """Set shed start ``c`` aside (no operation: nothing is matched against it until a
        later event would advance it); the oldest of a full list makes room."""
        nd: cython.int = self._make_node(c, x, vals, i, loc)
        head: cython.int
        last: cython.int
        before: cython.int = NO_NODE
        if nd == NO_NODE:
            return
        self.n_flag[nd] = FLAG_DEFERRED
        head = p * self.n_states + self.n_state[nd]
        if self.g_len[head] >= self.defer:
            last = self.g_heads[head]
            while self.n_next[last] != NO_NODE:
                before = last
                last = self.n_next[last]
            self._drop_deferred(head, before, last)
        self.n_next[nd] = self.g_heads[head]
        self.g_heads[head] = nd
        self.g_len[head] += 1
        self.n_refc[nd] = 1
        self.deferred += 1

    @cython.cfunc
    @cython.exceptval(check=False)
    def _drop_deferred(self, head: cython.int, before: cython.int,
                       nd: cython.int) -> cython.void:
        """Forget deferred start ``nd`` (expired, or the oldest of a full list)."""
        self._unlink_deferred(head, before, nd)
        self._release(nd)

    @cython.cfunc
    @cython.exceptval(check=False)
    def _unlink_deferred(self, head: cython.int, before: cython.int,
                         nd: cython.int) -> cython.void:
        if before == NO_NODE:
            self.g_heads[head] = self.n_next[nd]
        else:
            self.n_next[before] = self.n_next[nd]
        self.g_len[head] -= 1

    @cython.cfunc
    def _revive(self, nd: cython.int, p: cython.int, t: cython.double) -> cython.void:
        """A kept candidate advances deferred start ``nd``: the start becomes a node now (one
        operation) and joins its state's live list; the list's reference passes to it."""
        head: cython.int = p * self.n_states + self.n_state[nd]
        before: cython.int = NO_NODE
        m: cython.int = self.g_heads[head]
        while m != nd:
            before = m
            m = self.n_next[m]
        self._unlink_deferred(head, before, nd)
        self.n_flag[nd] = 0
        self.created += 1
        self.ev_created += 1
        self.revived += 1
        self.candidates += 1
        self.credit -= 1.0
        self._insert(nd, head, t)
        self.n_refc[nd] -= 1  # the candidate that advances it still holds one

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
        if self.max_entries and tcap > self.max_entries:
            raise LimitExceeded("the matches of this batch", tcap, self.max_entries)
        self.o_traj = _grown(self.o_traj, tcap)
        self.o_ttag = _grown(self.o_ttag, tcap)

    def set_limit(self, entries):
        """At most ``entries`` node slots and output entries (0: no limit); past it the
        kernel raises :class:`LimitExceeded` instead of growing."""
        self.max_entries = int(entries)

    # ------------------------------------------------------------------ shedding (SHEDDING.md)

    def set_bins(self, rem_edges, gap_edges, context=None):
        """Compute a cell per candidate (SHEDDING.md 2), split by the leaf of ``context``
        (an ``acep.shedding.ContextTree``, or None; SHEDDING.md 13)."""
        self.rem_edges = np.ascontiguousarray(rem_edges, dtype=np.float64)
        self.gap_edges = np.ascontiguousarray(gap_edges, dtype=np.float64)
        self.n_rem, self.n_gap = len(self.rem_edges) + 1, len(self.gap_edges) + 1
        self.has_bins = True
        if context is not None:
            self.set_context(context.feature, context.threshold, context.left, context.right)

    def set_context(self, feature, threshold, left, right):
        """Split every cell by the leaf of a context tree over (activity, idle time): at a
        split node ``feature`` is 0 or 1 and the walk goes ``left`` when the value is at most
        ``threshold``; at a leaf ``feature`` is -1 and ``left`` is the leaf's number."""
        self.t_feat = np.ascontiguousarray(feature, dtype=np.int32)
        self.t_thr = np.ascontiguousarray(threshold, dtype=np.float64)
        self.t_left = np.ascontiguousarray(left, dtype=np.int32)
        self.t_right = np.ascontiguousarray(right, dtype=np.int32)
        self.n_ctx, self.ctx_on = int(np.sum(np.asarray(self.t_feat) < 0)), True

    def set_budget(self, ops_per_event, depth):
        """A token bucket of candidate operations (SHEDDING.md 1); it starts full."""
        self.budget_on = True
        self.budget, self.depth, self.credit = ops_per_event, depth, depth

    def set_table_policy(self, score, proxy_class, explore, rate, seed, min_score=-1.0,
                         proxy_live=False, ahead=0.0, reserve=None, reserve_adv=None,
                         cover=-1.0, need=None, cover_slack=0.0, defer=0, probe=0.0,
                         probe_share=0.0, visits=None, prior_visits=0.0, probe_act=0.0):
        """``reserve``/``reserve_adv``: per cell, the share of the bucket that must remain
        after keeping a seed/advance candidate of the cell (None: no reserve); ``cover``
        (< 0: off): the share that must remain after keeping a covered candidate (one whose
        window starts at or before the partition's last match point); ``need``: per cell, the
        window a live node must have left to stand in for a candidate (None: any)."""
        self.policy_kind = POLICY_TABLE
        self.sh_reserve = np.zeros(0, dtype=np.float64) if reserve is None else reserve
        self.sh_reserve_adv = np.zeros(0, dtype=np.float64) if reserve_adv is None \
            else reserve_adv
        self.sh_need = np.zeros(0, dtype=np.float64) if need is None else need
        self.cover, self.cover_slack = cover, cover_slack
        self.sh_score, self.sh_class = score, proxy_class
        self.explore, self.rate = explore, rate
        self.min_score, self.proxy_live, self.ahead = min_score, proxy_live, ahead
        self.rng = (seed & 0xFFFFFFFF) or 2463534242
        self.track = self.track or rate > 0.0
        self.defer = defer
        self.probe, self.probe_share, self.probe_act = probe, probe_share, probe_act
        self.sh_visits = np.zeros(0, dtype=np.float64) if visits is None else visits
        self.prior_visits = prior_visits
        self.probe_key = _mix64(seed & MASK64)

    def set_keep_first(self):
        self.policy_kind, self.defer, self.probe = POLICY_KEEP_FIRST, 0, 0.0

    def set_callback(self, fn, every_event=False):
        """``every_event``: ask on every event with candidates, not only when over budget."""
        self.policy_kind, self.callback, self.defer, self.probe = POLICY_CALLBACK, fn, 0, 0.0
        self.ask_always = bool(every_event)

    def set_trace(self, on):
        self.log_on = bool(on)
        self.track = self.track or self.log_on

    def shedding_stats(self) -> dict:
        return {"candidates": self.candidates, "shed": self.shed, "decisions": self.decisions,
                "decide_ns": self.decide_ns, "credit": self.credit, "deferred": self.deferred,
                "revived": self.revived, "deferred_scans": self.deferred_scans,
                "probes": self.probes, "probe_ops": int(self.probe_ops),
                "probes_void": self.probes_void, "samples_void": self.samples_void}

    @cython.cfunc
    @cython.exceptval(check=False)
    def _cell(self, sigma: cython.int, e: cython.int, rem: cython.double,
              gap: cython.double) -> cython.int:
        r: cython.int = 0
        g: cython.int = 0
        while r < self.n_rem - 1 and self.rem_edges[r] <= rem:
            r += 1
        while g < self.n_gap - 1 and self.gap_edges[g] <= gap:
            g += 1
        return (((sigma * (self.k + 1) + e) * self.n_rem + r) * self.n_gap + g) * self.n_ctx + \
            self.c_ctx

    @cython.cfunc
    def _shed(self, nc: cython.int, p: cython.int, t: cython.double,
              loc: cython.longlong) -> cython.int:
        """Keep candidates costing at most ``floor(credit)`` as the policy says (one operation
        each, two for one that revives a deferred start); return how many."""
        cap: cython.int = int(min(self.credit, 1e9)) if self.credit > 0.0 else 0
        m: cython.int = min(cap, nc)
        c: cython.int
        t0: cython.longlong = _now_ns()
        if self.policy_kind == POLICY_TABLE:
            m = self._select_by_score(nc, cap, p)
        elif self.policy_kind == POLICY_CALLBACK:
            m = self._select_by_callback(nc, m, p, t, loc)
        else:
            for c in range(m):
                self.c_order[c] = c
        self._keep_selected(nc, m)
        self.shed += nc - m
        self.decisions += 1
        self.decide_ns += _now_ns() - t0
        return m

    @cython.cfunc
    def _select_by_score(self, nc: cython.int, m: cython.int, p: cython.int) -> cython.int:
        """``c_order[:n]``: the best candidates, costing at most ``m``, proxies deferred;
        return n. A candidate costs one operation, two if it revives a deferred start.

        Deferred: a score below ``min_score``, a proxy class already kept, or (with
        ``proxy_live``) a live node of the partition at the same state with no more errors.
        Deferred candidates fill what budget remains; with ``ahead`` > 0 only the credit
        above ``ahead`` x the bucket's depth (a reserve for the candidates not deferred).
        A seed candidate is shed outright when the credit after it would fall below its
        cell's ``sh_reserve`` x the depth, an advance likewise with ``sh_reserve_adv``, and a
        *covered* candidate (its window starts at or before the partition's last match
        point, so any point it reaches is within ``w`` of that one: the same bundle) below
        ``cover`` x the depth. A candidate that surely completes a match now (its errors
        allow the final state and the event type has no predicates) is covered exactly when
        the point is within ``w`` of the last match point, whatever its start. With
        ``sh_need`` a live node stands in only if it has at least the candidate's cell's
        ``need`` of its window left.
        """
        c: cython.int
        j: cython.int
        n_kept: cython.int = 0
        spent: cython.int = 0
        cost: cython.int
        n_seen: cython.int = 0
        spare: cython.double
        cls: cython.longlong
        has_table: cython.bint = self.sh_score.shape[0] > 0
        has_class: cython.bint = self.sh_class.shape[0] > 0
        has_reserve: cython.bint = self.sh_reserve.shape[0] > 0
        has_reserve_adv: cython.bint = self.sh_reserve_adv.shape[0] > 0
        has_need: cython.bint = self.sh_need.shape[0] > 0
        found: cython.double = self.found_at[p] + self.cover_slack * self.w
        same: cython.bint = self.c_tag - self.found_at[p] <= self.w  # a point now: same bundle
        sure: cython.bint = self.check_ptr[self.c_type] == self.check_ptr[self.c_type + 1]
        for c in range(nc):
            self.c_prio[c] = self.sh_score[self.c_cell[c]] if has_table else 0.0
            if self.explore > 0.0 and self._rand() < self.explore:
                self.c_prio[c] = self._rand()
            self.c_order[c] = c
            self.c_flag[c] = 0
        _heapsort(self, nc)
        if self.probe > 0.0:
            for j in range(nc):  # probes first, whatever the credit: their subtrees stay whole
                c = self.c_order[j]
                if self.c_probe[c]:
                    self.c_flag[c] = 1
                    self.c_pick[n_kept] = c
                    n_kept += 1
                    spent += 1 + self.c_rev[c]
        for j in range(nc):  # first pass: the candidates no kept node stands in for
            if spent >= m:
                break
            c = self.c_order[j]
            if self.c_flag[c] == 1:
                continue
            cost = 1 + self.c_rev[c]
            if self.c_prio[c] < self.min_score or spent + cost > m:
                continue
            if has_reserve and (self.c_prev[c] == NO_NODE or self.c_rev[c]) and \
                    self.credit - spent - cost < self.sh_reserve[self.c_cell[c]] * self.depth:
                self.c_flag[c] = 2  # a new window start below its cell's reserve: shed
                continue
            if has_reserve_adv and self.c_prev[c] != NO_NODE and not self.c_rev[c] and \
                    self.credit - spent - cost < self.sh_reserve_adv[self.c_cell[c]] * self.depth:
                self.c_flag[c] = 2  # an advance below its cell's reserve: shed
                continue
            if self.cover >= 0.0 and \
                    (same if sure and self.c_err[c] + self.final_cost[self.c_state[c]] <= self.k
                     else self.c_start[c] <= found) and \
                    self.credit - spent - cost < self.cover * self.depth:
                self.c_flag[c] = 2  # covered: any point it reaches is in a bundle found
                continue
            if self.proxy_live and self._has_live_proxy(
                    p, self.c_state[c], self.c_err[c],
                    self.sh_need[self.c_cell[c]] if has_need else 0.0):
                continue
            if has_class:
                cls = self.sh_class[self.c_cell[c]]
                if cls >= 0 and _seen(self.c_seen, n_seen, cls):
                    continue
                if cls >= 0:
                    self.c_seen[n_seen] = cls
                    n_seen += 1
            self.c_flag[c] = 1
            self.c_pick[n_kept] = c
            n_kept += 1
            spent += cost
        if self.ahead > 0.0:
            spare = self.credit - spent - self.ahead * self.depth
            m = min(m, spent + (int(min(spare, 1e9)) if spare > 0.0 else 0))
        for j in range(nc):  # second pass: fill with the deferred ones
            if spent >= m:
                break
            c = self.c_order[j]
            cost = 1 + self.c_rev[c]
            if self.c_flag[c] == 0 and spent + cost <= m:
                self.c_pick[n_kept] = c
                n_kept += 1
                spent += cost
        for j in range(n_kept):
            self.c_order[j] = self.c_pick[j]
        return n_kept

    @cython.cfunc
    @cython.exceptval(check=False)
    def _has_live_proxy(self, p: cython.int, sigma: cython.int, e: cython.int,
                        need: cython.double) -> cython.bint:
        """A live node of partition ``p`` at ``sigma`` with at most ``e`` errors and at least
        ``need`` of its window left (``need`` >= 0: not expired)."""
        nd: cython.int = self.heads[p * self.n_states + sigma]
        while nd != NO_NODE:
            if self.w - (self.c_tag - self.n_start[nd]) >= need and self.n_err[nd] <= e:
                return True
            nd = self.n_next[nd]
        return False

    def _select_by_callback(self, nc, m, p, t, loc):
        keep = self.callback(
            np.asarray(self.c_state)[:nc], np.asarray(self.c_err)[:nc],
            np.asarray(self.c_start)[:nc], np.asarray(self.c_gap)[:nc],
            np.asarray(self.c_cell)[:nc], np.asarray(self.c_prev)[:nc], p, t, loc, m)
        np.asarray(self.c_order)[: len(keep)] = keep
        return len(keep)

    @cython.cfunc
    def _keep_selected(self, nc: cython.int, m: cython.int) -> cython.void:
        """Keep the candidates ``c_order[:m]``, in the engine's own order (so a run that
        keeps everything is the unconstrained run); release the others' prevs.

        With bundle coverage on, a shed candidate that surely completes a match now (see
        ``_select_by_score``) within ``w`` of the partition's last match point proves that
        the bundle found goes on to now: the last match point moves to now, as if found."""
        c: cython.int
        j: cython.int = 0
        n_defer: cython.int = 0
        p: cython.int = self.c_part
        track: cython.bint = self.policy_kind == POLICY_TABLE and self.cover >= 0.0 and \
            self.check_ptr[self.c_type] == self.check_ptr[self.c_type + 1] and \
            self.c_tag - self.found_at[p] <= self.w
        for c in range(nc):
            self.c_flag[c] = 0
        for c in range(m):
            self.c_flag[self.c_order[c]] = 1
        for c in range(nc):
            if self.c_flag[c] == 1:
                self._stage(c, j)
                j += 1
            else:
                if track and self.c_err[c] + self.final_cost[self.c_state[c]] <= self.k:
                    self.found_at[p] = self.c_tag  # a sure point of the bundle found
                if self.c_prev[c] != NO_NODE:
                    self._release(self.c_prev[c])
                elif self.defer > 0 and self.c_err[c] + self.final_cost[self.c_state[c]] > \
                        self.k and self.c_err[c] + self.next_cost[self.c_state[c]] <= self.k:
                    self.c_pick[n_defer] = c  # a start to defer (placed after the kept)
                    n_defer += 1
        for c in range(n_defer):  # a start: no prev, gap 0, not revived
            self._stage(self.c_pick[c], j + c)
        self.n_defer = n_defer
        for c in range(j + n_defer):  # copied back: swapping memoryviews costs more
            self.c_state[c] = self.s_state[c]
            self.c_err[c] = self.s_err[c]
            self.c_start[c] = self.s_start[c]
            self.c_prev[c] = self.s_prev[c]
            self.c_cell[c] = self.s_cell[c]
            self.c_gap[c] = self.s_gap[c]
            self.c_rev[c] = self.s_rev[c]
            self.c_probe[c] = self.s_probe[c]

    @cython.cfunc
    @cython.inline
    @cython.exceptval(check=False)
    def _stage(self, c: cython.int, j: cython.int) -> cython.void:
        """Candidate ``c`` into slot ``j`` of the staging arrays (copied back after)."""
        self.s_state[j] = self.c_state[c]
        self.s_err[j] = self.c_err[c]
        self.s_start[j] = self.c_start[c]
        self.s_prev[j] = self.c_prev[c]
        self.s_cell[j] = self.c_cell[c]
        self.s_gap[j] = self.c_gap[c]
        self.s_rev[j] = self.c_rev[c]
        self.s_probe[j] = self.c_probe[c]

    @cython.cfunc
    @cython.exceptval(check=False)
    def _probe_start(self) -> cython.int:
        """Whether a window start of the current partition is a probe: 2 + j if its outcome
        is a sample of the unconstrained run's, of weight 2**j, 1 if it is kept only to keep
        those exact, 0 if not a probe (docs/SHEDDING.md 5).

        Each partition's time is cut in blocks of one window; a block is a *sample block*
        with probability ``probe``, by a seeded hash of (partition, block), so every start
        is sampled with the same probability whatever the stream. The starts of a sample
        block and of the block after it are probes: a node that could dominate a sample
        node starts at most one window after it, so sample nodes live and merge as they
        would without shedding. With ``probe_act`` > 0 a block is drawn with probability
        ``probe / 2**j``, ``j`` (at most 7) the least with ``act <= probe_act x mean_act x
        2**j``: ``act`` is the partition's activity at the block's first start, ``mean_act``
        the mean over the blocks decided so far; its samples weigh ``2**j``. A block is
        decided at its partition's first start in it (the mean includes it); while probes
        have spent ``probe_share`` of the credit granted, none is sampled, and past twice
        that share the spending partition's probes are void (``_void_probes``)."""
        p: cython.int = self.c_part
        b: cython.double = self.c_tag / self.w if self.w > 0.0 else self.c_tag
        if -4.5e15 < b < 4.5e15:  # beyond, a double is whole (or infinite: Python's floor raises)
            b = floor(b)
        after: cython.bint
        j: cython.int = 0
        if b != self.pb_block[p]:
            after = self.pb_state[p] >= 2 and b == self.pb_block[p] + 1.0
            self.pb_block[p] = b
            self.act_sum += self.c_act
            self.act_n += 1.0
            while self.probe_act > 0.0 and j < MAX_WEIGHT_EXP and \
                    self.c_act > self.probe_act * self.act_sum / self.act_n * (1 << j):
                j += 1
            if self._block_draw(p, b) < self.probe / (1 << j) and \
                    self.probe_ops < self.probe_share * (self.granted + self.depth):
                self.pb_state[p] = 2 + j
                self.probes += 1
            else:
                self.pb_state[p] = 1 if after else 0
        return self.pb_state[p]

    @cython.cfunc
    @cython.exceptval(check=False)
    def _void_probes(self, p: cython.int) -> cython.void:
        """Make the live probes of partition ``p`` ordinary nodes, and learn from none of
        their samples: probes have spent more than ``VOID_SHARE`` times their share of the
        credit (docs/SHEDDING.md 5). The rest of the block starts no probe."""
        q: cython.int
        nd: cython.int
        a: cython.int
        for q in range(self.n_states):
            nd = self.heads[p * self.n_states + q]
            while nd != NO_NODE:
                a = nd
                while a != NO_NODE and self.n_flag[a] & FLAG_PROBE:  # a probe's prevs are probes
                    if self.n_flag[a] & FLAG_SAMPLE:
                        self.samples_void += 1
                    self.n_flag[a] &= ~(FLAG_PROBE | FLAG_SAMPLE | (MAX_WEIGHT_EXP << WEIGHT_SHIFT))
                    a = self.n_prev[a]
                nd = self.n_next[nd]
        self.pb_state[p] = 0
        self.probes_void += 1

    @cython.cfunc
    @cython.exceptval(check=False)
    def _block_draw(self, p: cython.int, b: cython.double) -> cython.double:
        """A uniform draw in [0, 1) fixed by the policy's seed, the partition's key and the
        block."""
        block: cython.longlong = 0x7FFFFFFFFFFFFFFF  # the blocks past 2^63 windows share one
        if -9.2e18 < b < 9.2e18:
            block = int(b)
        elif b < 0.0:
            block = -0x7FFFFFFFFFFFFFFF
        x: cython.ulonglong = self.probe_key ^ _mix64(int(self.p_hash[p]) & MASK64)
        x = _mix64(x ^ (block & MASK64))
        return (x >> 11) / 9007199254740992.0

    @cython.cfunc
    @cython.exceptval(check=False)
    def _rand(self) -> cython.double:
        """xorshift32: the kernel's own seeded generator (runs repeat exactly)."""
        x: cython.ulonglong = self.rng
        x ^= (x << 13) & RNG_MASK
        x ^= x >> 17
        x ^= (x << 5) & RNG_MASK
        self.rng = x
        return x / 4294967296.0

    # ------------------------------------------------------------------ outcomes and node log

    @cython.cfunc
    @cython.exceptval(check=False)
    def _mark_reached(self, nd: cython.int, point: cython.double) -> cython.void:
        """Mark the trajectory up to its first marked node: all of it reaches ``point``."""
        while nd != NO_NODE and self.n_reach[nd] != self.n_reach[nd]:
            self.n_reach[nd] = point
            nd = self.n_prev[nd]

    @cython.cfunc
    def _retire(self, nd: cython.int) -> cython.void:
        """A node is freed: its outcome is settled; learn from it and log it."""
        flag: cython.int = self.n_flag[nd]
        reached: cython.bint = self.n_reach[nd] == self.n_reach[nd]
        cell: cython.int = self.n_cell[nd]
        if flag & (FLAG_REJECTED | FLAG_LOGGED | FLAG_DEFERRED):
            return  # a deferred start never revived was never a node
        if self.rate > 0.0 and cell >= 0 and (reached or (flag & FLAG_MERGED) == 0) and \
                (self.probe == 0.0 or not self.budget_on or flag & FLAG_SAMPLE):
            self._learn(cell, 1.0 if reached else 0.0,
                        (1 << ((flag >> WEIGHT_SHIFT) & MAX_WEIGHT_EXP)) if flag & FLAG_SAMPLE
                        else 1)
        if self.log_on:
            self._log(nd)

    @cython.cfunc
    @cython.exceptval(check=False)
    def _learn(self, cell: cython.int, outcome: cython.double,
               weight: cython.double) -> cython.void:
        """Move the cell's score towards an outcome of some weight: by the learning rate, or
        by 1 / (prior visits + visits) while that is larger (a running mean from the prior),
        times the weight."""
        step: cython.double = self.rate
        if self.sh_visits.shape[0] > 0:
            self.sh_visits[cell] += weight
            step = max(step, 1.0 / (self.prior_visits + self.sh_visits[cell]))
        self.sh_score[cell] += min(1.0, step * weight) * (outcome - self.sh_score[cell])

    @cython.cfunc
    def _log(self, nd: cython.int) -> cython.void:
        i: cython.longlong = self.lg_n
        prev: cython.int = self.n_prev[nd]
        if i == self.lg_part.shape[0]:
            self._grow_log(2 * i + 1024)
        self.lg_part[i] = self.n_part[nd]
        self.lg_pos[i] = self.n_loc[nd]
        self.lg_tag[i] = self.n_tag[nd]
        self.lg_state[i] = self.n_state[nd]
        self.lg_err[i] = self.n_err[nd]
        self.lg_start[i] = self.n_start[nd]
        self.lg_cell[i] = self.n_cell[nd]
        self.lg_pcell[i] = self.n_cell[prev] if prev != NO_NODE else -1
        self.lg_reach[i] = self.n_reach[nd]
        self.lg_gap[i] = self.n_tag[nd] - self.n_tag[prev] if prev != NO_NODE else 0.0
        self.lg_merged[i] = 1 if self.n_flag[nd] & FLAG_MERGED else 0
        self.lg_probe[i] = 2 + ((self.n_flag[nd] >> WEIGHT_SHIFT) & MAX_WEIGHT_EXP) \
            if self.n_flag[nd] & FLAG_SAMPLE else (1 if self.n_flag[nd] & FLAG_PROBE else 0)
        self.lg_act[i] = self.n_act[nd]
        self.lg_idle[i] = self.n_idle[nd]
        self.n_flag[nd] |= FLAG_LOGGED
        self.lg_n = i + 1

    def _reset_log(self, cap):
        self.lg_n = 0
        self.lg_part = np.zeros(cap, dtype=np.int32)
        self.lg_pos = np.zeros(cap, dtype=np.int64)
        self.lg_tag = np.zeros(cap, dtype=np.float64)
        self.lg_state = np.zeros(cap, dtype=np.int32)
        self.lg_err = np.zeros(cap, dtype=np.int32)
        self.lg_start = np.zeros(cap, dtype=np.float64)
        self.lg_cell = np.zeros(cap, dtype=np.int32)
        self.lg_pcell = np.zeros(cap, dtype=np.int32)
        self.lg_reach = np.zeros(cap, dtype=np.float64)
        self.lg_gap = np.zeros(cap, dtype=np.float64)
        self.lg_merged = np.zeros(cap, dtype=np.int32)
        self.lg_probe = np.zeros(cap, dtype=np.int32)
        self.lg_act = np.zeros(cap, dtype=np.float64)
        self.lg_idle = np.zeros(cap, dtype=np.float64)

    def _grow_log(self, cap):
        self.lg_part, self.lg_pos = _grown(self.lg_part, cap), _grown(self.lg_pos, cap)
        self.lg_tag, self.lg_state = _grown(self.lg_tag, cap), _grown(self.lg_state, cap)
        self.lg_err, self.lg_start = _grown(self.lg_err, cap), _grown(self.lg_start, cap)
        self.lg_cell, self.lg_pcell = _grown(self.lg_cell, cap), _grown(self.lg_pcell, cap)
        self.lg_reach, self.lg_merged = _grown(self.lg_reach, cap), _grown(self.lg_merged, cap)
        self.lg_gap, self.lg_probe = _grown(self.lg_gap, cap), _grown(self.lg_probe, cap)
        self.lg_act, self.lg_idle = _grown(self.lg_act, cap), _grown(self.lg_idle, cap)

    def take_node_log(self) -> dict:
        """The nodes retired so far (SHEDDING.md 4), and clear the log."""
        n = self.lg_n
        columns = [np.asarray(self.lg_part), np.asarray(self.lg_pos), np.asarray(self.lg_tag),
                   np.asarray(self.lg_state), np.asarray(self.lg_err),
                   np.asarray(self.lg_start), np.asarray(self.lg_cell),
                   np.asarray(self.lg_pcell), np.asarray(self.lg_reach),
                   np.asarray(self.lg_merged), np.asarray(self.lg_gap),
                   np.asarray(self.lg_probe), np.asarray(self.lg_act),
                   np.asarray(self.lg_idle)]
        out = {key: col[:n].copy() for key, col in zip(_LOG_KEYS, columns)}
        out["merged"] = out["merged"].astype(np.uint8)
        out["probe"] = out["probe"].astype(np.uint8)
        self._reset_log(0)
        return out

    def log_remaining(self):
        """Log every node still allocated (end of stream: their outcomes are final)."""
        free = np.zeros(self.capacity, dtype=bool)
        nd = self.free_head
        while nd != NO_NODE:
            free[nd] = True
            nd = self.n_next[nd]
        for nd in np.flatnonzero(~free):
            if self.n_flag[nd] & (FLAG_REJECTED | FLAG_LOGGED | FLAG_DEFERRED) == 0:
                self._log(nd)

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


_LOG_KEYS = ("partition", "position", "tag", "state", "err", "start", "cell", "prev_cell",
             "reach", "merged", "gap", "probe", "act", "idle")


@cython.cfunc
@cython.exceptval(check=False)
def _now_ns() -> cython.longlong:
    """A monotonic clock in ns: clock_gettime when compiled (a Python call would cost more
    than many decisions it times), ``time.perf_counter_ns`` otherwise."""
    if not cython.compiled:
        return time.perf_counter_ns()
    ts = cython.declare(timespec)
    clock_gettime(CLOCK_MONOTONIC, cython.address(ts))
    return ts.tv_sec * 1000000000 + ts.tv_nsec


@cython.cfunc
@cython.exceptval(check=False)
def _mix64(x: cython.ulonglong) -> cython.ulonglong:
    """splitmix64's finaliser: a well-mixed 64-bit hash of ``x``."""
    x = (x + GOLDEN) & MASK64
    x = ((x ^ (x >> 30)) * MIX1) & MASK64
    x = ((x ^ (x >> 27)) * MIX2) & MASK64
    return x ^ (x >> 31)


@cython.cfunc
@cython.exceptval(check=False)
def _seen(seen: cython.longlong[::1], n: cython.int, cls: cython.longlong) -> cython.bint:
    i: cython.int
    for i in range(n):
        if seen[i] == cls:
            return True
    return False


@cython.cfunc
@cython.exceptval(check=False)
def _before(kr: Kernel, a: cython.int, b: cython.int) -> cython.bint:
    """Selection order: higher priority, then later start, fewer errors, earlier candidate."""
    if kr.c_prio[a] != kr.c_prio[b]:
        return kr.c_prio[a] > kr.c_prio[b]
    if kr.c_start[a] != kr.c_start[b]:
        return kr.c_start[a] > kr.c_start[b]
    if kr.c_err[a] != kr.c_err[b]:
        return kr.c_err[a] < kr.c_err[b]
    return a < b


@cython.cfunc
@cython.exceptval(check=False)
def _sift(kr: Kernel, root: cython.int, end: cython.int) -> cython.void:
    child: cython.int
    tmp: cython.int
    while 2 * root + 1 < end:
        child = 2 * root + 1
        if child + 1 < end and _before(kr, kr.c_order[child], kr.c_order[child + 1]):
            child += 1  # a max-heap of the *last* in selection order
        if _before(kr, kr.c_order[root], kr.c_order[child]):
            tmp = kr.c_order[root]
            kr.c_order[root] = kr.c_order[child]
            kr.c_order[child] = tmp
            root = child
        else:
            return


@cython.cfunc
@cython.exceptval(check=False)
def _heapsort(kr: Kernel, n: cython.int) -> cython.void:
    """Sort ``c_order[:n]`` into selection order (in place, no allocation)."""
    i: cython.int
    tmp: cython.int
    for i in range(n // 2 - 1, -1, -1):
        _sift(kr, i, n)
    for i in range(n - 1, 0, -1):
        tmp = kr.c_order[0]
        kr.c_order[0] = kr.c_order[i]
        kr.c_order[i] = tmp
        _sift(kr, 0, i)


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
