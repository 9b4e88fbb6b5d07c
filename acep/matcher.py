"""The ACEP matcher: a pattern, a window ``w`` and an error bound ``k`` over event batches.

Semantics (ACEP paper, Definition 1; DESIGN.md, "Semantics"): a match is a non-empty
subsequence σ of one partition's events with ``t_last - t_first <= w`` that becomes a
serialization of the pattern after inserting at most ``k`` letters, and that satisfies the
predicates. Its *match point* is the tag of its last event (Definition 3).

By default the matcher reports one match per (partition, match point): the least errors,
then the latest start, with its trajectory. ``all_trajectories=True`` reports every
distinct trajectory with its least errors (small inputs; this also turns merging off).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from . import _backend
from . import _checks as check
from ._bundles import bundle_runs
from ._matcher_checks import check_batch, check_load, check_parameters, check_window
from .automaton import Automaton, build_automaton
from .events import Event, EventBatch, EventError, partition_hash, partition_key, tag_text
from .pattern import Node, Where, parse_regex, parse_where, symbols
from .predicates import CompiledPredicates, compile_predicates
from .shedding import Budget, OldestFirstPolicy, VectorBins, smallest_burst

__all__ = ["Pattern", "Matcher", "MatcherLimitError", "BucketWarning", "Match", "MatchBatch",
           "Bundle", "bundles", "bundles_table", "best_per_point", "match"]


@dataclass
class Pattern:
    """A parsed pattern with its Thompson automaton and compiled predicates."""

    text: str
    node: Node
    where: Where
    automaton: Automaton
    predicates: CompiledPredicates

    @classmethod
    def compile(cls, text: str, where: str | Sequence[str] = ()) -> Pattern:
        check.instance(text, "pattern", str, "a pattern text such as 'a b+ c'")
        if where is None or (isinstance(where, str) and not where):
            where = ()
        where = check.texts(where, "where", "predicates")
        node = parse_regex(text)
        parsed_where = parse_where(where) if where else Where()
        types = symbols(node)
        return cls(text, node, parsed_where, build_automaton(node, types),
                   compile_predicates(parsed_where, types))

    @property
    def types(self) -> list[str]:
        return self.automaton.types

    def kernel_tables(self, k: int) -> dict:
        """The per-state tables the kernel reads (see ``acep._kernel``)."""
        a = self.automaton
        cost = a.skip_cost()
        pre = a.letter_source()
        l_states = a.l_states()
        seed = np.full(a.n_states, _kernel_infinity(), dtype=np.int64)
        final = seed.copy()
        nxt = seed.copy()
        sources: list[list[tuple[int, int]]] = [[] for _ in range(a.n_states)]
        for sigma in l_states:
            seed[sigma] = cost[a.start, pre[sigma]]
            final[sigma] = cost[sigma, a.final]
            nxt[sigma] = min(cost[sigma, pre[s]] for s in l_states)
            sources[sigma] = [(q, int(cost[q, pre[sigma]])) for q in l_states
                              if cost[q, pre[sigma]] <= k]
        by_type = [a.l_states(t) for t in range(len(a.types))]
        pr = self.predicates
        slot_bit = [int(pr.var_bit[self.types.index(name.split(".")[0])])
                    for name in pr.slot_names]
        return {
            "n_states": a.n_states, "n_slots": pr.n_slots,
            "l_ptr": _ptr(by_type), "l_state": _flat(by_type),
            "src_ptr": _ptr(sources), "src_state": _flat([[q for q, _ in s] for s in sources]),
            "src_cost": _flat([[c for _, c in s] for s in sources]),
            "seed_cost": np.minimum(seed, _kernel_infinity()),
            "final_cost": np.minimum(final, _kernel_infinity()),
            "next_cost": np.minimum(nxt, _kernel_infinity()),
            "var_bit": pr.var_bit, "slot_bit": np.array(slot_bit, dtype=np.int64),
            "bind_ptr": pr.bind_ptr, "bind_slot": pr.bind_slot, "bind_col": pr.bind_col,
            "check_ptr": pr.check_ptr, "check_pred": pr.check_pred, "pred_mask": pr.pred_mask,
            "code_ptr": pr.code_ptr, "code_op": pr.code_op, "code_arg": pr.code_arg,
            "consts": pr.consts,
        }


def _kernel_infinity() -> int:
    return 1 << 20  # far above any k, and no overflow when an error count is added


def _ptr(lists) -> np.ndarray:
    return np.concatenate([[0], np.cumsum([len(x) for x in lists])]).astype(np.int32)


def _flat(lists) -> np.ndarray:
    return np.array([v for x in lists for v in x], dtype=np.int32)


@dataclass(frozen=True)
class Match:
    """One match: the trajectory's events (global positions and tags), errors, point."""

    partition: object
    start: float
    point: float
    errors: int
    events: tuple[int, ...]
    tags: tuple[float, ...]


