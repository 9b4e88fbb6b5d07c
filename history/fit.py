"""Fit a sketch's reserves to a budget on the training stream (docs/SHEDDING.md section 10).

A sketch's scores are success rates of an unconstrained run ([L16] Definition 4). Under
shedding a cell is worth something else, and how much depends on the budget. So, for each
budget ratio, :func:`fit_streams` measures the rates under that budget, makes four
candidate tables, replays the training streams with each and keeps the best (with
``search``, tuned by coordinate search), then the cover slack that finds the most with
that table. Each step is a task over one device's stream
(:class:`FitStream`) whose counts add up: :func:`fit_budgets` runs them in this process,
``acep train --fit`` in Spark's executors. The steps are docs/SHEDDING.md section 10.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial

import numpy as np

from acep import EventBatch, MatchBatch, Matcher
from acep.pattern import partition_attribute
from acep.shedding import Budget, check_buckets
from acep.windows import match_windows

from .build import build_history
from .graph import _key_id, _plain, bundle_index, compute_bundles
from .policies import HistoryPolicy
from .sketch import Sketch, cell_scores

__all__ = ["fit_budgets", "fit_streams", "FitStream", "describe", "matcher_args", "windows_task",
           "SKETCH_PARTITION", "CANDIDATES", "SEARCH_VALUES", "SEARCH_STARTS", "SLACK_VALUES"]

CANDIDATES = ("history", "measured", "order", "windows")
SEARCH_VALUES = (0.0, 0.3, 0.7, 1.0)  # a cell's reserve is (1 - value)^2 of the seed reserve
SEARCH_STARTS = 2  # the search tunes the best this many candidate tables, keeps the best result
SLACK_VALUES = (0.0, 0.5, 1.0)  # cover slacks (in windows) tried beside the sketch's default
CHUNK = 1 << 16

Task = Callable[["FitStream"], dict]
MapStreams = Callable[[list[Task]], list[list[dict]]]


class _SketchPartition:
    def __repr__(self) -> str:
        return "SKETCH_PARTITION"


SKETCH_PARTITION = _SketchPartition()  # the default partition: the one the sketch records


def fit_budgets(sketch: Sketch, events: EventBatch, ratios: Sequence[float], *,
                partition=SKETCH_PARTITION, burst: float = 1024.0, min_visits: int = 50,
                search: int = 0, seed: int = 0) -> tuple[Sketch, dict]:
    """Fit the sketch's reserves to each budget by replaying the training stream.

    For each budget the fit tries four reserve tables on the training stream and keeps the
    one that finds the most bundles, then the cover slack that finds the most with it
    (docs/SHEDDING.md 10). A device then picks the table and slack fitted nearest its own
    budget.

    Parameters
    ----------
    sketch : history.Sketch
        The sketch to fit.
    events : acep.events.EventBatch
        The training stream of one device: the one the sketch's history was built from, or
        any stream of the same kind.
    ratios : sequence of float
        The budgets, as fractions of the stream's unconstrained operations per event.
    partition : str, optional
        The stream's partition column. By default the one the sketch records; another is
        refused.
    burst : float
        The bucket depth the devices run with, in events (default 1024).
    min_visits : int
        Visits a cell needs before its rate measured under shedding is used (default 50).
    search : int
        Cells per budget tuned by coordinate search (default 0: none).
    seed : int
        Seed of the policy's random choices during the replays (default 0).

    Returns
    -------
    sketch : history.Sketch
        The sketch with a fitted table per ratio.
    report : dict
        ``"ratios"`` maps each ratio to ``{"chosen": name, "bundle_recall": {name:
        recall}, "slack": {"chosen": slack, "bundle_recall": {slack: recall}}}`` (with
        ``search``, also ``"searched"``: the recall after the search and the cells it
        changed); ``"ops_per_event"`` and ``"bundles"`` are the training stream's.

    Examples
    --------
    >>> from acep.demo import DEMO, demo_events
    >>> from history import Sketch, build_history, fit_budgets
    >>> events = demo_events()
    >>> graph = build_history(DEMO["pattern"], events, DEMO["window"], DEMO["k"],
    ...                       where=DEMO["where"], partition="origin")
    >>> fitted, report = fit_budgets(Sketch.from_graph(graph), events, [0.1])
    >>> fitted.fitted_ratios.tolist()
    [0.1]
    >>> report["bundles"], report["ratios"][0.1]["chosen"]
    (215, 'history')
    """
    stream = FitStream(events)
    return fit_streams(sketch, ratios, lambda tasks: [[task(stream)] for task in tasks],
                       matcher_args(sketch, partition), burst=burst, min_visits=min_visits,
                       search=search, seed=seed)


def matcher_args(sketch: Sketch, partition=SKETCH_PARTITION) -> dict:
    """The unconstrained matcher of the sketch's pattern, as keyword arguments.

    ``partition``: the attribute to partition by; by default the one the sketch records
    (none for a sketch that records none). One that differs from what the sketch records
    raises ``ValueError``: its scores are rates per partition of the history's kind."""
    if partition is SKETCH_PARTITION:
        partition = sketch.partition_by
    else:
        resolved = partition_attribute(sketch.where, partition)
        problem = sketch.mismatch(sketch.pattern, sketch.k, sketch.window, sketch.where,
                                  resolved)
        if problem is not None:
            raise ValueError(f"the sketch does not fit partition {partition!r}: {problem}")
        partition = resolved
    return {"pattern": sketch.pattern, "window": sketch.window, "k": sketch.k,
            "where": list(sketch.where), "partition": partition}


