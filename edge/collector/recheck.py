"""Exact re-check of uploaded windows with the NFA^b engine (``acep.nfab``, skip-till-any-match).

For every uploaded match the collector asks: is its trajectory itself an exact match, and
which exact matches end at its match point? :func:`translate` turns an ACEP pattern that is
a sequence of single types, each optionally with ``+``, into a SASE+ query; anything else
raises :class:`Unsupported`, which :func:`recheck_batch` turns into ``exact = None`` per
match (it never raises). The translation and the limits are in docs/WIRE.md, "Collector
(as built)", Exact re-check.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
from collections.abc import Sequence
from decimal import Decimal
from functools import lru_cache

import numpy as np

from acep.events import Event
from acep.nfab import Engine, ExactMatch, Query, QueryError, parse_query
from acep.nfab.ast import Agg, Equiv, Ref
from acep.pattern import (
    Attr,
    BinOp,
    Call,
    Concat,
    Const,
    PatternError,
    Repeat,
    Symbol,
    UnaryOp,
    parse_regex,
    parse_where,
)
from acep.windows import value_groups

from ..wire import partition_group_key
from . import fastcheck
from .fastcheck import Fallback

__all__ = ["Unsupported", "MatchCheck", "translate", "recheck", "recheck_batch",
           "MAX_EXACT_PER_POINT", "MAX_ENUMERATION", "MAX_WORK"]

# Exact matches stored per match point; the count is always exact, the list may be cut.
MAX_EXACT_PER_POINT = 100
# A window whose Kleene candidates could give more matches than this is not enumerated
# when a predicate forces enumeration (skip-till-any-match is exponential in Kleene+).
MAX_ENUMERATION = 100_000
# The re-check of one partition's windows builds a matrix per pair of components over their
# candidate events and multiplies them (edge.collector.fastcheck; the NFA^b engine grows alike): its
# steps are about the products of three candidate counts. Above this the matches are
# stored with exact = None, as for a pattern it cannot translate: a second or two and
# 100 MB at most (a device's 850 KB batch of 30,000 events of one partition took 23 GB).
MAX_WORK = 2 * 10 ** 8


class Unsupported(ValueError):
    """A pattern or window the exact re-check cannot handle; the message is the reason."""


class MatchCheck:
    """The re-check of one uploaded match.

    ``exact``: True when the trajectory is itself an exact match, False when not, None when
    the re-check could not run (``reason`` says why). ``exact_matches``: the exact matches
    ending at the match point, each a list of global stream positions per pattern
    component (at most :data:`MAX_EXACT_PER_POINT`); ``exact_count`` counts all of them.
    ``exact_json`` is ``exact_matches`` as compact JSON text, the form the collector
    stores. Either can be given; the other is derived on first use (the fast path lists
    the matches as text, so a collector never builds the lists).
    """

    __slots__ = ("exact", "exact_count", "reason", "truncated", "_matches", "_json")

    def __init__(self, exact: bool | None, exact_count: int | None = None,
                 exact_matches: list | None = None, reason: str | None = None,
                 truncated: bool = False, *, exact_json: str | None = None):
        self.exact, self.exact_count, self.reason = exact, exact_count, reason
        self.truncated = truncated
        self._matches, self._json = exact_matches, exact_json

    @property
    def exact_matches(self) -> list | None:
        if self._matches is None and self._json is not None:
            self._matches = json.loads(self._json)
        return self._matches

    @property
    def exact_json(self) -> str | None:
        if self._json is None and self._matches is not None:
            self._json = json.dumps(self._matches, separators=(",", ":"))
        return self._json

    def __eq__(self, other) -> bool:
        if not isinstance(other, MatchCheck):
            return NotImplemented
        return (self.exact, self.exact_count, self.exact_matches, self.reason,
                self.truncated) == (other.exact, other.exact_count, other.exact_matches,
                                    other.reason, other.truncated)

    def __repr__(self) -> str:
        return (f"MatchCheck(exact={self.exact!r}, exact_count={self.exact_count!r}, "
                f"exact_matches={self.exact_matches!r}, reason={self.reason!r}, "
                f"truncated={self.truncated!r})")


# --------------------------------------------------------------------------- translation


def translate(text: str, window: float, where: Sequence[str] = ()) -> str:
    """The SASE+ query text of an ACEP pattern; raises :class:`Unsupported` with the reason."""
    return _translate(text, float(window), tuple(where))


@lru_cache(maxsize=256)
def _translate(text: str, window: float, where: tuple[str, ...]) -> str:
    try:
        node = parse_regex(text)
    except PatternError as exc:
        raise Unsupported(f"pattern does not parse: {exc}") from None
    items = node.items if isinstance(node, Concat) else (node,)
    comps: list[tuple[str, bool]] = []  # (type, kleene)
    for item in items:
        if isinstance(item, Symbol):
            comps.append((item.name, False))
        elif (isinstance(item, Repeat) and isinstance(item.item, Symbol) and item.lo == 1
              and item.hi is None):
            comps.append((item.item.name, True))
        else:
            raise Unsupported("only sequences of single types with '+' translate to SASE+ "
                              f"(pattern {text!r})")
    if not math.isfinite(window) or window < 0:
        raise Unsupported(f"window {window!r} is not a finite number >= 0")
    try:
        parsed = parse_where(list(where))
    except PatternError as exc:
        raise Unsupported(f"predicate does not parse: {exc}") from None
    index: dict[str, list[int]] = {}
    for j, (name, _) in enumerate(comps):
        index.setdefault(name, []).append(j)
    conjuncts = [_conjunct(p, comps, index) for p in parsed.predicates]
    decl = ", ".join(f"{name}+ v{j}[]" if kleene else f"{name} v{j}"
                     for j, (name, kleene) in enumerate(comps))
    varlist = ", ".join(f"v{j}[]" if kleene else f"v{j}" for j, (_, kleene) in enumerate(comps))
    body = " AND ".join(conjuncts)
    return (f"PATTERN SEQ({decl}) WHERE skip_till_any_match({varlist}) {{ {body} }} "
            f"WITHIN {_number(window)}")


def _conjunct(expr, comps, index) -> str:
    used = _vars(expr)
    for var in used:
        if var not in index:
            raise Unsupported(f"predicate names type {var!r}, which is not in the pattern")
        if len(index[var]) > 1:
            raise Unsupported(f"predicate names type {var!r}, which occurs more than once in "
                              "the pattern")
    last = max(index[v][0] for v in used) if used else -1

    def ref(a: Attr) -> str:
        j = index[a.var][0]
        if not comps[j][1]:
            return f"v{j}.{a.attr}"
        return f"v{j}[i].{a.attr}" if j == last else f"v{j}[v{j}.len].{a.attr}"

    return _unparse(expr, ref)


def _vars(expr) -> set[str]:
    if isinstance(expr, Attr):
        return {expr.var}
    if isinstance(expr, BinOp):
        return _vars(expr.left) | _vars(expr.right)
    if isinstance(expr, UnaryOp):
        return _vars(expr.operand)
    if isinstance(expr, Call):
        return set().union(*(_vars(a) for a in expr.args))
    return set()


def _unparse(expr, ref) -> str:
    if isinstance(expr, Attr):
        return ref(expr)
    if isinstance(expr, Const):
        if isinstance(expr.value, str):
            if "'" in expr.value:
                raise Unsupported(f"string constant {expr.value!r} holds a quote")
            return f"'{expr.value}'"
        return _number(float(expr.value))
    if isinstance(expr, BinOp):
        op = {"and": "AND", "or": "OR", "<>": "!=", "=": "=="}.get(expr.op, expr.op)
        return f"({_unparse(expr.left, ref)} {op} {_unparse(expr.right, ref)})"
    if isinstance(expr, UnaryOp):
        op = "NOT " if expr.op == "not" else expr.op
        return f"({op}{_unparse(expr.operand, ref)})"
    if isinstance(expr, Call):
        return f"{expr.func}({', '.join(_unparse(a, ref) for a in expr.args)})"
    raise Unsupported(f"predicate node {type(expr).__name__} has no SASE+ form")


def _number(x: float) -> str:
    if not math.isfinite(x):
        raise Unsupported(f"constant {x!r} is not finite")
    text = format(Decimal(repr(abs(x))), "f")
    return f"(-{text})" if x < 0 else text


@lru_cache(maxsize=256)
def _query(text: str) -> Query:
    try:
        return parse_query(text)
    except (QueryError, PatternError) as exc:
        raise Unsupported(f"the exact engine refuses the translated query: {exc}") from None


# --------------------------------------------------------------------------- running


def recheck(pattern, window_events: Sequence[Event]) -> list[ExactMatch]:
    """Every exact match (skip-till-any-match) of ``pattern`` (an ``edge.wire.PatternRef``)
    in ``window_events`` (one partition's events, tags non-decreasing). Positions are
    indices into ``window_events``. Raises :class:`Unsupported` for patterns that do not
    translate and for windows too large to enumerate."""
    query = _query(translate(pattern.text, pattern.window, pattern.where))
    out: list[ExactMatch] = []
    for record in Engine(query, output="compact").run(list(window_events)):
        out.extend(_expand(record, None))
    return out


def _expand(record, limit: int | None) -> list[ExactMatch]:
    """Up to ``limit`` matches of a compact record (all when None). ``expand()`` builds its
    whole list before yielding, so a record is enumerated only when it is small enough."""
    if record.residual:
        if _bound(record) > MAX_ENUMERATION:
            raise Unsupported(f"window too large to enumerate exactly (up to {_bound(record)} "
                              f"matches end at one event, limit {MAX_ENUMERATION})")
    elif record.count() > MAX_ENUMERATION:
        if limit is None:
            raise Unsupported(f"{record.count()} exact matches end at one event, above the "
                              f"enumeration limit of {MAX_ENUMERATION}")
        return []
    return list(itertools.islice(record.expand(), limit))


def _bound(record) -> int:
    total = 1
    for cands in record.candidates:
        total *= max(len(cands), 1) if len(cands) <= 1 else 2 ** min(len(cands), 62)
    return total


def _count(record) -> int:
    if record.residual and _bound(record) > MAX_ENUMERATION:
        raise Unsupported(f"window too large to count exactly (up to {_bound(record)} "
                          f"matches end at one event, limit {MAX_ENUMERATION})")
    return record.count()


def _is_exact(query: Query, events: list[Event]) -> bool:
    """Under skip-till-any-match without negation, a subsequence is a match on its own, so
    the trajectory is exact iff the engine run over just its events uses all of them."""
    want = tuple(range(len(events)))
    return any(tuple(p for comp in m.positions for p in comp) == want
               for m in Engine(query).run(events))


class _BatchRows:
    """A batch's events as Python lists, taken from its columns once, so that each
    partition's rows are built without a numpy lookup per value."""

    def __init__(self, batch, attrs: frozenset | None):
        names = batch.type_names
        self.types = [names[c] for c in batch.event_type.tolist()]
        self.tags = [float(t) for t in batch.event_tag.tolist()]
        self.cols = [(name, col.tolist(), col.dtype == object)
                     for name, col in batch.columns.items() if attrs is None or name in attrs]
        self.points = batch.point.tolist()
        self.ptr, self.traj = batch.trajectory_ptr.tolist(), batch.trajectory.tolist()

    def trajectory(self, i: int) -> list[int]:
        """The stream positions of match ``i``'s events."""
        return self.traj[self.ptr[i]:self.ptr[i + 1]]

    def rows(self, idx: np.ndarray) -> list[Event]:
        types, tags, cols = self.types, self.tags, self.cols
        rows = []
        for i in idx.tolist():
            attrs = {}
            for name, col, is_text in cols:
                v = col[i]
                if is_text:
                    if v is not None:
                        attrs[name] = v
                elif v == v:
                    attrs[name] = float(v)
            rows.append(Event(types[i], tags[i], attrs))
        return rows


def _read_attrs(query: Query) -> frozenset:
    """Every attribute the query's predicates read (the tag ``t`` is not an attribute)."""
    out, stack = set(), list(query.conjuncts) + [r.expr for r in query.returns]
    while stack:
        node = stack.pop()
        if isinstance(node, (tuple, list)):
            stack.extend(node)
        elif isinstance(node, Equiv):
            out.update(node.attrs)
        elif isinstance(node, (Ref, Agg)):
            if node.attr is not None and node.attr != "t":
                out.add(node.attr)
        elif dataclasses.is_dataclass(node):
            stack.extend(getattr(node, f.name) for f in dataclasses.fields(node))
    return frozenset(out)


def recheck_batch(batch, fast: bool = True) -> list[MatchCheck]:
    """One :class:`MatchCheck` per match of an ``edge.wire.UploadBatch``; never raises.

    Events are grouped by the pattern's ``partition_by`` attribute and each partition is
    checked once over the union of its windows: every exact match ending at a point lies
    inside that point's window, which the device sent whole (``docs/WIRE.md``). A query in
    the class of :mod:`edge.collector.fastcheck` is counted there (``fast``); anything else, and any
    window the fast path declines, goes through the NFA^b engine."""
    n = len(batch)
    pattern = batch.pattern
    try:
        query = _query(translate(pattern.text, pattern.window, pattern.where))
        fplan = _fast_plan(query.text) if fast else None
    except Unsupported as exc:
        return [MatchCheck(None, reason=str(exc)) for _ in range(n)]
    except Exception as exc:  # a re-check must never take an upload down with it
        return [MatchCheck(None, reason=f"translation failed: {exc}") for _ in range(n)]
    try:
        groups = _partition_groups(batch)
    except Unsupported as exc:
        return [MatchCheck(None, reason=str(exc)) for _ in range(n)]
    out: list[MatchCheck | None] = [None] * n
    table = _BatchRows(batch, _read_attrs(query))
    by_key: dict = {}
    for i, key in enumerate(batch.partition):
        by_key.setdefault(partition_group_key(key), []).append(i)
    types = [c.type for c in query.components]
    for key, rows in by_key.items():
        idx = groups.get(key, np.zeros(0, dtype=np.int64))
        too_large = _too_large(types, batch, idx)
        if too_large is not None:
            for i in rows:
                out[i] = MatchCheck(None, reason=too_large)
            continue
        try:
            checks = None
            if fplan is not None:
                try:
                    checks = _fast_partition(batch, table, fplan, idx, rows)
                except Fallback:
                    checks = None
            if checks is None:
                checks = _check_partition(batch, table, query, idx, rows)
        except Unsupported as exc:
            checks = {i: MatchCheck(None, reason=str(exc)) for i in rows}
        except Exception as exc:  # e.g. EventError: an event lacking a predicate's attribute
            checks = {i: MatchCheck(None, reason=f"{type(exc).__name__}: {exc}") for i in rows}
        for i, c in checks.items():
            out[i] = c
    return out  # type: ignore[return-value]


def _too_large(types: list[str], batch, idx: np.ndarray) -> str | None:
    """Why the windows of a partition (its events ``idx``) are too large to re-check for
    a pattern of components of ``types``: its steps (:data:`MAX_WORK`), or None."""
    names = batch.type_names
    per_type = np.bincount(batch.event_type[idx], minlength=len(names)).tolist()
    by_name = dict(zip(names, per_type))
    n = [by_name.get(t, 0) for t in types]
    # the products W_0 T_1 ... (rows: the first component) and the reach back from the ends
    work = n[0] ** 2 + sum(n[j - 1] * n[j] * (n[0] + n[-1]) for j in range(1, len(n)))
    if work <= MAX_WORK:
        return None
    return (f"not re-checked: {len(idx)} events of the partition's windows for a pattern "
            f"of {len(n)} components are about {work:.1e} steps, above the re-check's "
            f"limit of {MAX_WORK:.0e} (they grow with the cube of the events per component)")


@lru_cache(maxsize=256)
def _fast_plan(text: str) -> fastcheck.Plan | None:
    return fastcheck.plan(_query(text))


def _fast_partition(batch, table: _BatchRows, fplan: fastcheck.Plan, idx: np.ndarray,
                    rows: list[int]) -> dict:
    """:func:`_check_partition` by :mod:`edge.collector.fastcheck` (raises ``Fallback``)."""
    events = table.rows(idx)
    gpos = batch.event_position[idx].tolist()
    local = {g: j for j, g in enumerate(gpos)}
    points = [table.points[i] for i in rows]
    per_point = fastcheck.check_partition(fplan, events, points, MAX_EXACT_PER_POINT, gpos)
    texts: dict[float, str] = {}  # one text per point, shared by its matches
    checks: dict[int, MatchCheck] = {}
    for i, point in zip(rows, points):
        count, found = per_point[point]
        if point not in texts:
            texts[point] = "[" + ",".join(found) + "]"
        at = [local.get(g) for g in table.trajectory(i)]
        try:  # (an event outside the partition: not a match of it)
            exact = None not in at and fastcheck.is_match(fplan, [events[j] for j in at])
        except Exception as exc:  # a predicate that raises: the engine says why
            raise Fallback(f"{type(exc).__name__}: {exc}") from None
        checks[i] = MatchCheck(exact, count, exact_json=texts[point],
                               truncated=count > len(found))
    return checks


def _check_partition(batch, table: _BatchRows, query: Query, idx: np.ndarray,
                     rows: list[int]) -> dict:
    events = table.rows(idx)
    gpos = batch.event_position[idx]
    records = Engine(query, output="compact").run(events) if len(events) else []
    by_point: dict[float, list] = {}
    for r in records:
        by_point.setdefault(events[r.end_position].t, []).append(r)
    checks: dict[int, MatchCheck] = {}
    per_point: dict[float, tuple] = {}
    for i in rows:
        point = float(batch.point[i])
        if point not in per_point:
            recs = by_point.get(point, [])
            count = sum(_count(r) for r in recs)
            found: list = []
            for r in recs:
                room = MAX_EXACT_PER_POINT - len(found)
                if room <= 0:
                    break
                found.extend([[int(gpos[p]) for p in comp] for comp in m.positions]
                             for m in _expand(r, room))
            per_point[point] = (count, found)
        count, found = per_point[point]
        lo, hi = batch.trajectory_ptr[i], batch.trajectory_ptr[i + 1]
        local = np.searchsorted(gpos, batch.trajectory[lo:hi])
        exact = _is_exact(query, [events[j] for j in local.tolist()])
        checks[i] = MatchCheck(exact, count, found, truncated=count > len(found))
    return checks


def _partition_groups(batch) -> dict:
    """{partition key: indices of its events in the batch, in stream order}."""
    n = len(batch.event_position)
    attr = batch.pattern.partition_by
    if attr is None:
        return {partition_group_key(None): np.arange(n, dtype=np.int64)}
    col = batch.columns.get(attr)
    if col is None:
        raise Unsupported(f"the events carry no attribute {attr!r} to partition by")
    groups: dict = {}
    for v, at in value_groups(col).items():  # values equal as keys (3 and 3.0) join, in order
        key = partition_group_key(v)
        groups[key] = np.sort(np.concatenate([groups[key], at])) if key in groups else at
    return groups