@dataclass
class MatchBatch:
    """Matches as columns; ``trajectory[trajectory_ptr[i]:trajectory_ptr[i+1]]`` is match i's."""

    partition: np.ndarray
    point: np.ndarray
    start: np.ndarray
    errors: np.ndarray
    trajectory_ptr: np.ndarray
    trajectory: np.ndarray
    trajectory_tags: np.ndarray
    tag_is_time: bool = False

    def __len__(self) -> int:
        return len(self.point)

    def __iter__(self):
        return iter(self.to_matches())

    def events_of(self, i: int) -> np.ndarray:
        """The positions of match ``i``'s events (``i`` may count from the end, as -1)."""
        j, n = check.whole(i, "i (a match index)"), len(self)
        if not -n <= j < n:
            raise IndexError(f"match index {j} is out of range for {n} matches")
        j %= n
        return self.trajectory[self.trajectory_ptr[j]:self.trajectory_ptr[j + 1]]

    def to_matches(self) -> list[Match]:
        ptr = self.trajectory_ptr
        events = self.trajectory.tolist()
        tags = self.trajectory_tags.tolist()
        return [Match(self.partition[i], float(self.start[i]), float(self.point[i]),
                      int(self.errors[i]), tuple(events[ptr[i]:ptr[i + 1]]),
                      tuple(tags[ptr[i]:ptr[i + 1]]))
                for i in range(len(self))]

    def to_arrow(self):
        """The matches as a ``pyarrow.Table`` (trajectories as list columns)."""
        import pyarrow as pa

        ptr = pa.array(self.trajectory_ptr.astype(np.int64))
        return pa.table({
            "partition": pa.array(list(self.partition)),
            "start": self.start, "point": self.point, "errors": self.errors,
            "events": pa.LargeListArray.from_arrays(ptr, pa.array(self.trajectory)),
            "event_tags": pa.LargeListArray.from_arrays(ptr, pa.array(self.trajectory_tags)),
        })

    @classmethod
    def empty(cls) -> MatchBatch:
        return cls(np.array([], dtype=object), np.zeros(0), np.zeros(0),
                   np.zeros(0, dtype=np.int32), np.zeros(1, dtype=np.int64),
                   np.zeros(0, dtype=np.int64), np.zeros(0))

    @classmethod
    def concat(cls, batches: Sequence[MatchBatch]) -> MatchBatch:
        if isinstance(batches, MatchBatch):
            raise check.ParameterError("batches must be a list of MatchBatch, got one "
                                       "MatchBatch (write concat([found]))")
        batches = list(batches)
        for b in batches:
            _check_matches(b, "each of batches")
        batches = [b for b in batches if len(b)] or [cls.empty()]
        offsets = np.cumsum([0] + [len(b.trajectory) for b in batches[:-1]])
        ptr = np.concatenate([[0]] + [b.trajectory_ptr[1:] + o for b, o in zip(batches, offsets)])
        return cls(np.concatenate([b.partition for b in batches]),
                   np.concatenate([b.point for b in batches]),
                   np.concatenate([b.start for b in batches]),
                   np.concatenate([b.errors for b in batches]),
                   ptr.astype(np.int64),
                   np.concatenate([b.trajectory for b in batches]),
                   np.concatenate([b.trajectory_tags for b in batches]),
                   any(b.tag_is_time for b in batches))


class MatcherLimitError(MemoryError):
    """The matcher would grow past ``Matcher.max_entries``; it cannot go on."""


