"""The cursor over a query's tokens and the expression grammar it reads (EXACT.md 2.2).

The cursor and the operators come from :mod:`acep.pattern`'s expression grammar; this module
adds the SASE+ primaries: percentages, ``[attr]``, ``v[i].x``, ``v.len`` and aggregates.
"""

from __future__ import annotations

from decimal import Decimal
from typing import NoReturn

from ...pattern import FUNCTIONS, Cursor, Token, expression
from ..ast import (
    Agg,
    Call,
    Component,
    Const,
    Equiv,
    Expr,
    Index,
    Kind,
    Len,
    Range,
    Ref,
)
from .lexer import AGGREGATES, CLAUSES, KEYWORDS, STRATEGIES, QueryError, _is, _tokenize


class _QueryCursor(Cursor):
    """``acep.pattern``'s cursor over the query tokens: keywords match case-insensitively
    (``at`` takes them in lower case), failures name the clause being read, and it knows the
    components once PATTERN is read."""

    def __init__(self, text: str, source: str | None):
        self.text, self.what, self.source = text, "query", source
        self.tokens = _tokenize(text)
        self.i = 0
        self.clause = "PATTERN"
        self.components: dict[str, Component] = {}

    @property
    def tok(self) -> Token:
        tok = self.tokens[self.i]
        if tok.kind == "bad":
            self.fail(tok.text, tok.pos)
        return tok

    def take(self) -> Token:
        tok = self.tok
        self.i += 1
        return tok

    def peek(self, ahead: int = 1) -> Token:
        return self.tokens[min(self.i + ahead, len(self.tokens) - 1)]

    def at(self, *texts: str) -> bool:
        return _is(self.tok, *texts)

    def at_clause_end(self) -> bool:
        return self.tok.kind == "end" or self.at(*CLAUSES)

    def end_of_last(self) -> int:
        tok = self.tokens[self.i - 1]
        return tok.pos + len(tok.text)

    product_ops = ("*", "/", "%")

    def primary(self) -> Expr:
        return _primary(self)

    def fail(self, message: str, pos: int | None = None, clause: str | None = None) -> NoReturn:
        pos = self.tokens[self.i].pos if pos is None else pos
        raise QueryError(message, self.text, pos, clause or self.clause, self.source)


def _name(cur: _QueryCursor, what: str) -> Token:
    if cur.tok.kind != "name":
        cur.fail(f"expected {what}, found {cur.describe()}")
    return cur.take()


def _primary(cur: _QueryCursor) -> Expr:
    """acep.pattern's primaries plus percentages, ``[attr]`` and SASE+ identifiers (2.2)."""
    tok = cur.tok
    if tok.kind == "num":
        return _number(cur)
    if tok.kind == "str":
        cur.take()
        return Const(tok.text[1:-1])
    if cur.at("("):
        cur.take()
        node = expression(cur)
        cur.expect(")")
        return node
    if cur.at("["):
        return _equiv(cur)
    if tok.kind == "name":
        return _named(cur)
    cur.fail(f"expected a value, found {cur.describe()}")


def _number(cur: _QueryCursor) -> Const:
    """A number, or a percentage: ``80%`` is 0.8 when no operand follows the ``%`` (2.3)."""
    tok = cur.take()
    if cur.at("%") and not _starts_operand(cur.peek()):
        cur.take()
        return Const(float(Decimal(tok.text) / 100))
    return Const(float(tok.text))


def _starts_operand(tok: Token) -> bool:
    """NUMBER, STRING, a name, ``(``, ``-`` or ``+`` (2.3); a keyword that cannot start an
    operand (AND, OR, NOT, AS, a clause) does not, so ``80% AND ...`` is a percentage."""
    if tok.kind == "name":
        return tok.text.lower() not in _NOT_OPERANDS
    return tok.kind in ("num", "str") or _is(tok, "(", "-", "+")


