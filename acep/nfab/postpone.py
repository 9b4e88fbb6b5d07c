"""Postponing with early filters, for skip_till_any_match (``docs/EXACT.md`` sections 7-8,
[Z14] §5.1-5.2).

Under skip-till-any-match every event may be skipped, so pattern matching does not have to
follow the value predicates event by event. For every event ``s`` that satisfies the first
component's begin condition one **main run** ``m(s)`` collects, per positive component, a
**candidate list**: the later events of the component's type inside the window of ``s``
(and, with an equivalence test, of the partition of ``s``), each with the **roles** it may
play (``begin``: a singleton or the first element of a Kleene component; ``take``: a later
element of a Kleene component) and, per role, the conjuncts proven true (**SAFE**) by the
early filters of 7.3. When an event joins the last component's list, the matches of ``m(s)``
that end exactly at it are built by a depth-first search over the lists (7.2), which
evaluates only the conjuncts that are not SAFE, at their anchors, and applies negation at
the leaves. Every match is found once: by ``m(first)``, at ``e = last``.

**Early filters** (7.3) are a syntactic classifier. A conjunct on a role's edge is normalized
to ``X op Y``: ``X`` does not depend on the earlier choices S (it reads the current event,
constants, the start ``s``: the first component's singleton or ``v_1[1]``), and ``Y`` is one
S-dependent term, possibly shifted or scaled by positive S-independent amounts. Per main run
the running ``min_C``/``max_C`` of the term's attribute over the candidates ``C`` accepted so
far bound every value the term can take:

- no S-dependent term (this includes ``[x]``'s ``v[i].x = v[1].x``, read as
  ``e.x = s.x``): SAFE if true, discard if false (class TF);
- ``max(v[..i-1].x)``, ``max(v[].x)``: with ``>``/``>=`` SAFE if ``X op max_C`` (T); with
  ``<``/``<=`` discard if ``not X op max_C`` (F);
- ``min(...)``: with ``>``/``>=`` discard if ``not X op min_C`` (F); with ``<``/``<=`` SAFE if
  ``X op min_C`` (T);
- ``v[i-1].x``, ``v[v.len].x``, ``v[1].x``, ``w.x`` (not component 1's): the value is some
  element of C, so both tests apply (TF);
- anything else (avg, sum, count, len, ``=``/``!=`` against S, other arithmetic):
  inconsistent, left for the search.

A filter discards a *role*, never the event. Discarding implies that no match of the main
run uses the event in that role, and SAFE that the conjunct holds in every such match, so
the output does not depend on the filters (``early_filters=False`` gives the same list). A
bound is used only when every value in ``C`` is a number other than NaN and the shifts and
scales are finite (scales positive); otherwise the conjunct stays UNSAFE.

**Output.** ``output="verbose"``: :class:`~acep.nfab.runs.ExactMatch` objects in canonical
order (3.7), the same list as :func:`acep.nfab.runs.match_runs`. ``output="compact"``: one
:class:`CollapsedMatch` per (main run, end event) that has a begin candidate for every
component ([Z14]'s collapsed format): :meth:`CollapsedMatch.expand` runs the search of 7.2,
:meth:`CollapsedMatch.count` is a dynamic program over the candidate lists when nothing is
left to check (no residual conjunct, no negation), an enumeration otherwise.

Negation (3.6) is checked at the leaves with the whole event list, as :mod:`acep.nfab.runs`
does; the list is finite, so a trailing negation needs no deferral here (a streaming engine
defers the construction for ``(m(s), e)`` until ``t(s) + W`` has passed).
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections import deque
from collections.abc import Iterable, Iterator

from ..events import Event
from .ast import Agg, BinOp, Index, Query, Ref, Strategy
from .compile import CompiledQuery, compile_query, identifiers
from .evaluate import Binding, _compare, evaluate, truthy, value_of
from .runs import Counters, ExactMatch, RunStats, _Machine, _validate, check_held

__all__ = ["match_postponed", "CollapsedMatch", "Candidate", "PostponeStats",
           "conjunct_classes", "BEGIN", "TAKE", "CLOSE"]

BEGIN, TAKE, CLOSE = "begin", "take", "close"
_EMPTY: frozenset = frozenset()
_SAFE, _DISCARD, _UNSAFE = 0, 1, 2
_UPPER = (">", ">=")     # X > Y: a large X passes
_LOWER = ("<", "<=")
_FLIP = {">": "<", ">=": "<=", "<": ">", "<=": ">="}


class PostponeStats(Counters):
    """Counters of one :func:`match_postponed` call.

    ``main_runs``: main runs created (7.1). ``candidates``: entries appended to candidate
    lists (one per main run, component and event; the start included). ``discarded``: roles
    discarded by the early filters. ``safe``: (role, conjunct) pairs marked SAFE.
    ``constructions``: (main run, end event) pairs searched (verbose) or emitted as records
    (compact). ``matches``: matches returned (verbose only; compact output does not
    enumerate). ``records``: :class:`CollapsedMatch` records returned (compact only).
    """

    __slots__ = ("main_runs", "candidates", "discarded", "safe", "constructions", "matches",
                 "records")


# --------------------------------------------------------------------------- classifier (7.3)

class _Independent:
    """TF: the conjunct does not depend on S; decided exactly (``expr`` may be a rewrite)."""

    __slots__ = ("expr",)
    cls = "TF"

    def __init__(self, expr):
        self.expr = expr


class _Bounded:
    """``X op f(T)``: T an S-dependent term over component ``comp``'s attribute ``attr``,
    f a chain of monotone steps ``(op, other, term_on_left)``; ``kind`` max, min or any."""

    __slots__ = ("x", "op", "steps", "comp", "attr", "kind")

    def __init__(self, x, op, steps, comp, attr, kind):
        self.x, self.op, self.steps, self.comp, self.attr, self.kind = \
            x, op, steps, comp, attr, kind

    @property
    def cls(self) -> str:
        if self.kind == "any":
            return "TF"
        upper = self.op in _UPPER
        return "T" if (self.kind == "max") == upper else "F"


class _Role:
    """One role of one positive component: its edge conjuncts, ids and filter specs."""

    __slots__ = ("j", "role", "var", "exprs", "ids", "all_ids", "specs", "needs", "memo")

    def __init__(self, j, role, var, exprs, specs, needs, memo):
        self.j, self.role, self.var, self.exprs, self.specs = j, role, var, tuple(exprs), specs
        self.ids = tuple((j, role, n) for n in range(len(self.exprs)))
        self.all_ids = frozenset(self.ids)
        self.needs = needs  # the component whose candidate list must not be empty
        self.memo = memo    # the check is a function of one earlier position (see _search)


class _Classifier:
    """Which identifiers of a role's conjuncts are S-independent (7.3), and the specs."""

    def __init__(self, cq: CompiledQuery):
        self.cq = cq
        self.vars = [e.component.var for e in cq.edges]
        self.index = {v: j for j, v in enumerate(self.vars)}
        self.kleene = [e.kleene for e in cq.edges]
        self.first = self.vars[0]

    def independent(self, ident, j: int, role: str) -> bool:
        if isinstance(ident, Ref):
            if ident.var == self.first and ident.index in (Index.NONE, Index.FIRST):
                return True  # the start s
            if ident.var == self.vars[j]:
                if role == BEGIN:
                    return ident.index in (Index.NONE, Index.FIRST, Index.I)
                return ident.index is Index.I
        return False

    def term(self, ident, j: int) -> tuple[int, str, str] | None:
        """(component, attribute, kind) of an S-dependent term of the table, else None."""
        if isinstance(ident, Agg):
            if ident.func in ("max", "min") and ident.attr is not None:
                return self.index[ident.var], ident.attr, ident.func
            return None
        if isinstance(ident, Ref) and ident.var in self.index:
            return self.index[ident.var], ident.attr, "any"
        return None  # Len, or a negated variable (never on a positive edge)

    def spec(self, conj, j: int, role: str):
        idents = identifiers(conj)
        dependent = [i for i in idents if not self.independent(i, j, role)]
        if not dependent:
            return _Independent(conj)
        if role == TAKE and j > 0:
            rewritten = self._equivalence(conj, j)
            if rewritten is not None:
                return _Independent(rewritten)
        if len(dependent) != 1 or not isinstance(conj, BinOp) or \
                conj.op not in _UPPER + _LOWER:
            return None
        left = [i for i in identifiers(conj.left) if not self.independent(i, j, role)]
        x, y, op = (conj.left, conj.right, conj.op) if not left else \
            (conj.right, conj.left, _FLIP[conj.op])
        steps = _monotone_chain(y, dependent[0])
        term = self.term(dependent[0], j)
        if steps is None or term is None:
            return None
        comp, attr, kind = term
        if comp > j or (comp == j and role == BEGIN):
            return None  # cannot happen by the anchoring rules; be safe
        return _Bounded(x, op, steps, comp, attr, kind)

    def memoizable(self, exprs, j: int, role: str) -> bool:
        """Whether the role's check depends on the earlier choices only through one
        position: the previous element ``v[i-1]`` (take), or the last element of component
        ``j - 1`` (begin). The search then evaluates it once per (that position, event)."""
        prior = self.vars[j - 1] if j else None
        for conj in exprs:
            for i in identifiers(conj):
                if self.independent(i, j, role):
                    continue
                if not isinstance(i, Ref):
                    return False
                if role == TAKE and not (i.var == self.vars[j] and i.index is Index.PREV):
                    return False
                if role == BEGIN and not (i.var == prior and i.index in (
                        Index.LAST if self.kleene[j - 1] else Index.NONE,)):
                    return False
        return True

    def _equivalence(self, conj, j: int):
        """``[x]``'s ``v[i].x = v[1].x`` (v not component 1) is ``v[i].x = F.x`` in every
        match, since ``v[1].x = F.x`` is required too (EXACT.md 2.5, 7.3)."""
        if not any(conj is c for c in self.cq.equivalence_conjuncts):
            return None
        left, right, v = conj.left, conj.right, self.vars[j]
        if isinstance(left, Ref) and isinstance(right, Ref) and left.var == right.var == v \
                and left.index is Index.I and right.index is Index.FIRST \
                and left.attr == right.attr:
            anchor = Ref(self.first, Index.FIRST if self.kleene[0] else Index.NONE, left.attr)
            return BinOp("==", left, anchor)
        return None