@dataclass
class Matcher:
    """Streaming ACEP matcher: feed event batches, collect matches.

    A matcher matches one stream: :meth:`match_batch` takes its batches in order and
    returns the matches they settle, :meth:`flush` ends the stream and returns the rest,
    :meth:`match` does both. ``stats`` counts the match nodes created, merged and expired,
    and under a budget the candidates and the ones shed.

    Parameters
    ----------
    pattern : str or Pattern
        A regular expression over event types (docs/CLI.md, Pattern language).
    window : float
        The window ``w`` in tag units (seconds when tags are timestamps).
    k : int
        The error bound: a match may miss up to ``k`` events of the pattern.
    where : str or sequence of str
        Predicates between bound events, such as ``"b.price > a.price"``.
    partition : str, optional
        The attribute to partition by: matches never mix partitions.
    merge : bool
        Dominance merging (exact for match points and bundles).
    all_trajectories : bool
        Report every trajectory; implies ``merge=False``.
    on_bad_event : {"error", "skip"}
        Raise :class:`EventError` naming the event (matches found before it are in
        ``error.matches``), or drop and count it.
    backend : {"compiled", "python"}, optional
        The kernel (None: the compiled one if built).
    capacity : int
        The initial number of match-node slots; the arrays grow when needed.
    max_entries : int, optional
        The most slots and output entries per batch (None: no limit). Past it
        :meth:`match_batch` raises :class:`MatcherLimitError` and the matcher cannot go on:
        a guard for ``all_trajectories`` and ``merge=False``, whose trajectories can
        multiply with every event.
    budget : acep.shedding.Budget, optional
        Caps the candidate match nodes per event (``docs/SHEDDING.md``; None: no cap).
    policy : optional
        The :mod:`acep.shedding` policy that picks the candidates to keep when an event's
        exceed the budget (oldest-first by default).
    bins : acep.shedding.VectorBins, optional
        Gives each node a match-vector cell, which score tables index.
    trace : bool
        Log every node with its outcome (:meth:`take_node_log`).

    Examples
    --------
    >>> from acep import EventBatch, Matcher
    >>> m = Matcher("a b c", window=5, k=1)
    >>> first = EventBatch.from_events([{"type": "a", "t": 1}, {"type": "b", "t": 2},
    ...                                 {"type": "c", "t": 3}])
    >>> [(x.point, x.errors, x.events) for x in m.match_batch(first).to_matches()]
    [(2.0, 1, (0, 1))]
    >>> then = EventBatch.from_events([{"type": "a", "t": 10}], position=3)
    >>> [(x.point, x.errors, x.events) for x in m.match_batch(then).to_matches()]
    [(3.0, 0, (0, 1, 2))]
    >>> m.flush().to_matches()
    []
    """

    pattern: Pattern | str
    window: float
    k: int = 0
    where: str | Sequence[str] = ()
    partition: str | None = None
    merge: bool = True
    all_trajectories: bool = False
    on_bad_event: str = "error"
    backend: str | None = None
    capacity: int = 1024
    max_entries: int | None = None
    budget: Budget | None = None
    policy: object | None = None
    bins: VectorBins | None = None
    trace: bool = False
    _kernel: object = field(init=False, repr=False)
    _partition_ids: dict = field(init=False, repr=False, default_factory=dict)
    _partition_keys: list = field(init=False, repr=False, default_factory=list)
    _key_table: np.ndarray = field(init=False, repr=False,
                                   default_factory=lambda: np.empty(0, dtype=object))
    _type_luts: dict = field(init=False, repr=False, default_factory=dict)
    _tag_is_time: bool = field(init=False, repr=False, default=False)
    _position: int = field(init=False, repr=False, default=0)
    _broken: str | None = field(init=False, repr=False, default=None)  # why it cannot go on
    _flushed: bool = field(init=False, repr=False, default=False)  # the stream has ended

    def __post_init__(self):
        if isinstance(self.pattern, str):
            self.pattern = Pattern.compile(self.pattern, self.where)
        elif not isinstance(self.pattern, Pattern):
            check.instance(self.pattern, "pattern", (str, Pattern),
                           "a pattern text such as 'a b+ c' or an acep.Pattern")
        elif self.where:
            raise ValueError("give `where` to Pattern.compile, not beside a compiled Pattern")
        check_parameters(self.window, self.k, self.on_bad_event)
        check.name_or_none(self.partition, "partition", "the attribute to partition by")
        for name in ("merge", "all_trajectories", "trace"):
            check.flag(getattr(self, name), name)
        capacity = check.whole(self.capacity, "capacity", 1, _MAX_NODES)
        if self.partition is None:
            self.partition = self.pattern.where.partition
        elif self.pattern.where.partition not in (None, self.partition):
            raise ValueError(f"partition {self.partition!r} conflicts with the equivalence "
                             f"test [{self.pattern.where.partition}]")
        if self.all_trajectories:
            self.merge = False
        self._kernel_module = _backend.kernel(self.backend)
        self._kernel = self._kernel_module.Kernel(
            self.pattern.kernel_tables(int(self.k)), int(self.k), float(self.window),
            bool(self.merge), bool(self.all_trajectories), max(capacity, 16))
        if self.max_entries is not None:
            limit = check.whole(self.max_entries, "max_entries", what=" or None (no limit)")
            if not max(capacity, 16) <= limit <= _MAX_LIMIT:
                raise check.ParameterError(
                    f"max_entries must be at least the capacity ({max(capacity, 16):,}) and "
                    f"at most 2**63 - 1, got {check.shown(self.max_entries)}")
            self._kernel.set_limit(limit)
        self._configure_shedding()

    def _configure_shedding(self) -> None:
        """Bins, budget, policy and tracing (docs/SHEDDING.md)."""
        if self.bins is not None:
            check.instance(self.bins, "bins", VectorBins, "an acep.shedding.VectorBins")
            self._kernel.set_bins(np.asarray(self.bins.rem_edges), np.asarray(self.bins.gap_edges),
                                  self.bins.context)
        if self.budget is not None:
            check.instance(self.budget, "budget", Budget, "an acep.shedding.Budget",
                           " (e.g. Budget(ops_per_event=0.1))")
            self._kernel.set_budget(float(self.budget.ops_per_event), float(self.budget.depth))
            if 0 < self.budget.depth < 1:
                warnings.warn(_SMALL_BUCKET.format(b=self.budget, need=smallest_burst(
                    self.budget.ops_per_event)), BucketWarning, stacklevel=4)
        if self.policy is None and self.budget is not None:
            self.policy = OldestFirstPolicy()
        if self.policy is not None:
            if isinstance(self.policy, type) or not hasattr(self.policy, "attach"):
                raise check.ParameterError(
                    f"policy must be a shedding policy instance (see acep.shedding), e.g. "
                    f"OldestFirstPolicy(), got {check.shown(self.policy)}")
            self.policy.attach(self._kernel, self.n_cells)
        if self.trace:
            self._kernel.set_trace(True)

    @property
    def n_cells(self) -> int | None:
        """The number of match-vector cells (None without ``bins``)."""
        if self.bins is None:
            return None
        return self.bins.n_cells(self.pattern.automaton.n_states, int(self.k))

    def set_budget(self, budget: Budget) -> None:
        """Change the budget between batches; the bucket starts full at its new depth.

        Parameters
        ----------
        budget : acep.shedding.Budget
            The new operations per event and burst. The policy is kept: a history policy
            keeps the reserves it took for the budget it was made with.

        Examples
        --------
        >>> from acep import Matcher
        >>> from acep.shedding import Budget
        >>> m = Matcher("a b", 10, 0, budget=Budget(ops_per_event=1.0))
        >>> m.set_budget(Budget(ops_per_event=0.5, burst=128))
        >>> m.budget
        Budget(ops_per_event=0.5, burst=128.0)
        """
        self._check_open("set_budget")
        check.instance(budget, "budget", Budget, "an acep.shedding.Budget",
                       " (e.g. Budget(ops_per_event=0.1))")
        if self.budget is None:
            raise ValueError("set_budget needs a Matcher made with a budget (the policy is "
                             "chosen with it); make one with budget=Budget(...)")
        self._kernel.set_budget(float(budget.ops_per_event), float(budget.depth))
        self.budget = budget

    def take_node_log(self) -> dict[str, np.ndarray]:
        """The match nodes retired so far, with their outcomes (``trace=True``; SHEDDING.md 4)."""
        if not self.trace:
            raise ValueError("the node log needs Matcher(..., trace=True)")
        return self._kernel.take_node_log()

    def partition_keys(self) -> list:
        """Partition keys by kernel partition id (the ``partition`` of node logs)."""
        return list(self._partition_keys)

    # ------------------------------------------------------------------ feeding

    def match_batch(self, batch: EventBatch, load: np.ndarray | None = None) -> MatchBatch:
        """Process one batch; return the matches completed so far.

        ``load``, if given, is an (n, 4) int64 array that receives per event the match
        nodes created, merged and expired and the live nodes after it.
        """
        self._check_open("match_batch")
        check_batch(batch, self._position)
        n = len(batch)
        if load is None:
            load = np.zeros((0, 4), dtype=np.int64)
        else:
            check_load(load, n)
        self._tag_is_time = self._tag_is_time or batch.tag_is_time
        types = self._type_ids(batch)
        parts = self._partition_ids_of(batch)
        vals = self._value_columns(batch)
        tags = np.ascontiguousarray(batch.tags, dtype=np.float64)
        done = self._guarded(f"events {batch.position:,}-{batch.position + n - 1:,}",
                             self._kernel.process, types, tags, parts, vals, batch.position,
                             self.on_bad_event == "skip", load)
        self._position = batch.position + done
        if done < n:
            raise self._bad_event_error(batch, parts)
        return self._take()

    def flush(self) -> MatchBatch:
        """End of stream: emit the pending best match of every partition.

        With ``trace=True`` the nodes still alive are logged too (their outcomes are final).
        """
        self._guarded("the end of the stream", self._kernel.flush)
        self._flushed = True
        if self.trace:
            self._kernel.log_remaining()
        return self._take()

    def match(self, events: EventBatch | Iterable[Event | dict]) -> MatchBatch:
        """Match a whole (small) input and flush: the convenience entry point."""
        self._check_open("match")
        batch = events if isinstance(events, EventBatch) else EventBatch.from_events(events)
        found = self.match_batch(batch)
        return MatchBatch.concat([found, self.flush()])

    def _check_open(self, call: str) -> None:
        if self._flushed:
            raise ValueError(f"Matcher.{call} after flush(): flush ends the stream (match() "
                             "flushes too); use a new Matcher for another stream")

    @property
    def stats(self) -> dict:
        """Counters: match nodes created, merged, expired; live and peak live nodes; skips."""
        s = dict(self._kernel.stats())
        s.update(self._kernel.shedding_stats())
        s["partitions"] = len(self._partition_keys)
        s["events"] = self._position
        s["bytes_per_node"] = self.bytes_per_node
        return s

    @property
    def kernel_name(self) -> str:
        """The kernel this matcher runs on: "compiled" or "python"."""
        return "compiled" if _backend.is_compiled(self._kernel_module) else "python"

    @property
    def bytes_per_node(self) -> int:
        """Bytes of one match node in the kernel's arrays."""
        fixed = 4 + 4 + 8 + 8 + 8 + 4 + 4 + 4 + 8  # state err start loc tag prev refc next bound
        return fixed + 8 * max(self.pattern.predicates.n_slots, 1)

    # ------------------------------------------------------------------ conversions

    def _type_ids(self, batch: EventBatch) -> np.ndarray:
        key = tuple(batch.type_names)
        lut = self._type_luts.get(key)
        if lut is None:
            ids = {t: i for i, t in enumerate(self.pattern.types)}
            lut = np.array([ids.get(name, -1) for name in batch.type_names] + [-1],
                           dtype=np.int32)
            self._type_luts = {key: lut}
        return np.ascontiguousarray(lut[batch.type_codes])

    def _partition_ids_of(self, batch: EventBatch) -> np.ndarray:
        n = len(batch)
        if self.partition is None:
            self._ensure_partition(None)
            return np.zeros(n, dtype=np.int32)
        column = batch.columns.get(self.partition)
        if column is None:  # no event of this batch has it: each is a bad event, as in others
            return np.full(n, -1, dtype=np.int32)
        encoded = batch.codes_of(self.partition)
        if encoded is not None:
            return self._partition_ids_of_codes(encoded.codes, encoded.values.tolist())
        keys, inverse = _factorize(column)
        keys = [partition_key(key) for key in keys]  # one key per id, whatever the batch
        ids = np.array([-1 if _no_key(key) else self._ensure_partition(key)
                        for key in keys], dtype=np.int32)  # -1: a bad event for the kernel
        return np.ascontiguousarray(ids[inverse]) if n else np.zeros(0, dtype=np.int32)

    def _partition_ids_of_codes(self, codes: np.ndarray, values: list) -> np.ndarray:
        """Partition ids of dictionary codes; keys new to the matcher are numbered in the
        order they first appear, as :func:`_factorize` would (a file's dictionary may hold
        values of later batches, or none of this one)."""
        keys = [partition_key(v) for v in values]
        used = np.flatnonzero(np.bincount(codes + 1, minlength=len(keys) + 1)[1:]).tolist()
        new = [c for c in used if not _no_key(keys[c]) and keys[c] not in self._partition_ids]
        if len(new) > 1:
            present, first = np.unique(codes, return_index=True)
            first_of = dict(zip(present.tolist(), first.tolist()))
            new.sort(key=first_of.__getitem__)
        for c in new:
            self._ensure_partition(keys[c])
        ids = np.full(len(keys) + 1, -1, dtype=np.int32)  # the last: code -1, missing
        for c in used:
            ids[c] = -1 if _no_key(keys[c]) else self._partition_ids[keys[c]]
        return np.ascontiguousarray(ids[codes])

    def _ensure_partition(self, key) -> int:
        pid = self._partition_ids.get(key)
        if pid is None:
            pid = self._partition_ids[key] = len(self._partition_keys)
            self._partition_keys.append(key)
            self._kernel.reserve_partitions(pid + 1)
            self._kernel.set_partition_hash(pid, partition_hash(key))
        return pid

    def _value_columns(self, batch: EventBatch) -> np.ndarray:
        """The predicate attributes as float64 columns. A value that is not a number is
        NaN, like a missing one: the kernel refuses (or skips) only the events whose
        type binds it, and :meth:`_bad_event_error` names the value."""
        names = self.pattern.predicates.columns
        out = np.full((len(batch), len(names)), np.nan, dtype=np.float64)
        for j, name in enumerate(names):
            column = batch.columns.get(name)
            if column is None:
                continue  # every event of a bound type is then a bad event, named below
            try:
                out[:, j] = np.asarray(column, dtype=np.float64)
            except (TypeError, ValueError):
                out[:, j] = [_number(v) for v in column]
        return out

    def _guarded(self, where: str, call, *args):
        """``call(*args)`` on the kernel, which refuses to grow past ``max_entries``."""
        if self._broken:
            raise MatcherLimitError(self._broken)
        try:
            return call(*args)
        except self._kernel_module.LimitExceeded as exc:
            self._broken = (f"{exc} (max_entries), in {where}: without merging, trajectories "
                            "multiply with the events of a window; match with merging (one "
                            "match per point, the same points) or a higher limit")
            raise MatcherLimitError(self._broken) from None

    def _bad_event_error(self, batch: EventBatch, parts: np.ndarray) -> EventError:
        """The kernel stopped at a bad event: name it; keep the matches found before it."""
        index, code, col = self._kernel.bad_event()
        local = int(index - batch.position)
        line = batch.line_of(local)
        if code == self._kernel_module.BAD_TAG_BACK:
            part = self._partition_keys[parts[local]]
            where = f" in partition {part!r}" if self.partition else ""
            tag = tag_text(float(batch.tags[local]), batch.tag_is_time)
            err = EventError(f"tag {tag} goes back in time{where}", batch.source, line,
                             batch.tag_field, int(index))
        elif code == self._kernel_module.BAD_NO_PARTITION:
            column = batch.columns.get(self.partition)
            value = None if column is None else column[local]
            value = value.item() if isinstance(value, np.generic) else value
            what = "is missing" if _missing(value) else \
                f"is {value!r}: not a partition key (a finite number or a text)"
            err = EventError(f"partition attribute {self.partition!r} {what}",
                             batch.source, line, self.partition, int(index))
        else:
            name = self.pattern.predicates.columns[col]
            value = batch.columns[name][local] if name in batch.columns else None
            what = "is missing" if _missing(value) else f"is not a number: {value!r}"
            err = EventError(f"attribute {name!r}, needed by a predicate, {what}",
                             batch.source, line, name, int(index))
        err.matches = self._take()
        return err

    def _take(self) -> MatchBatch:
        raw = self._kernel.take_matches()
        if len(self._key_table) != len(self._partition_keys):
            self._key_table = np.empty(len(self._partition_keys), dtype=object)
            self._key_table[:] = self._partition_keys
        keys = self._key_table[np.asarray(raw["partition"], dtype=np.intp)]
        found = MatchBatch(keys, raw["point"], raw["start"], raw["errors"],
                           raw["trajectory_ptr"], raw["trajectory"], raw["trajectory_tags"],
                           self._tag_is_time)
        return _distinct_trajectories(found) if self.all_trajectories else found


