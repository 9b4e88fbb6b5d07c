"""Edge formulas as generated Python functions over the computation state
([A08] Section 5.2.1; docs/EXACT.md 5.2 and 6.3).

Each edge formula becomes one function ``f(E, V)`` of the event row ``E`` and the run's
state ``V`` (one column per component, attribute and operation, [A08] l.236), so no
formula walks the buffer. The code keeps the evaluator's rules (:mod:`acep.nfab.evaluate`,
EXACT.md 3.2) bit for bit. The layout and the two comparison modes are in docs/EXACT.md
6.7, "V and formulas".
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .ast import Agg, BinOp, Call, Const, Index, Len, Ref, UnaryOp
from .compile import CompiledQuery
from .evaluate import _compare, _extreme, truthy

FIRST, LAST, SUM, COUNT, MIN, MAX = "first", "last", "sum", "count", "min", "max"
BEGIN, TAKE, CLOSE = "begin", "take", "close"
_OPS = (FIRST, LAST, SUM, COUNT, MIN, MAX)
_COMPARISONS = ("==", "!=", "<", "<=", ">", ">=")
_LOGICAL = ("and", "or")
NAN = math.nan


class Unset:
    """The value of a column before its component is instantiated (equal only to itself)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "UNSET"


UNSET = Unset()


def _div(x, y):
    return NAN if y == 0 else x / y


def _mod(x, y):
    return NAN if y == 0 else x % y


def _rmin(current, x):
    """Running min with NaN winning (EXACT.md 3.2, as :func:`~acep.nfab.evaluate._extreme`)."""
    if current != current or x != x:
        return NAN
    return x if x < current else current


def _rmax(current, x):
    if current != current or x != x:
        return NAN
    return x if x > current else current


@dataclass
class Layout:
    """Where values live: ``slots`` maps an attribute to its index in an event row ``E``,
    ``columns`` lists V's columns ``(component, attribute or None, operation)`` in the order
    of [A08] l.236 (by component, then attribute, then operation)."""

    slots: dict[str, int]
    columns: list[tuple[int, str | None, str]]

    def column(self, j: int, attr: str | None, op: str) -> int:
        return self.columns.index((j, attr, op))


class _Resolver:
    """Source text for an identifier read on one edge (EXACT.md 6.3's table)."""

    def __init__(self, cq: CompiledQuery, layout: Layout | None, edge: str, j: int):
        self.index = {e.component.var: e.index for e in cq.edges}
        self.layout, self.edge, self.j = layout, edge, j
        self.needed: set[tuple[int, str | None, str]] = set()
        self.attrs: set[str] = set()

    def event(self, attr: str) -> str:
        self.attrs.add(attr)
        if self.layout is None:
            return "E"
        return f"E[{self.layout.slots[attr]}]"

    def col(self, c: int, attr: str | None, op: str) -> str:
        self.needed.add((c, attr, op))
        if self.layout is None:
            return "V"
        return f"V[{self.layout.column(c, attr, op)}]"

    def ref(self, ident: Ref) -> str:
        c = self.index[ident.var]
        own = c == self.j and self.edge in (BEGIN, TAKE)
        if own and (ident.index is Index.I or
                    (self.edge == BEGIN and ident.index in (Index.NONE, Index.FIRST))):
            return self.event(ident.attr)
        if ident.index in (Index.NONE, Index.FIRST):
            return self.col(c, ident.attr, FIRST)
        if ident.index in (Index.PREV, Index.LAST):
            return self.col(c, ident.attr, LAST)
        raise ValueError(f"{ident} cannot be read on the {self.edge} edge of component "
                         f"{self.j}")  # excluded by the static rules (EXACT.md 2.4)

    def agg(self, ident: Agg) -> str:
        c = self.index[ident.var]
        if ident.func == "count":
            return self.col(c, None, COUNT)
        if ident.func == "avg":
            return f"({self.col(c, ident.attr, SUM)} / {self.col(c, None, COUNT)})"
        return self.col(c, ident.attr, {"sum": SUM, "min": MIN, "max": MAX}[ident.func])


