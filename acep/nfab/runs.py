"""The basic NFA^b run algorithm, without sharing ([A08] Section 4; docs/EXACT.md 6.1).

Every run is its own object holding the events it selected: no shared buffer, no merging,
no postponing. It is the exact engine's reference and the naive baseline of
``bench/exact``; the shared engine must give the same matches. The moves of a run, and
their fixed order, are in docs/EXACT.md 6.1.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..events import Event, EventError
from .ast import Equiv, Kind, Query, Strategy
from .compile import CompiledQuery, compile_query, identifiers
from .evaluate import Binding, evaluate, holds, value_of


@dataclass(frozen=True)
class ExactMatch:
    """A match: positions per positive component, first and last tag, partition key,
    RETURN values by name (None without RETURN)."""

    positions: tuple[tuple[int, ...], ...]
    start: float
    end: float
    partition: tuple | None
    values: dict | None = None


@dataclass(frozen=True)
class _Run:
    j: int            # the positive component being matched
    inside: bool      # True: inside Kleene component j; False: waiting to begin it
    chosen: tuple     # positions per component so far (the last one may be open)
    start: float


class Counters:
    """Integer counters named by ``__slots__``, all starting at 0 (the engines' stats)."""

    __slots__ = ()

    def __init__(self):
        for name in self.__slots__:
            setattr(self, name, 0)

    def as_dict(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in self.__slots__}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.as_dict()})"


class RunStats:
    def __init__(self):
        self.runs_created = 0


class ExactLimitError(MemoryError):
    """The engine would hold more than ``max_entries`` partial and complete matches at once;
    ``position`` is the event it had reached. It cannot go on."""

    def __init__(self, message: str, position: int):
        super().__init__(message)
        self.position = position


def check_held(held: int, limit: int | None, position: int, what: str = "") -> None:
    """Raise :class:`ExactLimitError` when ``held`` entries are more than ``limit``."""
    if limit is not None and held > limit:
        raise ExactLimitError(
            f"the exact engine would hold more than {limit:,} partial and complete matches "
            f"at once (max_entries), at event {position}{what}: they multiply with the events "
            "of a window (a Kleene component under skip_till_any_match: 2^n subsets); narrow "
            "the window or the predicates, or allow more", position)


def match_runs(query: Query, events: list[Event], stats: RunStats | None = None,
               max_entries: int | None = None) -> list[ExactMatch]:
    """All matches of ``query`` in ``events`` (a finite window), in canonical order.
    ``max_entries`` bounds the runs alive plus the matches found (:func:`check_held`)."""
    cq = compile_query(query)
    _validate(cq, events)
    stats = stats or RunStats()
    machine = _Machine(cq, events, stats)
    found: list[tuple] = []
    runs: list[_Run] = []
    for pos, event in enumerate(events):
        nxt: list[_Run] = []
        for run in runs:
            moves = machine.moves(run, pos, event)
            stats.runs_created += max(len(moves) - 1, 0)
            for move in moves:
                machine.apply(move, run, pos, event, nxt, found)
        if machine.begins(0, (), pos, event):
            stats.runs_created += 1
            machine.begin(_Run(0, False, (), event.t), pos, event, nxt, found)
        runs = nxt
        if max_entries is not None:
            check_held(len(runs) + len(found), max_entries, pos)
    matches = [m for m in (machine.finish(chosen) for chosen in found) if m is not None]
    return sorted(matches, key=lambda m: (m.positions[-1][-1], m.positions))


