"""The shared-buffer engine on its compiled core (``docs/EXACT.md`` 6.1-6.5, 6.7).

:class:`CorePlan` compiles a query's edge formulas (EXACT.md 5.2) and column updates (6.3)
to programs of the stack machine of :mod:`acep.nfab._core`; :func:`run_core` turns a finite
window of events into columns, runs the core and gives the raw matches of
:class:`acep.nfab.shared.Stream`, so that the same output code serves both. Queries and
events outside the core's class give :class:`Unsupported` or None: the caller then runs
``shared.py``, the reference the core is checked against.
"""

from __future__ import annotations

import operator
import os
from collections.abc import Sequence
from itertools import repeat
from pathlib import Path
from types import ModuleType

import numpy as np

from .._backend import source_module
from ..events import EXACT_INT, Event, EventBatch
from .ast import Agg, BinOp, Call, Const, Equiv, Len, Ref, Strategy, UnaryOp
from .codegen import BEGIN, CLOSE, COUNT, FIRST, MAX, MIN, SUM, TAKE, _Resolver
from .compile import CompiledQuery, compile_query, identifiers
from .evaluate import Binding, evaluate
from .runs import ExactMatch, check_held
from .shared import Stream, _Batch, _beyond_float, _Plan, to_matches

__all__ = ["CORES", "CorePlan", "Unsupported", "core_module", "pure_core", "run_core",
           "core_name", "CoreMatches"]

_PURE_NAME = "acep.nfab._core_pure"
_BINARY = {"+": "ADD", "-": "SUB", "*": "MUL", "/": "DIV", "%": "MOD", "==": "EQ",
           "!=": "NE", "<": "LT", "<=": "LE", ">": "GT", ">=": "GE", "and": "AND",
           "or": "OR"}
_STRATEGY = {Strategy.STRICT: "STRICT", Strategy.PARTITION: "PARTITION",
             Strategy.NEXT: "NEXT", Strategy.ANY: "ANY"}


class Unsupported(ValueError):
    """The query is outside the class the compiled core runs (the reason is the message)."""


def pure_core() -> ModuleType:
    """The core module run as plain Python from its source file."""
    return source_module(Path(__file__).with_name("_core.py"), _PURE_NAME)


CORES = ("auto", "compiled", "python", "off")


def core_module(choice: str = "auto") -> ModuleType | None:
    """The core to run, None for ``shared.py``: ``"auto"`` the compiled one when built (or
    what ``ACEP_NFAB_CORE`` names), ``"compiled"`` (an error where it is not built),
    ``"python"`` its source run as Python, ``"off"`` none."""
    if choice not in CORES:
        raise ValueError(f"core must be one of {', '.join(CORES)}, not {choice!r}")
    if choice == "auto":
        choice = os.environ.get("ACEP_NFAB_CORE", "auto")
    if choice == "off":
        return None
    if choice == "python":
        return pure_core()
    from . import _core

    if core_name(_core) == "compiled":
        return _core
    if choice == "compiled":
        raise RuntimeError("the compiled core of acep.nfab is not built; reinstall with a C "
                           "compiler and Cython (pip install .), or use core='python'")
    return None


def core_name(module: ModuleType | None) -> str:
    """``"compiled"``, ``"python"`` (the core's source run as Python) or ``"shared"``."""
    if module is None:
        return "shared"
    compiled = str(getattr(module, "__file__", "")).endswith((".so", ".pyd"))
    return "compiled" if compiled else "python"


class _Operands(_Resolver):
    """Codegen's resolver (EXACT.md 6.3's table), giving (kind, index) instead of source."""

    def event(self, attr: str):
        self.attrs.add(attr)
        return ("EVENT", self.layout.slots[attr])

    def col(self, c: int, attr: str | None, op: str):
        self.needed.add((c, attr, op))
        return ("STATE", self.layout.column(c, attr, op))

    def agg(self, ident: Agg):
        if ident.func == "avg":
            c = self.index[ident.var]
            return ("AVG", self.col(c, ident.attr, SUM)[1], self.col(c, None, COUNT)[1])
        return super().agg(ident)


