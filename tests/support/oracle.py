"""An independent brute-force oracle of the ACEP semantics (paper, Definition 1 and 3).

This is the judge the engines are tested against, so it deliberately shares nothing with
them: no automata, no engine code, only the parsed AST of :mod:`acep.pattern`. Everything
is computed from the definitions by enumeration, which is exponential and meant for tiny
inputs only (a dozen events per partition).

* :func:`serializations` -- every serialization of a regex up to a length, recursively.
* :func:`min_insertions` -- the error of a type sequence: least letters to insert so that it
  becomes a serialization (minimum over the enumerated serializations that contain it).
* :func:`oracle_matches` -- every match (subsequence in a window, error <= k, predicates
  hold), the best match per (partition, match point), and the match bundles.
* :func:`bundles_of` -- match bundles (Definition 3) from match points.
"""

from __future__ import annotations

import math
import numbers
from functools import lru_cache
from itertools import combinations

from acep.pattern import (
    Alt,
    Attr,
    BinOp,
    Call,
    Concat,
    Const,
    Repeat,
    Star,
    Symbol,
    UnaryOp,
    parse_regex,
    parse_where,
    variables,
)

__all__ = ["serializations", "enumeration_cost", "min_insertions", "oracle_matches",
           "bundles_of", "is_subsequence", "longest_serialization", "pattern_types"]


# --------------------------------------------------------------------------- serializations

def _concat(left: frozenset, right: frozenset, max_len: int) -> frozenset:
    return frozenset(a + b for a in left for b in right if len(a) + len(b) <= max_len)


def _star(item: frozenset, max_len: int) -> frozenset:
    """Zero or more serializations of the item concatenated (bounded by max_len)."""
    result = {()}
    frontier = {()}
    while frontier:
        new = set(_concat(frozenset(frontier), item, max_len)) - result
        result |= new
        frontier = new
    return frozenset(result)


@lru_cache(maxsize=4096)
def _ser(node, max_len: int) -> frozenset:
    if max_len < 0:
        return frozenset()
    if isinstance(node, Symbol):
        return frozenset({(node.name,)}) if max_len >= 1 else frozenset()
    if isinstance(node, Concat):
        acc = frozenset({()})
        for item in node.items:
            acc = _concat(acc, _ser(item, max_len), max_len)
        return acc
    if isinstance(node, Alt):
        out: set = set()
        for item in node.items:
            out |= _ser(item, max_len)
        return frozenset(out)
    if isinstance(node, Star):
        return _star(_ser(node.item, max_len), max_len)
    if isinstance(node, Repeat):
        item = _ser(node.item, max_len)
        base = frozenset({()})
        for _ in range(node.lo):
            base = _concat(base, item, max_len)
        if node.hi is None:
            return _concat(base, _star(item, max_len), max_len)
        out = set(base)
        cur = base
        for _ in range(node.hi - node.lo):
            cur = _concat(cur, item, max_len)
            out |= cur
        return frozenset(out)
    raise TypeError(f"not a regex node: {node!r}")


def serializations(node, max_len: int) -> set[tuple[str, ...]]:
    """Every serialization (paper, Section 2) of the regex ``node`` of length <= max_len."""
    return set(_ser(node, max_len))


def enumeration_cost(node, max_len: int) -> tuple[int, int]:
    """Upper bounds on what :func:`serializations` builds and does, without building it:
    ``(sequences, pairs)``, the sequences of length <= max_len it returns, and the pairs of
    sequences its concatenations and stars join on the way.

    Nested quantifiers over alternatives reach millions of either at a dozen letters, so
    tests that draw patterns skip the draws the oracle cannot afford. Per length n a set
    holds at most |types|**n sequences, and at most as many as the ways to build one (a
    union counts each part, a concatenation each split).
    """
    alphabet = len(pattern_types(node))
    ceiling = [alphabet ** n for n in range(max_len + 1)]
    pairs = 0

    def concat(a: list[int], b: list[int]) -> list[int]:
        nonlocal pairs
        pairs += sum(a) * sum(b)
        return [min(c, sum(a[m] * b[n - m] for m in range(n + 1)))
                for n, c in enumerate(ceiling)]

    def star(item: list[int]) -> list[int]:
        nonlocal pairs
        out = [1] + [0] * max_len
        for n in range(1, max_len + 1):
            out[n] = min(ceiling[n], sum(item[m] * out[n - m] for m in range(1, n + 1)))
        pairs += sum(out) * sum(item)  # each sequence of the result joins the item once
        return out

    def union(parts: list[list[int]]) -> list[int]:
        return [min(c, sum(col)) for c, col in zip(ceiling, zip(*parts))]

    def count(n) -> list[int]:
        if isinstance(n, Symbol):
            return [int(length == 1) for length in range(max_len + 1)]
        if isinstance(n, Concat):
            acc = [1] + [0] * max_len
            for item in n.items:
                acc = concat(acc, count(item))
            return acc
        if isinstance(n, Alt):
            return union([count(i) for i in n.items])
        item = count(n.item)
        if isinstance(n, Star):
            return star(item)
        base = [1] + [0] * max_len
        for _ in range(n.lo):
            base = concat(base, item)
        if n.hi is None:
            return concat(base, star(item))
        parts = [base]
        for _ in range(n.hi - n.lo):
            parts.append(concat(parts[-1], item))
        return union(parts)

    if max_len < 0:
        return 0, 0
    sequences = sum(count(node))
    return sequences, pairs