class _Machine:
    def __init__(self, cq: CompiledQuery, events: list[Event], stats: RunStats):
        self.cq, self.events, self.stats = cq, events, stats
        self.k = len(cq.edges)
        self.window = cq.query.window
        self.strategy = cq.query.strategy

    # ------------------------------------------------------------------ bindings

    def binding(self, chosen: tuple, var: str | None = None, i: int = 0) -> Binding:
        bound = {self.cq.edges[j].component.var: [self.events[p] for p in positions]
                 for j, positions in enumerate(chosen)}
        return Binding(bound, var, i)

    def in_window(self, run: _Run, event: Event) -> bool:
        return self.window is None or event.t - run.start <= self.window

    def begins(self, j: int, chosen: tuple, pos: int, event: Event) -> bool:
        """θ_begin of component j with the event as its first element (EXACT.md 5.2)."""
        edge = self.cq.edges[j]
        if event.type != edge.component.type:
            return False
        return holds(edge.begin, self.binding(chosen + ((pos,),), edge.component.var, 1))

    def takes(self, run: _Run, pos: int, event: Event) -> bool:
        edge = self.cq.edges[run.j]
        if event.type != edge.component.type:
            return False
        chosen = run.chosen[:-1] + (run.chosen[-1] + (pos,),)
        return holds(edge.take, self.binding(chosen, edge.component.var, len(chosen[-1])))

    def closes(self, chosen: tuple, j: int) -> bool:
        return holds(self.cq.edges[j].close, self.binding(chosen))

    def same_partition(self, run: _Run, event: Event) -> bool:
        first = self.events[run.chosen[0][0]]
        return all(a in event.attrs and value_of(event, a) == value_of(first, a)
                   for a in self.cq.equivalence)

    # ------------------------------------------------------------------ moves

    def moves(self, run: _Run, pos: int, event: Event) -> list[str]:
        if not self.in_window(run, event):
            return []
        out = []
        if run.inside:
            if run.j + 1 < self.k and self.closes(run.chosen, run.j) \
                    and self.begins(run.j + 1, run.chosen, pos, event):
                out.append("proceed+begin")
            taken = self.takes(run, pos, event)
            if taken:
                out.append("take")
            if self.ignores(run, event, taken):
                out.append("ignore")
        else:
            begun = self.begins(run.j, run.chosen, pos, event)
            if begun:
                out.append("begin")
            if self.ignores(run, event, begun):
                out.append("ignore")
        return out

    def ignores(self, run: _Run, event: Event, selectable: bool) -> bool:
        """θ_ignore by strategy (EXACT.md 5.3); ``selectable``: begin/take would hold."""
        if self.strategy is Strategy.STRICT:
            return False
        if self.strategy is Strategy.PARTITION:
            return not self.same_partition(run, event)
        if self.strategy is Strategy.NEXT:
            return not selectable
        return True

    def apply(self, move: str, run: _Run, pos: int, event: Event, out: list, found: list):
        if move == "ignore":
            out.append(run)
        elif move == "take":
            chosen = run.chosen[:-1] + (run.chosen[-1] + (pos,),)
            self._after_select(_Run(run.j, True, chosen, run.start), out, found)
        elif move == "begin":
            self.begin(run, pos, event, out, found)
        else:  # proceed+begin
            self.begin(_Run(run.j + 1, False, run.chosen, run.start), pos, event, out, found)

    def begin(self, run: _Run, pos: int, event: Event, out: list, found: list):
        chosen = run.chosen + ((pos,),)
        kleene = self.cq.edges[run.j].kleene
        if kleene:
            self._after_select(_Run(run.j, True, chosen, run.start), out, found)
        elif run.j + 1 == self.k:
            found.append(chosen)
        else:
            out.append(_Run(run.j + 1, False, chosen, run.start))

    def _after_select(self, run: _Run, out: list, found: list):
        """Inside a Kleene component: a trailing one may also reach F (EXACT.md 5.6)."""
        out.append(run)
        if run.j + 1 == self.k and self.closes(run.chosen, run.j):
            self.stats.runs_created += 1
            found.append(run.chosen)

    # ------------------------------------------------------------------ results

    def finish(self, chosen: tuple) -> ExactMatch | None:
        """Negation (EXACT.md 3.6), partition key and RETURN values of a positive match."""
        if any(self._eliminated(chosen, n) for n in self.cq.negations):
            return None
        first, last = self.events[chosen[0][0]], self.events[chosen[-1][-1]]
        partition = tuple(value_of(first, a) for a in self.cq.equivalence) or None
        values = None
        if self.cq.query.returns:
            b = self.binding(chosen)
            values = {item.name: evaluate(item.expr, b) for item in self.cq.query.returns}
        return ExactMatch(tuple(chosen), float(first.t), float(last.t), partition, values)

    def _eliminated(self, chosen: tuple, negation) -> bool:
        var, w = negation.component.var, self.window
        first_pos, last_pos = chosen[0][0], chosen[-1][-1]
        t_first, t_last = self.events[first_pos].t, self.events[last_pos].t
        if negation.before is not None and negation.after is not None:
            gap = range(chosen[negation.before][-1] + 1, chosen[negation.after][0])
        elif negation.before is None:  # tag differences against W, as 3.3 (no t - W)
            gap = [p for p in range(first_pos) if t_last - self.events[p].t <= w]
        else:
            gap = [p for p in range(last_pos + 1, len(self.events))
                   if self.events[p].t - t_first <= w]
        for p in gap:
            event = self.events[p]
            if event.type != negation.component.type:
                continue
            b = self.binding(chosen)
            b.events[var] = [event]
            if holds(negation.conjuncts, b):
                return True
        return False


def _validate(cq: CompiledQuery, events: list[Event]) -> None:
    """Tags never go back; component events carry what the query reads (EXACT.md 1)."""
    needed = needed_attributes(cq)
    by_type: dict[str, set[str]] = {}  # several components may share a type
    for c in cq.query.components:
        by_type.setdefault(c.type, set()).update(needed.get(c.var, ()))
    previous = float("-inf")
    for pos, event in enumerate(events):
        if event.t < previous:
            raise EventError(f"tag {event.t:g} goes back in time", position=pos, field="t")
        previous = event.t
        for attr in sorted(by_type.get(event.type, ())):
            if attr not in event.attrs or event.attrs[attr] is None:
                raise EventError(f"{event.type} event lacks attribute {attr!r} that the query "
                                 f"reads", position=pos, field=attr)


def needed_attributes(cq: CompiledQuery) -> dict[str, set[str]]:
    """The attributes each variable's events must carry for the query's predicates and RETURN."""
    exprs = [c for c in cq.query.conjuncts if not isinstance(c, Equiv)]
    exprs += [item.expr for item in cq.query.returns]
    needed: dict[str, set[str]] = {c.var: set(cq.equivalence) for c in cq.query.components}
    for expr in exprs:
        for ident in identifiers(expr):
            attr = getattr(ident, "attr", None)
            if attr and attr != "t":
                needed.setdefault(ident.var, set()).add(attr)
    return needed


__all__ = ["ExactMatch", "RunStats", "match_runs", "Kind", "ExactLimitError", "check_held"]
