"""The shared-buffer NFA^b runtime ([A08] Sections 4-5; docs/EXACT.md 6.1-6.6).

Runs share a versioned buffer and carry Dewey labels (6.2), keep their computation state
``V`` as one column per (component, attribute, operation) (6.3), merge when equivalent
(6.4), are routed by partition (6.1) and pruned by window (6.5); negation follows 6.6.
:meth:`Stream.push` returns the matches finalized by the next events, :meth:`Stream.flush`
the rest. What this implementation chose is docs/EXACT.md 6.7, "As built".
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator
from operator import itemgetter

import numpy as np

from ..events import EXACT_INT, Event, EventError
from .ast import Query, Strategy
from .codegen import (
    BEGIN,
    CLOSE,
    TAKE,
    UNSET,
    Layout,
    formula,
    formula_needs,
    order_columns,
    updater,
)
from .compile import CompiledQuery, compile_query
from .evaluate import Binding, evaluate, holds, number, value_of
from .runs import Counters, ExactMatch, check_held, needed_attributes

__all__ = ["Stream", "SharedStats", "BufferGroup", "match_shared"]

_IGNORE, _PROCEED_BEGIN, _TAKE, _BEGIN = 0, 1, 2, 3


class _Skip:
    """The routing key of an event that no run sees (never a key of a live partition)."""

    def __repr__(self) -> str:
        return "<unrouted>"


_SKIP = _Skip()


class SharedStats(Counters):
    """Counters of a :class:`Stream` (EXACT.md 8, ``eng.stats``).

    ``runs_created``: initiations + clones (6.1). ``runs_merged``: runs folded into another
    by 6.4. ``max_live_runs``: the most runs alive after an event. ``pointers_written``:
    buffer nodes written. ``events_visited``: events offered to some run or beginning one
    (the others were skipped by routing). ``matches``: matches finalized.
    """

    __slots__ = ("events", "runs_created", "runs_merged", "max_live_runs", "pointers_written",
                 "events_visited", "matches", "records")


# --------------------------------------------------------------------------- the plan


class _Plan:
    """What the query fixes: states, formulas (numeric and generic), updaters, masks."""

    def __init__(self, cq: CompiledQuery, merge: bool):
        self.cq, self.merge = cq, merge
        edges = cq.edges
        self.k = len(edges)
        self.types = [e.component.type for e in edges]
        self.kleene = [e.kleene for e in edges]
        self.window = cq.query.window
        self.strategy = cq.query.strategy
        self.equivalence = cq.equivalence
        reads, attrs = self._reads()
        columns = set().union(*reads.values()) if reads else set()
        attrs |= {a for _, a, _ in columns if a is not None}  # the updates read them
        self.layout = Layout({a: n for n, a in enumerate(sorted(attrs))}, order_columns(columns))
        self.slots = sorted(attrs)
        self.unset = tuple(UNSET for _ in self.layout.columns)
        self.update_begin = [updater(self.layout, j, True) for j in range(self.k)]
        self.update_take = [updater(self.layout, j, False) for j in range(self.k)]
        self.formulas = {flag: self._formulas(flag) for flag in (True, False)}
        self.masks = self._masks(reads)
        needed = needed_attributes(cq)
        self.required: dict[str, set[str]] = {}
        for c in cq.query.components:
            for a in needed.get(c.var, ()):
                self.required.setdefault(a, set()).add(c.type)
        self.component_types = frozenset(c.type for c in cq.query.components)
        self.positive_types = frozenset(self.types)
        self.negations = cq.negations
        self.trailing = any(n.after is None for n in cq.negations)

    def _reads(self) -> tuple[dict[int, set], set]:
        """Columns read at each state (2j: waiting to begin j, 2j+1: inside Kleene j)."""
        reads: dict[int, set] = {}
        attrs: set[str] = set()
        for j, e in enumerate(self.cq.edges):
            cols, a = formula_needs(self.cq, BEGIN, j, e.begin)
            reads.setdefault(2 * j, set()).update(cols)
            attrs |= a
            if e.kleene:
                inside = reads.setdefault(2 * j + 1, set())
                for edge, conj in ((TAKE, e.take), (CLOSE, e.close)):
                    cols, a = formula_needs(self.cq, edge, j, conj)
                    inside.update(cols)
                    attrs |= a
                if j + 1 < self.k:  # the peek at the next component's begin (5.5)
                    inside.update(formula_needs(self.cq, BEGIN, j + 1,
                                                self.cq.edges[j + 1].begin)[0])
        return reads, attrs

    def _formulas(self, numeric: bool) -> tuple[list, list, list]:
        cq, layout = self.cq, self.layout
        begin = [formula(cq, layout, BEGIN, j, e.begin, numeric) for j, e in enumerate(cq.edges)]
        take = [formula(cq, layout, TAKE, j, e.take, numeric) for j, e in enumerate(cq.edges)]
        close = [formula(cq, layout, CLOSE, j, e.close, numeric)
                 for j, e in enumerate(cq.edges)]
        return begin, take, close

    def _masks(self, reads: dict[int, set]) -> list:
        """Per state, a function of V giving its future-mask part FM (6.3)."""
        out = []
        for s in range(2 * self.k):
            future = set().union(*(cols for t, cols in reads.items() if t >= s))
            idx = sorted(self.layout.columns.index(c) for c in future)
            if not idx:
                out.append(lambda V: ())
            elif len(idx) == 1:
                i = idx[0]
                out.append(lambda V, i=i: (V[i],))
            else:
                out.append(itemgetter(*idx))
        return out


# --------------------------------------------------------------------------- runs


class _Member:
    """One run folded into a (possibly merged) run: its label, last node and start."""

    __slots__ = ("label", "node", "start", "clones")

    def __init__(self, label: tuple, node, start: float):
        self.label, self.node, self.start, self.clones = label, node, start, 0


class _Run:
    __slots__ = ("state", "V", "members", "start")

    def __init__(self, state: int, V: tuple, members: list, start: float):
        self.state, self.V, self.members, self.start = state, V, members, start

    def clone(self) -> _Run:
        members = []
        for m in self.members:
            m.clones += 1
            members.append(_Member(m.label + (m.clones,), m.node, m.start))
        return _Run(self.state, self.V, members, self.start)


# --------------------------------------------------------------------------- the stream


class Stream:
    """The shared-buffer engine over a stream fed in pieces (EXACT.md 6, 8).

    ``push(events)`` processes the next events (positions continue from the previous
    call) and returns the raw matches finalized by them; ``flush()`` finalizes the rest.
    A raw match is ``(end_position, node, label, start_tag)``; :func:`to_matches` and
    :func:`to_groups` turn them into output.
    """

    def __init__(self, query: Query | CompiledQuery, merge: bool = True,
                 stats: SharedStats | None = None, max_entries: int | None = None):
        cq = query if isinstance(query, CompiledQuery) else compile_query(query)
        self.plan = _Plan(cq, merge)
        self.stats = stats if stats is not None else SharedStats()
        self.live: dict[object, list[_Run]] = {}
        self.nlive = 0
        # max_entries bounds the runs' members (partial matches) plus the matches held
        self.max_entries = max_entries
        self.held = 0
        self.held_by_key: dict[object, int] = {}
        self.position = 0
        self.last_t = float("-inf")
        self.initiations = 0
        self.numeric = True
        self.prune_at = float("inf") if self.plan.window is None else float("-inf")
        self.pending: list[tuple[float, tuple]] = []
        self.neg_index = [([], [], []) for _ in self.plan.negations]  # positions, tags, events

    # ------------------------------------------------------------------ input

    def push(self, events: list[Event]) -> list[tuple]:
        """Process ``events``; the matches finalized by them. A bad event raises
        :class:`EventError` after the events before it were processed; the matches they
        finalized are on the error as ``error.matches``."""
        batch = _Batch(self, events)
        found: list[tuple] = []
        if batch.n:
            self._process(batch, found)
        out = self._finalize(found)
        if batch.error is not None:
            batch.error.matches = out
            raise batch.error
        return out

    def flush(self) -> list[tuple]:
        """Finalize the matches still waiting for a trailing negation's window."""
        out = [m for _, m in self.pending if not self._eliminated(m)]
        self.pending = []
        self.stats.matches += len(out)
        return out

    # ------------------------------------------------------------------ the loop

    def _process(self, batch: _Batch, found: list) -> None:
        plan, stats = self.plan, self.stats
        n = batch.n
        stats.events += n
        events = batch.events
        self._index_negations(batch)
        rows = batch.rows()
        keys = batch.keys()
        begins = batch.begins(rows)
        tags = batch.tags
        offset = self.position
        live = self.live
        window = plan.window
        nb, bi, i = len(begins), 0, 0
        while i < n:
            if not self.nlive:
                if bi >= nb:
                    break
                i = begins[bi]
            t = tags[i]
            if t > self.prune_at:
                self._sweep(t)
            key = keys[i]
            runs = live.get(key)
            starts = bi < nb and begins[bi] == i
            if runs or starts:
                stats.events_visited += 1
                event = events[i]
                out: list[_Run] = []
                if runs:
                    self._step(runs, offset + i, event, rows[i], t, out, found)
                if starts:
                    bi += 1
                    if key is _SKIP:  # a NaN or unrouted key: nothing else joins this run
                        key = object()
                    self._initiate(offset + i, event, rows[i], t, out, found)
                if plan.merge and len(out) > 1:
                    out = self._merge(out)
                self.nlive += len(out) - (len(runs) if runs else 0)
                if out:
                    live[key] = out
                elif runs:
                    del live[key]
                if self.nlive > stats.max_live_runs:
                    stats.max_live_runs = self.nlive
                if self.max_entries is not None:
                    self._hold(key, out, len(found), offset + i)
            i += 1
        self.position += n
        self.last_t = tags[n - 1]
        if window is not None and self.nlive and self.last_t > self.prune_at:
            self._sweep(self.last_t)

    def _initiate(self, pos: int, event: Event, E: tuple, t: float, out: list,
                  found: list) -> None:
        self.initiations += 1
        self.stats.runs_created += 1
        run = _Run(0, self.plan.unset, [_Member((self.initiations,), None, t)], t)
        self._begin(run, 0, pos, event, E, t, out, found)

    def _step(self, runs: list[_Run], pos: int, event: Event, E: tuple, t: float,
              out: list, found: list) -> None:
        """Every run of the partition takes its enabled moves (6.1 step 1), in the fixed
        order proceed+begin, take, ignore (inside a Kleene component) or begin, ignore."""
        plan = self.plan
        begin_f, take_f, close_f = plan.formulas[self.numeric]
        k, types, window, ty = plan.k, plan.types, plan.window, event.type
        strategy = plan.strategy
        skip_any = strategy is Strategy.ANY
        skip_next = strategy is Strategy.NEXT
        for run in runs:
            if window is not None and t - run.start > window:
                continue  # out of its window: no edge is enabled (5.4)
            s = run.state
            j = s >> 1
            V = run.V
            if s & 1:
                nj = j + 1
                moves = []
                if nj < k and ty == types[nj] and \
                        (close_f[j] is None or close_f[j](E, V)) and \
                        (begin_f[nj] is None or begin_f[nj](E, V)):
                    moves.append(_PROCEED_BEGIN)
                selectable = ty == types[j] and (take_f[j] is None or take_f[j](E, V))
                if selectable:
                    moves.append(_TAKE)
            else:
                selectable = ty == types[j] and (begin_f[j] is None or begin_f[j](E, V))
                moves = [_BEGIN] if selectable else []
            # 5.3: partition contiguity never ignores a routed event (same partition)
            if skip_any or (skip_next and not selectable):
                moves.append(_IGNORE)
            if not moves:
                continue
            if len(moves) > 1:
                targets = [run] + [run.clone() for _ in range(len(moves) - 1)]
                self.stats.runs_created += len(moves) - 1
            else:
                targets = (run,)
            for move, r in zip(moves, targets):
                if move == _IGNORE:
                    out.append(r)
                elif move == _TAKE:
                    self._take(r, j, pos, event, E, t, out, found)
                elif move == _BEGIN:
                    self._begin(r, j, pos, event, E, t, out, found)
                else:
                    for m in r.members:
                        m.label += (0,)
                    self._begin(r, nj, pos, event, E, t, out, found)

    def _write(self, run: _Run, j: int, pos: int, event: Event) -> None:
        for m in run.members:
            m.node = (pos, j, event, m.node)
        self.stats.pointers_written += len(run.members)

    def _begin(self, run: _Run, j: int, pos: int, event: Event, E: tuple, t: float,
               out: list, found: list) -> None:
        plan = self.plan
        run.V = plan.update_begin[j](run.V, E)
        self._write(run, j, pos, event)
        last = j + 1 == plan.k
        if plan.kleene[j]:
            for m in run.members:
                m.label += (0,)
            run.state = 2 * j + 1
            out.append(run)
            if last:
                self._final(run, j, t, found)
        elif last:
            self._reach_f(run, t, found)
        else:
            for m in run.members:
                m.label += (0,)
            run.state = 2 * j + 2
            out.append(run)

    def _take(self, run: _Run, j: int, pos: int, event: Event, E: tuple, t: float,
              out: list, found: list) -> None:
        run.V = self.plan.update_take[j](run.V, E)
        self._write(run, j, pos, event)
        out.append(run)
        if j + 1 == self.plan.k:
            self._final(run, j, t, found)

    def _final(self, run: _Run, j: int, t: float, found: list) -> None:
        """A trailing Kleene component: a branch reaches F if θ_proceed holds (5.6)."""
        close = self.plan.formulas[self.numeric][2][j]
        if close is None or close(None, run.V):
            self.stats.runs_created += 1
            self._reach_f(run, t, found)

    def _reach_f(self, run: _Run, t: float, found: list) -> None:
        """One match per member still inside its own window ([A08] l.280)."""
        window = self.plan.window
        for m in run.members:
            if window is None or t - m.start <= window:
                found.append((m.node[0], m.node, m.label, m.start))

    def _merge(self, runs: list[_Run]) -> list[_Run]:
        """Runs in one state with equal V on its future mask become one (6.4)."""
        masks = self.plan.masks
        seen: dict[tuple, _Run] = {}
        out = []
        for run in runs:
            key = (run.state, masks[run.state](run.V))
            other = seen.get(key)
            if other is None:
                seen[key] = run
                out.append(run)
            else:
                other.members.extend(run.members)
                if run.start > other.start:
                    other.start = run.start
                self.stats.runs_merged += 1
        return out

    def _hold(self, key: object, runs: list[_Run], found: int, pos: int) -> None:
        """Count the partial matches of ``key``'s runs; past ``max_entries`` (with the
        matches found and pending), raise :class:`~acep.nfab.runs.ExactLimitError`."""
        n = sum(len(r.members) for r in runs)
        self.held += n - self.held_by_key.pop(key, 0)
        if n:
            self.held_by_key[key] = n
        check_held(self.held + found + len(self.pending), self.max_entries, pos)

    def _sweep(self, t: float) -> None:
        """Drop runs (and members) whose start is out of the window at tag t (6.5)."""
        window = self.plan.window
        for key in list(self.live):
            kept = []
            for run in self.live[key]:
                if t - run.start <= window:
                    run.members = [m for m in run.members if t - m.start <= window]
                    kept.append(run)
            self.nlive -= len(self.live[key]) - len(kept)
            if kept:
                self.live[key] = kept
            else:
                del self.live[key]
        self.prune_at = t + window
        if self.max_entries is not None:
            self.held_by_key = {key: sum(len(r.members) for r in runs)
                                for key, runs in self.live.items()}
            self.held = sum(self.held_by_key.values())

    # ------------------------------------------------------------------ negation (6.6)

    def _index_negations(self, batch: _Batch) -> None:
        offset = self.position
        for negation, (positions, tags, evs) in zip(self.plan.negations, self.neg_index):
            typ = negation.component.type
            for i, ty in enumerate(batch.types):
                if ty == typ:
                    positions.append(offset + i)
                    tags.append(batch.tags[i])
                    evs.append(batch.events[i])

    def _finalize(self, found: list[tuple]) -> list[tuple]:
        """Apply negation; with a trailing one, wait until t(first) + W < the last tag."""
        plan = self.plan
        if not plan.negations:
            self.stats.matches += len(found)
            return found
        if plan.trailing:  # ready once the last tag is more than W after t(first)
            for m in found:
                self.pending.append((_first_tag(m[1]), m))
            closed = [self.last_t - t_first > plan.window for t_first, _ in self.pending]
            ready = [m for (_, m), done in zip(self.pending, closed) if done]
            self.pending = [p for p, done in zip(self.pending, closed) if not done]
            out = [m for m in ready if not self._eliminated(m)]
        else:
            out = [m for m in found if not self._eliminated(m)]
        self._prune_negations()
        self.stats.matches += len(out)
        return out

    def _prune_negations(self) -> None:
        window = self.plan.window
        if window is None:
            return  # only middle negations: a gap may reach back to any run's start
        oldest = min((t_first for t_first, _ in self.pending), default=None)
        for positions, tags, evs in self.neg_index:
            cut = _within_from(tags, self.last_t, window)
            if oldest is not None:
                cut = min(cut, bisect_left(tags, oldest))
            if cut > 1024 and cut * 2 > len(tags):
                del positions[:cut], tags[:cut], evs[:cut]

    def _eliminated(self, raw: tuple) -> bool:
        """EXACT.md 3.6: some event of a negated type in the gap satisfies its conjuncts."""
        blocks, events = _chain(raw[1], self.plan.k)
        window = self.plan.window
        bound = {e.component.var: evs for e, evs in zip(self.plan.cq.edges, events)}
        first_pos, last_pos = blocks[0][0], blocks[-1][-1]
        t_first, t_last = float(events[0][0].t), float(events[-1][-1].t)
        for negation, (positions, tags, evs) in zip(self.plan.negations, self.neg_index):
            if negation.before is not None and negation.after is not None:
                lo = bisect_right(positions, blocks[negation.before][-1])
                hi = bisect_left(positions, blocks[negation.after][0])
            elif negation.before is None:
                lo = _within_from(tags, t_last, window)
                hi = bisect_left(positions, first_pos)
            else:
                lo = bisect_right(positions, last_pos)
                hi = _within_to(tags, t_first, window)
            var = negation.component.var
            for n in range(lo, hi):
                b = Binding(dict(bound))
                b.events[var] = [evs[n]]
                if holds(negation.conjuncts, b):
                    return True
        return False


