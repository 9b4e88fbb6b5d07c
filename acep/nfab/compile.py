"""Compile a parsed query into NFA^b edge conditions (``docs/EXACT.md`` sections 2.5 and 5).

Each conjunct goes to the edge of its *anchor*, the latest point at which one of its
identifiers is instantiated ([A08] Section 3.2, Step 2): BEGIN(j) < TAKE(j) < CLOSE(j) <
BEGIN(j+1) ... and NEG(n) above all. Equivalence tests ``[x]`` expand into equalities
with the first component's ``x`` (EXACT.md 2.5). A TAKE conjunct that reads no other
element of its Kleene variable than ``v[i]`` is *pure* and also guards ``v[1]`` (3.2).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .ast import (
    Agg,
    BinOp,
    Call,
    Component,
    Const,
    Equiv,
    Expr,
    Index,
    Kind,
    Len,
    Query,
    Ref,
    Strategy,
    UnaryOp,
)

BEGIN, TAKE, CLOSE, NEG = 0, 1, 2, 3


@dataclass
class ComponentEdges:
    """The conjuncts on one positive component's edges (EXACT.md 5.2)."""

    component: Component
    index: int
    begin: list[Expr] = field(default_factory=list)   # θ_begin (pure TAKE ones included)
    take: list[Expr] = field(default_factory=list)    # θ_take
    close: list[Expr] = field(default_factory=list)   # θ_proceed

    @property
    def kleene(self) -> bool:
        return self.component.kind is Kind.PLUS


@dataclass
class Negation:
    """A negated component: its conjuncts and its gap (neighbouring positive indexes)."""

    component: Component
    conjuncts: list[Expr]
    before: int | None   # index of the positive component before it, None if leading
    after: int | None    # index of the positive component after it, None if trailing


@dataclass
class CompiledQuery:
    query: Query
    edges: list[ComponentEdges]
    negations: list[Negation]
    equivalence: tuple[str, ...]        # the partition key attributes, in order
    equivalence_conjuncts: list[Expr]   # the expanded equalities (partition condition)

    def position_of(self, var: str) -> int | None:
        """Index of ``var`` among the positive components (None: negated)."""
        for e in self.edges:
            if e.component.var == var:
                return e.index
        return None


def compile_query(query: Query) -> CompiledQuery:
    positive = list(query.positive)
    edges = [ComponentEdges(c, j) for j, c in enumerate(positive)]
    index = {c.var: j for j, c in enumerate(positive)}
    attrs = tuple(a for c in query.conjuncts if isinstance(c, Equiv) for a in c.attrs)
    expanded = _expand_equivalence(attrs, query.components, positive[0])
    negations = _negations(query, index)
    _check_static_rules(query, attrs, negations)
    by_var = {n.component.var: n for n in negations}
    plain = [c for c in query.conjuncts if not isinstance(c, Equiv)]
    for conjunct in plain + expanded:
        point, j = _anchor(conjunct, query, index)
        if point == NEG:
            by_var[j].conjuncts.append(conjunct)
        elif point == BEGIN:
            edges[j].begin.append(conjunct)
        elif point == TAKE:
            edges[j].take.append(conjunct)
            if _is_pure(conjunct, positive[j].var):
                edges[j].begin.append(conjunct)
        else:
            edges[j].close.append(conjunct)
    return CompiledQuery(query, edges, negations, attrs, expanded)


def _check_static_rules(query: Query, attrs: tuple, negations: list) -> None:
    """The rules a hand-built AST could break (the parser enforces them too, EXACT.md 2.4)."""
    if query.strategy is Strategy.PARTITION and not attrs:
        raise ValueError("partition contiguity needs an equivalence test [attr] "
                         "(EXACT.md 2.4 rule 5)")
    edge = [n for n in negations if n.before is None or n.after is None]
    if edge and query.window is None:
        raise ValueError(f"negation ~{edge[0].component.type} at the edge of the pattern "
                         "needs WITHIN (EXACT.md 2.4 rule 7)")


def _expand_equivalence(attrs, components, first: Component) -> list[Expr]:
    """``[x]``: every component's x equals the first one's (EXACT.md 2.5)."""
    out: list[Expr] = []
    for x in attrs:
        kleene_first = first.kind is Kind.PLUS
        anchor = Ref(first.var, Index.FIRST if kleene_first else Index.NONE, x)
        for c in components:
            if c.kind is Kind.PLUS:
                if c.var != first.var:
                    out.append(BinOp("==", Ref(c.var, Index.FIRST, x), anchor))
                out.append(BinOp("==", Ref(c.var, Index.I, x), Ref(c.var, Index.FIRST, x)))
            elif c.var != first.var:
                out.append(BinOp("==", Ref(c.var, Index.NONE, x), anchor))
    return out