def _monotone_chain(expr, term) -> list | None:
    """The steps from ``term`` up to ``expr`` if ``expr`` is ``term`` under shifts
    ``+ c``, ``c +``, ``- c`` and positive scales ``* c``, ``c *``, ``/ c`` (innermost
    first), with every ``c`` free of ``term``; else None."""
    steps: list = []
    node = expr
    while node is not term:
        if not isinstance(node, BinOp) or node.op not in ("+", "-", "*", "/"):
            return None
        in_left = _contains(node.left, term)
        inner, other = (node.left, node.right) if in_left else (node.right, node.left)
        if not in_left and node.op in ("-", "/"):
            return None  # c - T and c / T are decreasing
        steps.append((node.op, other, in_left))
        node = inner
    steps.reverse()
    return steps


def _contains(expr, node) -> bool:
    return any(i is node for i in identifiers(expr))


def _apply(steps, value: float, b: Binding) -> float | None:
    """f(value) with the evaluator's arithmetic, or None when a step is not a finite shift
    or a finite positive scale (the bound is then unusable)."""
    for op, other, term_on_left in steps:
        c = evaluate(other, b)
        if isinstance(c, str) or not math.isfinite(c) or (op in ("*", "/") and c <= 0):
            return None
        left, right = (value, c) if term_on_left else (c, value)
        value = left + right if op == "+" else left - right if op == "-" else \
            left * right if op == "*" else left / right
    return None if value != value else value


