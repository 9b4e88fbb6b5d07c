"""The parsed form of a SASE+ query (``docs/EXACT.md``, section 2), shared by the exact
engine and the tests' brute-force oracle. Nothing here evaluates; see the spec.

Expression nodes ``Const``, ``BinOp``, ``UnaryOp`` and ``Call`` (abs/min/max of two
scalars) come from :mod:`acep.pattern`; the nodes below add what SASE+ needs.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Union

from ..pattern import BinOp, Call, Const, UnaryOp

__all__ = ["Index", "Range", "Kind", "Strategy", "Ref", "Agg", "Len", "Equiv", "Component",
           "ReturnItem", "Query", "Expr", "Const", "BinOp", "UnaryOp", "Call"]


class Index(Enum):
    """Which element of a variable an identifier reads (EXACT.md 2.5)."""

    NONE = "v"        # a singleton or negated variable: ``v.x``
    FIRST = "v[1]"
    I = "v[i]"        # noqa: E741 - the papers' name
    PREV = "v[i-1]"
    LAST = "v[v.len]"


class Range(Enum):
    PREFIX = "v[..i-1]"   # also written v[1..i-1]
    ALL = "v[]"


class Kind(Enum):
    ONE = "singleton"
    PLUS = "kleene"
    NEG = "negated"


class Strategy(Enum):
    STRICT = "strict_contiguity"
    PARTITION = "partition_contiguity"
    NEXT = "skip_till_next_match"
    ANY = "skip_till_any_match"


@dataclass(frozen=True)
class Ref:
    """``v.x``, ``v[1].x``, ``v[i].x``, ``v[i-1].x`` or ``v[v.len].x`` (``x == "t"``: the tag)."""

    var: str
    index: Index
    attr: str
    pos: int = 0


@dataclass(frozen=True)
class Agg:
    """``avg/sum/min/max(v[..i-1].x)``, ``avg(v[].x)``; ``count(v[..])`` has ``attr`` None."""

    func: str
    var: str
    range: Range
    attr: str | None
    pos: int = 0


@dataclass(frozen=True)
class Len:
    """``v.len``: the number of elements of Kleene variable ``v``."""

    var: str
    pos: int = 0


@dataclass(frozen=True)
class Equiv:
    """``[x, y]``: the equivalence test (a top-level conjunct only)."""

    attrs: tuple[str, ...]
    pos: int = 0


Expr = Union[Const, BinOp, UnaryOp, Call, Ref, Agg, Len, Equiv]


@dataclass(frozen=True)
class Component:
    """One component of ``SEQ(...)``: ``Type v``, ``Type+ v[]`` or ``~Type v``."""

    kind: Kind
    type: str
    var: str
    pos: int = 0


@dataclass(frozen=True)
class ReturnItem:
    expr: Expr
    name: str


@dataclass(frozen=True)
class Query:
    """A whole query. ``conjuncts`` are the top-level AND terms of WHERE, in source order
    (``Equiv`` among them); ``window`` is in tag units (seconds when a unit was given),
    None without WITHIN; ``strategy`` defaults to skip-till-any-match."""

    components: tuple[Component, ...]
    strategy: Strategy
    conjuncts: tuple[Expr, ...]
    window: float | None
    returns: tuple[ReturnItem, ...]
    text: str = ""

    @property
    def positive(self) -> tuple[Component, ...]:
        return tuple(c for c in self.components if c.kind is not Kind.NEG)

    def component(self, var: str) -> Component:
        return next(c for c in self.components if c.var == var)