class CorePlan:
    """A query compiled for the core: the reference plan (merging off), the programs and the
    updates. Raises :class:`Unsupported` for text constants."""

    def __init__(self, query_or_cq):
        cq = query_or_cq if isinstance(query_or_cq, CompiledQuery) else \
            compile_query(query_or_cq)
        self.cq = cq
        self.plan = plan = _Plan(cq, merge=False)
        self.ops = {name: getattr(pure_core(), f"OP_{name}") for name in
                    ("END", "CHECK", "CONST", "EVENT", "STATE", "NEG", "NOT", "ABS", "MIN",
                     "MAX", *_BINARY.values())}
        self.code: list[int] = []
        self.consts: list[float] = []
        self.depth = 0
        # the equalities of [x]: true of every run an event is routed to (6.1 Routing)
        self.routed = set() if plan.strategy is Strategy.STRICT else \
            {id(c) for c in cq.equivalence_conjuncts}
        k = plan.k
        self.begin = [self._program(BEGIN, j, e.begin) for j, e in enumerate(cq.edges)]
        self.take = [self._program(TAKE, j, e.take) for j, e in enumerate(cq.edges)]
        self.close = [self._program(CLOSE, j, e.close) for j, e in enumerate(cq.edges)]
        if self.depth > pure_core().STACK:
            raise Unsupported("a predicate too deep for the core's stack")
        self._updates()
        kinds = {ty: n for n, ty in enumerate(dict.fromkeys(plan.types))}
        self.type_codes = kinds
        self.types = [kinds[ty] for ty in plan.types]
        self.kleene = [int(x) for x in plan.kleene]
        self.k = k
        self.strategy = getattr(pure_core(), _STRATEGY[plan.strategy])
        plain = {getattr(i, "attr", None) for c in cq.query.conjuncts
                 if not isinstance(c, Equiv) for i in identifiers(c)}
        self.equality_only = set(cq.equivalence) - plain

    # ------------------------------------------------------------------ programs

    def _program(self, edge: str, j: int, conjuncts) -> int:
        """The offset of the program of these conjuncts (-1: none, the edge holds)."""
        conjuncts = [c for c in conjuncts if id(c) not in self.routed]
        if not conjuncts:
            return -1
        start = len(self.code)
        resolver = _Operands(self.cq, self.plan.layout, edge, j)
        for conjunct in conjuncts:
            self._emit(conjunct, resolver, 0)
            self._op("CHECK")
        self._op("END")
        return start

    def _op(self, name: str, arg: int = 0) -> None:
        self.code += [self.ops[name], arg]

    def _emit(self, e, resolver: _Operands, depth: int) -> None:
        """Code leaving the value of ``e`` on the stack; ``depth``: values below it."""
        self.depth = max(self.depth, depth + 2)
        if isinstance(e, Const):
            v = e.value
            if isinstance(v, str) or not isinstance(v, (int, float)) or \
                    (isinstance(v, int) and abs(v) > EXACT_INT):
                raise Unsupported(f"constant {v!r}: the core computes with float64")
            self.consts.append(float(v))
            self._op("CONST", len(self.consts) - 1)
        elif isinstance(e, (Ref, Agg, Len)):
            if isinstance(e, Ref):
                where = resolver.ref(e)
            elif isinstance(e, Agg):
                where = resolver.agg(e)
            else:
                where = resolver.col(resolver.index[e.var], None, COUNT)
            if where[0] == "AVG":
                self._op("STATE", where[1])
                self._op("STATE", where[2])
                self._op("DIV")
            else:
                self._op(*where)
        elif isinstance(e, UnaryOp):
            self._emit(e.operand, resolver, depth)
            self._op("NOT" if e.op == "not" else "NEG")
        elif isinstance(e, Call):
            for n, a in enumerate(e.args):
                self._emit(a, resolver, depth + n)
            if e.func == "abs":
                self._op("ABS")
            else:
                self._op(e.func.upper(), len(e.args))
        elif isinstance(e, BinOp):
            if e.op in ("+", "-", "*", "/", "%") and _constant(e.left) and _constant(e.right):
                raise Unsupported("arithmetic on constants only: exact in Python integers")
            self._emit(e.left, resolver, depth)
            self._emit(e.right, resolver, depth + 1)
            self._op(_BINARY[e.op])
        else:
            raise Unsupported(f"cannot compile {e!r}")

    def _updates(self) -> None:
        """Per component and edge (take, begin) the column updates of 6.3."""
        core, layout = pure_core(), self.plan.layout
        self.up_start, self.up_col, self.up_op, self.up_slot = [0], [], [], []
        for j in range(self.plan.k):
            for begin in (False, True):
                for n, (c, attr, op) in enumerate(layout.columns):
                    if c != j or (op == FIRST and not begin):
                        continue
                    if op == FIRST or op == "last":
                        code = core.UP_SET
                    elif op == SUM:
                        code = core.UP_SUM0 if begin else core.UP_SUM
                    elif op == COUNT:
                        code = core.UP_COUNT0 if begin else core.UP_COUNT
                    else:
                        code = core.UP_SET if begin else \
                            {MIN: core.UP_MIN, MAX: core.UP_MAX}[op]
                    self.up_col.append(n)
                    self.up_op.append(code)
                    self.up_slot.append(layout.slots[attr] if attr is not None else -1)
                self.up_start.append(len(self.up_col))

    def core(self, module: ModuleType, labels: bool):
        """A fresh core of ``module`` for one run."""
        p = self.plan
        return module.Core(self.k, len(p.layout.columns), len(p.slots), self.strategy,
                           p.window, labels, self.types, self.kleene, self.begin, self.take,
                           self.close, self.code, self.consts, self.up_start, self.up_col,
                           self.up_op, self.up_slot)


