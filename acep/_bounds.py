"""Limits on one input record (a JSON Lines line, a msgpack event), checked before decoding.

Python's ``json`` recurses once per nesting level, so a line nested about 1,000 deep raises
RecursionError, which no ``except ValueError`` catches. :func:`json_problem` finds such a
line without recursion and says which limit it breaks; the reader then treats it as any
other bad line.
"""

from __future__ import annotations

import re

import numpy as np

__all__ = ["MAX_DEPTH", "MAX_LINE_BYTES", "json_problem", "depth_problem"]

MAX_DEPTH = 64  # nesting levels of one event; an event's own object is level 1
MAX_LINE_BYTES = 16 << 20  # bytes of one line, as for one msgpack record

_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_DELTA = np.zeros(256, dtype=np.int8)
_DELTA[[ord("["), ord("{")]] = 1
_DELTA[[ord("]"), ord("}")]] = -1


def json_problem(raw: bytes | str) -> str | None:
    """Why one JSON text is over a limit (its size, its nesting depth), or None."""
    data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    if len(data) > MAX_LINE_BYTES:
        return f"line is longer than the limit of {MAX_LINE_BYTES} bytes ({len(data)})"
    if data.count(b"[") + data.count(b"{") <= MAX_DEPTH:
        return None  # the common case: too few brackets to be too deep
    # brackets inside strings do not nest
    depth = np.cumsum(_DELTA[np.frombuffer(_STRING.sub(b"", data), dtype=np.uint8)])
    if len(depth) and int(depth.max()) > MAX_DEPTH:
        return f"nested deeper than the limit of {MAX_DEPTH} levels"
    return None


def depth_problem(value: object) -> str | None:
    """Why a decoded value (a msgpack record) nests too deep, or None; no recursion."""
    level = [(value, 1)] if isinstance(value, (dict, list)) else []
    while level:
        item, depth = level.pop()
        if depth > MAX_DEPTH:
            return f"nested deeper than the limit of {MAX_DEPTH} levels"
        children = item.values() if isinstance(item, dict) else item
        level.extend((c, depth + 1) for c in children if isinstance(c, (dict, list)))
    return None