# --------------------------------------------------------------------------- a batch


class _Batch:
    """The columns of the events of one :meth:`Stream.push`, validated (EXACT.md 1): the
    good prefix (``n`` events) and the first bad event's error, if any."""

    def __init__(self, stream: Stream, events: list[Event]):
        self.stream, self.plan = stream, stream.plan
        self.events = events
        self.types = [e.type for e in events]
        self.present = set(self.types)
        self.raw: dict[str, list] = {}
        self.error: EventError | None = None
        self.n = len(events)
        if not events:
            self.tags: list[float] = []
            return
        tags = np.array([e.t for e in events], dtype=float)
        back = np.flatnonzero(np.diff(tags, prepend=stream.last_t) < 0)
        if back.size:
            self.n = int(back[0])
            self.error = EventError(f"tag {events[self.n].t:g} goes back in time",
                                    position=stream.position + self.n, field="t")
        self.tags = tags.tolist()
        self._check_attributes()
        if self.n < len(events):
            self.events = events[:self.n]
            self.types = self.types[:self.n]
            self.tags = self.tags[:self.n]
            self.raw = {a: col[:self.n] for a, col in self.raw.items()}

    def column(self, attr: str) -> list:
        col = self.raw.get(attr)
        if col is None:
            if attr == "t":
                col = self.tags
            else:
                col = self.raw[attr] = [e.attrs.get(attr) for e in self.events]
        return col

    def _check_attributes(self) -> None:
        """The first event of a component type lacking an attribute the query reads."""
        for attr in sorted(self.plan.required):
            types = self.plan.required[attr]
            if not types & self.present:
                continue
            col = self.column(attr)
            if None not in col:
                continue
            for i in range(self.n):
                if col[i] is None and self.types[i] in types:
                    self.n = i
                    self.error = EventError(
                        f"{self.types[i]} event lacks attribute {attr!r} that the query "
                        f"reads", position=self.stream.position + i, field=attr)
                    break

    def converted(self, attr: str) -> tuple[list, list[int]]:
        """The attribute as :func:`~acep.nfab.evaluate.value_of` reads it (numbers as
        floats, integers beyond 2**53 exact), and the indexes where it is undefined
        (missing) or NaN."""
        raw = self.column(attr)
        arr = np.array(raw) if raw else np.zeros(0)
        if arr.ndim == 1 and arr.dtype.kind in "biuf" and not _beyond_float(arr):
            values = arr.astype(float)
            return values.tolist(), np.flatnonzero(np.isnan(values)).tolist()
        out = [number(v) if isinstance(v, (int, float)) else v for v in raw]
        if any(isinstance(v, str) for v in out):
            self.stream.numeric = False  # from now on, comparisons follow _compare (3.2)
        return out, [i for i, v in enumerate(out) if v is None or v != v]

    def rows(self) -> list:
        """The event rows ``E``: converted values in slot order."""
        cols = [self.converted(a)[0] for a in self.plan.slots]
        if not cols:
            return [()] * self.n
        return list(zip(*cols))

    def unrouted(self) -> list[int] | None:
        """Indexes of the events no run has to see (6.1 Routing): under the skipping
        strategies, events of no positive component's type. None: every event is routed."""
        plan = self.plan
        if plan.strategy in (Strategy.STRICT, Strategy.PARTITION) or \
                self.present <= plan.positive_types:
            return None
        types = plan.positive_types
        return [i for i, ty in enumerate(self.types) if ty not in types]

    def keys(self) -> list:
        """The routing key of every event (6.1): its partition (the bare value for one
        attribute), ``_SKIP`` when no run sees it, None when runs are not partitioned."""
        plan = self.plan
        skip = self.unrouted() or []
        if not plan.equivalence or plan.strategy is Strategy.STRICT:
            keys = [None] * self.n
        else:
            cols = [self.converted(a) for a in plan.equivalence]
            if len(cols) == 1:
                keys = list(cols[0][0])
            else:
                keys = list(zip(*(c[0] for c in cols)))
            for _, bad in cols:  # undefined or NaN: in no partition (3.4)
                skip = skip + bad
        for i in skip:
            keys[i] = _SKIP
        return keys

    def begins(self, rows: list) -> list[int]:
        """Indexes of the events that satisfy θ_begin of state 1 (6.1 step 3)."""
        plan = self.plan
        first = plan.types[0]
        if first not in self.present:
            return []
        f = plan.formulas[self.stream.numeric][0][0]
        types = self.types
        if f is None:
            return [i for i in range(self.n) if types[i] == first]
        return [i for i in range(self.n) if types[i] == first and f(rows[i], None)]


