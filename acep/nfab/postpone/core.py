"""Postponing on the compiled core (``docs/EXACT.md`` 7, 6.8): the main runs, the early
filters and the candidate lists run in :class:`acep.nfab._postpone.Postpone`, with the
filter conjuncts compiled to programs of the shared-buffer core's stack machine
(:class:`acep.nfab.core.CorePlan`); the lists it returns are turned into the same
:class:`~.search._MainRun` objects the pure engine builds, for the same records and search
(7.2). Queries and events outside the core's class give :class:`~acep.nfab.core.Unsupported`
or None: the caller then runs the pure engine, the reference.
"""

from __future__ import annotations

from itertools import repeat
from pathlib import Path
from types import ModuleType

import numpy as np

from ..._backend import source_module
from ...events import Event
from ..ast import Index, Ref
from ..compile import CompiledQuery
from ..core import CorePlan, Unsupported, _column, _keys, _Stub, core_name
from ..evaluate import value_of
from ..runs import ExactMatch, check_held
from ..shared import _Batch
from .filters import _EMPTY, BEGIN, TAKE, _Bounded, _Independent, _Plan
from .search import Candidate, _MainRun

_STEP = {"+": "ADD", "-": "SUB", "*": "MUL", "/": "DIV"}
_COMPARE = {">": "GT", ">=": "GE", "<": "LT", "<=": "LE"}
_AGG = {"any": 0, "max": 1, "min": 2}
_MASK_BITS = 62
_PURE_NAME = "acep.nfab._postpone_pure"


def pure_postpone() -> ModuleType:
    """The postponing core run as plain Python from its source file."""
    return source_module(Path(__file__).parents[1] / "_postpone.py", _PURE_NAME)


def postpone_module(core: ModuleType, choice: str) -> ModuleType | None:
    """The postponing core beside the shared core ``core`` (what
    :func:`~acep.nfab.core.core_module` gave for ``choice``): its source run as Python
    beside the Python one, else the compiled one; None where that is not built and
    ``choice`` is ``"auto"`` (the pure engine runs)."""
    if core_name(core) == "python":
        return pure_postpone()
    from .. import _postpone

    if core_name(_postpone) == "compiled":
        return _postpone
    if choice == "compiled":
        raise RuntimeError("the compiled postponing core (acep/nfab/_postpone.py) is not "
                           "built; reinstall with a C compiler and Cython (pip install .), "
                           "or use core='python'")
    return None


class _Operands:
    """Where an S-independent identifier is read (7.3): the start s is the STATE row, the
    event in its role the EVENT row; anything else is outside the core's class."""

    def __init__(self, slots: dict[str, int], first: str, var: str, role: str):
        self.slots, self.first, self.var, self.role = slots, first, var, role
        self.index: dict = {}

    def _slot(self, attr: str) -> int:
        return self.slots.setdefault(attr, len(self.slots))

    def ref(self, ident: Ref):
        if ident.var == self.first and ident.index in (Index.NONE, Index.FIRST):
            return ("STATE", self._slot(ident.attr))
        if ident.var == self.var and (ident.index is Index.I or (
                self.role == BEGIN and ident.index in (Index.NONE, Index.FIRST))):
            return ("EVENT", self._slot(ident.attr))
        raise Unsupported(f"{ident} in an early filter")

    def agg(self, ident):
        raise Unsupported(f"{ident} in an early filter")

    col = agg


class PostponePlan:
    """A query compiled for the postponing core: the start program of the shared core's
    plan, the roles per type and their conjuncts' filter specs as programs."""

    def __init__(self, cq: CompiledQuery, early_filters: bool):
        self.base = base = CorePlan(cq)
        self.cq, self.filters = cq, early_filters
        self.plan = plan = _Plan(cq, early_filters)
        self.slots = dict(base.plan.layout.slots)
        self.roles: list[tuple] = []
        self.conjuncts: list[tuple] = []
        self.steps: list[tuple] = []
        self.bounds: dict[tuple[int, str], int] = {}
        self.role_of: list = []
        names = list(base.type_codes)
        self.t_start = [0]
        for name in names:
            for role in plan.by_type.get(name, ()):
                self._role(role)
            self.t_start.append(len(self.roles))
        self.t_start.append(len(self.roles))  # code -1 reads t_start[-1:]: none
        if base.depth > _stack():
            raise Unsupported("a predicate too deep for the core's stack")
        self.bound_list = [(c, self.slots[a]) for (c, a) in self.bounds]

    def _role(self, role) -> None:
        if len(role.exprs) > _MASK_BITS:
            raise Unsupported("more conjuncts on one edge than the core's masks hold")
        resolver = _Operands(self.slots, self.plan.vars[0], role.var, role.role)
        self.roles.append((role.j, int(role.role == TAKE), role.needs, len(self.conjuncts),
                           len(role.exprs)))
        self.role_of.append(role)
        for spec in role.specs:
            self.conjuncts.append(self._spec(spec, resolver))

    def _spec(self, spec, resolver: _Operands) -> tuple:
        """(kind, program, op, agg, bound, first step, steps) of one conjunct (7.3)."""
        if isinstance(spec, _Independent):
            return (1, self._program(spec.expr, resolver, True), 0, 0, 0, 0, 0)
        if not isinstance(spec, _Bounded):
            return (0, -1, 0, 0, 0, 0, 0)
        ops = self.base.ops
        first = len(self.steps)
        for op, other, left in spec.steps:
            self.steps.append((ops[_STEP[op]], self._program(other, resolver, False),
                               int(left)))
        bound = self.bounds.setdefault((spec.comp, spec.attr), len(self.bounds))
        resolver._slot(spec.attr)
        return (2, self._program(spec.x, resolver, False), ops[_COMPARE[spec.op]],
                _AGG[spec.kind], bound, first, len(spec.steps))

    def _program(self, expr, resolver: _Operands, predicate: bool) -> int:
        base = self.base
        start = len(base.code)
        base._emit(expr, resolver, 0)
        if predicate:
            base._op("CHECK")
        base._op("END")
        return start

    def core(self, module: ModuleType):
        base, cq = self.base, self.cq
        search = (len(base.plan.layout.columns), base.kleene, base.begin, base.take,
                  base.close, base.up_start, base.up_col, base.up_op, base.up_slot)
        return module.Postpone(
            len(cq.edges), len(self.slots), cq.query.window, self.filters,
            self.plan.last_kleene, base.types[0], base.begin[0], base.code, base.consts,
            self.t_start, self.roles, self.conjuncts, self.steps, self.bound_list, search)