def _negations(query: Query, index: dict) -> list[Negation]:
    out, last_positive = [], None
    for c in query.components:
        if c.kind is Kind.NEG:
            out.append(Negation(c, [], last_positive, None))
        else:
            last_positive = index[c.var]
            for n in out:  # negations declared since the previous positive component
                if n.after is None:
                    n.after = last_positive
    return out


def identifiers(expr: Expr) -> list:
    """The identifiers (Ref, Agg, Len) of an expression, in order."""
    if isinstance(expr, (Ref, Agg, Len)):
        return [expr]
    if isinstance(expr, BinOp):
        return identifiers(expr.left) + identifiers(expr.right)
    if isinstance(expr, UnaryOp):
        return identifiers(expr.operand)
    if isinstance(expr, Call):
        return [i for a in expr.args for i in identifiers(a)]
    return []


def _anchor(conjunct: Expr, query: Query, index: dict) -> tuple[int, object]:
    """(point, component index) of the conjunct's latest identifier; NEG gives the var."""
    best = (0, BEGIN)  # constants: BEGIN(1)
    for ident in identifiers(conjunct):
        if ident.var not in index:
            return NEG, ident.var
        best = max(best, (index[ident.var], _point(ident)))
    return best[1], best[0]


def _point(ident) -> int:
    if isinstance(ident, Len):
        return CLOSE
    if isinstance(ident, Agg):
        return TAKE if ident.range.name == "PREFIX" else CLOSE
    return {Index.NONE: BEGIN, Index.FIRST: BEGIN, Index.I: TAKE, Index.PREV: TAKE,
            Index.LAST: CLOSE}[ident.index]


def _is_pure(conjunct: Expr, var: str) -> bool:
    """A TAKE conjunct whose only identifiers of ``var`` are ``var[i].x`` (EXACT.md 2.5)."""
    return all(not (getattr(i, "var", None) == var)
               or (isinstance(i, Ref) and i.index is Index.I)
               for i in identifiers(conjunct))


_ARITHMETIC = ("+", "-", "*", "/", "%")
_ORDERING = ("<", "<=", ">", ">=")


def numeric_attributes(query: Query) -> dict[str, set[str]]:
    """{variable: attributes the query computes with}: operands of arithmetic, abs/min/max
    and aggregates, and of an ordering against such a number or a numeric constant. A text
    value there has no meaning (EXACT.md 3.2 compares text only with text)."""
    out: dict[str, set[str]] = {}
    exprs = [c for c in query.conjuncts if not isinstance(c, Equiv)]
    for expr in exprs + [item.expr for item in query.returns]:
        _numeric_refs(expr, False, out)
    return out


def _numeric_refs(expr: Expr, numeric: bool, out: dict[str, set[str]]) -> None:
    if isinstance(expr, Ref):
        if numeric and expr.attr != "t":
            out.setdefault(expr.var, set()).add(expr.attr)
    elif isinstance(expr, Agg):
        if expr.attr not in (None, "t"):
            out.setdefault(expr.var, set()).add(expr.attr)
    elif isinstance(expr, BinOp):
        if expr.op in _ARITHMETIC:
            sides = (True, True)
        elif expr.op in _ORDERING:
            sides = (_is_number(expr.right), _is_number(expr.left))
        else:
            sides = (False, False)
        _numeric_refs(expr.left, sides[0], out)
        _numeric_refs(expr.right, sides[1], out)
    elif isinstance(expr, UnaryOp):
        _numeric_refs(expr.operand, expr.op == "-", out)
    elif isinstance(expr, Call):
        for arg in expr.args:
            _numeric_refs(arg, True, out)


def _is_number(expr: Expr) -> bool:
    """Whether an expression is a number whatever the events hold."""
    if isinstance(expr, Const):
        return not isinstance(expr.value, str)
    if isinstance(expr, (Agg, Len, Call)):
        return True
    if isinstance(expr, BinOp):
        return expr.op in _ARITHMETIC
    return isinstance(expr, UnaryOp) and expr.op == "-"
