"""The early filters of postponing (``docs/EXACT.md`` 7.3) and the plan a query fixes.

Each conjunct on a role's edge gets a class (TF, T, F or inconsistent) by a syntactic
classifier; :class:`_Plan` holds the roles per event type with their filter specs.
"""

from __future__ import annotations

import math

from ..ast import Agg, BinOp, Index, Query, Ref
from ..compile import CompiledQuery, compile_query, identifiers
from ..evaluate import Binding, evaluate

BEGIN, TAKE, CLOSE = "begin", "take", "close"
_EMPTY: frozenset = frozenset()
_SAFE, _DISCARD, _UNSAFE = 0, 1, 2
_UPPER = (">", ">=")     # X > Y: a large X passes
_LOWER = ("<", "<=")
_FLIP = {">": "<", ">=": "<=", "<": ">", "<=": ">="}


# --------------------------------------------------------------------------- classifier (7.3)

class _Independent:
    """TF: the conjunct does not depend on S; decided exactly (``expr`` may be a rewrite)."""

    __slots__ = ("expr",)
    cls = "TF"

    def __init__(self, expr):
        self.expr = expr


class _Bounded:
    """``X op f(T)``: T an S-dependent term over component ``comp``'s attribute ``attr``,
    f a chain of monotone steps ``(op, other, term_on_left)``; ``kind`` max, min or any."""

    __slots__ = ("x", "op", "steps", "comp", "attr", "kind")

    def __init__(self, x, op, steps, comp, attr, kind):
        self.x, self.op, self.steps, self.comp, self.attr, self.kind = \
            x, op, steps, comp, attr, kind

    @property
    def cls(self) -> str:
        if self.kind == "any":
            return "TF"
        upper = self.op in _UPPER
        return "T" if (self.kind == "max") == upper else "F"


class _Role:
    """One role of one positive component: its edge conjuncts, ids and filter specs."""

    __slots__ = ("j", "role", "var", "exprs", "ids", "all_ids", "specs", "needs", "memo")

    def __init__(self, j, role, var, exprs, specs, needs, memo):
        self.j, self.role, self.var, self.exprs, self.specs = j, role, var, tuple(exprs), specs
        self.ids = tuple((j, role, n) for n in range(len(self.exprs)))
        self.all_ids = frozenset(self.ids)
        self.needs = needs  # the component whose candidate list must not be empty
        self.memo = memo    # the check is a function of one earlier position (see _search)


class _Classifier:
    """Which identifiers of a role's conjuncts are S-independent (7.3), and the specs."""

    def __init__(self, cq: CompiledQuery):
        self.cq = cq
        self.vars = [e.component.var for e in cq.edges]
        self.index = {v: j for j, v in enumerate(self.vars)}
        self.kleene = [e.kleene for e in cq.edges]
        self.first = self.vars[0]

    def independent(self, ident, j: int, role: str) -> bool:
        if isinstance(ident, Ref):
            if ident.var == self.first and ident.index in (Index.NONE, Index.FIRST):
                return True  # the start s
            if ident.var == self.vars[j]:
                if role == BEGIN:
                    return ident.index in (Index.NONE, Index.FIRST, Index.I)
                return ident.index is Index.I
        return False

    def term(self, ident, j: int) -> tuple[int, str, str] | None:
        """(component, attribute, kind) of an S-dependent term of the table, else None."""
        if isinstance(ident, Agg):
            if ident.func in ("max", "min") and ident.attr is not None:
                return self.index[ident.var], ident.attr, ident.func
            return None
        if isinstance(ident, Ref) and ident.var in self.index:
            return self.index[ident.var], ident.attr, "any"
        return None  # Len, or a negated variable (never on a positive edge)

    def spec(self, conj, j: int, role: str):
        idents = identifiers(conj)
        dependent = [i for i in idents if not self.independent(i, j, role)]
        if not dependent:
            return _Independent(conj)
        if role == TAKE and j > 0:
            rewritten = self._equivalence(conj, j)
            if rewritten is not None:
                return _Independent(rewritten)
        if len(dependent) != 1 or not isinstance(conj, BinOp) or \
                conj.op not in _UPPER + _LOWER:
            return None
        left = [i for i in identifiers(conj.left) if not self.independent(i, j, role)]
        x, y, op = (conj.left, conj.right, conj.op) if not left else \
            (conj.right, conj.left, _FLIP[conj.op])
        steps = _monotone_chain(y, dependent[0])
        term = self.term(dependent[0], j)
        if steps is None or term is None:
            return None
        comp, attr, kind = term
        if comp > j or (comp == j and role == BEGIN):
            return None  # cannot happen by the anchoring rules; be safe
        return _Bounded(x, op, steps, comp, attr, kind)

    def memoizable(self, exprs, j: int, role: str) -> bool:
        """Whether the role's check depends on the earlier choices only through one
        position: the previous element ``v[i-1]`` (take), or the last element of component
        ``j - 1`` (begin). The search then evaluates it once per (that position, event)."""
        prior = self.vars[j - 1] if j else None
        for conj in exprs:
            for i in identifiers(conj):
                if self.independent(i, j, role):
                    continue
                if not isinstance(i, Ref):
                    return False
                if role == TAKE and not (i.var == self.vars[j] and i.index is Index.PREV):
                    return False
                if role == BEGIN and not (i.var == prior and i.index in (
                        Index.LAST if self.kleene[j - 1] else Index.NONE,)):
                    return False
        return True

    def _equivalence(self, conj, j: int):
        """``[x]``'s ``v[i].x = v[1].x`` (v not component 1) is ``v[i].x = F.x`` in every
        match, since ``v[1].x = F.x`` is required too (EXACT.md 2.5, 7.3)."""
        if not any(conj is c for c in self.cq.equivalence_conjuncts):
            return None
        left, right, v = conj.left, conj.right, self.vars[j]
        if isinstance(left, Ref) and isinstance(right, Ref) and left.var == right.var == v \
                and left.index is Index.I and right.index is Index.FIRST \
                and left.attr == right.attr:
            anchor = Ref(self.first, Index.FIRST if self.kleene[0] else Index.NONE, left.attr)
            return BinOp("==", left, anchor)
        return None