_NOT_OPERANDS = frozenset((*CLAUSES, "and", "or", "not", "as"))


def _equiv(cur: _QueryCursor) -> Equiv:
    """``[attr, ...]``: the equivalence test (2.2; where it may stand: rule 6)."""
    start = cur.take()
    attrs = [_name(cur, "an attribute name").text]
    while cur.at(","):
        cur.take()
        attrs.append(_name(cur, "an attribute name").text)
    if not cur.at("]"):
        cur.fail(f"expected ',' or ']' in the equivalence test, found {cur.describe()}")
    cur.take()
    return Equiv(tuple(attrs), start.pos)


def _named(cur: _QueryCursor) -> Expr:
    """What a name starts: an aggregate, a function call or a variable reference."""
    low = cur.tok.text.lower()
    follows_paren = _is(cur.peek(), "(")
    if low in STRATEGIES:
        cur.fail(f"the strategy {cur.tok.text} may only open the WHERE clause, once "
                 "(EXACT.md 2.4 rule 5)")
    if low in AGGREGATES and follows_paren and (low not in FUNCTIONS or _array_argument(cur)):
        return _aggregate(cur)
    if follows_paren:
        return _call(cur)
    if low in KEYWORDS:
        cur.fail(f"expected a value, found {cur.describe()}")
    return _reference(cur)


def _array_argument(cur: _QueryCursor) -> bool:
    """``min``/``max`` over an array: ``name ( VAR [ ]``, ``[ ..`` or ``[ N ..``."""
    if cur.peek(2).kind != "name" or not _is(cur.peek(3), "["):
        return False
    return _is(cur.peek(4), "]", "..") or _is(cur.peek(5), "..")


def _call(cur: _QueryCursor) -> Call:
    name = cur.take()
    func = name.text.lower()
    if func not in FUNCTIONS:
        cur.fail(f"unknown function {name.text!r} (known: {', '.join(FUNCTIONS)}; "
                 f"aggregates: {', '.join(AGGREGATES)})", name.pos)
    cur.expect("(")
    args = [expression(cur)]
    while cur.at(","):
        cur.take()
        args.append(expression(cur))
    cur.expect(")")
    if len(args) != FUNCTIONS[func]:
        cur.fail(f"{func}() takes {FUNCTIONS[func]} argument(s), got {len(args)}", name.pos)
    return Call(func, tuple(args))


def _aggregate(cur: _QueryCursor) -> Agg:
    """``agg(v[range].x)`` or ``count(v[range])`` over a Kleene variable (2.2, rule 3)."""
    name = cur.take()
    func = name.text.lower()
    cur.expect("(")
    var = _name(cur, "a Kleene variable")
    if _component_of(cur, var).kind is not Kind.PLUS:
        cur.fail(f"{func}() reads the elements of a Kleene variable; {var.text} is not one "
                 "(EXACT.md 2.4 rule 1)", var.pos)
    if not cur.at("["):
        cur.fail(f"expected '[' and a range after {var.text}: write {var.text}[ ] or "
                 f"{var.text}[..i-1]")
    cur.take()
    range_ = _range(cur)
    cur.expect("]")
    attr = None
    if func != "count":
        if not cur.at("."):
            cur.fail(f"expected '.' and an attribute: {func}({var.text}[...].ATTRIBUTE)")
        cur.take()
        attr = _attribute(cur)
    elif cur.at("."):
        cur.fail(f"count() takes no attribute: write count({var.text}[...])")
    if not cur.at(")"):
        cur.fail(f"expected ')' closing {func}( (an aggregate takes one array), "
                 f"found {cur.describe()}")
    cur.take()
    return Agg(func, var.text, range_, attr, name.pos)