class BucketWarning(UserWarning):
    """A budget whose bucket holds less than one operation: every candidate is shed."""


_SMALL_BUCKET = ("budget: a bucket of {b.ops_per_event:g} operations per event x burst "
                 "{b.burst:g} holds {b.depth:.3g} operations, less than the one a match node "
                 "costs, so every candidate will be shed; give burst={need} or more (or a "
                 "larger ops_per_event)")


# node slots are indexed by C ints in the kernel; its limit is a C long long
_MAX_NODES, _MAX_LIMIT = 2**31 - 1, 2**63 - 1


def _factorize(column: np.ndarray):
    """Distinct keys and each row's key index (pyarrow's hash encoding when installed)."""
    if column.dtype != object:
        keys, inverse = np.unique(column, return_inverse=True)
        return list(keys), inverse
    encoded = _arrow_dictionary(column)
    if encoded is not None:
        keys = encoded.dictionary.to_pylist()
        if encoded.null_count:  # missing keys get an index of their own, refused later
            keys.append(None)
        inverse = encoded.indices.fill_null(len(encoded.dictionary)).to_numpy()
        return keys, inverse.astype(np.int64)
    index: dict = {}
    inverse = np.fromiter((index.setdefault(v, len(index)) for v in column),
                          dtype=np.int64, count=len(column))
    return list(index), inverse