def _constant(e) -> bool:
    return not identifiers(e)


# --------------------------------------------------------------------------- a run


class _Stub:
    """What :class:`~acep.nfab.shared._Batch` reads of a stream."""

    def __init__(self, plan):
        self.plan, self.position, self.last_t, self.numeric = plan, 0, float("-inf"), True


def run_core(plan: CorePlan, events: list[Event] | EventBatch, output: str,
             module: ModuleType, max_entries: int | None = None) -> tuple[Sequence, dict] | None:
    """The matches over the events, and the counters: verbose
    :class:`~acep.nfab.runs.ExactMatch` objects in canonical order (a :class:`CoreMatches`
    without RETURN or negation), or (``output="raw"``) the raw matches of
    :meth:`acep.nfab.shared.Stream.push` with merging off (labels and all). None when the
    events need the reference engine (a bad event, text or integers beyond 2**53 where the
    query computes); for an :class:`~acep.events.EventBatch`, also when the batch is not
    plain numbers in the columns the query reads (missing values, text) or the output
    needs event rows (raw output, RETURN, negation). Past ``max_entries`` it raises
    :class:`~acep.nfab.runs.ExactLimitError` where shared.py with merging off does."""
    if isinstance(events, EventBatch):
        cols = _batch_columns(plan, events) if output == "verbose" else None
    else:
        cols = _event_columns(plan, events)
    if cols is None:
        return None
    core = plan.core(module, output == "raw")
    limit = -1 if max_entries is None else max_entries
    found = core.run(cols.E, cols.ty, cols.tags, cols.keys, cols.nkeys, limit)  # even none
    if found < 0:
        check_held(max_entries + 1, max_entries, int(~found))
    counters = core.counters()
    counters["events"], counters["matches"] = cols.n, found
    if plan.cq.negations:
        raw = _negated(plan.cq, _raw(core.found(), core, events), events)
        counters["matches"] = len(raw)
        return (raw if output == "raw" else to_matches(plan.cq, raw)), counters
    if output == "raw":
        return _raw(core.found(), core, events), counters
    return _verbose(plan.cq, cols, core, events), counters


class _Columns:
    """The core's input: event rows ``E`` (float64, slot order, flattened), type codes,
    tags, partition codes; and for the output the partition values as the
    reference engine gives them (lists, or arrays turned into lists when read)."""

    def __init__(self, E, ty, tags, keys, nkeys, partitions):
        self.E, self.ty, self.tags, self.keys, self.nkeys = E, ty, tags, keys, nkeys
        self.n = len(tags)
        self.partitions = partitions


