"""The SASE+ query parser of the exact engine (``docs/EXACT.md``, section 2).

``parse_query(text)`` reads a query into :class:`acep.nfab.ast.Query`; ``load_query(path)``
reads a query file. Both follow the grammar of EXACT.md 2.2 and enforce the static rules of
2.4: every syntax error and every rule violation is a :class:`QueryError` (a
:class:`acep.pattern.PatternError`) whose message names the clause (``"WHERE: ..."``) and
whose ``pos`` is the offset in the whole query text.

The tokenizer here is the query language's own (EXACT.md 2.3): it adds ``~``, ``%``, ``..``
and ``/* */`` comments, and does not read the dot of ``1..i-1`` as part of the number, while
:mod:`acep.pattern` keeps tokenizing ACEP patterns exactly as before. The cursor and the
expression nodes (``Const``, ``BinOp``, ``UnaryOp``, ``Call``) come from :mod:`acep.pattern`.

``format_expr`` and ``format_query`` print the AST back as query text that parses to the same
AST (positions aside).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import NoReturn

from ..pattern import FUNCTIONS, PatternError, Token, _Cursor, _or, check_depth
from ..units import WITHIN_UNITS, within_seconds
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
    Range,
    Ref,
    ReturnItem,
    Strategy,
    UnaryOp,
)

__all__ = ["QueryError", "parse_query", "load_query", "format_expr", "format_query"]

STRATEGIES = {s.value: s for s in Strategy}
AGGREGATES = ("avg", "sum", "min", "max", "count")
CLAUSES = ("pattern", "where", "within", "return")
KEYWORDS = frozenset((*CLAUSES, "seq", "and", "or", "not", "as", "len", *STRATEGIES,
                      *AGGREGATES))


class QueryError(PatternError):
    """A syntax error or a broken static rule (EXACT.md 2.4) in a query.

    ``message`` starts with the clause (``"WHERE: ..."``), ``clause`` names it alone, ``pos``
    is the offset in the whole text, ``source`` the file name (or None). ``str()`` shows the
    line and column, the offending line and a caret under the position.
    """

    def __init__(self, message: str, text: str, pos: int, clause: str,
                 source: str | None = None):
        full = f"{clause}: {message}"
        super().__init__(full, text, pos, "query")
        self.clause, self.source = clause, source
        line_no, line, column = _locate(text, pos)
        caret = "".join(c if c == "\t" else " " for c in line[:column]) + "^"
        origin = f"{source}: " if source else ""
        ValueError.__init__(self, f"{origin}query error at line {line_no}, column {column + 1} "
                                  f"(position {pos}): {full}\n  {line}\n  {caret}")


def _locate(text: str, pos: int) -> tuple[int, str, int]:
    """1-based line number, the line's text and the 0-based column of ``pos``."""
    start = text.rfind("\n", 0, pos) + 1
    end = text.find("\n", pos)
    line = text[start:None if end < 0 else end].rstrip("\r")
    return text.count("\n", 0, pos) + 1, line, pos - start


# --------------------------------------------------------------------------- tokens (2.3)

_TOKEN = re.compile(
    r"""(?P<ws>\s+|/\*.*?\*/)
      | (?P<open_comment>/\*)
      | (?P<num>\d+\.(?!\.)\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|\d+(?:[eE][-+]?\d+)?)
      | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
      | (?P<str>'[^']*'|"[^"]*")
      | (?P<open_str>['"])
      | (?P<op><=|>=|==|!=|<>|\.\.|[-+*/%()<>{},.\[\]=!~])
    """,
    re.VERBOSE | re.DOTALL,
)

_BAD = {"open_comment": "unterminated comment: '/*' without '*/'",
        "open_str": "unterminated string"}


def _tokenize(text: str) -> list[Token]:
    """Tokens of a query; an unreadable spot becomes one ``bad`` token holding the message,
    raised (with the clause it sits in) when the parser reaches it."""
    tokens, pos = [], 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.lastgroup in _BAD:
            message = _BAD[m.lastgroup] if m else f"unexpected character {text[pos]!r}"
            tokens.append(Token("bad", message, pos))
            break
        if m.lastgroup != "ws":
            tokens.append(Token(m.lastgroup, m.group(), pos))
        pos = m.end()
    tokens.append(Token("end", "", len(text.rstrip())))  # a caret after the last word
    return tokens