def longest_serialization(node) -> int | None:
    """Length of the longest serialization, None if unbounded (computed here, independently)."""
    if isinstance(node, Symbol):
        return 1
    if isinstance(node, (Concat, Alt)):
        parts = [longest_serialization(i) for i in node.items]
        if any(p is None for p in parts):
            return None
        return sum(parts) if isinstance(node, Concat) else max(parts)
    inner = longest_serialization(node.item)
    if inner == 0:
        return 0
    if isinstance(node, Star) or node.hi is None or inner is None:
        return None
    return inner * node.hi


def pattern_types(node) -> set[str]:
    """The event types the pattern mentions."""
    if isinstance(node, Symbol):
        return {node.name}
    if isinstance(node, (Concat, Alt)):
        return set().union(*(pattern_types(i) for i in node.items))
    return pattern_types(node.item)


# --------------------------------------------------------------------------- errors

def is_subsequence(seq, s) -> bool:
    """True if ``seq`` can be obtained from ``s`` by deleting letters."""
    it = iter(s)
    return all(any(x == y for y in it) for x in seq)


def min_insertions(seq: tuple[str, ...], node, k: int) -> int | None:
    """Least number of letters to insert into ``seq`` to make it a serialization of ``node``.

    None if more than ``k`` are needed. Literally: the minimum, over serializations s of
    length <= len(seq) + k that contain seq as a subsequence, of len(s) - len(seq).
    """
    if k < 0:
        return None
    seq = tuple(seq)
    by_length = _by_length(node, len(seq) + k)
    for extra in range(k + 1):  # shortest first: the first hit is the minimum
        if any(is_subsequence(seq, s) for s in by_length.get(len(seq) + extra, ())):
            return extra
    return None


@lru_cache(maxsize=1024)
def _by_length(node, max_len: int) -> dict:
    """The serializations of length <= max_len, grouped by length."""
    out: dict = {}
    for s in _ser(node, max_len):
        out.setdefault(len(s), []).append(s)
    return out


# --------------------------------------------------------------------------- predicates

def _num(v):
    if isinstance(v, bool) or (isinstance(v, numbers.Real) and not isinstance(v, str)):
        return float(v)
    return v


def _is_nan(v) -> bool:
    return isinstance(v, float) and math.isnan(v)


_COMPARE = {
    "<": lambda a, b: a < b, "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b, ">=": lambda a, b: a >= b,
    "==": lambda a, b: a == b, "!=": lambda a, b: a != b,
}


def evaluate(expr, env: dict):
    """Evaluate a predicate expression; ``env`` maps a variable (type name) to its event."""
    if isinstance(expr, Const):
        return _num(expr.value)
    if isinstance(expr, Attr):
        return _num(env[expr.var][expr.attr])
    if isinstance(expr, UnaryOp):
        v = evaluate(expr.operand, env)
        return (not bool(v)) if expr.op == "not" else -v
    if isinstance(expr, Call):
        args = [evaluate(a, env) for a in expr.args]
        return {"abs": abs, "min": min, "max": max}[expr.func](*args)
    if isinstance(expr, BinOp):
        op = expr.op
        if op == "and":
            return bool(evaluate(expr.left, env)) and bool(evaluate(expr.right, env))
        if op == "or":
            return bool(evaluate(expr.left, env)) or bool(evaluate(expr.right, env))
        a, b = evaluate(expr.left, env), evaluate(expr.right, env)
        if op in _COMPARE:
            if _is_nan(a) or _is_nan(b):
                return op == "!="  # IEEE: every comparison with NaN is false but !=
            return _COMPARE[op](a, b)
        if op == "+":
            return a + b
        if op == "-":
            return a - b
        if op == "*":
            return a * b
        if op == "/":
            return math.nan if b == 0 else a / b
        if op == "%":
            return math.nan if b == 0 else a % b
        raise ValueError(f"unknown operator {op!r}")
    raise TypeError(f"not an expression node: {expr!r}")