def _rows_matrix(cols: list[np.ndarray], n: int) -> np.ndarray:
    return np.ascontiguousarray(np.column_stack(cols) if cols else np.zeros((n, 0))).ravel()


def _event_columns(plan: CorePlan, events: list[Event]) -> _Columns | None:
    """The columns of row events (None: they need the reference engine)."""
    batch = _Batch(_Stub(plan.plan), events)
    if batch.error is not None:
        return None
    n = batch.n
    cols = []
    for attr in plan.plan.slots:
        col = _column(batch, attr, attr in plan.equality_only)
        if col is None:
            return None
        cols.append(col)
    ty = np.array(list(map(plan.type_codes.get, batch.types, repeat(-1, n))), dtype=np.int32)
    tags = np.asarray(batch.tags, dtype=np.float64)
    equivalence = [_column(batch, a, True) for a in plan.cq.equivalence]
    keys, nkeys = _keys(equivalence, plan, ty, n)
    partitions = [batch.converted(a)[0] for a in plan.cq.equivalence]  # as value_of reads
    return _Columns(_rows_matrix(cols, n), ty, tags, keys, nkeys, partitions)


def _batch_columns(plan: CorePlan, batch: EventBatch) -> _Columns | None:
    """The columns of an :class:`~acep.events.EventBatch` without making event rows, where
    the result is the one of its rows (:meth:`~acep.events.EventBatch.to_events`): tags
    that never go back, and the attributes the query reads plain numbers (no missing
    value, no text, integers within 2**53). None otherwise, or when the output needs rows."""
    cq = plan.cq
    if cq.negations or cq.query.returns:
        return None
    n = len(batch)
    tags = np.asarray(batch.tags, dtype=np.float64)
    if n and (np.isnan(tags).any() or (np.diff(tags) < 0).any()):
        return None
    numeric = {}
    for attr in {*plan.plan.slots, *plan.plan.required, *cq.equivalence}:
        col = tags if attr == "t" else _plain(batch.columns.get(attr))
        if col is None:
            return None
        numeric[attr] = col
    codes = [plan.type_codes.get(name, -1) for name in batch.type_names]
    ty = np.asarray(codes, dtype=np.int32)[np.asarray(batch.type_codes, dtype=np.intp)] \
        if n else np.zeros(0, dtype=np.int32)
    equivalence = [numeric[a] for a in cq.equivalence]
    keys, nkeys = _keys(equivalence, plan, ty, n)
    E = _rows_matrix([numeric[a] for a in plan.plan.slots], n)
    return _Columns(E, ty, tags, keys, nkeys, equivalence)


def _plain(col) -> np.ndarray | None:
    """A column of plain numbers as float64 (None: absent, text, NaN or beyond 2**53)."""
    if col is None:
        return None
    arr = np.asarray(col)
    if arr.ndim != 1 or arr.dtype.kind not in "biuf" or _beyond_float(arr):
        return None
    out = arr.astype(np.float64)
    return None if np.isnan(out).any() else out


def _negated(cq: CompiledQuery, raw: list[tuple], events: list[Event]) -> list[tuple]:
    """The raw matches no negated event eliminates (EXACT.md 6.6), finalized as one
    :meth:`Stream.push` and :meth:`Stream.flush` of the reference engine do."""
    stream = Stream(cq, merge=False)
    stream._index_negations(_Batch(stream, events))
    stream.position = len(events)
    stream.last_t = float(events[-1].t) if events else float("-inf")
    return stream._finalize(raw) + stream.flush()