def fit_streams(sketch: Sketch, ratios: Sequence[float], map_streams: MapStreams,
                args: dict, *, burst: float = 1024.0, min_visits: int = 50,
                search: int = 0, seed: int = 0) -> tuple[Sketch, dict]:
    """:func:`fit_budgets` over several streams, one bucket each.

    ``map_streams(tasks)`` applies each task to the :class:`FitStream` of every training
    stream and returns, per task, the results (in any order); the tasks of one call are
    independent (one per budget), so it may run them side by side. ``args``: the
    ``acep.Matcher`` keyword arguments of the unconstrained run (pattern, window, k, where,
    partition, and e.g. ``on_bad_event``). The budget ratio is of the operations per event
    of all streams together, the recall of all their bundles together. A budget whose
    bucket cannot hold one operation is refused (``acep.shedding.BudgetError``).
    """
    ratios = [float(r) for r in ratios]
    if not all(np.isfinite(r) and r > 0 for r in ratios):
        raise ValueError(f"budget ratios must be positive numbers, got {ratios!r}")
    if min_visits < 1:
        raise ValueError(f"min_visits must be >= 1, got {min_visits!r}")
    if search < 0:
        raise ValueError(f"search must be >= 0 cells, got {search!r}")
    counted = _sum(map_streams([partial(count_task, args, sketch)])[0])
    ops_per_event = counted["candidates"] / max(counted["events"], 1)
    if not ops_per_event > 0:
        raise ValueError("the training stream has no operations to fit a budget to")
    check_buckets(ratios, ops_per_event, burst)  # a table fit to keep nothing: refuse it now
    budgets = [Budget(r * ops_per_event, burst) for r in ratios]
    plain = replace(sketch, ops_per_event=0.0, fitted_ratios=None, fitted=None,
                    fitted_slack=None)
    measured = [_sum(r) for r in map_streams(
        [partial(measure_task, args, plain, b, seed) for b in budgets])]
    windows = cell_scores(counted["window_visits"], counted["window_successes"])
    tables = [candidate_tables(plain.score, m["visits"], m["successes"], min_visits, windows)
              for m in measured]
    replayed = [_sum(r) for r in map_streams(
        [partial(replay_task, args, plain, b, [t[name] for name in CANDIDATES[1:]], seed)
         for b, t in zip(budgets, tables)])]
    found = np.array([[m["found"], *r["found"]] for m, r in zip(measured, replayed)])
    n = int(counted["bundles"])
    report = {"ops_per_event": ops_per_event, "bundles": n, "streams": int(counted["streams"]),
              "ratios": {}}
    ranked = [sorted(CANDIDATES, key=lambda c: (-row[CANDIDATES.index(c)], CANDIDATES.index(c)))
              for row in found]
    best = [tables[i][names[0]].copy() for i, names in enumerate(ranked)]
    for i, ratio in enumerate(ratios):
        recall = {name: float(found[i, j]) / max(n, 1) for j, name in enumerate(CANDIDATES)}
        report["ratios"][ratio] = {"chosen": ranked[i][0], "bundle_recall": recall}
    best_found = [int(row[CANDIDATES.index(names[0])]) for row, names in zip(found, ranked)]
    if search:
        searched = _search_from_starts(
            tables, ranked, found, n, [m["visits"] for m in measured], search,
            lambda tasks: [_sum(r) for r in map_streams(tasks)],
            partial(replay_task, args, plain), budgets, seed)
        for i, ratio in enumerate(ratios):
            best[i], report["ratios"][ratio]["searched"] = searched[i]
            best_found[i] = searched[i][1]["found"]
    slacks = _fit_slack(plain, best, best_found, n, map_streams, args, budgets, seed)
    for i, ratio in enumerate(ratios):
        report["ratios"][ratio]["slack"] = slacks[i]
        sketch = sketch.with_fitted(ratio, best[i], ops_per_event, slacks[i]["chosen"])
    return sketch, report