def conjunct_classes(query: Query) -> dict[tuple[str, str], list[tuple[str, str]]]:
    """The early-filter class of every conjunct, per (variable, role): a list of
    ``(conjunct text, class)`` with class ``TF``, ``T``, ``F`` or ``inconsistent`` (7.3).
    The first component's begin role is its main run's start and is never filtered."""
    from .query import format_expr

    plan = _Plan(compile_query(query), True)
    out: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for role in plan.roles:
        out[(role.var, role.role)] = [
            (format_expr(expr), "inconsistent" if spec is None else spec.cls)
            for expr, spec in zip(role.exprs, role.specs)]
    return out


# --------------------------------------------------------------------------- the plan

class _Plan:
    """Everything fixed by the query: roles per event type, close conjuncts, bound attrs."""

    def __init__(self, cq: CompiledQuery, early_filters: bool):
        self.cq = cq
        self.filters = early_filters
        self.k = len(cq.edges)
        self.vars = [e.component.var for e in cq.edges]
        self.kleene = [e.kleene for e in cq.edges]
        self.close = [tuple(e.close) for e in cq.edges]
        self.close_ids = frozenset((j, CLOSE, n) for j, e in enumerate(cq.edges)
                                   for n in range(len(e.close)))
        self.window = cq.query.window
        self.equivalence = cq.equivalence
        classifier = _Classifier(cq)
        self.roles: list[_Role] = []
        self.by_type: dict[str, list[_Role]] = {}
        self.bound_attrs: list[set[str]] = [set() for _ in cq.edges]
        for j, edge in enumerate(cq.edges):
            kinds = ([] if j == 0 else [BEGIN]) + ([TAKE] if edge.kleene else [])
            for role in kinds:
                exprs = edge.begin if role == BEGIN else edge.take
                specs = [classifier.spec(c, j, role) for c in exprs]
                needs = j - 1 if role == BEGIN else j
                memo = classifier.memoizable(exprs, j, role)
                r = _Role(j, role, edge.component.var, exprs, specs, needs, memo)
                self.roles.append(r)
                self.by_type.setdefault(edge.component.type, []).append(r)
                for s in specs:
                    if isinstance(s, _Bounded):
                        self.bound_attrs[s.comp].add(s.attr)
        self.bound_attrs_t = [tuple(sorted(a)) for a in self.bound_attrs]
        self.role_ids = {(r.j, r.role): r.all_ids for r in self.roles}
        self.role_ids[(0, BEGIN)] = frozenset((0, BEGIN, n) for n in range(len(
            cq.edges[0].begin)))  # the start s: checked when its main run was created
        self.last_kleene = self.kleene[-1]


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

    def append(self, plan: _Plan, j: int, cand: Candidate, event: Event) -> None:
        cands = self.cands[j]
        if self.first_begin[j] < 0 and cand._b is not None:
            self.first_begin[j] = len(cands)
        cands.append(cand)
        self.positions[j].append(cand.position)
        ids = (cand._bu or _EMPTY) | (cand._tu or _EMPTY)
        cum = self.cum[j]
        previous = cum[-1] if cum else _EMPTY
        cum.append(previous if ids <= previous else previous | ids)
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


