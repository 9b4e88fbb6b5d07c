"""Evaluate query expressions over bound events (``docs/EXACT.md`` section 3.2).

Numbers are floats (integers beyond 2**53 stay exact ints); ``x / 0`` and ``x % 0`` are
NaN; comparisons with NaN are false except ``!=``; a number and a string are never equal
and never ordered; aggregates fold left in position order. ``v.t`` reads the tag.
"""

from __future__ import annotations

import math

from ..events import EXACT_INT, Event
from .ast import Agg, BinOp, Call, Const, Index, Len, Ref, UnaryOp


class Binding:
    """The events bound to each variable: a list per variable, and the iterator ``i``
    (1-based) of the Kleene variable whose take or begin edge is being evaluated."""

    __slots__ = ("events", "var", "i")

    def __init__(self, events: dict[str, list[Event]], var: str | None = None, i: int = 0):
        self.events, self.var, self.i = events, var, i


def number(v: int | float) -> int | float:
    """A number as the engines compute with it (EXACT.md 3.2): a float, except an integer
    beyond 2**53, such as a 64-bit id, which stays exact, so that two such ids never
    compare equal (nor route to one partition) by rounding."""
    if type(v) is int and not -EXACT_INT <= v <= EXACT_INT:
        return v
    return float(v)


def value_of(event: Event, attr: str):
    if attr == "t":
        return float(event.t)
    v = event.attrs[attr]
    return number(v) if isinstance(v, (int, float)) else v


def evaluate(expr, b: Binding):
    if isinstance(expr, Const):
        return expr.value
    if isinstance(expr, Ref):
        return value_of(_element(expr, b), expr.attr)
    if isinstance(expr, Agg):
        return _aggregate(expr, b)
    if isinstance(expr, Len):
        return float(len(b.events[expr.var]))
    if isinstance(expr, UnaryOp):
        v = evaluate(expr.operand, b)
        return (not truthy(v)) if expr.op == "not" else -v
    if isinstance(expr, Call):
        args = [evaluate(a, b) for a in expr.args]
        return abs(args[0]) if expr.func == "abs" else _extreme(expr.func, args)
    return _binary(expr, b)


def holds(conjuncts, b: Binding) -> bool:
    return all(truthy(evaluate(c, b)) for c in conjuncts)


def truthy(v) -> bool:
    """Whether a predicate's value holds: any text holds, other values by ``bool``."""
    return bool(v) if not isinstance(v, str) else True


def _element(ref: Ref, b: Binding) -> Event:
    events = b.events[ref.var]
    if ref.index in (Index.NONE, Index.FIRST):
        return events[0]
    if ref.index is Index.LAST:
        return events[-1]
    i = b.i if ref.var == b.var else len(events)
    return events[i - 1] if ref.index is Index.I else events[i - 2]


def _aggregate(agg: Agg, b: Binding):
    events = b.events[agg.var]
    if agg.range.name == "PREFIX":
        i = b.i if agg.var == b.var else len(events)
        events = events[: i - 1]
    if agg.func == "count":
        return float(len(events))
    values = [value_of(e, agg.attr) for e in events]
    if not values:
        return math.nan
    if agg.func in ("sum", "avg"):
        total = 0.0
        for v in values:
            total = total + v
        return total if agg.func == "sum" else total / len(values)
    return _extreme(agg.func, values)


def _extreme(func: str, values: list):
    """min or max; NaN wins, so the result does not depend on the order (EXACT.md 3.2)."""
    if any(isinstance(v, float) and math.isnan(v) for v in values):
        return math.nan
    return min(values) if func == "min" else max(values)


def _binary(expr: BinOp, b: Binding):
    op = expr.op
    if op == "and":
        return truthy(evaluate(expr.left, b)) and truthy(evaluate(expr.right, b))
    if op == "or":
        return truthy(evaluate(expr.left, b)) or truthy(evaluate(expr.right, b))
    x, y = evaluate(expr.left, b), evaluate(expr.right, b)
    if op in ("==", "!=", "<", "<=", ">", ">="):
        return _compare(op, x, y)
    if op == "/":
        return math.nan if y == 0 else x / y
    if op == "%":
        return math.nan if y == 0 else x % y
    return x + y if op == "+" else x - y if op == "-" else x * y


def _compare(op: str, x, y) -> bool:
    if isinstance(x, str) != isinstance(y, str):
        return op == "!="
    return {"==": x == y, "!=": x != y, "<": x < y, "<=": x <= y, ">": x > y,
            ">=": x >= y}[op]