def _fit_slack(plain: Sketch, tables: list[np.ndarray], found: list[int], n: int,
               map_streams: MapStreams, args: dict, budgets: list[Budget], seed: int
               ) -> list[dict]:
    """Step 5: per budget, the cover slack that finds the most training bundles with that
    budget's table: the sketch's default (its ``found``), or one of :data:`SLACK_VALUES`
    when it finds strictly more. A table that finds every bundle keeps the default."""
    default = plain.default_cover_slack
    trials = [v for v in SLACK_VALUES if not np.isclose(v, default)]
    missing = [i for i, f in enumerate(found) if f < n]
    tasks = [partial(slack_task, args, plain, budgets[i], tables[i], trials, seed)
             for i in missing]
    results = map_streams(tasks) if tasks else []
    replayed = {i: _sum(r)["found"] for i, r in zip(missing, results)}
    out = []
    for i, base in enumerate(found):
        more = replayed.get(i, ())
        counts = {default: int(base), **{v: int(c) for v, c in zip(trials, more)}}
        chosen = max(counts, key=lambda v: (counts[v], v == default))
        out.append({"chosen": float(chosen),
                    "bundle_recall": {f"{v:g}": c / max(n, 1) for v, c in counts.items()}})
    return out


def describe(report: dict) -> list[str]:
    """One line per fitted ratio: the table shipped (the start of the winning search, or step
    3's choice without one) and the training recall of each candidate."""
    lines = []
    for ratio, row in report["ratios"].items():
        found = ", ".join(f"{n} {100 * r:.1f}%" for n, r in row["bundle_recall"].items())
        searched, after = row.get("searched"), ""
        shipped = searched["from"] if searched else row["chosen"]
        if searched and row["bundle_recall"][row["chosen"]] >= 1.0:
            after = "; nothing to search"
        elif searched:
            after = (f"; the search moved {searched['changed']} of {searched['cells']} cells of "
                     f"the {searched['from']} table: {100 * searched['bundle_recall']:.1f}%")
        lines.append(f"budget {ratio:g} x {report['ops_per_event']:.3f} ops/event: "
                     f"{shipped} reserves (training bundle recall {found}{after}){_slack(row)}")
    return lines