class _QueryCursor(_Cursor):
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


def _is(tok: Token, *texts: str) -> bool:
    """``tok`` is one of ``texts`` (operators exactly, names in lower case)."""
    if tok.kind == "name":
        return tok.text.lower() in texts
    return tok.kind == "op" and tok.text in texts


def _name(cur: _QueryCursor, what: str) -> Token:
    if cur.tok.kind != "name":
        cur.fail(f"expected {what}, found {cur.describe()}")
    return cur.take()


# --------------------------------------------------------------------------- the query

def parse_query(text: str, *, source: str | None = None) -> Query:
    """Parse a SASE+ query (EXACT.md 2.2) and check the static rules (2.4).

    ``source`` (a file name) only goes into error messages. Raises :class:`QueryError`.
    """
    cur = _QueryCursor(text, source)
    components = _pattern(cur)
    strategy, conjuncts = _where(cur) if cur.at("where") else (Strategy.ANY, ())
    window = _within(cur) if cur.at("within") else None
    returns = _returns(cur) if cur.at("return") else ()
    if cur.tok.kind != "end":
        cur.fail(f"unexpected {cur.describe()} (the clauses are PATTERN, WHERE, WITHIN and "
                 "RETURN, in this order)")
    if window is None:
        _check_edge_negations(cur, components)
    return Query(components, strategy, conjuncts, window, returns, text)


def load_query(path: str | os.PathLike[str]) -> Query:
    """Read and parse a query file (UTF-8, with or without the byte-order mark some
    editors write); errors name the file.

    Parameters
    ----------
    path : str or os.PathLike
        The query file (SASE+, docs/EXACT.md).

    Returns
    -------
    Query
        The parsed query, for :class:`acep.nfab.Engine`.

    Raises
    ------
    QueryError
        A malformed query, with the file, line, position and a caret.

    Examples
    --------
    >>> import os, tempfile
    >>> from acep.nfab import load_query
    >>> path = os.path.join(tempfile.mkdtemp(), "rise.sase")
    >>> with open(path, "w") as f:
    ...     print("PATTERN SEQ(Stock a, Stock b)", file=f)
    ...     print("WHERE skip_till_next_match(a, b) { [symbol] and b.price > a.price }", file=f)
    ...     print("WITHIN 1 hour", file=f)
    >>> query = load_query(path)
    >>> [c.var for c in query.components], query.window, query.strategy.value
    (['a', 'b'], 3600.0, 'skip_till_next_match')
    """
    return parse_query(Path(path).read_text(encoding="utf-8-sig"), source=str(path))


# --------------------------------------------------------------------------- PATTERN

def _pattern(cur: _QueryCursor) -> tuple[Component, ...]:
    """``PATTERN [SEQ] ( component, ... )`` with rule 1 (2.4) on the declarations."""
    if not cur.at("pattern"):
        cur.fail(f"a query starts with PATTERN, found {cur.describe()}")
    cur.take()
    if cur.at("seq"):
        cur.take()
    cur.expect("(")
    components = [_component(cur)]
    while cur.at(","):
        cur.take()
        components.append(_component(cur))
    if not cur.at(")"):
        cur.fail(f"expected ',' or ')' after a component, found {cur.describe()}")
    cur.take()
    if all(c.kind is Kind.NEG for c in components):
        cur.fail("the pattern needs at least one positive (non-negated) component "
                 "(EXACT.md 2.4 rule 1)", components[0].pos)
    return tuple(components)


def _component(cur: _QueryCursor) -> Component:
    """``Type v``, ``Type+ v[ ]``, ``~Type v`` or ``~(Type v)`` (``!`` for ``~`` too)."""
    start = cur.tok.pos
    if not cur.at("~", "!"):
        return _declaration(cur, start, negated=False)
    cur.take()
    if not cur.at("("):
        return _declaration(cur, start, negated=True)
    cur.take()
    component = _declaration(cur, start, negated=True)
    cur.expect(")")
    return component