def predicates_hold(positions, events, predicates) -> bool:
    """Walk σ in order, binding each type to its latest event; check each predicate at each
    event of one of its variables once all its variables are bound."""
    prepared = [(p, set(variables(p))) for p in predicates]
    bound: dict[str, dict] = {}
    for i in positions:
        ev = events[i]
        bound[ev["type"]] = ev
        for pred, vars_ in prepared:
            if ev["type"] in vars_ and all(v in bound for v in vars_):
                if not bool(evaluate(pred, bound)):
                    return False
    return True


# --------------------------------------------------------------------------- matches

def bundles_of(points, w) -> list:
    """Match bundles (Definition 3) of match points ``{(partition, point): ...}`` (or any
    iterable of (partition, point) pairs): per partition, sorted distinct points, a new
    bundle whenever the gap to the previous point exceeds w. Returns a sorted list of
    (partition, first_point, last_point, n_points)."""
    by_part: dict = {}
    for part, point in points:
        by_part.setdefault(part, set()).add(point)
    out = []
    for part, pts in by_part.items():
        run: list = []
        for p in sorted(pts):
            if run and p - run[-1] > w:
                out.append((part, run[0], run[-1], len(run)))
                run = []
            run.append(p)
        if run:
            out.append((part, run[0], run[-1], len(run)))
    return sorted(out, key=lambda b: (type(b[0]).__name__, b[0], b[1]) if b[0] is not None
                  else ("", 0, b[1]))


def oracle_matches(pattern: str, events: list[dict], w: float, k: int,
                   where: list[str] = ()) -> dict:
    """Every ACEP match of ``pattern`` in ``events`` by enumeration (tiny inputs only).

    Returns ``{"matches": {(partition, positions): err}, "points": {(partition, point):
    (err, start)}, "bundles": [(partition, first, last, n_points), ...]}`` where positions
    are indices into ``events``, point = tag of σ's last event, and the per-point entry is
    the least error, then the latest start tag.
    """
    node = parse_regex(pattern)
    clause = parse_where(list(where)) if where else parse_where([])
    types = pattern_types(node)
    cap = longest_serialization(node)

    partitions: dict = {}
    for i, ev in enumerate(events):
        key = ev[clause.partition] if clause.partition is not None else None
        if ev["type"] in types:
            partitions.setdefault(key, []).append(i)

    err_cache: dict = {}

    def err_of(type_seq):
        if type_seq not in err_cache:
            err_cache[type_seq] = min_insertions(type_seq, node, k)
        return err_cache[type_seq]

    matches: dict = {}
    for part, positions in partitions.items():
        tags = [events[i]["t"] for i in positions]
        if any(b < a for a, b in zip(tags, tags[1:])):
            raise ValueError(f"tags go back in partition {part!r}: {tags}")
        for a, first in enumerate(positions):
            rest = [j for j in positions[a + 1:] if events[j]["t"] - events[first]["t"] <= w]
            longest_rest = len(rest) if cap is None else min(len(rest), cap - 1)
            for r in range(0, longest_rest + 1):
                for tail in combinations(rest, r):
                    sigma = (first,) + tail
                    e = err_of(tuple(events[i]["type"] for i in sigma))
                    if e is None:
                        continue
                    if clause.predicates and not predicates_hold(sigma, events,
                                                                 clause.predicates):
                        continue
                    matches[(part, sigma)] = e

    points: dict = {}
    for (part, sigma), e in matches.items():
        key = (part, events[sigma[-1]]["t"])
        cand = (e, events[sigma[0]]["t"])
        old = points.get(key)
        if old is None or (cand[0], -cand[1]) < (old[0], -old[1]):
            points[key] = cand

    return {"matches": matches, "points": points, "bundles": bundles_of(points, w)}