def _slack(row: dict) -> str:
    slack = row.get("slack")
    if slack is None:
        return ""
    tried = ", ".join(f"{v} {100 * r:.1f}%" for v, r in slack["bundle_recall"].items())
    return f"; cover slack {slack['chosen']:g} (tried {tried})"


def _search_from_starts(tables: list[dict], ranked: list[list[str]], found: np.ndarray, n: int,
                        visits: list[np.ndarray], cells: int, replay, task, budgets, seed
                        ) -> list[tuple[np.ndarray, dict]]:
    """Step 4 from each ratio's ``SEARCH_STARTS`` best distinct candidate tables (``ranked``:
    the candidates, best first): per ratio, the table that ends highest (ties: the better
    start) and its report, which names the start."""
    lanes = []  # (ratio index, candidate name)
    for i, names in enumerate(ranked):
        for j, name in enumerate(names[:SEARCH_STARTS]):
            if not any(np.array_equal(tables[i][name], tables[i][d]) for d in names[:j]):
                lanes.append((i, name))
    lane_tables = [tables[i][name].copy() for i, name in lanes]
    done = _search(lane_tables, [found[i, CANDIDATES.index(c)] for i, c in lanes], n,
                   [visits[i] for i, _ in lanes], cells, replay, task,
                   [budgets[i] for i, _ in lanes], seed)
    out = []
    for i in range(len(ranked)):
        won = max((j for j, (r, _) in enumerate(lanes) if r == i),
                  key=lambda j: (done[j]["bundle_recall"], -j))
        out.append((lane_tables[won], {**done[won], "from": lanes[won][1]}))
    return out


def _search(tables: list[np.ndarray], found: np.ndarray, n: int, visits: list[np.ndarray],
            cells: int, replay: Callable[[list[Task]], list[dict]], task, budgets, seed
            ) -> list[dict]:
    """Step 4 on every ratio at once: round ``j`` tries the values of each ratio's ``j``-th
    most visited cell (one task per ratio), and keeps a value only if it finds more."""
    found = [int(f) for f in found]
    order = [np.argsort(-v, kind="stable")[:cells] for v in visits]
    order = [o[v[o] > 0] for o, v in zip(order, visits)]
    changed = [0] * len(tables)
    for j in range(cells):
        live = [i for i in range(len(tables)) if found[i] < n and j < len(order[i])]
        if not live:
            break
        trials = {}
        for i in live:
            cell = order[i][j]
            values = [v for v in SEARCH_VALUES if not np.isclose(v, tables[i][cell])]
            trials[i] = (cell, values, [_with(tables[i], cell, v) for v in values])
        results = replay([partial(task, budgets[i], trials[i][2], seed) for i in live])
        for i, result in zip(live, results):
            k = int(np.argmax(result["found"]))
            if result["found"][k] > found[i]:
                cell, values, _ = trials[i]
                tables[i][cell], found[i] = values[k], int(result["found"][k])
                changed[i] += 1
    return [{"cells": int(len(o)), "changed": c, "bundle_recall": f / max(n, 1), "found": f}
            for o, c, f in zip(order, changed, found)]


def _with(table: np.ndarray, cell: int, value: float) -> np.ndarray:
    out = table.copy()
    out[cell] = value
    return out


# --------------------------------------------------------------------------- tasks