def _declaration(cur: _QueryCursor, start: int, negated: bool) -> Component:
    type_ = _name(cur, "an event type").text
    kind = Kind.NEG if negated else Kind.ONE
    if cur.at("+"):
        if negated:
            cur.fail("a negated component may not be Kleene (EXACT.md 2.4 rule 4)")
        cur.take()
        kind = Kind.PLUS
    var = _name(cur, f"a variable name after the type {type_}")
    _declare(cur, var)
    if kind is Kind.PLUS:
        if not cur.at("["):
            cur.fail(f"a Kleene variable is declared with brackets: write {type_}+ "
                     f"{var.text}[ ] (EXACT.md 2.4 rule 1)")
        cur.take()
        cur.expect("]")
    elif cur.at("["):
        cur.fail(f"{var.text}[ ] declares a Kleene variable: write {type_}+ {var.text}[ ]")
    component = Component(kind, type_, var.text, start)
    cur.components[var.text] = component
    return component


def _declare(cur: _QueryCursor, var: Token) -> None:
    if var.text.lower() in KEYWORDS or var.text.lower() == "i":
        cur.fail(f"{var.text!r} is a keyword and cannot name a variable", var.pos)
    if var.text in cur.components:
        cur.fail(f"the variable {var.text} is declared twice (EXACT.md 2.4 rule 1)", var.pos)


def _check_edge_negations(cur: _QueryCursor, components: tuple[Component, ...]) -> None:
    """Rule 7 (2.4): a leading or trailing negation needs WITHIN (3.6)."""
    positive = [n for n, c in enumerate(components) if c.kind is not Kind.NEG]
    for n, c in enumerate(components):
        if c.kind is Kind.NEG and not positive[0] < n < positive[-1]:
            edge = "leading" if n < positive[0] else "trailing"
            cur.fail(f"the {edge} negation ~{c.type} {c.var} needs WITHIN (EXACT.md 2.4 "
                     "rule 7, 3.6)", c.pos, "PATTERN")


# --------------------------------------------------------------------------- WHERE

def _where(cur: _QueryCursor) -> tuple[Strategy, tuple[Expr, ...]]:
    """``WHERE [strategy [AND]] conjunction``, split into conjuncts in source order."""
    cur.clause = "WHERE"
    cur.take()
    if cur.at_clause_end():
        cur.fail("empty WHERE clause")
    strategy, strategy_tok, conjuncts = Strategy.ANY, None, []
    _check_strategy_name(cur)
    if cur.tok.kind == "name" and cur.tok.text.lower() in STRATEGIES:
        strategy_tok = cur.tok
        strategy, body = _strategy(cur)
        conjuncts.extend(body)
        if not cur.at("and") and not cur.at_clause_end():
            cur.fail(f"expected AND, WITHIN, RETURN or the end after the strategy, "
                     f"found {cur.describe()}")
        if cur.at("and"):
            cur.take()
            conjuncts.extend(_conjunction(cur))
    else:
        conjuncts.extend(_conjunction(cur))
    if not cur.at_clause_end():
        cur.fail(f"expected an operator, AND, WITHIN, RETURN or the end, found {cur.describe()}")
    for conjunct in conjuncts:
        _check_conjunct(cur, conjunct)
    if strategy is Strategy.PARTITION and not any(isinstance(c, Equiv) for c in conjuncts):
        cur.fail("partition_contiguity needs an equivalence test such as [attr] "
                 "(EXACT.md 2.4 rule 5)", strategy_tok.pos)
    return strategy, tuple(conjuncts)


def _strategy(cur: _QueryCursor) -> tuple[Strategy, tuple[Expr, ...]]:
    """The paper form ``s(a, b[ ]) { ... }`` or the wrapping form ``s(...)`` (2.2)."""
    name = cur.take()
    strategy = STRATEGIES[name.text.lower()]
    if not cur.at("("):
        cur.fail(f"expected '(' after {name.text}, found {cur.describe()}")
    if _paper_form(cur):
        _varlist(cur, name.text)
        cur.expect("{")
        body = () if cur.at("}") else _conjunction(cur)
        if not cur.at("}"):
            cur.fail(f"expected AND or '}}' to close {name.text}(...) {{, "
                     f"found {cur.describe()}")
        cur.take()
        return strategy, body
    cur.take()
    body = () if cur.at(")") else _conjunction(cur)
    if not cur.at(")"):
        cur.fail(f"expected AND or ')' to close {name.text}(, found {cur.describe()}")
    cur.take()
    return strategy, body


