"""A small pure-Python ACEPMatch, Algorithm 1 of the ACEP paper, written as the paper does.

This is the readable specification the kernel is tested against, and the baseline of
``bench/engine``. Unlike the kernel it materialises every match node of Algorithm 1,
including the ε-state and error nodes created by ``propagate``, as a Python object;
there is no merging. A guard makes ``propagate`` visit each (state, err) once per node,
so ε-cycles (e.g. ``(a*)*``) terminate; it removes only duplicate nodes.

Predicates follow :mod:`acep.predicates`: a variable names the latest event of its type
on the trajectory; each predicate is checked when one of its variables is bound and all
of them are bound.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .automaton import Automaton
from .matcher import Pattern
from .pattern import Attr, Call, Const, UnaryOp, variables


@dataclass(frozen=True)
class MatchNode:
    """(state, loc, err, start_win, prev) of the paper; ``prev`` is the previous L-node."""

    state: int
    loc: int | None
    err: int
    start: float | None
    prev: MatchNode | None
    bound: tuple = ()  # ((var, event attrs), ...) latest binding per variable


@dataclass(frozen=True)
class ReferenceMatch:
    partition: object
    events: tuple[int, ...]
    errors: int
    start: float
    point: float


def acep_match(pattern: str | Pattern, events: Sequence[dict], window: float, k: int,
               where: Sequence[str] = ()) -> list[ReferenceMatch]:
    """Every match trajectory (Algorithm 1, line 18), per partition, in stream order.

    ``events`` are dicts with ``type``, ``t`` and attributes; the equivalence test
    ``[attr]`` in ``where`` partitions them.
    """
    if isinstance(pattern, str):
        pattern = Pattern.compile(pattern, where)
    automaton = pattern.automaton
    predicates = list(pattern.where.predicates)
    partition_attr = pattern.where.partition
    seed = MatchNode(automaton.start, None, 0, None, None)
    seed_closure = [seed] + _propagate(seed, automaton, k)
    by_type = {name: [(sigma, automaton.pre(sigma)) for sigma in automaton.l_states(tid)]
               for tid, name in enumerate(automaton.types)}
    partitions: dict[object, dict[int, list[MatchNode]]] = {}
    found: list[ReferenceMatch] = []
    for i, event in enumerate(events):
        key = event.get(partition_attr) if partition_attr else None
        live = partitions.get(key)
        if live is None:
            live = partitions[key] = _by_state(seed_closure)
        created = []
        for sigma, pre in by_type.get(event["type"], ()):
            for q in pre:
                live[q] = [n for n in live.get(q, ()) if _open(n, event["t"], window)]
                for nu in live[q]:
                    node = _advance(nu, sigma, i, event, predicates)
                    if node is not None:
                        created.append(node)
                        created.extend(_propagate(node, automaton, k))
        for node in created:
            live.setdefault(node.state, []).append(node)
            if node.state == automaton.final:
                found.append(ReferenceMatch(key, _trajectory(node), node.err, node.start,
                                            float(event["t"])))
    return found


def _by_state(nodes: list[MatchNode]) -> dict[int, list[MatchNode]]:
    out: dict[int, list[MatchNode]] = {}
    for n in nodes:
        out.setdefault(n.state, []).append(n)
    return out


def _open(node: MatchNode, t: float, window: float) -> bool:
    """Line 5: a node whose window has passed is expired (and simply removed)."""
    return node.start is None or t - node.start <= window


def _advance(nu: MatchNode, sigma: int, i: int, event: dict, predicates) -> MatchNode | None:
    """Lines 5-15 of ACEPMatch: match event i at L-state σ from node ν."""
    start = event["t"] if nu.start is None else nu.start
    prev = nu.prev if nu.loc is None else nu
    bound = dict(nu.bound)
    bound[event["type"]] = event
    for p in predicates:
        used = variables(p)
        if event["type"] in used and all(v in bound for v in used):
            if _evaluate(p, bound) == 0.0:
                return None
    return MatchNode(sigma, i, nu.err, start, prev, tuple(bound.items()))


def _propagate(node: MatchNode, automaton: Automaton, k: int) -> list[MatchNode]:
    """Procedure propagate: skip states without consuming events (an L-state costs 1)."""
    out, seen, stack = [], {(node.state, node.err)}, [node]
    while stack:
        nu = stack.pop()
        for q in automaton.post[nu.state]:
            err = nu.err + (1 if automaton.is_l_state(q) else 0)
            if err > k or (q, err) in seen:
                continue
            seen.add((q, err))
            prev = nu.prev if nu.loc is None else nu
            child = MatchNode(q, None, err, nu.start, prev, nu.bound)
            out.append(child)
            stack.append(child)
    return out


def _trajectory(node: MatchNode) -> tuple[int, ...]:
    locs = []
    n = node if node.loc is not None else node.prev
    while n is not None:
        locs.append(n.loc)
        n = n.prev
    return tuple(reversed(locs))


def _evaluate(e, bound: dict) -> float:
    if isinstance(e, Attr):
        value = bound[e.var].get(e.attr)
        return float("nan") if value is None else float(value)
    if isinstance(e, Const):
        return float(e.value)
    if isinstance(e, UnaryOp):
        v = _evaluate(e.operand, bound)
        return -v if e.op == "-" else float(v == 0.0)
    if isinstance(e, Call):
        args = [_evaluate(a, bound) for a in e.args]
        return {"abs": lambda: abs(args[0]), "min": lambda: min(args),
                "max": lambda: max(args)}[e.func]()
    a, b = _evaluate(e.left, bound), _evaluate(e.right, bound)
    return _BINARY[e.op](a, b)


_BINARY = {
    "+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
    "/": lambda a, b: float("nan") if b == 0.0 else a / b,
    "<": lambda a, b: float(a < b), "<=": lambda a, b: float(a <= b),
    ">": lambda a, b: float(a > b), ">=": lambda a, b: float(a >= b),
    "==": lambda a, b: float(a == b), "!=": lambda a, b: float(a != b),
    "and": lambda a, b: float(a != 0.0 and b != 0.0),
    "or": lambda a, b: float(a != 0.0 or b != 0.0),
}
