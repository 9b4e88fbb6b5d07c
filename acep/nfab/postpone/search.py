"""The candidate lists of a main run (``docs/EXACT.md`` 7.1) and the search over them that
builds the matches ending at one event (7.2).
"""

from __future__ import annotations

import math
from bisect import bisect_right

from ...events import Event
from ..evaluate import Binding, evaluate, truthy, value_of
from ..runs import _Machine
from .filters import _EMPTY, BEGIN, TAKE, _Plan

# --------------------------------------------------------------------------- candidates

class Candidate:
    """One entry of a candidate list: an event position and its roles.

    ``roles``: the surviving roles (``"begin"``, ``"take"``). ``safe[role]`` and
    ``unsafe[role]``: the ids ``(component, role, n)`` of that role's edge conjuncts proven
    true by the early filters, and those left for the search. Unpacks as
    ``(position, roles)``.
    """

    __slots__ = ("position", "component", "_b", "_t", "_bu", "_tu", "_plan", "_bm", "_tm")

    def __init__(self, position, component, begin, take, begin_unsafe, take_unsafe, plan,
                 begin_memo=False, take_memo=False):
        self.position, self.component = position, component
        self._b, self._t = begin, take            # exprs still to check; None: no such role
        self._bu, self._tu = begin_unsafe, take_unsafe
        self._plan = plan
        # memoized checks by the earlier position they depend on (None: not memoizable)
        self._bm = {} if begin_memo and begin else None
        self._tm = {} if take_memo and take else None

    @property
    def roles(self) -> frozenset[str]:
        return frozenset(r for r, x in ((BEGIN, self._b), (TAKE, self._t)) if x is not None)

    @property
    def unsafe(self) -> dict[str, frozenset]:
        return {r: u for r, u in ((BEGIN, self._bu), (TAKE, self._tu)) if u is not None}

    @property
    def safe(self) -> dict[str, frozenset]:
        ids = self._plan.role_ids
        return {r: ids[(self.component, r)] - u for r, u in self.unsafe.items()}

    def __iter__(self):
        return iter((self.position, self.roles))

    def __eq__(self, other):
        if isinstance(other, tuple):
            return tuple(self) == other
        if isinstance(other, Candidate):
            return (self.position, self.component, self.unsafe) == \
                (other.position, other.component, other.unsafe)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Candidate({self.position}, {sorted(self.roles)})"


class _MainRun:
    """``m(s)`` (7.1): candidate lists per component, running bounds, cumulative unsafe ids."""

    __slots__ = ("start", "t", "cands", "positions", "cum", "bounds", "first_begin",
                 "recorded")

    def __init__(self, plan: _Plan, pos: int, event: Event):
        self.start, self.t = pos, event.t
        self.recorded = False  # a compact record keeps the candidate lists
        k = plan.k
        self.cands: list[list[Candidate]] = [[] for _ in range(k)]
        self.positions: list[list[int]] = [[] for _ in range(k)]
        self.cum: list[list[frozenset]] = [[] for _ in range(k)]
        # per component, per bound attribute: [count, min, max, regular]
        self.bounds = [{a: [0, math.inf, -math.inf, True] for a in attrs}
                       for attrs in plan.bound_attrs_t]
        self.first_begin = [-1] * k

    def add(self, j: int, cand: Candidate) -> None:
        """Add a candidate to component ``j``'s lists, not to its bounds."""
        cands = self.cands[j]
        if self.first_begin[j] < 0 and cand._b is not None:
            self.first_begin[j] = len(cands)
        cands.append(cand)
        self.positions[j].append(cand.position)
        ids = (cand._bu or _EMPTY) | (cand._tu or _EMPTY)
        cum = self.cum[j]
        previous = cum[-1] if cum else _EMPTY
        cum.append(previous if ids <= previous else previous | ids)

    def append(self, plan: _Plan, j: int, cand: Candidate, event: Event) -> None:
        self.add(j, cand)
        for attr, b in self.bounds[j].items():
            v = value_of(event, attr)
            b[0] += 1
            if isinstance(v, str) or v != v:
                b[3] = False
            elif b[3]:
                if v < b[1]:
                    b[1] = v
                if v > b[2]:
                    b[2] = v


class _Context:
    """Shared by a call and the records it returns."""

    def __init__(self, plan: _Plan, events: list[Event], machine: _Machine,
                 max_entries: int | None = None):
        self.plan, self.events, self.machine = plan, events, machine
        self.max_entries = max_entries

    def eliminated(self, chosen: tuple) -> bool:
        return any(self.machine._eliminated(chosen, n) for n in self.plan.cq.negations)


# --------------------------------------------------------------------------- search (7.2)

def _search(ctx: _Context, run: _MainRun, ranges: tuple | list, end: int, emit) -> None:
    """Call ``emit(chosen)`` for every structurally valid choice that passes the non-SAFE
    conjuncts at their anchors and ends exactly at ``end``, in lexicographic order of the
    identity tuple (before negation). Component ``j`` picks among the candidates with index
    in ``ranges[j]``. A failing conjunct prunes its branch: every conjunct is decided by the
    prefix it is anchored at (7.2). A check that depends on the earlier choices only through
    one position (``_Role.memo``) is evaluated once per (position, candidate) and kept on
    the candidate, for every record of its main run."""
    plan, events = ctx.plan, ctx.events
    k, names, kleene, close = plan.k, plan.vars, plan.kleene, plan.close
    bound: dict[str, list[Event]] = {}
    blocks: list[list[int]] = []

    def passes(exprs, b: Binding) -> bool:
        for expr in exprs:
            if not truthy(evaluate(expr, b)):
                return False
        return True

    def begin(j: int, after: int) -> None:
        cands, positions = run.cands[j], run.positions[j]
        lo, hi = ranges[j]
        var, last, more = names[j], j == k - 1, kleene[j]
        for idx in range(max(lo, bisect_right(positions, after, lo, hi)), hi):
            c = cands[idx]
            if c._b is None:
                continue
            elements = [events[c.position]]
            bound[var] = elements
            if c._b:
                memo = c._bm
                if memo is None:
                    ok = passes(c._b, Binding(bound, var, 1))
                else:
                    ok = memo.get(after)
                    if ok is None:
                        ok = memo[after] = passes(c._b, Binding(bound, var, 1))
                if not ok:
                    continue
            block = [c.position]
            blocks.append(block)
            if more:
                extend(j, block, elements, idx)
            elif last:
                emit(tuple(map(tuple, blocks)))
            else:
                begin(j + 1, c.position)
            blocks.pop()

    def extend(j: int, block: list[int], elements: list[Event], idx: int) -> None:
        last = j == k - 1
        p = block[-1]
        if not last or p == end:
            if not close[j] or passes(close[j], Binding(bound)):
                if last:
                    emit(tuple(map(tuple, blocks)))
                else:
                    begin(j + 1, p)
        if last and p == end:
            return
        cands, var = run.cands[j], names[j]
        for idx2 in range(idx + 1, ranges[j][1]):
            c = cands[idx2]
            if c._t is None:
                continue
            elements.append(events[c.position])
            block.append(c.position)
            ok = True
            if c._t:
                memo = c._tm
                if memo is None:
                    ok = passes(c._t, Binding(bound, var, len(elements)))
                else:
                    ok = memo.get(p)
                    if ok is None:
                        ok = memo[p] = passes(c._t, Binding(bound, var, len(elements)))
            if ok:
                extend(j, block, elements, idx2)
            elements.pop()
            block.pop()

    begin(0, -1)