class _Source:
    """Python source of one expression; constants go to the namespace as ``_c<n>``."""

    def __init__(self, resolver: _Resolver, numeric: bool, consts: dict):
        self.r, self.numeric, self.consts = resolver, numeric, consts

    def const(self, value) -> str:
        name = f"_c{len(self.consts)}"
        self.consts[name] = value
        return name

    def truth(self, expr) -> str:
        """Source of ``truthy(expr)``, without the call when the value is already a bool."""
        if isinstance(expr, BinOp) and expr.op in _COMPARISONS + _LOGICAL or \
                isinstance(expr, UnaryOp) and expr.op == "not":
            return self.expr(expr)
        return f"truthy({self.expr(expr)})"

    def expr(self, e) -> str:
        if isinstance(e, Const):
            return self.const(e.value)
        if isinstance(e, Ref):
            return self.r.ref(e)
        if isinstance(e, Agg):
            return self.r.agg(e)
        if isinstance(e, Len):
            return self.r.col(self.r.index[e.var], None, COUNT)
        if isinstance(e, UnaryOp):
            if e.op == "not":
                return f"(not {self.truth(e.operand)})"
            return f"(-{self.expr(e.operand)})"
        if isinstance(e, Call):
            args = [self.expr(a) for a in e.args]
            if e.func == "abs":
                return f"abs({args[0]})"
            return f"_extreme({e.func!r}, [{', '.join(args)}])"
        if isinstance(e, BinOp):
            return self.binop(e)
        raise TypeError(f"cannot compile {e!r}")

    def binop(self, e: BinOp) -> str:
        if e.op in _LOGICAL:
            return f"({self.truth(e.left)} {e.op} {self.truth(e.right)})"
        x, y = self.expr(e.left), self.expr(e.right)
        if e.op in _COMPARISONS:
            if self.numeric and not _has_string(e):
                return f"({x} {e.op} {y})"
            return f"_compare({e.op!r}, {x}, {y})"
        if e.op == "/":
            return f"_div({x}, {y})"
        if e.op == "%":
            return f"_mod({x}, {y})"
        return f"({x} {e.op} {y})"


def _has_string(e) -> bool:
    if isinstance(e, Const):
        return isinstance(e.value, str)
    if isinstance(e, BinOp):
        return _has_string(e.left) or _has_string(e.right)
    if isinstance(e, UnaryOp):
        return _has_string(e.operand)
    if isinstance(e, Call):
        return any(_has_string(a) for a in e.args)
    return False


_NAMESPACE = {"truthy": truthy, "_compare": _compare, "_extreme": _extreme, "_div": _div,
              "_mod": _mod, "_rmin": _rmin, "_rmax": _rmax, "NAN": NAN,
              "UNSET": UNSET}


def _build(name: str, params: str, body: str, consts: dict):
    namespace = dict(_NAMESPACE, **consts)
    exec(f"def {name}({params}):\n    return {body}\n", namespace)  # noqa: S102
    return namespace[name]


def formula_needs(cq: CompiledQuery, edge: str, j: int, conjuncts) -> tuple[set, set]:
    """(V columns, event attributes) that the conjuncts read on this edge."""
    r = _Resolver(cq, None, edge, j)
    src = _Source(r, True, {})
    for c in conjuncts:
        src.truth(c)
    return r.needed, r.attrs


def formula(cq: CompiledQuery, layout: Layout, edge: str, j: int, conjuncts,
            numeric: bool):
    """``f(E, V) -> bool``: every conjunct holds on this edge; None when there is none."""
    if not conjuncts:
        return None
    consts: dict = {}
    src = _Source(_Resolver(cq, layout, edge, j), numeric, consts)
    body = " and ".join(src.truth(c) for c in conjuncts)
    return _build(f"{edge}_{j}", "E, V", body, consts)


def updater(layout: Layout, j: int, begin: bool):
    """``u(V, E) -> V'``: the columns of component ``j`` after it selects the event
    (EXACT.md 6.3: SET at begin, LAST, SUM as a left fold, COUNT, running MIN/MAX)."""
    items = []
    for n, (c, attr, op) in enumerate(layout.columns):
        if c != j:
            items.append(f"V[{n}]")
            continue
        x = f"E[{layout.slots[attr]}]" if attr is not None else None
        if op == FIRST:
            items.append(x if begin else f"V[{n}]")
        elif op == LAST:
            items.append(x)
        elif op == SUM:
            items.append(f"(0.0 + {x})" if begin else f"(V[{n}] + {x})")
        elif op == COUNT:
            items.append("1.0" if begin else f"(V[{n}] + 1.0)")
        else:
            fn = "_rmin" if op == MIN else "_rmax"
            items.append(x if begin else f"{fn}(V[{n}], {x})")
    body = "(" + "".join(f"{i}, " for i in items) + ")"
    return _build(f"update_{j}", "V, E", body, {})


def order_columns(columns) -> list[tuple[int, str | None, str]]:
    """[A08] l.236's order: by instantiation state (component), attribute, operation."""
    return sorted(columns, key=lambda c: (c[0], c[1] or "", _OPS.index(c[2])))