# --------------------------------------------------------------------------- the engine

class _Context:
    """Shared by a call and the records it returns."""

    def __init__(self, plan: _Plan, events: list[Event], machine: _Machine,
                 max_entries: int | None = None):
        self.plan, self.events, self.machine = plan, events, machine
        self.max_entries = max_entries

    def eliminated(self, chosen: tuple) -> bool:
        return any(self.machine._eliminated(chosen, n) for n in self.plan.cq.negations)


def match_postponed(query: Query, events: Iterable[Event], *, early_filters: bool = True,
                    output: str = "verbose", stats: PostponeStats | None = None,
                    max_entries: int | None = None
                    ) -> list[ExactMatch] | list[CollapsedMatch]:
    """All matches of a skip_till_any_match ``query`` on ``events``, by postponing (7).

    ``output="verbose"``: the :class:`~acep.nfab.runs.ExactMatch` list in canonical order,
    equal to :func:`acep.nfab.runs.match_runs`. ``output="compact"``: the
    :class:`CollapsedMatch` records, ordered by end then start position. ``early_filters``
    turns the classifier of 7.3 on or off (the output is the same). ``stats`` (a
    :class:`PostponeStats`) receives the counters. ``max_entries`` bounds the candidates
    held plus the matches (verbose) or records (compact), and the matches one record's
    ``count()`` or ``expand()`` enumerates (:class:`~acep.nfab.runs.ExactLimitError`).
    Raises ``ValueError`` for another strategy or output, :class:`~acep.events.EventError`
    for bad events (section 1).
    """
    if query.strategy is not Strategy.ANY:
        raise ValueError(f"postponing is exact only under skip_till_any_match, not "
                         f"{query.strategy.value} (EXACT.md 7)")
    if output not in ("verbose", "compact"):
        raise ValueError(f"output is 'verbose' or 'compact', not {output!r}")
    cq = compile_query(query)
    events = list(events)
    _validate(cq, events)
    stats = stats if stats is not None else PostponeStats()
    plan = _Plan(cq, early_filters)
    ctx = _Context(plan, events, _Machine(cq, events, RunStats()), max_entries)
    engine = _Engine(ctx, stats, compact=output == "compact")
    for pos, event in enumerate(events):
        engine.step(pos, event)
        if max_entries is not None:
            check_held(engine.held + len(engine.records) + len(engine.matches), max_entries,
                       pos)
    if output == "compact":
        stats.records = len(engine.records)
        return sorted(engine.records, key=lambda r: (r.end_position, r.start_position))
    stats.matches = len(engine.matches)
    return sorted(engine.matches, key=lambda m: (m.positions[-1][-1], m.positions))