def _column(batch: _Batch, attr: str, equality_only: bool) -> np.ndarray | None:
    """An attribute as float64 values the core computes with exactly (None: it cannot);
    an attribute only tested for equality may hold anything, coded by value."""
    raw = batch.column(attr)
    arr = np.array(raw) if raw else np.zeros(0)
    if arr.ndim == 1 and arr.dtype.kind in "biuf" and not _beyond_float(arr):
        return arr.astype(np.float64)
    values, _ = batch.converted(attr)
    out = np.empty(len(values))
    seen: dict = {}
    for i, v in enumerate(values):
        if v is None or v != v:
            out[i] = np.nan
        elif equality_only:
            out[i] = seen.setdefault(v, len(seen))
        elif isinstance(v, float):
            out[i] = v
        else:
            return None
    return out


def _keys(cols: list[np.ndarray], plan: CorePlan, ty: np.ndarray,
          n: int) -> tuple[np.ndarray, int]:
    """Partition codes of the events (-1: no run sees it, or a key of its own) and their
    number (6.1 Routing, as :meth:`~acep.nfab.shared._Batch.keys`); ``cols``: the
    equivalence attributes as :func:`_column` codes them."""
    strategy = plan.plan.strategy
    if not cols or strategy is Strategy.STRICT:
        keys, nkeys = np.zeros(n, dtype=np.int64), 1
    else:
        table = np.column_stack(cols) + 0.0  # -0.0 becomes 0.0: one key, as in Python
        undefined = np.isnan(table).any(axis=1)
        table[undefined] = 0.0
        keys = _small_whole(table[:, 0], n) if len(cols) == 1 else None
        if keys is None:
            _, inverse = np.unique(table, axis=0, return_inverse=True)
            keys = inverse.reshape(-1).astype(np.int64)
        keys[undefined] = -1
        nkeys = int(keys.max()) + 1 if n else 0
    if strategy not in (Strategy.STRICT, Strategy.PARTITION):
        keys[ty < 0] = -1  # events of no positive component's type (unrouted)
    return keys, nkeys


def _small_whole(x: np.ndarray, n: int) -> np.ndarray | None:
    """Whole numbers in a range of at most about 4n: themselves, less the least, are
    partition codes without sorting (None otherwise)."""
    if not n:
        return None
    lo, hi = x.min(), x.max()
    if not hi - lo <= 4 * n + 1024 or not (x == np.floor(x)).all():
        return None
    return (x - lo).astype(np.int64)


def _verbose(cq: CompiledQuery, cols: _Columns, core, events) -> Sequence:
    """The matches as :func:`acep.nfab.shared.to_matches` gives them (3.7, 8)."""
    ends, offsets, flat = core.chains(len(cq.edges))
    order = core.canonical(offsets, flat)
    out = CoreMatches(ends, offsets, flat, order, cols.tags, cols.partitions)
    if not cq.query.returns:
        return out
    variables = [e.component.var for e in cq.edges]
    full = []
    for m in out:
        b = Binding({v: [events[p] for p in ps] for v, ps in zip(variables, m.positions)})
        values = {item.name: evaluate(item.expr, b) for item in cq.query.returns}
        full.append(ExactMatch(m.positions, m.start, m.end, m.partition, values))
    return full