def _stack() -> int:
    from ..core import pure_core

    return pure_core().STACK


def run_lists(pplan: PostponePlan, events: list[Event], module: ModuleType,
              limit: int = -1, compact: bool = False):
    """Run the core over the events and return it (:meth:`output`, :meth:`counters`,
    :func:`search`), or None when the events need the pure engine (a bad event, text or
    integers beyond 2**53 where the query computes). With ``limit`` >= 0 the core notes
    what the pure engine holds per event and stops past it (:meth:`held_at`)."""
    base = pplan.base
    batch = _Batch(_Stub(base.plan), events)
    if batch.error is not None:
        return None
    n = batch.n
    cols = []
    for attr in pplan.slots:
        col = _column(batch, attr, attr in base.equality_only)
        if col is None:
            return None
        cols.append(col)
    E = np.ascontiguousarray(np.column_stack(cols) if cols else np.zeros((n, 0))).ravel()
    ty = np.array(list(map(base.type_codes.get, batch.types, repeat(-1, n))), dtype=np.int32)
    tags = np.asarray(batch.tags, dtype=np.float64)
    equivalence = [_column(batch, a, True) for a in base.cq.equivalence]
    keys, nkeys = _keys(equivalence, base, ty, n)
    core = pplan.core(module)
    core.run(E, ty, tags, keys, nkeys, limit, compact)  # even none: it allocates the lists
    return core


class _Roles:
    """The (exprs, ids, memo) of a candidate's role from its mask, cached per mask."""

    def __init__(self, pplan: PostponePlan):
        self.by_edge = {(r.j, r.role): r for r in pplan.role_of}
        self.cache: dict = {(0, BEGIN, 0): ((), _EMPTY)}

    def get(self, j: int, role: str, mask: int) -> tuple:
        key = (j, role, mask)
        out = self.cache.get(key)
        if out is None:
            r = self.by_edge[(j, role)]
            chosen = [n for n in range(len(r.exprs)) if mask >> n & 1]
            out = (tuple(r.exprs[n] for n in chosen),
                   frozenset(r.ids[n] for n in chosen) if chosen else _EMPTY)
            self.cache[key] = out
        return out

    def memo(self, j: int, role: str) -> bool:
        r = self.by_edge.get((j, role))
        return r is not None and r.memo


def constructions(pplan: PostponePlan, output: tuple, events: list[Event]) -> list[tuple]:
    """The (end, main run, ranges) pairs to construct (7.2), in the core's order. Each main
    run is rebuilt as the pure engine holds it (candidate lists, cumulative ids) when a
    record first reads it: most records are never expanded."""
    (c_run, c_pos, c_j, c_flags, c_bu, c_tu), (x_run, x_end, x_hi), starts = output
    if not len(x_run):
        return []
    plan = pplan.plan
    wanted = np.unique(x_run)
    chosen = np.flatnonzero(np.isin(c_run, wanted))
    chosen = chosen[np.argsort(c_run[chosen], kind="stable")]
    by_run = c_run[chosen]
    lo = np.searchsorted(by_run, wanted, "left").tolist()
    hi = np.searchsorted(by_run, wanted, "right").tolist()
    source = _Source(pplan, events, (c_pos[chosen], c_j[chosen], c_flags[chosen],
                                     c_bu[chosen], c_tu[chosen]))
    runs = {r: _LazyRun(source, int(starts[r]), a, b)
            for r, a, b in zip(wanted.tolist(), lo, hi)}
    last = plan.k - 1
    lows = [0] * plan.k
    out = []
    for r, end, his in zip(x_run.tolist(), x_end.tolist(), x_hi.tolist()):
        if not plan.kleene[last]:
            lows[last] = his[last] - 1
        out.append((end, runs[r], tuple(zip(lows, his))))
    return out


