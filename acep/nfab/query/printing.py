"""Printing a query back: :func:`format_expr` and :func:`format_query` write the AST as query
text that parses to the same AST (positions aside).
"""

from __future__ import annotations

import re

from ..ast import (
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
    UnaryOp,
)

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