def _monotone_chain(expr, term) -> list | None:
    """The steps from ``term`` up to ``expr`` if ``expr`` is ``term`` under shifts
    ``+ c``, ``c +``, ``- c`` and positive scales ``* c``, ``c *``, ``/ c`` (innermost
    first), with every ``c`` free of ``term``; else None."""
    steps: list = []
    node = expr
    while node is not term:
        if not isinstance(node, BinOp) or node.op not in ("+", "-", "*", "/"):
            return None
        in_left = _contains(node.left, term)
        inner, other = (node.left, node.right) if in_left else (node.right, node.left)
        if not in_left and node.op in ("-", "/"):
            return None  # c - T and c / T are decreasing
        steps.append((node.op, other, in_left))
        node = inner
    steps.reverse()
    return steps


def _contains(expr, node) -> bool:
    return any(i is node for i in identifiers(expr))


def _apply(steps, value: float, b: Binding) -> float | None:
    """f(value) with the evaluator's arithmetic, or None when a step is not a finite shift
    or a finite positive scale (the bound is then unusable)."""
    for op, other, term_on_left in steps:
        c = evaluate(other, b)
        if isinstance(c, str) or not math.isfinite(c) or (op in ("*", "/") and c <= 0):
            return None
        left, right = (value, c) if term_on_left else (c, value)
        value = left + right if op == "+" else left - right if op == "-" else \
            left * right if op == "*" else left / right
    return None if value != value else value


def conjunct_classes(query: Query) -> dict[tuple[str, str], list[tuple[str, str]]]:
    """The early-filter class of every conjunct, per (variable, role): a list of
    ``(conjunct text, class)`` with class ``TF``, ``T``, ``F`` or ``inconsistent`` (7.3).
    The first component's begin role is its main run's start and is never filtered."""
    from ..query import format_expr

    plan = _Plan(compile_query(query), True)
    out: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for role in plan.roles:
        out[(role.var, role.role)] = [
            (format_expr(expr), "inconsistent" if spec is None else spec.cls)
            for expr, spec in zip(role.exprs, role.specs)]
    return out


# --------------------------------------------------------------------------- the plan

class _Plan:
    """Everything fixed by the query: roles per event type, close conjuncts, bound attrs."""

    def __init__(self, cq: CompiledQuery, early_filters: bool):
        self.cq = cq
        self.filters = early_filters
        self.k = len(cq.edges)
        self.vars = [e.component.var for e in cq.edges]
        self.kleene = [e.kleene for e in cq.edges]
        self.close = [tuple(e.close) for e in cq.edges]
        self.close_ids = frozenset((j, CLOSE, n) for j, e in enumerate(cq.edges)
                                   for n in range(len(e.close)))
        self.window = cq.query.window
        self.equivalence = cq.equivalence
        classifier = _Classifier(cq)
        self.roles: list[_Role] = []
        self.by_type: dict[str, list[_Role]] = {}
        self.bound_attrs: list[set[str]] = [set() for _ in cq.edges]
        for j, edge in enumerate(cq.edges):
            kinds = ([] if j == 0 else [BEGIN]) + ([TAKE] if edge.kleene else [])
            for role in kinds:
                exprs = edge.begin if role == BEGIN else edge.take
                specs = [classifier.spec(c, j, role) for c in exprs]
                needs = j - 1 if role == BEGIN else j
                memo = classifier.memoizable(exprs, j, role)
                r = _Role(j, role, edge.component.var, exprs, specs, needs, memo)
                self.roles.append(r)
                self.by_type.setdefault(edge.component.type, []).append(r)
                for s in specs:
                    if isinstance(s, _Bounded):
                        self.bound_attrs[s.comp].add(s.attr)
        self.bound_attrs_t = [tuple(sorted(a)) for a in self.bound_attrs]
        self.role_ids = {(r.j, r.role): r.all_ids for r in self.roles}
        self.role_ids[(0, BEGIN)] = frozenset((0, BEGIN, n) for n in range(len(
            cq.edges[0].begin)))  # the start s: checked when its main run was created
        self.last_kleene = self.kleene[-1]
