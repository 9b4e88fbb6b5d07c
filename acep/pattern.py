"""The pattern language: regular expressions over event types, and predicates.

A pattern is a regular expression over event types ([L16] Section 2): ``a (b | c) d b``,
``late+ ontime? early``, ``x* | y{2} | w{2,3}``. Predicates (``where``) are boolean
expressions over the attributes of bound events, named by their type; ``[attr]`` is the
equivalence test. This module only parses: :mod:`acep.automaton` and :mod:`acep.predicates`
compile, and the exact engine reuses the tokenizer and expression parser. The syntax is in
docs/CLI.md, "Pattern language".
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Union

__all__ = [
    "PatternError", "Symbol", "Concat", "Alt", "Star", "Repeat", "Node",
    "parse_regex", "Attr", "Const", "BinOp", "UnaryOp", "Call", "Expr",
    "parse_expression", "parse_where", "Where", "symbols", "pattern_length_bounds",
    "partition_attribute",
]


class PatternError(ValueError):
    """A syntax error in a pattern or predicate, pointing at the offending position."""

    def __init__(self, message: str, text: str, pos: int, what: str = "pattern"):
        self.message, self.text, self.pos, self.what = message, text, pos, what
        caret = " " * pos + "^"
        super().__init__(f"{what} error at position {pos}: {message}\n  {text}\n  {caret}")


# Nesting levels of a pattern or an expression (groups, operators, calls): the parsers and
# every walk over the tree recurse once a level, so input must not reach Python's limit.
MAX_NESTING = 64


# --------------------------------------------------------------------------- tokens

_TOKEN = re.compile(
    r"""(?P<ws>\s+)
      | (?P<num>\d+\.\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|\d+(?:[eE][-+]?\d+)?)
      | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
      | (?P<str>'[^']*'|"[^"]*")
      | (?P<op><=|>=|==|!=|<>|[-+*/()<>|?{},.\[\]=!])
    """,
    re.VERBOSE,
)


@dataclass(frozen=True)
class Token:
    kind: str  # "num" | "name" | "str" | "op" | "end"
    text: str
    pos: int


def tokenize(text: str, what: str = "pattern") -> list[Token]:
    tokens, pos = [], 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise PatternError(f"unexpected character {text[pos]!r}", text, pos, what)
        if m.lastgroup != "ws":
            tokens.append(Token(m.lastgroup, m.group(), pos))
        pos = m.end()
    tokens.append(Token("end", "", len(text)))
    return tokens


class Cursor:
    """Tokens with a position. The expression grammar below asks the cursor for the parts a
    language extends: its product operators and how it reads a primary (the exact engine's
    query cursor adds ``%`` and SASE+ identifiers)."""

    product_ops: tuple[str, ...] = ("*", "/")
    depth = 0  # levels of the grammar's recursion open now

    def __init__(self, text: str, what: str):
        self.text, self.what = text, what
        self.tokens = tokenize(text, what)
        self.i = 0

    @property
    def tok(self) -> Token:
        return self.tokens[self.i]

    def take(self) -> Token:
        tok = self.tokens[self.i]
        self.i += 1
        return tok

    def at(self, *texts: str) -> bool:
        return self.tok.kind in ("op", "name") and self.tok.text in texts

    def expect(self, text: str) -> Token:
        if not self.at(text):
            self.fail(f"expected {text!r}, found {self.describe()}")
        return self.take()

    def describe(self) -> str:
        return "end of input" if self.tok.kind == "end" else repr(self.tok.text)

    def fail(self, message: str, pos: int | None = None):
        raise PatternError(message, self.text, self.tok.pos if pos is None else pos, self.what)

    def primary(self):
        return _primary(self)

    @contextmanager
    def nested(self):
        """One more level of recursion, refused past :data:`MAX_NESTING`."""
        if self.depth >= MAX_NESTING:
            self.fail(_TOO_DEEP)
        self.depth += 1
        try:
            yield
        finally:
            self.depth -= 1


_TOO_DEEP = f"nested deeper than the limit of {MAX_NESTING} levels"


def tree_depth(node) -> int:
    """Levels of a pattern or expression tree, counted without recursion."""
    deepest, todo = 0, [(node, 1)]
    while todo:
        node, depth = todo.pop()
        deepest = max(deepest, depth)
        todo.extend((child, depth + 1) for child in _children(node))
    return deepest


def _children(node) -> tuple:
    if isinstance(node, (Concat, Alt)):
        return node.items
    if isinstance(node, (Star, Repeat)):
        return (node.item,)
    if isinstance(node, BinOp):
        return node.left, node.right
    if isinstance(node, UnaryOp):
        return (node.operand,)
    if isinstance(node, Call):
        return node.args
    return ()


def check_depth(cur: Cursor, node, start: int):
    """``node``, or the error when its tree is deeper than :data:`MAX_NESTING` (a chain
    such as ``1 + 1 + ...`` or ``a???`` deepens it without recursing)."""
    if tree_depth(node) > MAX_NESTING:
        cur.fail(_TOO_DEEP, start)
    return node


# --------------------------------------------------------------------------- regex AST

@dataclass(frozen=True)
class Symbol:
    name: str
    pos: int = 0


@dataclass(frozen=True)
class Concat:
    items: tuple


@dataclass(frozen=True)
class Alt:
    items: tuple


@dataclass(frozen=True)
class Star:
    item: object


@dataclass(frozen=True)
class Repeat:
    """``item{lo,hi}``; ``hi`` None means unbounded (``+`` is ``{1,}``, ``?`` is ``{0,1}``)."""

    item: object
    lo: int
    hi: int | None


Node = Union[Symbol, Concat, Alt, Star, Repeat]

MAX_REPEAT = 64


def parse_regex(text: str) -> Node:
    """Parse a regular expression over event types into an AST."""
    cur = Cursor(text, "pattern")
    if cur.tok.kind == "end":
        cur.fail("empty pattern")
    node = check_depth(cur, _alternation(cur), 0)
    if cur.tok.kind != "end":
        cur.fail(f"unexpected {cur.describe()}")
    return node


def _alternation(cur: Cursor) -> Node:
    with cur.nested():
        items = [_concatenation(cur)]
        while cur.at("|"):
            cur.take()
            items.append(_concatenation(cur))
    return items[0] if len(items) == 1 else Alt(tuple(items))


def _concatenation(cur: Cursor) -> Node:
    items = []
    while cur.tok.kind == "name" or cur.at("("):
        items.append(_postfix(cur))
    if not items:
        cur.fail(f"expected an event type or '(', found {cur.describe()}")
    return items[0] if len(items) == 1 else Concat(tuple(items))


def _postfix(cur: Cursor) -> Node:
    node = _atom(cur)
    while cur.at("*", "+", "?", "{"):
        op = cur.take()
        if op.text == "*":
            node = Star(node)
        elif op.text == "+":
            node = Repeat(node, 1, None)
        elif op.text == "?":
            node = Repeat(node, 0, 1)
        else:
            node = _counted(cur, node, op)
    return node


def _counted(cur: Cursor, node: Node, brace: Token) -> Node:
    lo = _int(cur)
    hi: int | None = lo
    if cur.at(","):
        cur.take()
        hi = None if cur.at("}") else _int(cur)
    cur.expect("}")
    if hi is not None and hi < lo:
        cur.fail(f"repetition {{{lo},{hi}}} has its upper bound below its lower bound", brace.pos)
    if max(lo, hi or 0) > MAX_REPEAT:
        cur.fail(f"repetition count above {MAX_REPEAT}", brace.pos)
    if hi == 0:
        cur.fail("repetition {0} matches nothing", brace.pos)
    return Repeat(node, lo, hi)


def _int(cur: Cursor) -> int:
    tok = cur.tok
    if tok.kind != "num" or not tok.text.isdigit():
        cur.fail(f"expected a whole number, found {cur.describe()}")
    cur.take()
    return int(tok.text)


def _atom(cur: Cursor) -> Node:
    tok = cur.take()
    if tok.kind == "name":
        return Symbol(tok.text, tok.pos)
    node = _alternation(cur)  # tok was "("
    if not cur.at(")"):
        cur.fail(f"expected ')' to close the group opened at position {tok.pos}, "
                 f"found {cur.describe()}")
    cur.take()
    return node


def symbols(node: Node) -> list[str]:
    """The distinct event types of a pattern, in order of first appearance."""
    seen: dict[str, None] = {}

    def walk(n):
        if isinstance(n, Symbol):
            seen.setdefault(n.name)
        elif isinstance(n, (Concat, Alt)):
            for item in n.items:
                walk(item)
        else:
            walk(n.item)

    walk(node)
    return list(seen)


def pattern_length_bounds(node: Node) -> tuple[int, int | None]:
    """Shortest and longest serialization length (None: unbounded)."""
    if isinstance(node, Symbol):
        return 1, 1
    if isinstance(node, Concat):
        bounds = [pattern_length_bounds(i) for i in node.items]
        hi = None if any(b[1] is None for b in bounds) else sum(b[1] for b in bounds)
        return sum(b[0] for b in bounds), hi
    if isinstance(node, Alt):
        bounds = [pattern_length_bounds(i) for i in node.items]
        hi = None if any(b[1] is None for b in bounds) else max(b[1] for b in bounds)
        return min(b[0] for b in bounds), hi
    lo, hi = pattern_length_bounds(node.item)
    if isinstance(node, Star):
        return 0, (0 if hi == 0 else None)
    rep_hi = None if node.hi is None or hi is None else hi * node.hi
    if node.hi is None and hi == 0:
        rep_hi = 0
    return lo * node.lo, rep_hi


# --------------------------------------------------------------------------- predicates

@dataclass(frozen=True)
class Attr:
    """``var.attr``: an attribute of the event bound to variable ``var`` (its type name)."""

    var: str
    attr: str
    pos: int = 0


@dataclass(frozen=True)
class Const:
    value: float | str


@dataclass(frozen=True)
class BinOp:
    op: str  # + - * / < <= > >= == != and or
    left: object
    right: object


@dataclass(frozen=True)
class UnaryOp:
    op: str  # - not
    operand: object


@dataclass(frozen=True)
class Call:
    func: str  # abs, min, max
    args: tuple


Expr = Union[Attr, Const, BinOp, UnaryOp, Call]

FUNCTIONS = {"abs": 1, "min": 2, "max": 2}
_COMPARISONS = ("<", "<=", ">", ">=", "==", "!=", "<>", "=")


def parse_expression(text: str) -> Expr:
    """Parse one predicate expression (``d.price > a.price + 1``)."""
    cur = Cursor(text, "predicate")
    expr = check_depth(cur, expression(cur), 0)
    if cur.tok.kind != "end":
        cur.fail(f"unexpected {cur.describe()}")
    return expr


def expression(cur: Cursor) -> Expr:
    """The expression at the cursor: the whole grammar, from ``or`` down to the primaries
    the cursor reads (the exact engine's query parser reads its expressions with it)."""
    with cur.nested():
        node = _and(cur)
        while cur.at("or"):
            cur.take()
            node = BinOp("or", node, _and(cur))
    return node


def _and(cur):
    node = _not(cur)
    while cur.at("and"):
        cur.take()
        node = BinOp("and", node, _not(cur))
    return node


def _not(cur):
    if cur.at("not"):
        cur.take()
        with cur.nested():
            return UnaryOp("not", _not(cur))
    return _comparison(cur)


def _comparison(cur):
    node = _sum(cur)
    if cur.at(*_COMPARISONS):
        op = cur.take().text
        op = {"<>": "!=", "=": "=="}.get(op, op)
        node = BinOp(op, node, _sum(cur))
        if cur.at(*_COMPARISONS):
            cur.fail("chained comparisons are not supported; use and")
    return node


def _sum(cur):
    node = _product(cur)
    while cur.at("+", "-"):
        node = BinOp(cur.take().text, node, _product(cur))
    return node


def _product(cur):
    node = _unary(cur)
    while cur.at(*cur.product_ops):
        node = BinOp(cur.take().text, node, _unary(cur))
    return node


def _unary(cur):
    if cur.at("-"):
        cur.take()
        with cur.nested():
            return UnaryOp("-", _unary(cur))
    if cur.at("+"):
        cur.take()
        with cur.nested():
            return _unary(cur)
    return cur.primary()


def _primary(cur):
    tok = cur.tok
    if tok.kind == "num":
        cur.take()
        return Const(float(tok.text))
    if tok.kind == "str":
        cur.take()
        return Const(tok.text[1:-1])
    if cur.at("("):
        cur.take()
        node = expression(cur)
        cur.expect(")")
        return node
    if tok.kind == "name" and tok.text not in ("and", "or", "not"):
        cur.take()
        if cur.at("("):
            return _call(cur, tok)
        if not cur.at("."):
            cur.fail(f"expected '.' and an attribute after {tok.text!r} "
                     f"(write {tok.text}.ATTRIBUTE)")
        cur.take()
        attr = cur.tok
        if attr.kind != "name":
            cur.fail(f"expected an attribute name, found {cur.describe()}")
        cur.take()
        return Attr(tok.text, attr.text, tok.pos)
    cur.fail(f"expected a value, found {cur.describe()}")


def _call(cur, name: Token):
    if name.text not in FUNCTIONS:
        cur.fail(f"unknown function {name.text!r} (known: {', '.join(FUNCTIONS)})", name.pos)
    cur.expect("(")
    args = [expression(cur)]
    while cur.at(","):
        cur.take()
        args.append(expression(cur))
    cur.expect(")")
    if len(args) != FUNCTIONS[name.text]:
        cur.fail(f"{name.text}() takes {FUNCTIONS[name.text]} argument(s), got {len(args)}",
                 name.pos)
    return Call(name.text, tuple(args))


# --------------------------------------------------------------------------- where clause

@dataclass(frozen=True)
class Where:
    """A parsed where clause: conjunct predicates and the equivalence attribute (if any)."""

    predicates: tuple = ()
    partition: str | None = None


def parse_where(texts) -> Where:
    """Parse where clauses: each text is a conjunction of predicates and ``[attr]`` tests.

    A top-level ``and`` separates predicates so each one is checked as early as possible.
    """
    if isinstance(texts, str):
        texts = [texts]
    predicates, partition = [], None
    for text in texts:
        for part, offset in _split_top_level_and(text):
            stripped = part.strip()
            m = re.fullmatch(r"\[\s*([A-Za-z_][A-Za-z0-9_]*)\s*\]", stripped)
            if m:
                if partition is not None and partition != m.group(1):
                    raise PatternError(
                        f"a second equivalence test [{m.group(1)}] (already [{partition}]); "
                        "one partition attribute is supported", text, offset, "predicate")
                partition = m.group(1)
                continue
            try:
                expr = parse_expression(part)
            except PatternError as exc:
                raise PatternError(exc.message, text, offset + exc.pos, "predicate") from None
            predicates.extend(_conjuncts(expr))
    return Where(tuple(predicates), partition)


def partition_attribute(where, partition: str | None = None) -> str | None:
    """The attribute a matcher with these settings partitions by: ``partition``, else the
    where clauses' equivalence test ``[attr]`` (None: one partition), as ``Matcher`` resolves
    it. Histories and sketches record it, and devices are checked against it."""
    return partition if partition is not None else parse_where(where).partition


def _split_top_level_and(text: str):
    """Split on the word ``and`` outside brackets (keeps ``[attr]`` parts apart)."""
    parts, depth, start = [], 0, 0
    tokens = tokenize(text, "predicate")
    for tok in tokens:
        if tok.kind == "op" and tok.text in "([":
            depth += 1
        elif tok.kind == "op" and tok.text in ")]":
            depth -= 1
        elif tok.kind == "name" and tok.text == "and" and depth == 0:
            parts.append((text[start:tok.pos], start))
            start = tok.pos + 3
    parts.append((text[start:], start))
    for part, offset in parts:
        if not part.strip():
            raise PatternError("empty condition around 'and'", text, offset, "predicate")
    return parts


def _conjuncts(expr):
    if isinstance(expr, BinOp) and expr.op == "and":
        return _conjuncts(expr.left) + _conjuncts(expr.right)
    return [expr]


def variables(expr) -> list[str]:
    """Variables (type names) an expression uses, in order of first use."""
    found: dict[str, None] = {}

    def walk(e):
        if isinstance(e, Attr):
            found.setdefault(e.var)
        elif isinstance(e, BinOp):
            walk(e.left)
            walk(e.right)
        elif isinstance(e, UnaryOp):
            walk(e.operand)
        elif isinstance(e, Call):
            for a in e.args:
                walk(a)

    walk(expr)
    return list(found)