class FitStream:
    """One device's training stream; its unconstrained run is made once and kept.

    ``truth``: the :meth:`truth_state` of the same stream made elsewhere (a Spark trainer
    ships it between its jobs rather than run the stream unconstrained in each)."""

    def __init__(self, events: EventBatch, truth: dict | None = None):
        self.events = events
        self._truth = None if truth is None else _BundleTruth.from_state(truth)
        self._matches = None

    def truth(self, args: dict) -> _BundleTruth:
        """The bundles of the unconstrained run and its operations."""
        if self._truth is None:
            self._matches, stats = _run(args, self.events)
            self._truth = _BundleTruth(self._matches, args["window"], stats["candidates"])
        return self._truth

    def match_windows(self, args: dict) -> EventBatch:
        """The events of the unconstrained run's match windows (``acep.windows``); asked
        once per fit, so the run's matches are let go."""
        matches = self._matches if self._matches is not None else _run(args, self.events)[0]
        self._matches = None
        keys = [_plain(k) for k in matches.partition.tolist()]
        return match_windows(self.events, keys, matches.point, args["window"],
                             partition_attribute(args["where"], args["partition"]))

    def truth_state(self) -> dict | None:
        """The unconstrained run's outcome as plain values (None: not run here)."""
        return None if self._truth is None else self._truth.state()


def count_task(args: dict, sketch: Sketch, stream: FitStream) -> dict:
    """Events, unconstrained operations and bundles of one stream, and the cells' visits
    and successes on its match windows (:func:`windows_task`, cut from the same run)."""
    truth = stream.truth(args)
    windows = windows_task(args, sketch, stream)
    return {"streams": 1, "events": len(stream.events), "candidates": truth.candidates,
            "bundles": truth.n, "window_visits": windows["visits"],
            "window_successes": windows["successes"]}


def windows_task(args: dict, sketch: Sketch, stream: FitStream) -> dict:
    """Step 2's ``windows`` counts for one stream: each cell's visits and successes in the
    unconstrained run (the history's rule, the sketch's cells) over the stream's match
    windows alone."""
    events = stream.match_windows(args)
    if not len(events):
        return {"visits": np.zeros(sketch.n_cells, np.int64),
                "successes": np.zeros(sketch.n_cells, np.int64)}
    skip = [] if args.get("on_bad_event") == "skip" else None
    graph = build_history(args["pattern"], events, args["window"], args["k"],
                          where=args["where"], partition=args["partition"], bins=sketch.bins(),
                          bad_events=skip)
    return {"visits": np.asarray(graph.visits, np.int64),
            "successes": np.asarray(graph.successes, np.int64)}


def measure_task(args: dict, sketch: Sketch, budget: Budget, seed: int,
                 stream: FitStream) -> dict:
    """Step 1 for one stream and budget: each cell's visits and successes under the plain
    history policy, and the bundles that policy found."""
    truth = stream.truth(args)
    visits = np.zeros(sketch.n_cells, dtype=np.int64)
    successes = np.zeros_like(visits)

    def count(log):
        settled = ~((log["merged"] != 0) & np.isnan(log["reach"]))  # merged: censored
        cell, reached = log["cell"][settled], ~np.isnan(log["reach"][settled])
        visits[:] += np.bincount(cell, minlength=sketch.n_cells)
        successes[:] += np.bincount(cell[reached], minlength=sketch.n_cells)

    matches, _ = _run(args, stream.events, budget, seed, sketch, on_chunk=count)
    return {"visits": visits, "successes": successes, "found": truth.found(matches)}


def replay_task(args: dict, sketch: Sketch, budget: Budget, trials: list[np.ndarray],
                seed: int, stream: FitStream) -> dict:
    """Step 3 for one stream and budget: the bundles found with each trial table."""
    return {"found": np.array([_found_with(args, sketch, budget, table, None, seed, stream)
                               for table in trials], dtype=np.int64)}


def slack_task(args: dict, sketch: Sketch, budget: Budget, table: np.ndarray,
               slacks: list[float], seed: int, stream: FitStream) -> dict:
    """Step 5 for one stream and budget: the bundles found with ``table`` and each slack."""
    return {"found": np.array([_found_with(args, sketch, budget, table, slack, seed, stream)
                               for slack in slacks], dtype=np.int64)}