class _Engine:
    def __init__(self, ctx: _Context, stats: PostponeStats, compact: bool):
        self.ctx, self.plan, self.stats, self.compact = ctx, ctx.plan, stats, compact
        self.live: dict[object, deque] = {}
        self.order: deque = deque()          # live main runs by start, for expiry
        self.records: list[CollapsedMatch] = []
        self.matches: list[ExactMatch] = []
        self.held = 0  # candidates in the lists of live or recorded main runs

    def key(self, event: Event):
        """The partition key for routing; None without an equivalence test. An event
        outside every partition is offered to no main run (it fails every equality)."""
        attrs = self.plan.equivalence
        if not attrs:
            return None
        if any(a not in event.attrs or event.attrs[a] is None for a in attrs):
            return _NOWHERE
        return tuple(value_of(event, a) for a in attrs)

    def step(self, pos: int, event: Event) -> None:
        plan = self.plan
        if plan.window is not None:
            order = self.order
            while order and event.t - order[0][0].t > plan.window:
                run, key = order.popleft()
                self.live[key].popleft()
                if not run.recorded:
                    self.held -= sum(map(len, run.cands))
        roles = plan.by_type.get(event.type)
        key = None
        if roles or event.type == plan.cq.edges[0].component.type:
            key = self.key(event)
        if roles and key is not _NOWHERE:
            for run in self.live.get(key, ()):
                self.offer(run, pos, event, roles)
        if event.type == plan.cq.edges[0].component.type and \
                self.ctx.machine.begins(0, (), pos, event):
            self.stats.main_runs += 1
            run = _MainRun(plan, pos, event)
            run.append(plan, 0, Candidate(pos, 0, (), None, _EMPTY, None, plan), event)
            self.stats.candidates += 1
            self.held += 1
            self.live.setdefault(key, deque()).append(run)
            self.order.append((run, key))
            if plan.k == 1:
                self.construct(run, pos)

    def offer(self, run: _MainRun, pos: int, event: Event, roles: list[_Role]) -> None:
        """Classify every role of ``event`` first (the lists before it), then append."""
        plan = self.plan
        verdicts: dict[int, list] = {}
        for role in roles:
            out = self.classify(run, role, event)
            if out is not None:
                verdicts.setdefault(role.j, [None, None, None, None, False, False])
                slot = verdicts[role.j]
                if role.role == BEGIN:
                    slot[0], slot[2] = out
                    slot[4] = role.memo
                else:
                    slot[1], slot[3] = out
                    slot[5] = role.memo
        end = False
        for j, (b, t, bu, tu, bm, tm) in verdicts.items():
            run.append(plan, j, Candidate(pos, j, b, t, bu, tu, plan, bm, tm), event)
            self.stats.candidates += 1
            self.held += 1
            if j == plan.k - 1 and (b is not None or plan.last_kleene):
                end = True
        if end:
            self.construct(run, pos)

    def classify(self, run: _MainRun, role: _Role, event: Event):
        """(exprs, ids) still to check for ``event`` in ``role``; None: discarded (7.3)."""
        if not self.plan.filters:
            return role.exprs, role.all_ids
        if not run.cands[role.needs]:
            self.stats.discarded += 1   # no earlier element for this role: impossible
            return None
        if not role.exprs:
            return (), _EMPTY
        b = self.binding(run, role, event)
        exprs, ids = [], []
        for expr, cid, spec in zip(role.exprs, role.ids, role.specs):
            try:
                verdict = _UNSAFE if spec is None else self.decide(run, spec, b)
            except (TypeError, ValueError, ArithmeticError):
                verdict = _UNSAFE  # let the search evaluate it, exactly as the runs do
            if verdict == _DISCARD:
                self.stats.discarded += 1
                return None
            if verdict == _SAFE:
                self.stats.safe += 1
            else:
                exprs.append(expr)
                ids.append(cid)
        return tuple(exprs), (frozenset(ids) if ids else _EMPTY)

    def binding(self, run: _MainRun, role: _Role, event: Event) -> Binding:
        """The S-independent identifiers: the event in its role and the start s."""
        s = self.ctx.events[run.start]
        first = self.plan.vars[0]
        if role.j == 0:
            return Binding({first: [s, event]}, first, 2)
        if role.role == BEGIN:
            return Binding({first: [s], role.var: [event]}, role.var, 1)
        return Binding({first: [s], role.var: [event, event]}, role.var, 2)

    def decide(self, run: _MainRun, spec, b: Binding) -> int:
        if isinstance(spec, _Independent):
            return _SAFE if truthy(evaluate(spec.expr, b)) else _DISCARD
        count, low, high, regular = run.bounds[spec.comp][spec.attr]
        if count == 0:
            return _DISCARD  # C is empty: no earlier element to compare against
        if not regular:
            return _UNSAFE
        lo, hi = _apply(spec.steps, low, b), _apply(spec.steps, high, b)
        if lo is None or hi is None:
            return _UNSAFE
        x, op, kind = evaluate(spec.x, b), spec.op, spec.kind
        if op in _UPPER:   # X > Y for every Y in [lo, hi] iff X > hi; for none iff not X > lo
            if kind != "min" and _compare(op, x, hi):
                return _SAFE
            if kind != "max" and not _compare(op, x, lo):
                return _DISCARD
        else:
            if kind != "max" and _compare(op, x, lo):
                return _SAFE
            if kind != "min" and not _compare(op, x, hi):
                return _DISCARD
        return _UNSAFE

    def construct(self, run: _MainRun, end: int) -> None:
        """The results of ``m(s)`` that end exactly at ``end`` (7.2)."""
        plan, k = self.plan, self.plan.k
        ranges = []
        for j in range(k):
            n = len(run.cands[j])
            if j == k - 1:
                lo = 0 if plan.kleene[j] else n - 1
                hi = n
            else:
                lo, hi = 0, n - (1 if n and run.positions[j][-1] == end else 0)
            if not (0 <= run.first_begin[j] < hi):
                return  # no begin candidate for this component: no match here
            ranges.append((lo, hi))
        self.stats.constructions += 1
        if self.compact:
            self.records.append(CollapsedMatch(run.start, end, self.ctx, run, tuple(ranges)))
            run.recorded = True
            return
        finish, matches = self.ctx.machine.finish, self.matches
        limit = self.ctx.max_entries
        if limit is not None:
            limit -= self.held  # the candidates count too

        def emit(chosen):
            match = finish(chosen)
            if match is not None:
                matches.append(match)
                if limit is not None and len(matches) > limit:
                    check_held(len(matches) + self.held, self.ctx.max_entries, end)

        _search(self.ctx, run, ranges, end, emit)


