"""How a sketch sheds on events of one's own: the history policy against the baselines,
budget by budget (``acep history evaluate``, docs/SHEDDING.md section 11).

The ground truth is the unconstrained run on the same events ([L16] Algorithm 1 without a
budget): its match points and its bundles (Definition 3). Each (budget, policy) row runs the
events from an empty matcher under ``Budget(ratio * ops_per_event, burst)`` and scores what
it found; the measures are in docs/SHEDDING.md section 11.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np

from acep import EventBatch, MatchBatch, Matcher
from acep.shedding import Budget, check_buckets

from .build import traced_run
from .fit import SKETCH_PARTITION, _BundleTruth, _run, matcher_args
from .graph import _key_id
from .inspection import partition_text
from .policies import GRAPH_POLICIES, POLICY_NAMES, policy_options
from .sketch import Sketch

__all__ = ["evaluate", "graph_mismatch", "POLICIES", "DEFAULT_POLICIES", "format_header",
           "format_row"]

POLICIES = POLICY_NAMES
DEFAULT_POLICIES = ("keep-first", "random", "oldest-first", "history", "history+rl")


def evaluate(sketch: Sketch, events: EventBatch, ratios: Sequence[float], *,
             partition=SKETCH_PARTITION, burst: float = 64.0,
             policies: Sequence[str] | None = None, graph=None, seed: int = 0,
             on_row: Callable[[dict, dict], None] | None = None) -> dict:
    """Bundle recall and cost of each policy at each budget ratio on ``events``.

    ``ratios``: budgets as fractions of the unconstrained run's operations per event on
    ``events``; ``partition``: the partition column (by default the one the sketch
    records; one that differs from it is refused);
    ``burst``: the devices' bucket depth in events; ``policies``: names from
    :data:`POLICIES` (None: :data:`DEFAULT_POLICIES`, and the rows of the history graph,
    ``completion``, ``pspice``, ``hspice`` and ``hybrid``, too when ``graph`` is given;
    ``history`` is the sketch with learning off, ``history+rl`` with the online update at
    the history package's defaults, ``completion`` the pSPICE-style completion model of the
    history ``graph`` the sketch was made from, ``pspice``, ``hspice`` and ``hybrid`` the
    field's shedders learned from it (:mod:`history.spice`), ``hindsight`` the offline
    reference that knows the
    unconstrained run's node log: a Python call per shedding event).
    ``on_row(row, truth)`` is called with each row as it is done and the ground truth's
    summary. A budget whose bucket cannot hold one operation is refused after the ground
    truth, before any row (``acep.shedding.BudgetError``). Returns ``{"truth": summary,
    "rows": [row, ...]}``, the rows in budget order, then policy order.
    """
    if policies is None:
        policies = [p for p in POLICIES if p in DEFAULT_POLICIES
                    or (p in GRAPH_POLICIES and graph is not None)]
    ratios = _checked(ratios, policies, burst)
    needing = [p for p in policies if p in GRAPH_POLICIES]
    if needing and graph is None:
        raise ValueError(f"the {' and '.join(needing)} "
                         f"polic{'ies need' if len(needing) > 1 else 'y needs'} the history "
                         "graph the sketch was made from")
    if graph is not None:
        _check_graph(sketch, graph)
    if len(events) == 0:
        raise ValueError("no events to evaluate on")
    args = matcher_args(sketch, partition)
    started = time.perf_counter()
    matches, stats, hindsight = _truth_run(args, events, "hindsight" in policies)
    seconds = time.perf_counter() - started
    known = {"sketch": sketch, "graph": graph, "hindsight": hindsight}
    truth = _BundleTruth(matches, sketch.window, stats["candidates"])
    points = _points(matches)
    ops_per_event = truth.candidates / len(events)
    summary = {"events": len(events), "ops_per_event": ops_per_event, "bundles": truth.n,
               "match_points": len(points), "us_per_event": 1e6 * seconds / len(events),
               "partition": args["partition"], "sketch_ops_per_event": sketch.ops_per_event,
               "fitted_ratios": [float(r) for r in sketch.fitted_ratios]}
    if not ops_per_event > 0:
        raise ValueError(f"the pattern {sketch.pattern!r} makes no operations on these "
                         "events: there is nothing to shed")
    check_buckets(ratios, ops_per_event, burst)
    rows = []
    for ratio in ratios:
        budget = Budget(ratio * ops_per_event, burst)
        for name in policies:
            row = _row(name, ratio, budget, args, events, known, truth, points, seed)
            rows.append(row)
            if on_row is not None:
                on_row(row, summary)
    return {"truth": summary, "rows": rows}


def _check_graph(sketch: Sketch, graph) -> None:
    why = graph_mismatch(sketch, graph)
    if why is not None:
        raise ValueError(f"the history graph does not go with the sketch: {why}")


def graph_mismatch(sketch: Sketch, graph) -> str | None:
    """What differs between the history ``graph`` and ``sketch`` (None: nothing), as
    ``name graph's (the sketch's: sketch's)``: the completion model would rate other cells
    (or other runs) than the ones the matcher makes."""
    pairs = {"pattern": (graph.pattern, sketch.pattern),
             "window": (float(graph.window), float(sketch.window)), "k": (graph.k, sketch.k),
             "where": (list(graph.where), list(sketch.where))}
    if graph.partition_recorded and sketch.partition_recorded:
        pairs["partition"] = (graph.partition_by, sketch.partition_by)
    differ = [f"{name} {theirs!r} (the sketch's: {ours!r})"
              for name, (theirs, ours) in pairs.items() if theirs != ours]
    if not differ and (graph.n_states, tuple(graph.rem_edges), tuple(graph.gap_edges)) != (
            sketch.n_states, tuple(sketch.rem_edges), tuple(sketch.gap_edges)):
        differ.append("the match-vector bins (another --bins, or another history of the same "
                      "pattern)")
    return ", ".join(differ) or None


def _checked(ratios: Sequence[float], policies: Sequence[str], burst: float) -> list[float]:
    ratios = [float(r) for r in ratios]
    if not ratios or not all(np.isfinite(r) and r > 0 for r in ratios):
        raise ValueError(f"budget ratios must be positive numbers, got {ratios!r}")
    unknown = [p for p in policies if p not in POLICIES]
    if unknown or not policies:
        raise ValueError(f"unknown policies {unknown!r}: choose from {', '.join(POLICIES)}")
    if not (np.isfinite(burst) and burst >= 1):
        raise ValueError(f"burst must be at least one event, got {burst!r}")
    return ratios


def _truth_run(args: dict, events: EventBatch, traced: bool):
    """The unconstrained run: (matches, stats, what hindsight knows or None)."""
    if not traced:
        return (*_run(args, events), None)
    run = traced_run(args["pattern"], events, args["window"], args["k"], where=args["where"],
                     partition=args["partition"], fields=None, keep_matches=True)
    return run.matches, run.stats, {"log": run.log, "matches": {"partition": run.partition,
                                                                "point": run.point}}


def _row(name, ratio, budget, args, events, known, truth, points, seed) -> dict:
    sketch = known["sketch"]
    matcher = Matcher(**args, budget=budget, **policy_options(
        name, sketch=sketch, graph=known["graph"], hindsight=known["hindsight"], budget=budget,
        seed=seed))
    started = time.perf_counter()
    found = MatchBatch.concat([matcher.match_batch(events), matcher.flush()])
    seconds = time.perf_counter() - started
    got = _points(found)
    right = len(got & points)
    bundles = truth.found(found) if len(found) else 0
    s, n = matcher.stats, len(events)
    return {"policy": name, "ratio": ratio, "budget_ops_per_event": budget.ops_per_event,
            "bundle_recall": bundles / truth.n if truth.n else 1.0,
            "point_recall": right / len(points) if points else 1.0,
            "precision": right / len(got) if got else None,
            "ops_spent_per_event": (s["candidates"] - s["shed"]) / n, "shed": int(s["shed"]),
            "decide_ns_per_event": s["decide_ns"] / n, "us_per_event": 1e6 * seconds / n,
            "fitted_ratio": sketch.fitted_ratio(budget.ops_per_event)
            if name.startswith("history") else None}


def _points(matches) -> set:
    return set(zip(map(_key_id, matches.partition.tolist()), matches.point.tolist()))


def format_header(truth: dict) -> list[str]:
    """The ground truth's line and the column names of :func:`format_row`."""
    return [f"# {truth['events']:,} events: {truth['match_points']:,} match points in "
            f"{truth['bundles']:,} bundles, {truth['ops_per_event']:.4g} operations per event "
            f"without a budget; {partition_text(truth.get('partition'))}",
            f"{'budget':>7}  {'policy':<13}{'bundles':>8}{'points':>8}{'precision':>10}"
            f"{'ops/event':>11}{'shed':>11}{'decide ns/ev':>13}{'wall us/ev':>11}  reserves"]


def format_row(row: dict) -> str:
    """One (budget, policy) row: recalls and precision in %, operations spent per event,
    operations shed, time deciding and wall time per event, and which reserves a history
    policy used."""
    reserves = ""
    precision = "n/a" if row["precision"] is None else f"{100 * row['precision']:.1f}%"
    if row["fitted_ratio"] is not None:
        reserves = f"fitted at {row['fitted_ratio']:g}"
    elif row["policy"].startswith("history"):
        reserves = "the sketch's scores"
    return (f"{100 * row['ratio']:>6.4g}%  {row['policy']:<13}"
            f"{100 * row['bundle_recall']:>7.1f}%{100 * row['point_recall']:>7.1f}%"
            f"{precision:>10}{row['ops_spent_per_event']:>11.4g}"
            f"{row['shed']:>11,}{row['decide_ns_per_event']:>13.0f}{row['us_per_event']:>11.3g}"
            f"  {reserves}").rstrip()
