"""The static rules of a query (EXACT.md 2.4) that its conjuncts and RETURN items must keep,
each broken one a :class:`QueryError` at the offending identifier.
"""

from __future__ import annotations

from collections.abc import Iterator

from ..ast import Agg, BinOp, Call, Equiv, Expr, Index, Kind, Len, Range, Ref, UnaryOp
from .expressions import _QueryCursor

_BEGIN, _ITER, _CLOSE = "begin", "iterator", "close"


def _children(expr: Expr) -> tuple:
    if isinstance(expr, BinOp):
        return expr.left, expr.right
    if isinstance(expr, UnaryOp):
        return (expr.operand,)
    if isinstance(expr, Call):
        return expr.args
    return ()


def _walk(expr: Expr) -> Iterator[Expr]:
    """Every node, in source order (pre-order, left to right)."""
    yield expr
    for child in _children(expr):
        yield from _walk(child)


def _form(node: Expr) -> str | None:
    """The identifier forms of 2.5: begin (``v.x``, ``v[1].x``), iterator, close; else None."""
    if isinstance(node, Ref):
        return {Index.I: _ITER, Index.PREV: _ITER, Index.LAST: _CLOSE}.get(node.index, _BEGIN)
    if isinstance(node, Agg):
        return _ITER if node.range is Range.PREFIX else _CLOSE
    if isinstance(node, Len):
        return _CLOSE
    return None


def _identifiers(expr: Expr) -> list[Ref | Agg | Len]:
    return [node for node in _walk(expr) if _form(node) is not None]


def _check_equiv_placement(cur: _QueryCursor, expr: Expr) -> None:
    """Rule 6: ``[attr]`` only as a top-level WHERE conjunct."""
    for node in _walk(expr):
        if isinstance(node, Equiv) and node is not expr:
            cur.fail("an equivalence test [...] must be a conjunct of its own, joined by AND "
                     "(EXACT.md 2.4 rule 6)", node.pos)


def _check_conjunct(cur: _QueryCursor, expr: Expr) -> None:
    """Rules 2, 4 and 6 of 2.4 for one WHERE conjunct."""
    _check_equiv_placement(cur, expr)
    idents = _identifiers(expr)
    kinds = {v: c.kind for v, c in cur.components.items()}
    negated = [n for n in idents if kinds[n.var] is Kind.NEG]
    iterators = [n for n in idents if _form(n) == _ITER]
    for n in negated:
        if n.var != negated[0].var:
            cur.fail(f"a conjunct may mention only one negated variable ({negated[0].var} and "
                     f"{n.var}) (EXACT.md 2.4 rule 4)", n.pos)
    if negated and iterators:
        cur.fail(f"a conjunct on the negated variable {negated[0].var} may not use iterator "
                 "forms (EXACT.md 2.4 rule 4)", iterators[0].pos)
    if iterators:
        _check_iterator_conjunct(cur, idents, iterators[0].var)


def _check_iterator_conjunct(cur: _QueryCursor, idents: list, v: str) -> None:
    """Rule 2: one iterated Kleene variable ``v``, otherwise earlier components or ``v[1]``."""
    order = {var: n for n, var in enumerate(cur.components)}
    for n in idents:
        form = _form(n)
        if form == _ITER and n.var != v:
            cur.fail(f"a conjunct may iterate over only one Kleene variable ({v} and {n.var}) "
                     "(EXACT.md 2.4 rule 2)", n.pos)
        if n.var == v and form == _CLOSE:
            cur.fail(f"a conjunct may not mix the iterator forms of {v} with {v}[{v}.len], "
                     f"an aggregate over {v}[ ] or {v}.len (EXACT.md 2.4 rule 2)", n.pos)
        if order[n.var] > order[v]:
            cur.fail(f"an iterator predicate may only refer to earlier components ({n.var} "
                     f"comes after {v}) (EXACT.md 2.4 rule 2)", n.pos)


def _check_return(cur: _QueryCursor, expr: Expr) -> None:
    """Rules 6 and 8: no ``[attr]``, no iterator forms; negated variables are never bound."""
    for node in _walk(expr):
        if isinstance(node, Equiv):
            cur.fail("an equivalence test [...] may only be a WHERE conjunct "
                     "(EXACT.md 2.4 rule 6)", node.pos)
    for n in _identifiers(expr):
        if _form(n) == _ITER:
            cur.fail("RETURN items may not use the iterator forms v[i], v[i-1] or "
                     "agg(v[..i-1]) (EXACT.md 2.4 rule 8)", n.pos)
        if cur.components[n.var].kind is Kind.NEG:
            cur.fail(f"{n.var} is negated: a match never binds it (EXACT.md 3.7)", n.pos)
