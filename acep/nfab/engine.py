"""The public API of the exact engine: :class:`Engine` and :func:`match`.

``Engine(query, output="verbose" | "compact", engine="auto" | ...)`` runs a SASE+ query
over a finite window (:meth:`Engine.run`) or a stream (:meth:`Engine.push`,
:meth:`Engine.flush`). ``"auto"`` picks the postponing engine (:mod:`acep.nfab.postpone`)
for skip-till-any-match and the shared-buffer engine (:mod:`acep.nfab.shared`, on its
compiled core where it can) for the other strategies. The engines, the output modes and
the streaming contract are in docs/EXACT.md section 8, "Output modes" (API as built).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from functools import lru_cache

from ..events import Event, EventBatch, EventError
from .ast import Query, Strategy
from .compile import numeric_attributes
from .core import CORES, CorePlan, Unsupported, core_module, core_name, run_core
from .postpone import PostponeStats, match_postponed
from .query import parse_query
from .runs import ExactMatch, RunStats, match_runs
from .shared import BufferGroup, Stream, to_groups, to_matches

__all__ = ["Engine", "MatchGroup", "BufferGroup", "match", "group_by_end", "OUTPUTS",
           "ENGINES"]

OUTPUTS = ("verbose", "compact")
# "runs": the basic run algorithm (EXACT.md 6.1), every strategy. "shared": the shared-buffer
# runtime (EXACT.md 6.2-6.6), every strategy. "postpone": postponing with early filters
# (EXACT.md 7), skip-till-any-match only. "auto": postpone for any-match, shared otherwise.
ENGINES = ("auto", "runs", "shared", "postpone")


class MatchGroup:
    """A compact record of the run engine (EXACT.md 8): the matches that end at the event
    at ``end_position`` (whose tag is ``end``). ``expand()`` yields them in canonical order."""

    __slots__ = ("end_position", "end", "_matches")

    def __init__(self, end_position: int, matches: Iterable[ExactMatch]):
        self._matches = tuple(matches)
        if not self._matches:
            raise ValueError("a match group holds at least one match")
        if any(m.positions[-1][-1] != end_position for m in self._matches):
            raise ValueError(f"every match of the group must end at position {end_position}")
        self.end_position = end_position
        self.end = self._matches[0].end

    def count(self) -> int:
        return len(self._matches)

    def expand(self) -> Iterator[ExactMatch]:
        return iter(self._matches)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MatchGroup):
            return NotImplemented
        return self.end_position == other.end_position and self._matches == other._matches

    __hash__ = None  # matches hold RETURN dicts, so groups are not hashable

    def __repr__(self) -> str:
        return f"MatchGroup(end_position={self.end_position}, count={self.count()})"


class Engine:
    """The exact engine over finite windows of events, or over a stream fed in pieces
    (EXACT.md 8).

    ``query``: a parsed :class:`~acep.nfab.ast.Query` or query text (parsed with
    :func:`~acep.nfab.query.parse_query`). ``output``: ``"verbose"`` (a list of
    :class:`~acep.nfab.runs.ExactMatch`) or ``"compact"`` (a list of :class:`MatchGroup` or
    :class:`~acep.nfab.shared.BufferGroup` records, or collapsed records of the postponing
    engine). ``engine``: one of :data:`ENGINES`. ``merge``: merging of equivalent runs in
    the shared-buffer engine (EXACT.md 6.4; off gives the same output). ``max_entries``:
    the most partial matches (runs, or their members when merged; the postponing
    engine's candidates) plus matches (or postponed records) one call may hold at once,
    and the matches one postponed record may enumerate; past it a call raises
    :class:`~acep.nfab.runs.ExactLimitError` (a ``MemoryError``). None: no bound.

    ``stats`` adds up over calls: ``events``, ``runs_created`` (initiations + clones,
    EXACT.md 6.1), ``main_runs`` (postponing), ``matches`` and ``records``; the shared-buffer
    engine adds ``runs_merged``, ``max_live_runs``, ``pointers_written`` and
    ``events_visited``.

    Parameters
    ----------
    query : Query or str
        The SASE+ query (docs/EXACT.md), parsed or as text.
    output : {"verbose", "compact"}
        One object per match, or records grouped by end event.
    engine : {"auto", "runs", "shared", "postpone"}
        The algorithm; ``"auto"`` postpones under ``skip_till_any_match``, else ``"shared"``.
    merge : bool
        Merge equivalent runs in the shared-buffer engine.
    max_entries : int, optional
        The bound on what one call may hold at once (None: no bound).
    core : {"auto", "compiled", "python", "off"}
        For ``run`` with the shared-buffer or the postponing engine: its compiled core
        (:mod:`acep.nfab.core`, :mod:`acep.nfab.postpone.core`) when built (``"auto"``),
        always (``"compiled"``), its source as Python (``"python"``), or never
        (``"off"``); :attr:`core` says what ran.

    Examples
    --------
    >>> from acep.events import Event
    >>> from acep.nfab import Engine
    >>> engine = Engine("PATTERN SEQ(A a, B b) WHERE [id] WITHIN 10")
    >>> events = [Event("A", 1, {"id": 1}), Event("A", 2, {"id": 2}),
    ...           Event("B", 5, {"id": 1}), Event("B", 20, {"id": 2})]
    >>> for m in engine.run(events):
    ...     print(m.partition, m.positions, m.start, m.end)
    (1.0,) ((0,), (2,)) 1.0 5.0
    >>> engine.stats["matches"]
    1
    """

    def __init__(self, query: Query | str, output: str = "verbose", engine: str = "auto",
                 merge: bool = True, max_entries: int | None = None, core: str = "auto"):
        if core not in CORES:
            raise ValueError(f"core must be one of {', '.join(CORES)}, not {core!r}")
        self._core_choice = core
        if max_entries is not None and (isinstance(max_entries, bool) or
                                        not isinstance(max_entries, int) or max_entries < 1):
            raise ValueError(f"max_entries must be a whole number >= 1 or None, not "
                             f"{max_entries!r}")
        if output not in OUTPUTS:
            raise ValueError(f"output must be one of {', '.join(OUTPUTS)}, not {output!r}")
        if engine not in ENGINES:
            raise ValueError(f"engine must be one of {', '.join(ENGINES)}, not {engine!r}")
        if isinstance(query, str):
            query = parse_query(query)
        elif not isinstance(query, Query):
            raise TypeError(f"query must be a Query or query text, not {type(query).__name__}")
        any_match = query.strategy is Strategy.ANY
        if engine == "postpone" and not any_match:
            raise ValueError(f"the postponing engine needs skip_till_any_match, not "
                             f"{query.strategy.value} (EXACT.md 7)")
        self.query, self.output, self.merge = query, output, merge
        self.max_entries = max_entries
        self._numeric = _numeric_by_type(query)
        if engine == "auto":
            engine = "postpone" if any_match else "shared"
        self.engine = engine
        self._stats = {"events": 0, "runs_created": 0, "main_runs": 0, "matches": 0,
                       "records": 0}
        if engine == "shared":
            self._stats.update(runs_merged=0, max_live_runs=0, pointers_written=0,
                               events_visited=0)
        self._stream: Stream | None = None
        self._pending: list[Event] = []
        self._core_plan: CorePlan | bool | None = None  # False: outside the core's class
        self._core_ran: str | None = None

    @property
    def core(self) -> str | None:
        """What ran the last shared-buffer or postponing call: ``"compiled"`` (the
        compiled core, :mod:`acep.nfab.core`), ``"python"`` (its source run as Python:
        ``core="python"`` or ``ACEP_NFAB_CORE=python``), ``"shared"``
        (:mod:`acep.nfab.shared`) or ``"postpone"`` (:mod:`acep.nfab.postpone`'s pure
        engine), the references: streams pushed in pieces (shared), verbose postponing with
        negation under ``max_entries``, text where the query computes, or no compiled core;
        None before any."""
        return self._core_ran

    @property
    def stats(self) -> dict:
        return dict(self._stats)

    def run(self, events: Iterable[Event] | EventBatch) -> Sequence:
        """All matches in ``events`` (one finite window), in canonical order (EXACT.md 3.7):
        ``ExactMatch`` objects, or compact records by increasing end position. Independent
        of any stream being pushed. A list, or from the compiled core a list-like
        :class:`~acep.nfab.core.CoreMatches` that makes each match when it is read; a batch
        of plain numbers goes to the core without being turned into rows."""
        if isinstance(events, EventBatch) and self.engine == "shared":
            found = self._on_core(events)
            if found is not None:
                return found
        rows = _rows(events)
        bad = _text_in_numbers(self._numeric, rows, 0)
        if bad is None:
            return self._run(rows)
        bad.matches = self._run(rows[:bad.position])  # an earlier bad event raises there
        raise bad

    def _run(self, rows: list[Event]) -> list:
        if self.engine == "shared":
            found = self._on_core(rows)
            if found is not None:
                return found
            self._core_ran = "shared"
            stream = Stream(self.query, self.merge, max_entries=self.max_entries)
            raw = self._shared(stream, rows, final=True)
            return self._shared_output(stream.plan.cq, raw)
        self._stats["events"] += len(rows)
        if self.engine == "postpone":
            return self._postponed(rows)
        stats = RunStats()
        found = match_runs(self.query, rows, stats, self.max_entries)
        self._stats["runs_created"] += stats.runs_created
        self._stats["matches"] += len(found)
        if self.output == "verbose":
            return found
        groups = group_by_end(found)
        self._stats["records"] += len(groups)
        return groups

    def _on_core(self, rows: list[Event] | EventBatch) -> Sequence | None:
        """The output of the compiled core (:mod:`acep.nfab.core`), or None where the
        query or the events need the reference engine."""
        module = core_module(self._core_choice)
        if module is None or self._core_plan is False:
            return None
        if self._core_plan is None:
            try:
                self._core_plan = CorePlan(self.query)
            except Unsupported:
                self._core_plan = False
                return None
        verbose = self.output == "verbose"
        self._core_ran = core_name(module)  # named before it runs: it may stop at the bound
        result = run_core(self._core_plan, rows, "verbose" if verbose else "raw", module,
                          self.max_entries)
        if result is None:
            return None
        found, counters = result
        for name, value in counters.items():
            if name == "max_live_runs":
                self._stats[name] = max(self._stats[name], value)
            else:
                self._stats[name] += value
        return found if verbose else self._shared_output(self._core_plan.cq, found)

    def push(self, events: Iterable[Event] | EventBatch) -> list:
        """Feed the next events of the stream; the outputs finalized by them (verbose
        matches or compact records, each list in canonical order)."""
        rows = _rows(events)
        offset = len(self._pending) if self._stream is None else self._stream.position
        bad = _text_in_numbers(self._numeric, rows, offset)
        if bad is not None:
            bad.matches = self._push(rows[:bad.position - offset])
            raise bad
        return self._push(rows)

    def _push(self, rows: list[Event]) -> list:
        if self.engine != "shared":
            self._pending.extend(rows)
            return []
        if self._stream is None:
            self._stream = Stream(self.query, self.merge, max_entries=self.max_entries)
        self._core_ran = "shared"
        return self._shared_output(self._stream.plan.cq, self._shared(self._stream, rows))

    def flush(self) -> list:
        """End the stream: the outputs not returned yet. The next :meth:`push` starts a
        new stream (positions from 0)."""
        if self.engine != "shared":
            rows, self._pending = self._pending, []
            return self.run(rows)
        stream, self._stream = self._stream, None
        if stream is None:
            return []
        return self._shared_output(stream.plan.cq, self._shared(stream, [], final=True))

    def _shared(self, stream: Stream, rows: list[Event], final: bool = False) -> list:
        """Raw matches of the shared-buffer engine; a bad event's error carries the
        outputs finalized before it as ``error.matches``."""
        before = stream.stats.as_dict()
        try:
            raw = stream.push(rows) if rows else []
            if final:
                raw += stream.flush()
        except EventError as error:
            error.matches = self._shared_output(stream.plan.cq, getattr(error, "matches", []))
            raise
        finally:
            after = stream.stats.as_dict()
            for name in ("events", "runs_created", "runs_merged", "pointers_written",
                         "events_visited", "matches"):
                self._stats[name] += after[name] - before[name]
            self._stats["max_live_runs"] = max(self._stats["max_live_runs"],
                                               after["max_live_runs"])
        return raw

    def _shared_output(self, cq, raw: list) -> list:
        if self.output == "verbose":
            return to_matches(cq, raw)
        groups = to_groups(cq, raw)
        self._stats["records"] += len(groups)
        return groups

    def _postponed(self, rows: list[Event]) -> list:
        """Verbose matches, or collapsed records (counted lazily: ``matches`` stays 0)."""
        stats = PostponeStats()
        found = match_postponed(self.query, rows, output=self.output, stats=stats,
                                max_entries=self.max_entries, core=self._core_choice)
        self._core_ran = stats.core
        self._stats["main_runs"] += stats.main_runs
        self._stats["matches"] += stats.matches
        self._stats["records"] += stats.records
        return found


def group_by_end(matches: Iterable[ExactMatch]) -> list[MatchGroup]:
    """Compact records of a verbose output: one :class:`MatchGroup` per end position, by
    increasing end position; each keeps its matches in canonical order."""
    by_end: dict[int, list[ExactMatch]] = {}
    for m in sorted(matches, key=lambda m: (m.positions[-1][-1], m.positions)):
        by_end.setdefault(m.positions[-1][-1], []).append(m)
    return [MatchGroup(end, ms) for end, ms in by_end.items()]


def match(query: Query | str, events: Iterable[Event] | EventBatch,
          output: str = "verbose") -> list:
    """``Engine(query, output).run(events)``; query texts are parsed once and cached."""
    if isinstance(query, str):
        query = _parse_cached(query)
    return Engine(query, output).run(events)


@lru_cache(maxsize=64)
def _parse_cached(text: str) -> Query:
    return parse_query(text)


def _numeric_by_type(query: Query) -> dict[str, tuple[str, ...]]:
    """{event type: the attributes the query computes with on it}
    (:func:`~acep.nfab.compile.numeric_attributes`), worked out once per engine."""
    by_type: dict[str, set[str]] = {}
    for var, attrs in numeric_attributes(query).items():
        by_type.setdefault(query.component(var).type, set()).update(attrs)
    return {kind: tuple(sorted(attrs)) for kind, attrs in by_type.items()}


def _text_in_numbers(numeric: dict[str, tuple[str, ...]], rows: list[Event],
                     offset: int) -> EventError | None:
    """The first event whose attribute holds text where the query computes with a number
    (``numeric``: :func:`_numeric_by_type`), as a bad event; positions from ``offset``."""
    if not numeric:
        return None
    for pos, event in enumerate(rows):
        for attr in numeric.get(event.type, ()):
            value = event.attrs.get(attr)
            if isinstance(value, str):
                return EventError(f"attribute {attr!r} of a {event.type} event is not a "
                                  f"number ({value!r}), and the query computes with it",
                                  position=offset + pos, field=attr)
    return None


def _rows(events: Iterable[Event] | EventBatch) -> list[Event]:
    if isinstance(events, EventBatch):
        return events.to_events()
    rows = list(events)
    if not all(isinstance(e, Event) for e in rows):
        pos = next(p for p, e in enumerate(rows) if not isinstance(e, Event))
        raise TypeError(f"event {pos} is a {type(rows[pos]).__name__}, not an "
                        "acep.events.Event")
    return rows