def _check_strategy_name(cur: _QueryCursor) -> None:
    """A call that opens WHERE and stands alone (``s(...) {``, ``s(...) AND``, ``s(...)``
    at the end of the clause) is a strategy: an unknown name there is a misspelt one."""
    name = cur.tok
    low = name.text.lower()
    if name.kind != "name" or not _is(cur.peek(), "(") or \
            low in STRATEGIES or low in FUNCTIONS or low in AGGREGATES:
        return
    after = _after_parens(cur, 1)
    if after is not None and (_is(after, "{", "and") or after.kind == "end" or
                              _is(after, *CLAUSES)):
        cur.fail(f"unknown strategy {name.text!r} (known: {', '.join(STRATEGIES)})")


def _paper_form(cur: _QueryCursor) -> bool:
    """Whether the token after the parenthesis that closes the current one is ``{``."""
    after = _after_parens(cur, 0)
    return after is not None and _is(after, "{")


def _after_parens(cur: _QueryCursor, ahead: int) -> Token | None:
    """The token after the parenthesis that closes the one ``ahead`` tokens on (None when
    it is never closed)."""
    depth = 0
    for n in range(ahead, len(cur.tokens) - cur.i):
        tok = cur.peek(n)
        if tok.kind in ("end", "bad"):
            return None
        depth += _is(tok, "(") - _is(tok, ")")
        if depth == 0:
            return cur.peek(n + 1)
    return None


def _varlist(cur: _QueryCursor, strategy: str) -> None:
    """Rule 5 (2.4): the paper form names every component's variable exactly once."""
    cur.expect("(")
    named: set[str] = set()
    while True:
        var = _name(cur, "a variable")
        component = _component_of(cur, var)
        if var.text in named:
            cur.fail(f"{strategy}(...) names {var.text} twice (EXACT.md 2.4 rule 5)", var.pos)
        named.add(var.text)
        if cur.at("["):
            if component.kind is not Kind.PLUS:
                cur.fail(f"{var.text} is not a Kleene variable: write {var.text} without [ ]")
            cur.take()
            cur.expect("]")
        if not cur.at(","):
            break
        cur.take()
    if not cur.at(")"):
        cur.fail(f"expected ',' or ')' in the variable list, found {cur.describe()}")
    missing = [v for v in cur.components if v not in named]
    if missing:
        cur.fail(f"{strategy}(...) must name every variable of the pattern once; missing: "
                 f"{', '.join(missing)} (per-component strategies are not supported, "
                 "EXACT.md 2.4 rule 5)")
    cur.take()


def _conjunction(cur: _QueryCursor) -> tuple[Expr, ...]:
    """An expression, split at AND into conjuncts (2.5: an OR stays inside one). A chain of
    ANDs is as long as it likes; each conjunct is held to the nesting limit."""
    start = cur.tok.pos
    return tuple(check_depth(cur, c, start) for c in _split_and(_or(cur)))


def _split_and(expr: Expr) -> list[Expr]:
    found, todo = [], [expr]
    while todo:
        e = todo.pop()
        if isinstance(e, BinOp) and e.op == "and":
            todo += [e.right, e.left]
        else:
            found.append(e)
    return found


# --------------------------------------------------------------------------- WITHIN, RETURN

def _within(cur: _QueryCursor) -> float:
    """``WITHIN NUMBER [UNIT]``, in seconds when a unit is given (2.2, 3.3)."""
    cur.clause = "WITHIN"
    cur.take()
    number = cur.tok
    if number.kind != "num":
        cur.fail(f"expected a number after WITHIN, found {cur.describe()}")
    cur.take()
    unit = ""
    if cur.tok.kind == "name" and not cur.at(*CLAUSES):
        unit = cur.tok.text
        if unit.lower() not in WITHIN_UNITS:
            cur.fail(f"unknown unit {unit!r} (known: {', '.join(u for u in WITHIN_UNITS if u)})")
        cur.take()
    if not cur.at_clause_end():
        cur.fail(f"expected RETURN or the end, found {cur.describe()}")
    try:
        return within_seconds(number.text, unit)
    except ValueError as exc:
        cur.fail(str(exc), number.pos)