class _Nowhere:
    def __repr__(self) -> str:
        return "<no partition>"


_NOWHERE = _Nowhere()


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


# --------------------------------------------------------------------------- compact (8)

class CollapsedMatch:
    """[Z14]'s collapsed result for one (main run, end event) (EXACT.md 8).

    ``start_position``, ``end_position``: the first and the last event of every match in it.
    ``candidates``: per positive component, the :class:`Candidate` entries ``(position,
    roles)`` the search may pick (the last component's end at ``end_position``).
    ``residual``: ids ``(component, role, n)`` of the conjuncts that some candidate still
    has to check (``(j, "close", n)`` for CLOSE conjuncts). ``negation``: whether negation
    is checked at the leaves. ``expand()`` yields the matches (RETURN evaluated then) in
    canonical order; ``count()`` counts them, without enumerating when there is neither a
    residual nor negation.
    """

    __slots__ = ("start_position", "end_position", "_ctx", "_run", "_ranges", "_count",
                 "_residual")

    def __init__(self, start_position: int, end_position: int, ctx: _Context, run: _MainRun,
                 ranges: tuple):
        self.start_position, self.end_position = start_position, end_position
        self._ctx, self._run, self._ranges = ctx, run, ranges
        self._count: int | None = None
        self._residual: frozenset | None = None

    @property
    def candidates(self) -> tuple[tuple[Candidate, ...], ...]:
        return tuple(tuple(cands[lo:hi]) for cands, (lo, hi) in zip(self._run.cands,
                                                                     self._ranges))

    @property
    def residual(self) -> frozenset:
        if self._residual is None:
            out = set(self._ctx.plan.close_ids)
            for cum, cands, (lo, hi) in zip(self._run.cum, self._run.cands, self._ranges):
                if lo == 0:
                    out |= cum[hi - 1]
                else:
                    for c in cands[lo:hi]:
                        out |= (c._bu or _EMPTY) | (c._tu or _EMPTY)
            self._residual = frozenset(out)
        return self._residual

    @property
    def negation(self) -> bool:
        return bool(self._ctx.plan.cq.negations)

    def expand(self) -> Iterator[ExactMatch]:
        """The matches of the record, in canonical order; RETURN is evaluated here. The
        search runs when the iteration starts."""
        chosen: list[tuple] = []
        limit = self._ctx.max_entries

        def emit(positions):
            chosen.append(positions)
            if limit is not None and len(chosen) > limit:
                check_held(len(chosen), limit, self.end_position, " (expanding one compact record)")

        _search(self._ctx, self._run, self._ranges, self.end_position, emit)
        finish = self._ctx.machine.finish
        for positions in chosen:
            match = finish(positions)
            if match is not None:
                yield match

    def count(self) -> int:
        """The number of matches: a DP over the candidate lists without residual and
        negation, an enumeration (without RETURN) otherwise."""
        if self._count is None:
            if not self.residual and not self.negation:
                self._count = self._dp()
            else:
                found = [0]
                eliminated = self._ctx.eliminated if self.negation else None
                limit = self._ctx.max_entries

                def emit(positions):
                    if eliminated is None or not eliminated(positions):
                        found[0] += 1
                        if limit is not None and found[0] > limit:
                            check_held(found[0], limit, self.end_position,
                                       " (counting one compact record's matches)")

                _search(self._ctx, self._run, self._ranges, self.end_position, emit)
                self._count = found[0]
        return self._count

    def _dp(self) -> int:
        """Structurally valid choices (8): ``f_j(q)`` = the ways to fill components ``0..j``
        with ``q`` the last element of ``j``; begin from any ``f_{j-1}(p)``, ``p < q``; take
        from any ``f_j(p)``, ``p < q``."""
        previous: list[tuple[int, int]] = []   # (position, f) of component j - 1
        for j, (lo, hi) in enumerate(self._ranges):
            cands = self._run.cands[j]
            current: list[tuple[int, int]] = []
            before, pointer, own = 0, 0, 0
            for c in cands[lo:hi]:
                while pointer < len(previous) and previous[pointer][0] < c.position:
                    before += previous[pointer][1]
                    pointer += 1
                f = 0
                if c._b is not None:
                    f += 1 if j == 0 else before
                if c._t is not None:
                    f += own
                own += f
                current.append((c.position, f))
            previous = current
        return previous[-1][1] if previous and previous[-1][0] == self.end_position else 0

    def __repr__(self) -> str:
        sizes = [hi - lo for lo, hi in self._ranges]
        return (f"CollapsedMatch(start={self.start_position}, end={self.end_position}, "
                f"candidates={sizes}, residual={sorted(self.residual)}, "
                f"negation={self.negation})")
