"""The postponing engine: :func:`match_postponed` steps the main runs over the events, offers
each event to them through the early filters and builds the matches at their end events.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from ...events import Event
from ..ast import Query, Strategy
from ..compile import compile_query
from ..core import CORES, Unsupported, core_module, core_name
from ..evaluate import Binding, _compare, evaluate, truthy, value_of
from ..runs import Counters, ExactMatch, RunStats, _Machine, _validate, check_held
from .compact import CollapsedMatch
from .core import (
    PostponePlan,
    check_bound,
    constructions,
    found_matches,
    postpone_module,
    prepare_search,
    run_lists,
)
from .filters import (
    _DISCARD,
    _EMPTY,
    _SAFE,
    _UNSAFE,
    _UPPER,
    BEGIN,
    _apply,
    _Independent,
    _Plan,
    _Role,
)
from .search import Candidate, _Context, _MainRun, _search


class PostponeStats(Counters):
    """Counters of one :func:`match_postponed` call.

    ``main_runs``: main runs created (7.1). ``candidates``: entries appended to candidate
    lists (one per main run, component and event; the start included). ``discarded``: roles
    discarded by the early filters. ``safe``: (role, conjunct) pairs marked SAFE.
    ``constructions``: (main run, end event) pairs searched (verbose) or emitted as records
    (compact). ``matches``: matches returned (verbose only; compact output does not
    enumerate). ``records``: :class:`CollapsedMatch` records returned (compact only).
    ``core`` (not a counter): what ran the main runs, ``"compiled"`` (the compiled core,
    :mod:`.core`), ``"python"`` (its source run as Python) or ``"postpone"`` (this module).
    """

    __slots__ = ("main_runs", "candidates", "discarded", "safe", "constructions", "matches",
                 "records", "core")

    def __init__(self):
        super().__init__()
        self.core: str | None = None

    def as_dict(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in self.__slots__ if name != "core"}


def match_postponed(query: Query, events: Iterable[Event], *, early_filters: bool = True,
                    output: str = "verbose", stats: PostponeStats | None = None,
                    max_entries: int | None = None, core: str = "auto"
                    ) -> list[ExactMatch] | list[CollapsedMatch]:
    """All matches of a skip_till_any_match ``query`` on ``events``, by postponing (7).

    ``output="verbose"``: the :class:`~acep.nfab.runs.ExactMatch` list in canonical order,
    equal to :func:`acep.nfab.runs.match_runs`. ``output="compact"``: the
    :class:`CollapsedMatch` records, ordered by end then start position. ``early_filters``
    turns the classifier of 7.3 on or off (the output is the same). ``stats`` (a
    :class:`PostponeStats`) receives the counters. ``max_entries`` bounds the candidates
    held plus the matches (verbose) or records (compact), and the matches one record's
    ``count()`` or ``expand()`` enumerates (:class:`~acep.nfab.runs.ExactLimitError`).
    ``core`` (``"auto"``, ``"compiled"``, ``"python"``, ``"off"``, as
    :func:`acep.nfab.core.core_module`) runs the main runs, the early filters and the
    verbose search on the compiled core (:mod:`.core`, EXACT.md 7.4) where the query and
    the events allow (with a ``max_entries``, verbose output without negation); the output,
    the counters and the bound's error are the same.
    Raises ``ValueError`` for another strategy, output or core,
    :class:`~acep.events.EventError` for bad events (section 1).
    """
    if query.strategy is not Strategy.ANY:
        raise ValueError(f"postponing is exact only under skip_till_any_match, not "
                         f"{query.strategy.value} (EXACT.md 7)")
    if output not in ("verbose", "compact"):
        raise ValueError(f"output is 'verbose' or 'compact', not {output!r}")
    if core not in CORES:
        raise ValueError(f"core must be one of {', '.join(CORES)}, not {core!r}")
    cq = compile_query(query)
    events = list(events)
    stats = stats if stats is not None else PostponeStats()
    # verbose matches count after negation, which the core's search does not apply
    bound = max_entries is not None and (output == "compact" or not cq.negations)
    module = core_module(core) if max_entries is None or bound else None
    module = postpone_module(module, core) if module is not None else None
    pplan = _core_plan(cq, early_filters) if module is not None else None
    limit = -1 if max_entries is None else max_entries
    core_run = None if pplan is None else run_lists(pplan, events, module, limit,
                                                   output == "compact")
    if core_run is not None:
        stats.core = core_name(module)
        if max_entries is not None:
            check_bound(pplan, core_run, module, max_entries, output == "compact")
        for name, value in core_run.counters().items():
            setattr(stats, name, value)
        ctx = _Context(pplan.plan, events, _Machine(cq, events, RunStats()), max_entries)
        if output == "compact":
            records = [CollapsedMatch(run.start, pos, ctx, run, ranges) for pos, run, ranges
                       in constructions(pplan, core_run.output(), events)]
            stats.records = len(records)
            return sorted(records, key=lambda r: (r.end_position, r.start_position))
        # pos: the end event a timer's handler finds the search at (bench/exact)
        if max_entries is None:  # check_bound searched under a bound
            for c, pos in enumerate(prepare_search(pplan, core_run)):  # noqa: B007
                core_run.search(c)
        found = found_matches(pplan, core_run, events, ctx.machine)
        stats.matches = len(found)
        return sorted(found, key=lambda m: (m.positions[-1][-1], m.positions))
    _validate(cq, events)
    stats.core = "postpone"
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


def _core_plan(cq, early_filters: bool) -> PostponePlan | None:
    try:
        return PostponePlan(cq, early_filters)
    except Unsupported:
        return None


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
        outside every partition (a key missing or NaN) is offered to no main run (it fails
        every equality)."""
        attrs = self.plan.equivalence
        if not attrs:
            return None
        if any(a not in event.attrs or event.attrs[a] is None for a in attrs):
            return _NOWHERE
        key = tuple(value_of(event, a) for a in attrs)
        if any(v != v for v in key):
            return _NOWHERE  # NaN equals nothing (3.2), not even one shared NaN object
        return key

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