def _returns(cur: _QueryCursor) -> tuple[ReturnItem, ...]:
    """``RETURN item [AS name], ...`` with rule 8 (2.4) and unique names."""
    cur.clause = "RETURN"
    cur.take()
    items: list[ReturnItem] = []
    while True:
        start = cur.tok.pos
        expr = check_depth(cur, _or(cur), start)
        name, name_pos = cur.text[start:cur.end_of_last()].strip(), start
        if cur.at("as"):
            cur.take()
            name_tok = _name(cur, "a name after AS")
            name, name_pos = name_tok.text, name_tok.pos
        _check_return(cur, expr)
        if any(item.name == name for item in items):
            cur.fail(f"two RETURN items are named {name!r} (EXACT.md 2.4 rule 8)", name_pos)
        items.append(ReturnItem(expr, name))
        if not cur.at(","):
            break
        cur.take()
    if cur.tok.kind != "end":
        cur.fail(f"expected ',', AS or the end, found {cur.describe()}")
    return tuple(items)


# --------------------------------------------------------------------------- expressions

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
        node = _or(cur)
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
    args = [_or(cur)]
    while cur.at(","):
        cur.take()
        args.append(_or(cur))
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


# --------------------------------------------------------------------------- static rules

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


# --------------------------------------------------------------------------- printing

_INDEX_TEXT = {Index.FIRST: "1", Index.I: "i", Index.PREV: "i-1"}


def format_expr(expr: Expr) -> str:
    """Query text for an expression; :func:`parse_query` reads it back to the same node
    (a negative ``Const`` comes back as ``UnaryOp("-", ...)``)."""
    text = _format(expr)
    return text[1:-1] if isinstance(expr, BinOp) else text


def _format(expr: Expr) -> str:
    if isinstance(expr, Const):
        return _format_const(expr.value)
    if isinstance(expr, BinOp):
        return f"({_format(expr.left)} {expr.op} {_format(expr.right)})"
    if isinstance(expr, UnaryOp):
        return f"(not {_format(expr.operand)})" if expr.op == "not" else \
            f"(-{_format(expr.operand)})"
    if isinstance(expr, Call):
        return f"{expr.func}({', '.join(_format(a) for a in expr.args)})"
    if isinstance(expr, Ref):
        if expr.index is Index.NONE:
            return f"{expr.var}.{expr.attr}"
        index = _INDEX_TEXT.get(expr.index, f"{expr.var}.len")
        return f"{expr.var}[{index}].{expr.attr}"
    if isinstance(expr, Agg):
        range_ = "" if expr.range is Range.ALL else "..i-1"
        attr = "" if expr.attr is None else f".{expr.attr}"
        return f"{expr.func}({expr.var}[{range_}]{attr})"
    if isinstance(expr, Len):
        return f"{expr.var}.len"
    if isinstance(expr, Equiv):
        return f"[{', '.join(expr.attrs)}]"
    raise TypeError(f"not an expression: {expr!r}")


def _format_const(value: float | str) -> str:
    if isinstance(value, str):
        if "'" not in value:
            return f"'{value}'"
        if '"' not in value:
            return f'"{value}"'
        raise ValueError(f"a string with both quote characters cannot be written: {value!r}")
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError(f"{value!r} cannot be written as a number literal")
    text = repr(float(value))
    return f"(-{text[1:]})" if text.startswith("-") else text


def format_query(query: Query) -> str:
    """Query text for a :class:`Query`, in the wrapping strategy form, the window in seconds.

    A RETURN name that is not an identifier comes back as the printed expression.
    """
    lines = ["PATTERN SEQ(" + ", ".join(_format_component(c) for c in query.components) + ")"]
    body = " AND ".join(_format(c) if _is_logical(c) else format_expr(c)
                        for c in query.conjuncts)
    lines.append(f"WHERE {query.strategy.value}({body})")
    if query.window is not None:
        lines.append(f"WITHIN {_format_const(query.window)}")
    if query.returns:
        lines.append("RETURN " + ", ".join(_format_item(r) for r in query.returns))
    return "\n".join(lines)


def _is_logical(expr: Expr) -> bool:
    return isinstance(expr, BinOp) and expr.op in ("and", "or")


def _format_component(c: Component) -> str:
    if c.kind is Kind.PLUS:
        return f"{c.type}+ {c.var}[ ]"
    return f"{'~' if c.kind is Kind.NEG else ''}{c.type} {c.var}"


def _format_item(item: ReturnItem) -> str:
    text = format_expr(item.expr)
    if item.name == text or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", item.name):
        return text
    return f"{text} AS {item.name}"