def _range(cur: _QueryCursor) -> Range:
    """Rule 3 (2.4): a range is empty (the whole array), ``..i-1`` or ``1..i-1``."""
    if cur.at("]"):
        return Range.ALL
    start = cur.tok
    if _is(start, "i") or _is(cur.peek(), ".") or (start.text == "1" and _is(cur.peek(), "]")):
        cur.fail("an aggregate reads a range, v[ ] or v[..i-1], not an index")
    if start.kind == "num" and start.text == "1" and _is(cur.peek(), ".."):
        cur.take()
    for part in ("..", "i", "-", "1"):
        if not _is(cur.tok, part) and not (part == "1" and cur.tok.text == "1"):
            cur.fail("a range is empty (v[ ]), ..i-1 or 1..i-1 (EXACT.md 2.4 rule 3)",
                     start.pos)
        cur.take()
    return Range.PREFIX


def _reference(cur: _QueryCursor) -> Expr:
    """``v.x``, ``v[index].x`` or ``v.len``, each only for the right kind of variable (rule 1)."""
    var = cur.take()
    component = _component_of(cur, var)
    kleene = component.kind is Kind.PLUS
    if cur.at("["):
        if not kleene:
            cur.fail(f"{var.text} is not a Kleene variable: read it as {var.text}.ATTRIBUTE "
                     "(EXACT.md 2.4 rule 1)")
        cur.take()
        index = _index(cur, var.text)
        cur.expect("]")
        cur.expect(".")
        return Ref(var.text, index, _attribute(cur), var.pos)
    if not cur.at("."):
        cur.fail(f"expected '.' and an attribute after {var.text!r} (write "
                 f"{var.text}.ATTRIBUTE)")
    cur.take()
    if cur.at("len"):
        if not kleene:
            cur.fail(f"{var.text}.len: {var.text} is not a Kleene variable "
                     "(EXACT.md 2.4 rule 1)", var.pos)
        cur.take()
        return Len(var.text, var.pos)
    if kleene:
        v = var.text
        cur.fail(f"the Kleene variable {v} is read through {v}[1], {v}[i], {v}[i-1], "
                 f"{v}[{v}.len], {v}.len or an aggregate (EXACT.md 2.4 rule 1)", var.pos)
    return Ref(var.text, Index.NONE, _attribute(cur), var.pos)


def _index(cur: _QueryCursor, var: str) -> Index:
    """``1``, ``i``, ``i-1`` or ``var.len`` (the same array, rule 3)."""
    tok = cur.tok
    if tok.kind == "num" and tok.text == "1" and not _is(cur.peek(), ".."):
        cur.take()
        return Index.FIRST
    if cur.at("i"):
        cur.take()
        if not cur.at("-"):
            return Index.I
        cur.take()
        if cur.tok.kind != "num" or cur.tok.text != "1":
            cur.fail(f"an index is 1, i, i-1 or {var}.len (EXACT.md 2.4 rule 3)")
        cur.take()
        return Index.PREV
    if tok.kind == "name" and _is(cur.peek(), ".") and _is(cur.peek(2), "len"):
        if tok.text != var:
            cur.fail(f"the index {tok.text}.len must name the same array: write "
                     f"{var}[{var}.len] (EXACT.md 2.4 rule 3)")
        cur.i += 3
        return Index.LAST
    if cur.at("]", "..") or _is(cur.peek(), ".."):
        cur.fail(f"a range is only read by an aggregate: avg({var}[..i-1].x), count({var}[ ])")
    cur.fail(f"an index is 1, i, i-1 or {var}.len (EXACT.md 2.4 rule 3)")


def _attribute(cur: _QueryCursor) -> str:
    tok = _name(cur, "an attribute name")
    if tok.text.lower() == "len":
        cur.fail("'len' is a keyword: the length of v is v.len", tok.pos)
    return tok.text


def _component_of(cur: _QueryCursor, var: Token) -> Component:
    component = cur.components.get(var.text)
    if component is None:
        cur.fail(f"unknown variable {var.text!r} (the pattern declares "
                 f"{', '.join(cur.components)})", var.pos)
    return component