def _arrow_dictionary(column: np.ndarray):
    try:
        import pyarrow as pa
    except ImportError:  # the device side: no pyarrow, plain dict encoding
        return None
    try:
        encoded = pa.array(column, from_pandas=True).dictionary_encode()
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):  # mixed key types
        return None
    # numbers in an object column (big or mixed with text) are keyed exactly, by Python
    return encoded if pa.types.is_string(encoded.dictionary.type) else None


def _distinct_trajectories(found: MatchBatch) -> MatchBatch:
    """All-trajectories mode: one row per distinct (partition, trajectory), least errors."""
    best: dict = {}
    ptr, events = found.trajectory_ptr, found.trajectory.tolist()
    for i in range(len(found)):
        key = (found.partition[i], tuple(events[ptr[i]:ptr[i + 1]]))
        if key not in best or found.errors[i] < found.errors[best[key]]:
            best[key] = i
    keep = sorted(best.values())
    return _select(found, np.array(keep, dtype=np.int64))


def _select(found: MatchBatch, rows: np.ndarray) -> MatchBatch:
    ptr = found.trajectory_ptr
    pieces = [np.arange(ptr[i], ptr[i + 1]) for i in rows]
    idx = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.int64)
    lengths = np.array([ptr[i + 1] - ptr[i] for i in rows], dtype=np.int64)
    return MatchBatch(found.partition[rows], found.point[rows], found.start[rows],
                      found.errors[rows], np.concatenate([[0], np.cumsum(lengths)]),
                      found.trajectory[idx], found.trajectory_tags[idx], found.tag_is_time)