def _found_with(args: dict, sketch: Sketch, budget: Budget, table: np.ndarray,
                slack: float | None, seed: int, stream: FitStream) -> int:
    """The stream's bundles the static policy finds with ``table`` and ``slack`` fitted."""
    ops = sketch.ops_per_event or 1.0  # the fitted ratio is relative: any positive scale
    trial = sketch.with_fitted(budget.ops_per_event / ops, table, ops, slack)
    return stream.truth(args).found(_run(args, stream.events, budget, seed, trial)[0])


def candidate_tables(score: np.ndarray, visits: np.ndarray, successes: np.ndarray,
                     min_visits: int, windows: np.ndarray) -> dict[str, np.ndarray]:
    """The candidate reserve tables of one budget (module docstring, step 2); ``windows``:
    the cells' scores on the match windows (:func:`windows_task`)."""
    base = np.asarray(score, dtype=np.float64)
    seen = np.flatnonzero(visits >= min_visits)
    measured, order = base.copy(), base.copy()
    rate = successes[seen] / visits[seen]
    measured[seen] = rate
    order[seen[np.argsort(rate, kind="stable")]] = np.sort(base[seen])
    return {"history": base, "measured": measured, "order": order,
            "windows": np.asarray(windows, dtype=np.float64)}


def _sum(results: list[dict]) -> dict:
    if not results:
        raise ValueError("no training stream to fit on")
    total = dict(results[0])
    for r in results[1:]:
        for name, value in r.items():
            total[name] = total[name] + value
    return total


def _run(args: dict, events: EventBatch, budget: Budget | None = None, seed: int = 0,
         sketch: Sketch | None = None, on_chunk=None):
    """One pass over ``events`` (unconstrained, or the static history policy at ``budget``)."""
    options = {}
    if sketch is not None:
        policy = HistoryPolicy(sketch, learning_rate=0.0, explore=0.0, seed=seed,
                               budget=budget)
        options = {"budget": budget, "policy": policy, "bins": policy.bins,
                   "trace": on_chunk is not None}
    m = Matcher(**args, **options)
    found = []
    for i in range(0, len(events), CHUNK):
        found.append(m.match_batch(events.slice(i, min(i + CHUNK, len(events)))))
        if on_chunk is not None:
            on_chunk(m.take_node_log())
    found.append(m.flush())
    if on_chunk is not None:
        on_chunk(m.take_node_log())
    return MatchBatch.concat(found), dict(m.stats)


class _BundleTruth:
    """The bundles of an unconstrained run, to count those another run found."""

    def __init__(self, matches, window: float, candidates: int):
        self.keys: dict = {}
        part = np.array([self.keys.setdefault(_key_id(k), len(self.keys))
                         for k in matches.partition.tolist()], dtype=np.int64)
        self.bundles = compute_bundles(part, matches.point, window)
        self.n = len(self.bundles["partition"])
        self.candidates = int(candidates)

    def state(self) -> dict:
        b = self.bundles
        return {"keys": [list(k) for k in self.keys], "candidates": self.candidates,
                "partition": b["partition"].tolist(), "first": b["first"].tolist(),
                "last": b["last"].tolist()}

    @classmethod
    def from_state(cls, state: dict) -> _BundleTruth:
        truth = cls.__new__(cls)
        truth.keys = {tuple(k): i for i, k in enumerate(state["keys"])}
        truth.bundles = {"partition": np.asarray(state["partition"], np.int32),
                         "first": np.asarray(state["first"], np.float64),
                         "last": np.asarray(state["last"], np.float64)}
        truth.n = len(truth.bundles["partition"])
        truth.candidates = int(state["candidates"])
        return truth

    def found(self, matches) -> int:
        part = np.array([self.keys.get(_key_id(k), -1) for k in matches.partition.tolist()],
                        dtype=np.int64)
        ok = part >= 0
        b = self.bundles
        idx = bundle_index(b["partition"], b["first"], b["last"], part[ok],
                           np.asarray(matches.point, dtype=np.float64)[ok])
        return len(np.unique(idx[idx >= 0]))