def _chain(node, k: int) -> tuple[list[list[int]], list[list[Event]]]:
    """Positions and events per component of the match ending at ``node`` (6.2)."""
    blocks: list[list[int]] = [[] for _ in range(k)]
    events: list[list[Event]] = [[] for _ in range(k)]
    while node is not None:
        pos, j, event, node = node
        blocks[j].append(pos)
        events[j].append(event)
    for b in blocks:
        b.reverse()
    for e in events:
        e.reverse()
    return blocks, events


def _first_true(n: int, holds_at) -> int:
    """The first index in ``range(n)`` where ``holds_at`` (false, then true) holds."""
    lo, hi = 0, n
    while lo < hi:
        mid = (lo + hi) // 2
        if holds_at(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


def _within_from(tags: list, t_last: float, window: float) -> int:
    """The first index of the sorted ``tags`` with ``t_last - tag <= window``. Every window
    test compares a difference of tags with W (EXACT.md 3.3): ``tag >= t_last - window``
    rounds, and took in a tag 1 before t_last for W = 1 - 2**-53."""
    return _first_true(len(tags), lambda i: t_last - tags[i] <= window)


def _within_to(tags: list, t_first: float, window: float) -> int:
    """One past the last index of the sorted ``tags`` with ``tag - t_first <= window``."""
    return _first_true(len(tags), lambda i: tags[i] - t_first > window)


def _first_tag(node) -> float:
    while node[3] is not None:
        node = node[3]
    return float(node[2].t)


# --------------------------------------------------------------------------- output (8)


def _exact(cq: CompiledQuery, node) -> ExactMatch:
    blocks, events = _chain(node, len(cq.edges))
    first, last = events[0][0], events[-1][-1]
    partition = tuple(value_of(first, a) for a in cq.equivalence) or None
    values = None
    if cq.query.returns:
        b = Binding({e.component.var: evs for e, evs in zip(cq.edges, events)})
        values = {item.name: evaluate(item.expr, b) for item in cq.query.returns}
    return ExactMatch(tuple(map(tuple, blocks)), float(first.t), float(last.t), partition,
                      values)


def _canonical(m: ExactMatch) -> tuple:
    return (m.positions[-1][-1], m.positions)


def to_matches(cq: CompiledQuery, raw: Iterable[tuple]) -> list[ExactMatch]:
    """Verbose output: the matches in canonical order (3.7)."""
    return sorted((_exact(cq, r[1]) for r in raw), key=_canonical)


class BufferGroup:
    """A compact record of the shared-buffer engine (EXACT.md 8): the matches that end at
    the event at ``end_position`` (tag ``end``), held as their Dewey ``labels`` and last
    buffer nodes; negation was applied before, so :meth:`count` is exact without building
    a match. :meth:`expand` retrieves them from the buffer, in canonical order."""

    __slots__ = ("end_position", "end", "_cq", "_entries")

    def __init__(self, cq: CompiledQuery, end_position: int, entries: list[tuple]):
        if not entries:
            raise ValueError("a match group holds at least one match")
        self._cq, self.end_position, self._entries = cq, end_position, entries
        self.end = float(entries[0][1][2].t)

    @property
    def labels(self) -> list[tuple]:
        return [e[2] for e in self._entries]

    def count(self) -> int:
        return len(self._entries)

    def expand(self) -> Iterator[ExactMatch]:
        return iter(to_matches(self._cq, self._entries))

    def __eq__(self, other: object) -> bool:
        if not hasattr(other, "expand") or not hasattr(other, "end_position"):
            return NotImplemented
        return self.end_position == other.end_position and \
            list(self.expand()) == list(other.expand())

    __hash__ = None

    def __repr__(self) -> str:
        return f"BufferGroup(end_position={self.end_position}, count={self.count()})"


def to_groups(cq: CompiledQuery, raw: list[tuple]) -> list[BufferGroup]:
    """Compact output: one :class:`BufferGroup` per end position, by increasing position."""
    by_end: dict[int, list[tuple]] = {}
    for r in raw:
        by_end.setdefault(r[0], []).append(r)
    return [BufferGroup(cq, end, by_end[end]) for end in sorted(by_end)]


def match_shared(query: Query, events: list[Event], output: str = "verbose",
                 merge: bool = True, stats: SharedStats | None = None,
                 max_entries: int | None = None) -> list:
    """All matches of ``query`` in ``events`` (one finite window): verbose
    :class:`~acep.nfab.runs.ExactMatch` objects in canonical order, or compact
    :class:`BufferGroup` records by end position."""
    stream = Stream(query, merge, stats, max_entries)
    raw = stream.push(events) + stream.flush()
    cq = stream.plan.cq
    return to_matches(cq, raw) if output == "verbose" else to_groups(cq, raw)


def _beyond_float(arr: np.ndarray) -> bool:
    """A number column that may hold an integer float64 cannot hold exactly (then read
    value by value, as :func:`~acep.nfab.evaluate.number` does): an integer column with a
    value beyond 2**53, or a float column with one at or beyond it, which is what numpy
    makes of floats beside such an integer (2**53 + 1 becomes 2**53)."""
    if not len(arr):
        return False
    if arr.dtype.kind == "f":
        return bool(np.any(np.abs(arr) >= EXACT_INT))
    return arr.dtype.kind in "iu" and bool((arr.max() > EXACT_INT) | (arr.min() < -EXACT_INT))