class CoreMatches(Sequence):
    """The verbose matches of one core run in canonical order (EXACT.md 3.7), held as the
    core's arrays; each :class:`~acep.nfab.runs.ExactMatch` is made when it is read.

    A list in all but type: it has a length, indexes and slices (a slice is a list),
    iterates, compares equal to a list or tuple of the same matches, and adds to lists.
    ``list(matches)`` makes every match at once. Matches made are kept.
    """

    __slots__ = ("_ends", "_offsets", "_flat", "_tags", "_partitions", "_order", "_made",
                 "_starts", "_stops", "_keys")

    def __init__(self, ends: np.ndarray, offsets: np.ndarray, flat: np.ndarray,
                 order: np.ndarray, tags, partitions: list):
        self._ends, self._offsets, self._flat = ends, offsets, flat
        self._tags, self._partitions = tags, partitions
        self._made: list | None = None
        same = len(ends) > 1 and (ends[1:] == ends[:-1]).any()
        self._order = order.tolist() if same else None

    def __len__(self) -> int:
        return len(self._ends)

    def arrays(self) -> tuple:
        """What the matches are made of, for output in bulk: the end positions, the bounds
        in ``flat`` of each match's components (one row per match), the positions, the
        output order (None: as stored), and the partition columns (by event position)."""
        order = None if self._order is None else np.asarray(self._order, dtype=np.int64)
        return (np.asarray(self._ends, dtype=np.int64),
                np.asarray(self._offsets, dtype=np.int64),
                np.asarray(self._flat, dtype=np.int64), order, self._partitions)

    def _lists(self) -> None:
        """What the matches are made of, as Python lists, once, on the first read."""
        offsets, flat = self._offsets, self._flat
        firsts = flat[offsets[:, 0]] if len(flat) else np.zeros(0, dtype=np.int64)
        tags = self._tags if isinstance(self._tags, np.ndarray) else np.asarray(self._tags)
        self._starts = tags[firsts].tolist()
        self._stops = tags[self._ends].tolist()
        self._keys = [col[firsts].tolist() if isinstance(col, np.ndarray) else
                      [col[i] for i in firsts.tolist()] for col in self._partitions]
        self._keys = list(zip(*self._keys)) if self._keys else None
        self._offsets, self._flat = offsets.tolist(), flat.tolist()
        self._made = [None] * len(self._ends)

    def _positions(self, m: int) -> tuple:
        off, flat = self._offsets[m], self._flat
        return tuple([tuple(flat[off[c]:off[c + 1]]) for c in range(len(off) - 1)])

    def _make(self, m: int) -> ExactMatch:
        if self._made is None:
            self._lists()
        made = self._made[m]
        if made is None:
            key = self._keys[m] if self._keys is not None else None
            made = self._made[m] = ExactMatch(self._positions(m), self._starts[m],
                                              self._stops[m], key, None)
        return made

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        n = len(self)
        i = operator.index(i)
        if not -n <= i < n:
            raise IndexError("match index out of range")
        i %= n
        return self._make(i if self._order is None else self._order[i])

    def __iter__(self):
        if self._made is None:
            self._make_all()
        make = self._make
        if self._order is None:
            return map(make, range(len(self)))
        return map(make, self._order)

    def _make_all(self) -> None:
        """Every match at once (the first iteration), in one pass over the lists."""
        self._lists()
        m, flat = len(self._ends), self._flat
        if not m:
            return
        k = len(self._offsets[0]) - 1
        if len(flat) == m * k:  # one event per component
            blocks = zip(*[zip(flat[c::k]) for c in range(k)])
        else:
            blocks = map(self._positions, range(m))
        keys = self._keys if self._keys is not None else repeat(None, m)
        self._made = list(map(ExactMatch, blocks, self._starts, self._stops, keys,
                              repeat(None, m)))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, (list, tuple, CoreMatches)):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other))

    __hash__ = None

    def __add__(self, other):
        if not isinstance(other, (list, CoreMatches)):
            return NotImplemented
        return list(self) + list(other)

    def __radd__(self, other):
        if not isinstance(other, list):
            return NotImplemented
        return other + list(self)

    def __repr__(self) -> str:
        return repr(list(self))


def _raw(found: list, core, events: list[Event]) -> list[tuple]:
    """The core's matches as ``shared.Stream``'s raw matches: nodes ``(position,
    component, event, previous node)`` and Dewey label tuples (6.2)."""
    if not found:
        return []
    n_pos, n_comp, n_prev, l_prev, l_val = (a.tolist() for a in core.buffer())
    nodes: dict[int, tuple] = {}
    label_of: dict[int, tuple] = {}

    def node(i: int):
        chain = []
        while i >= 0 and i not in nodes:
            chain.append(i)
            i = n_prev[i]
        out = nodes[i] if i >= 0 else None
        for m in reversed(chain):
            out = nodes[m] = (n_pos[m], n_comp[m], events[n_pos[m]], out)
        return out

    def label(i: int) -> tuple:
        chain = []
        while i >= 0 and i not in label_of:
            chain.append(i)
            i = l_prev[i]
        out = label_of[i] if i >= 0 else ()
        for m in reversed(chain):
            out = label_of[m] = out + (l_val[m],)
        return out

    return [(end, node(nd), label(lb), start) for end, nd, lb, start in found]