# ---------------------------------------------------------------------- bundles

@dataclass(frozen=True)
class Bundle:
    """A match bundle (Definition 3): a maximal run of match points, each within ``w`` of
    another, in one partition."""

    partition: object
    first: float
    last: float
    n_points: int


def bundles(found: MatchBatch, window: float) -> list[Bundle]:
    """The match bundles of a set of matches (one partition's points never mix with another's).

    A bundle is a maximal run of match points in one partition, each within ``window`` of
    the next (Definition 3 of the ACEP paper).

    Parameters
    ----------
    found : MatchBatch
        The matches, as :meth:`Matcher.match` returns them.
    window : float
        The pattern's window, in tag units.

    Returns
    -------
    list of Bundle
        The bundles by partition, then by first point.

    Examples
    --------
    >>> from acep import bundles, match
    >>> events = [{"type": "a", "t": 1, "id": "x"}, {"type": "b", "t": 2, "id": "x"},
    ...           {"type": "c", "t": 3, "id": "x"}, {"type": "a", "t": 10, "id": "y"},
    ...           {"type": "c", "t": 12, "id": "y"}]
    >>> for bundle in bundles(match("a b c", events, window=5, k=1, partition="id"), 5):
    ...     print(bundle)
    Bundle(partition='x', first=2.0, last=3.0, n_points=2)
    Bundle(partition='y', first=12.0, last=12.0, n_points=1)
    """
    _check_matches(found, "found")
    window = check_window(window)
    if not len(found):
        return []
    index: dict = {}  # partitions as a dict tells keys apart, each the first key object
    codes = np.fromiter((index.setdefault(k, len(index)) for k in found.partition.tolist()),
                        dtype=np.int64, count=len(found))
    keys = list(index)
    rank = np.empty(len(keys), dtype=np.int64)
    rank[sorted(range(len(keys)), key=lambda c: repr(keys[c]))] = np.arange(len(keys))
    part, first, last, n = bundle_runs(rank[codes], found.point, window)
    by_rank = [keys[c] for c in np.argsort(rank).tolist()]
    return [Bundle(by_rank[r], f, t, n) for r, f, t, n in
            zip(part.tolist(), first.tolist(), last.tolist(), n.tolist())]