class _Source:
    """The core's candidates of the constructed main runs, grouped by run."""

    def __init__(self, pplan: PostponePlan, events: list[Event], columns: tuple):
        self.plan, self.events, self.columns = pplan.plan, events, columns
        self.roles = _Roles(pplan)
        self.memo = {(j, role): self.roles.memo(j, role) for j in range(pplan.plan.k)
                     for role in (BEGIN, TAKE)}

    def build(self, start: int, lo: int, hi: int) -> _MainRun:
        plan, roles, memo = self.plan, self.roles, self.memo
        run = _empty_run(plan, start, self.events)
        for pos, j, flags, bu, tu in zip(*(col[lo:hi].tolist() for col in self.columns)):
            b, bids = roles.get(j, BEGIN, bu) if flags & 1 else (None, None)
            t, tids = roles.get(j, TAKE, tu) if flags & 2 else (None, None)
            run.add(j, Candidate(pos, j, b, t, bids, tids, plan, memo[(j, BEGIN)],
                                memo[(j, TAKE)]))
        return run


class _LazyRun:
    """A :class:`~.search._MainRun` built on first use of anything but its start."""

    def __init__(self, source: _Source, start: int, lo: int, hi: int):
        self.start = start
        self._where = (source, lo, hi)
        self._run: _MainRun | None = None

    def __getattr__(self, name: str):
        if self._run is None:
            source, lo, hi = self._where
            self._run = source.build(self.start, lo, hi)
        return getattr(self._run, name)


def _empty_run(plan: _Plan, start: int, events: list[Event]) -> _MainRun:
    run = _MainRun.__new__(_MainRun)
    k = plan.k
    run.start, run.t, run.recorded, run.bounds = start, events[start].t, True, None
    run.cands, run.positions, run.cum = [[] for _ in range(k)], [[] for _ in range(k)], \
        [[] for _ in range(k)]
    run.first_begin = [-1] * k
    return run


def prepare_search(pplan: PostponePlan, core, cap: int = -1) -> list[int]:
    """Hand the core its candidate lists per (run, component); the end position of each
    construction, for ``core.search(c)`` (7.2), which stops past ``cap`` (>= 0) matches."""
    (c_run, _, c_j, _, _, _), (x_run, x_end, _), starts = core.output()
    k = pplan.plan.k
    keyed = c_run * k + c_j
    order = np.argsort(keyed, kind="stable").astype(np.int64)
    counts = np.bincount(keyed, minlength=len(starts) * k)
    core.begin_search(order, np.concatenate([[0], np.cumsum(counts)]).astype(np.int64), cap)
    return x_end.tolist()


def check_bound(pplan: PostponePlan, core, module: ModuleType, limit: int,
                compact: bool) -> None:
    """Raise :class:`~acep.nfab.runs.ExactLimitError` where the pure engine would (it holds
    candidates, records or matches past ``limit`` after an event); verbose output searches
    here, in order, each search stopping past ``limit`` matches."""
    held = core.held_at()
    if not compact:
        ends = prepare_search(pplan, core, limit)
        found = []
        try:
            for c in range(len(ends)):
                found.append(core.search(c))
        except module.Capped:
            found.append(limit + 1)
        if found:  # the matches found up to each event, by the constructions' ends
            at = np.searchsorted(ends[:len(found)], np.arange(len(held)), "right") - 1
            held = held + np.where(at >= 0, np.asarray(found, dtype=np.int64)[at], 0)
    over = np.flatnonzero(held > limit)
    if len(over):
        check_held(int(held[over[0]]), limit, int(over[0]))


def found_matches(pplan: PostponePlan, core, events: list[Event], machine) -> list:
    """The matches the searches found (:class:`~acep.nfab.runs.ExactMatch`, through the
    run engine's ``finish`` where negation or RETURN needs it), in the order found."""
    pos, comp, first = core.matches()
    cq, k = pplan.cq, pplan.plan.k
    if len(pos) == 0:
        return []
    # a match's components are consecutive and non-empty: k blocks each
    cut = np.zeros(len(pos), dtype=bool)
    cut[first[:-1]] = True
    cut[1:] |= comp[1:] != comp[:-1]
    starts = np.flatnonzero(cut).tolist()
    flat = pos.tolist()
    blocks = [tuple(flat[a:b]) for a, b in zip(starts, starts[1:] + [len(flat)])]
    matches = [tuple(blocks[m:m + k]) for m in range(0, len(blocks), k)]
    if cq.negations or cq.query.returns:
        return [m for m in map(machine.finish, matches) if m is not None]
    attrs, keys = cq.equivalence, {}
    out: list[ExactMatch] = []
    for chosen in matches:
        s, e = chosen[0][0], chosen[-1][-1]
        key = keys.get(s)
        if key is None:
            key = keys[s] = tuple(value_of(events[s], x) for x in attrs) or None
        out.append(ExactMatch(chosen, float(events[s].t), float(events[e].t), key, None))
    return out
