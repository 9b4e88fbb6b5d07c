"""The query parser: :func:`parse_query` and :func:`load_query` read the clauses PATTERN,
WHERE, WITHIN and RETURN (EXACT.md 2.2) and check the static rules (2.4).
"""

from __future__ import annotations

import os
from pathlib import Path

from ...pattern import FUNCTIONS, Token, check_depth, expression
from ...units import WITHIN_UNITS, within_seconds
from ..ast import BinOp, Component, Equiv, Expr, Kind, Query, ReturnItem, Strategy
from .expressions import _component_of, _name, _QueryCursor
from .lexer import AGGREGATES, CLAUSES, KEYWORDS, STRATEGIES, _is
from .rules import _check_conjunct, _check_return


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
    return tuple(check_depth(cur, c, start) for c in _split_and(expression(cur)))


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
        expr = check_depth(cur, expression(cur), start)
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