def bundles_table(found: MatchBatch, window: float):
    """The bundles as a ``pyarrow.Table`` (partition, first, last, n_points)."""
    import pyarrow as pa

    rows = bundles(found, window)
    return pa.table({"partition": pa.array([b.partition for b in rows]),
                     "first": pa.array([b.first for b in rows], pa.float64()),
                     "last": pa.array([b.last for b in rows], pa.float64()),
                     "n_points": pa.array([b.n_points for b in rows], pa.int64())})


def best_per_point(found: MatchBatch) -> dict:
    """{(partition, point): (errors, start)}: least errors, then latest start."""
    _check_matches(found, "found")
    best: dict = {}
    for key, point, err, start in zip(found.partition, found.point, found.errors, found.start):
        cand = (int(err), -float(start))
        slot = (key, float(point))
        if slot not in best or cand < best[slot]:
            best[slot] = cand
    return {slot: (e, -s) for slot, (e, s) in best.items()}


def _check_matches(found, name: str) -> None:
    check.instance(found, name, MatchBatch, "an acep.MatchBatch",
                   " (what Matcher.match_batch, flush and match return)")


def match(pattern: str, events, window: float, k: int = 0, **options) -> MatchBatch:
    """Match a pattern over a whole stream at once: ``Matcher(...).match(events)``.

    Parameters
    ----------
    pattern : str
        The pattern (docs/CLI.md, Pattern language).
    events : EventBatch or iterable
        An event batch, an iterable of batches (such as :func:`acep.read_events` gives) or
        a list of event dicts with ``type`` and ``t``.
    window : float
        The window, in tag units.
    k : int
        The error bound.
    **options
        The other arguments of :class:`Matcher` (``where``, ``partition``, ...).

    Returns
    -------
    MatchBatch
        The matches: numpy columns and trajectories; ``to_matches()`` gives objects.

    Examples
    --------
    >>> from acep import match
    >>> found = match("a b c", [{"type": "a", "t": 1}, {"type": "b", "t": 2},
    ...                         {"type": "c", "t": 3}], window=5, k=1)
    >>> len(found), found.to_matches()[-1].errors
    (2, 0)
    """
    return Matcher(pattern, window, k, **options).match(events)


def _number(value) -> float:
    """``float(value)``, or NaN when it is not a number (a missing value is NaN too)."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return float("nan")


def _no_key(key) -> bool:
    """A partition value that keys no partition: missing, or infinite (which JSON, the
    wire and the collector's database cannot carry as a key)."""
    return key is None or (isinstance(key, float) and not np.isfinite(key))


def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and np.isnan(value))
