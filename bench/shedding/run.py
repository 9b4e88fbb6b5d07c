"""Shedding benchmark: bundle recall under a budget of operations, policy by policy.

Run ``python -m bench.shedding [--data PATH] [--quick] [--out DIR] [--jobs N]``. Per workload
(``bench/shedding/workloads.py``) it

1. runs the unconstrained matcher on the test stream: the ground truth (match points,
   bundles, operations = candidate match nodes, ops per event, bundles per partition-day);
2. builds the history of the training stream (``history.build_history``) and its sketch,
   and fits the sketch's reserves to every budget on the training stream (``history.fit``,
   tuning ``--search`` cells per budget; ``--no-fit``: the plain sketch), and the same of
   the test stream itself (the reference row ``policies.TEST_HISTORY``);
3. runs every policy (``bench/shedding/policies.py``) at budgets of 5%..100% of the ground
   truth's ops per event (``Budget(f * ops_per_event, burst=BURST)``) and scores the matches:
   bundle recall, match-point recall, precision, ops spent, shed, time deciding, wall time,
   and bundle recall per time slice (the drift figure);
4. checks the issue's targets with pass/fail.

The hindsight policy calls Python on every shedding event, so it runs on a prefix of the
test stream; every other row is also scored on that prefix to compare with it.
Figures go to ``shedding.json``, ``shedding.png`` and ``drift.png``.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

from acep.arguments import bins_type, whole_number
from acep.events import EventBatch
from acep.shedding import MAX_BINS, Budget
from history.policies import EXPLORE, LEARNING_RATE

from ..common import bench_parser, machine, publish, ready
from . import policies
from .bound import min_trajectory_nodes, recall_bound, stream_lp_bound
from .measure import (
    DAY,
    ground_truth,
    planted_bundles,
    recall_over_time,
    run_matcher,
    score,
    shed_stats,
    split_recall,
)
from .workloads import (
    DRIFT_WORKLOAD,
    PLANTED,
    WORKLOADS,
    Workload,
    flights_split,
    rebase,
    synthetic_split,
)

RESULTS = Path(__file__).with_name("results")
FRACTIONS = (0.05, 0.10, 0.25, 0.50, 0.75, 1.00)
BURST = 1024.0  # a device queue of about a window of sensor events
BURSTS = (64.0, 1024.0, 16384.0, 262144.0)  # the burst sensitivity part
BURST_WORKLOAD = "delay-wave"
BURST_POLICIES = ("oldest-first", "history+rl")
SKETCH_TARGET = 256 * 1024
LP_PAIRS = 300_000  # test-stream programmes solved up to this size (bound.py: minutes, not hours)
CEILING_SHARE = 0.75  # history+rl against the ceiling, at every budget from 10%
FULL = {"flights_days": None, "synthetic_duration": 10_000.0, "hindsight_days": 7.0,
        "hindsight_units": 1000.0, "calibration_events": 200_000, "slices": 20}
QUICK = {"flights_days": 2.0, "synthetic_duration": 300.0, "hindsight_days": None,
         "hindsight_units": None, "calibration_events": 5_000, "slices": 6}
SEED = 2016
N_BINS = 8  # time bins per dimension: history.build_history's default
SEARCH = 32  # cells per budget the fit tunes by coordinate search (history.fit, step 4)
MAX_DEFER = 1024
JOBS = 2

_STATE: dict = {}  # per workload, set before the worker pools fork


# --------------------------------------------------------------------------- preparation

def selected(args) -> list[Workload]:
    """The workloads ``--workloads`` names (all by default), in the benchmark's order."""
    names = getattr(args, "workloads", None)
    if names is None:
        return list(WORKLOADS)
    return [w for w in WORKLOADS if w.name in names]


def workload_names(text: str) -> list[str]:
    """An argparse type: ``--workloads``, a comma-separated list of known workloads."""
    wanted = [n.strip() for n in text.split(",") if n.strip()]
    known = [w.name for w in WORKLOADS]
    unknown = [n for n in wanted if n not in known]
    if unknown or not wanted:
        what = f"unknown workload(s) {', '.join(unknown)}" if unknown else "no workload named"
        raise argparse.ArgumentTypeError(f"{what}; known: {', '.join(known)}")
    return wanted


def streams(args, sizes: dict) -> dict[str, dict]:
    """Train/test streams of the selected workloads' stream kinds."""
    chosen = selected(args)
    out = {}
    if any(w.stream == "flights" for w in chosen):
        out["flights"] = flights_split(args.data, sizes["flights_days"] if args.quick else None)
    for w in chosen:
        if w.stream != "flights":
            out[w.name] = synthetic_split(w, sizes["synthetic_duration"], SEED)
    return out


def split_of(w: Workload, all_streams: dict) -> dict:
    return all_streams["flights" if w.stream == "flights" else w.name]


def prepare(name: str) -> dict:
    """Ground truth, history, sketch, hindsight log and sampling rates of one workload."""
    st = _STATE[name]
    w, test, train, sizes = st["workload"], st["test"], st["train"], st["sizes"]
    truth = ground_truth(w, test)
    out = {"truth": truth, "prefix": hindsight_prefix(w, test, sizes)}
    out["bound"] = bounds(w, test, truth, out["prefix"])
    out["sampling_rates"], out["calibration"] = sampling_rates(w, train, sizes)
    options = (st.get("n_bins", N_BINS), st.get("fit", True), st.get("search", SEARCH))
    out.update(build(w, train, *options))
    if st.get("retrain") is not None:
        out["retrained"] = build(w, st["retrain"], *options)
    out["test_history"] = build(w, test, *options)
    out["hindsight"] = hindsight_log(w, out["prefix"])
    out["planted"] = planted_bundles(truth, test, w.partition, PLANTED)
    return out


def bounds(w: Workload, test: EventBatch, truth, prefix: EventBatch) -> dict:
    """Per budget, the upper bounds on bundle recall of any policy (``bound.py``), on the
    test stream and on the hindsight prefix: the runs' bound, and the bucket's linear
    programme (``lp_test``, ``lp_prefix``; None on a test stream of more than ``LP_PAIRS``
    (bundle, event) pairs, whose programme takes too long)."""
    from acep.matcher import Matcher

    pattern = Matcher(**w.matcher_args()).pattern
    nodes = min_trajectory_nodes(pattern.automaton, w.k)
    until = float(prefix.tags[-1]) if len(prefix) else -np.inf
    early = truth.bundle_last <= until
    budgets = [(f * truth.summary["ops_per_event"], f * truth.summary["ops_per_event"] * BURST)
               for f in FRACTIONS]
    whole = recall_bound(test.tags, truth.bundle_first, truth.bundle_last, w.window, budgets,
                         nodes)
    head = recall_bound(prefix.tags, truth.bundle_first[early], truth.bundle_last[early],
                        w.window, budgets, nodes)
    points = list(truth.point_bundle)
    inside = [p for p, b in truth.point_bundle.items() if truth.bundle_last[b] <= until]
    lp = {}
    for scope, events, keep in (("test", test, points), ("prefix", prefix, inside)):
        start = time.perf_counter()
        lp[scope] = stream_lp_bound(events, w.partition, pattern.types, [k for k, _ in keep],
                                    [t for _, t in keep], w.window, budgets, nodes,
                                    max_pairs=LP_PAIRS if scope == "test" else None)
        lp[f"{scope}_seconds"] = time.perf_counter() - start
    return {"min_trajectory_nodes": nodes, "lp_max_pairs": LP_PAIRS,
            "lp_seconds": {"test": lp["test_seconds"], "prefix": lp["prefix_seconds"]},
            **{str(f): {"test": x, "prefix": y, "lp_test": lp["test"][i],
                        "lp_prefix": lp["prefix"][i]}
               for i, (f, x, y) in enumerate(zip(FRACTIONS, whole, head))}}


def hindsight_prefix(w: Workload, test: EventBatch, sizes: dict) -> EventBatch:
    """The first days (flights) or time units (synthetic) of the test stream."""
    span = sizes["hindsight_days"] * DAY if test.tag_is_time and sizes["hindsight_days"] \
        else sizes["hindsight_units"]
    if span is None or len(test) == 0:
        return test
    end = int(np.searchsorted(test.tags, test.tags[0] + span, side="left"))
    return rebase(test, 0, end)


def build(w: Workload, train: EventBatch, n_bins: int = N_BINS, fit: bool = True,
          search: int = 0) -> dict:
    """The history of the training stream and its sketch, with sizes and errors.

    ``n_bins``: quantile bins per time dimension (``--n-bins``, to compare binnings);
    ``fit``: fit the sketch's reserves to each budget of ``FRACTIONS`` on the training
    stream (``history.fit``), as a trainer would for its devices' budgets, tuning ``search``
    cells per budget by coordinate search (its step 4)."""
    from history.build import build_history
    from history.sketch import Sketch

    start = time.perf_counter()
    batches = [train.slice(i, i + (1 << 16)) for i in range(0, len(train), 1 << 16)]
    graph = build_history(w.pattern, batches, w.window, w.k, where=list(w.where),
                          partition=w.partition, n_bins=n_bins).canonical()
    sketch = Sketch.from_graph(graph)  # canonical: the bytes acep train ships
    seconds = time.perf_counter() - start
    plain_bytes, fitting = int(sketch.nbytes), None
    if fit:
        from history.fit import fit_budgets

        start = time.perf_counter()
        sketch, report = fit_budgets(sketch, train, FRACTIONS, partition=w.partition,
                                     burst=BURST, search=search, seed=SEED)
        fitting = {"seconds": time.perf_counter() - start, "ops_per_event":
                   report["ops_per_event"], "train_bundles": report["bundles"],
                   "ratios": {str(f): r for f, r in report["ratios"].items()}}
    info = {"build_seconds": seconds, "cells": int(graph.n_cells),
            "bundles": int(graph.n_bundles), "rem_edges": list(graph.rem_edges),
            "gap_edges": list(graph.gap_edges), "sketch_bytes": int(sketch.nbytes),
            "plain_sketch_bytes": plain_bytes, "fit": fitting,
            "graph_bytes": len(graph.to_bytes()),
            "sketch_error": sketch.error_against(graph),
            "success_rate": float(graph.successes.sum() / max(graph.visits.sum(), 1))}
    return {"graph": graph, "sketch": sketch, "history": info}


def hindsight_log(w: Workload, prefix: EventBatch) -> dict:
    """The unconstrained run's node log on the prefix: what the hindsight policy knows."""
    from history.build import traced_run

    run = traced_run(w.pattern, prefix, w.window, w.k, where=list(w.where),
                     partition=w.partition, fields=None)
    return {"log": run.log, "matches": {"partition": run.partition, "point": run.point}}


def sampling_rates(w: Workload, train: EventBatch, sizes: dict) -> tuple[dict, dict]:
    """Per budget fraction, the input-sampling rate whose ops fit it (on a training prefix)."""
    head = rebase(train, 0, min(len(train), sizes["calibration_events"]))

    def ops(rate: float) -> float:
        _, m, _ = run_matcher(w, policies.sample(head, rate))
        return m.stats["candidates"] / max(len(head), 1)

    full = ops(1.0)
    rates = {f: policies.calibrate(ops, f * full) if f < 1 else 1.0 for f in FRACTIONS}
    return rates, {"events": len(head), "ops_per_event": full}


# --------------------------------------------------------------------------- policy runs

def run_policy(task: tuple[str, str]) -> list[dict]:
    """Every budget of one (workload, policy)."""
    name, policy = task
    return [one_run(_STATE[name], policy, f) for f in FRACTIONS]


def one_run(st: dict, policy: str, fraction: float) -> dict:
    """One (workload, policy, budget) run, scored against the ground truth."""
    w, truth, prefix = st["workload"], st["truth"], st["prefix"]
    budget = Budget(fraction * truth.summary["ops_per_event"], BURST)
    setup = policies.make(policy, st, fraction, budget)
    events = prefix if policy == "hindsight" else st["test"]
    if setup.sampled_rate is not None:
        # the same device: the same ops per original event and the same bucket, in ops
        rate = setup.sampled_rate
        per_kept = Budget(budget.ops_per_event / rate, max(1.0, BURST * rate))
        found, m, seconds = run_matcher(w, policies.sample(events, rate), budget=per_kept)
    else:
        found, m, seconds = run_matcher(w, events, budget=budget, **setup.options)
    row = {"workload": w.name, "policy": policy, "fraction": fraction,
           "budget_ops_per_event": budget.ops_per_event, "burst": BURST,
           "events": len(events), "scope": "prefix" if policy == "hindsight" else "test",
           **shed_stats(m, seconds, len(events))}
    if setup.sampled_rate is not None:
        row["sampled_rate"] = setup.sampled_rate
    until = float(prefix.tags[-1]) if len(prefix) else None
    row["prefix"] = score(truth, found, until)
    if st.get("planted") is not None:
        row["planted"] = split_recall(truth, found, st["planted"],
                                      until if policy == "hindsight" else None)
    if policy != "hindsight":
        row.update(score(truth, found))
        row["over_time"] = recall_over_time(truth, found, st["edges"])
    else:
        row.update(row["prefix"])
    return row


def burst_run(task: tuple[str, float, float]) -> dict:
    """One run of the burst sensitivity part: a policy, a budget and a burst."""
    policy, fraction, burst = task
    st = _STATE[BURST_WORKLOAD]
    w, truth = st["workload"], st["truth"]
    budget = Budget(fraction * truth.summary["ops_per_event"], burst)
    setup = policies.make(policy, st, fraction, budget)
    found, m, seconds = run_matcher(w, st["test"], budget=budget, **setup.options)
    return {"workload": w.name, "policy": policy, "fraction": fraction, "burst": burst,
            **score(truth, found), **shed_stats(m, seconds, len(st["test"]))}


def time_edges(test: EventBatch, slices: int, weekly: bool) -> np.ndarray:
    """Slice edges over the test stream: weeks for flights, equal slices otherwise."""
    lo, hi = float(test.tags[0]), float(test.tags[-1]) + 1e-9
    if weekly and hi - lo > 14 * DAY:
        return np.append(np.arange(lo, hi, 7 * DAY), hi)
    return np.linspace(lo, hi, slices + 1)


# --------------------------------------------------------------------------- targets

def _best_of(rows: list[dict], workload: str, policy: str, fraction: float, key: str):
    for r in rows:
        if (r["workload"], r["policy"], r["fraction"]) == (workload, policy, fraction):
            return r[key] if key != "prefix" else r["prefix"]["bundle_recall"]
    return None


def targets(rows: list[dict], workloads: list[dict], references: list[dict] = ()) -> list[dict]:
    """The targets of issue 42, per workload, with pass/fail and the numbers; beside the
    first, the same figure of ``references`` (the history of the test stream)."""
    out = []
    names = [w["name"] for w in workloads]
    shares = {w["name"]: _ceiling_share(rows, w) for w in workloads}
    out.append(_target(f"history+rl >= {CEILING_SHARE:.0%} of the ceiling at every budget "
                       "from 10%", {n: s and s[0] for n, s in shares.items()},
                       lambda v: v >= CEILING_SHARE,
                       "least share of the ceiling (the lower of the two bounds), any budget "
                       "from 10%"))
    out[-1]["at_budget"] = {n: s and s[1] for n, s in shares.items()}
    out[-1]["ceilings"] = {n: s and s[2] for n, s in shares.items()}
    refs = {w["name"]: shares[w["name"]] and _ceiling_share(
        references, w, policies.TEST_HISTORY, shares[w["name"]][1]) for w in workloads}
    out[-1]["references"] = {n: r and r[0] for n, r in refs.items()}
    for rivals, what in ((policies.FIELD, "pspice and hspice"),
                        (policies.BASELINES, "every baseline")):
        margins = {n: _margin(rows, n, rivals) for n in names}
        out.append(_target(f"history+rl beats {what} at every budget < 100%",
                           {n: m and m[0] for n, m in margins.items()}, lambda v: v > 0,
                           "least margin (recall points) over the best of them, at the "
                           "budgets where one misses bundles and the bucket holds an "
                           "operation"))
        out[-1]["at_budget"] = {n: m and m[2] for n, m in margins.items()}
        out[-1]["against"] = {n: m and m[1] for n, m in margins.items()}
    sizes = {w["name"]: w.get("history", {}).get("sketch_bytes") for w in workloads
             if w["stream"] == "flights"}
    out.append(_target("flights sketch <= 256 KiB", sizes, lambda v: v <= SKETCH_TARGET,
                       "bytes of the signed sketch"))
    return out


def _ceiling_share(rows: list[dict], workload: dict, policy: str = "history+rl",
                   fraction: float | None = None) -> tuple[float, float, float] | None:
    """The least share of the ceiling that ``policy`` reaches over the budgets from 10% (at
    ``fraction`` only, if given), with that budget and the ceiling there."""
    worst = None
    for f in [f for f in FRACTIONS if f >= 0.10] if fraction is None else [fraction]:
        mine = _best_of(rows, workload["name"], policy, f, "bundle_recall")
        top = ceiling(workload, f)
        if mine is None or top is None:
            return None
        if top > 0 and (worst is None or mine / top < worst[0]):
            worst = (mine / top, f, top)
    return worst


def ceiling(workload: dict, fraction: float, scope: str = "test") -> float | None:
    """The lower of the two upper bounds on bundle recall (``bound.py``) at a budget, on the
    test stream or the hindsight prefix (None without bounds)."""
    bound = (workload.get("recall_bound") or {}).get(str(fraction))
    if not bound:
        return None
    return min(v for v in (bound[scope], bound.get(f"lp_{scope}")) if v is not None)


def _margin(rows: list[dict], name: str,
            rivals: tuple[str, ...]) -> tuple[float, str, float] | None:
    """The least lead of history+rl over the best of ``rivals``, with that rival and the
    budget, over the budgets where beating is possible: some rival still misses a bundle (a
    tie at 100% is not a loss) and the bucket holds at least one operation (below that no
    policy can create a node)."""
    worst = None
    for f in FRACTIONS[:-1]:
        mine = _best_of(rows, name, "history+rl", f, "bundle_recall")
        base = {b: _best_of(rows, name, b, f, "bundle_recall") for b in rivals}
        base = {b: v for b, v in base.items() if v is not None}
        if mine is None or not base:
            return None
        best = max(base, key=base.get)
        if base[best] >= 1.0 or _bucket_ops(rows, name, f) < 1.0:
            continue
        if worst is None or mine - base[best] < worst[0]:
            worst = (mine - base[best], best, f)
    return worst


def _bucket_ops(rows: list[dict], name: str, fraction: float) -> float:
    row = next(r for r in rows if r["workload"] == name and r["fraction"] == fraction
               and r.get("budget_ops_per_event") is not None)
    return row["budget_ops_per_event"] * row["burst"]


def _target(name: str, values: dict, ok, measure: str = "bundle recall") -> dict:
    known = {k: v for k, v in values.items() if v is not None}
    return {"name": name, "measure": measure, "values": values,
            "pass": bool(known) and len(known) == len(values) and all(ok(v) for v in
                                                                       known.values()),
            "per_workload": {k: (None if v is None else bool(ok(v))) for k, v in values.items()},
            "note": None if len(known) == len(values) else "some workloads have no figure"}


# --------------------------------------------------------------------------- driver

def run_all(args, sizes: dict) -> dict:
    """Prepare every workload, run every policy, check targets."""
    started = time.perf_counter()
    all_streams = streams(args, sizes)
    chosen = selected(args)
    for w in chosen:
        split = split_of(w, all_streams)
        _STATE[w.name] = {"workload": w, "train": split["train"], "test": split["test"],
                          "sizes": sizes, "source": split["source"],
                          "retrain": split.get("retrain"),
                          "n_bins": getattr(args, "n_bins", N_BINS),
                          "defer": getattr(args, "defer", policies.DEFER),
                          "fit": not getattr(args, "no_fit", False),
                          "search": getattr(args, "search", SEARCH),
                          "edges": time_edges(split["test"], sizes["slices"],
                                              w.stream == "flights")}
    ctx = multiprocessing.get_context("fork")
    names = [w.name for w in chosen]
    with ctx.Pool(args.jobs) as pool:
        prepared = list(tqdm(pool.imap(prepare, names), total=len(names),
                             desc="ground truth + histories", file=sys.stderr))
    for name, extra in zip(names, prepared):
        _STATE[name].update(extra)
    tasks = [(n, p) for n in names for p in (*policies.POLICIES, policies.TEST_HISTORY)]
    tasks.sort(key=lambda t: t[0] != "rising-delays")  # the longest first
    rows: list[dict] = []
    references: list[dict] = []
    with ctx.Pool(args.jobs) as pool:
        for done in tqdm(pool.imap_unordered(run_policy, tasks), total=len(tasks),
                         desc="policies x budgets", file=sys.stderr):
            (references if done[0]["policy"] == policies.TEST_HISTORY else rows).extend(done)
        burst_tasks = [(p, f, b) for p in BURST_POLICIES for f in (0.25, 1.0) for b in BURSTS
                       if BURST_WORKLOAD in _STATE]
        bursts = list(tqdm(pool.imap(burst_run, burst_tasks), total=len(burst_tasks),
                           desc="burst sensitivity", file=sys.stderr))
    reference = run_policy((DRIFT_WORKLOAD, policies.RETRAINED)) \
        if "retrained" in _STATE.get(DRIFT_WORKLOAD, {}) else []
    order = {(n, p): i for i, (n, p) in enumerate((n, p) for n in names
                                                  for p in policies.POLICIES)}
    rows.sort(key=lambda r: (order[r["workload"], r["policy"]], r["fraction"]))
    references.sort(key=lambda r: (names.index(r["workload"]), r["fraction"]))
    workloads = [describe(name) for name in names]
    return {"workloads": workloads, "rows": rows, "targets": targets(rows, workloads, references),
            "burst_sensitivity": bursts, "drift_reference": reference,
            "test_history_reference": references,
            "wall_seconds": time.perf_counter() - started}


def describe(name: str) -> dict:
    st = _STATE[name]
    out = {**st["workload"].describe(), "source": st["source"],
           "train_events": len(st["train"]), "truth": st["truth"].summary,
           "hindsight_prefix": {"events": len(st["prefix"]),
                                "until": float(st["prefix"].tags[-1]) if len(st["prefix"])
                                else None},
           "recall_bound": st["bound"],
           "sampling_rates": {str(f): r for f, r in st["sampling_rates"].items()},
           "sampling_calibration": st["calibration"],
           "time_edges": [float(x) for x in st["edges"]], "history": st["history"]}
    if st.get("planted") is not None:
        out["planted_bundles"] = int(st["planted"].sum())
    out["test_history"] = {**st["test_history"]["history"], "train_events": len(st["test"])}
    if "retrained" in st:
        out["retrained_history"] = {**st["retrained"]["history"],
                                    "train_events": len(st["retrain"])}
    return out


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = bench_parser("shedding", __doc__, RESULTS, "shedding.json and the PNGs",
                          "small streams, for tests (about two minutes; the embedded sample "
                          "without --data)")
    parser.add_argument("--jobs", type=whole_number(1, "worker processes"), default=JOBS,
                        help=f"worker processes (default {JOBS})")
    parser.add_argument("--workloads", metavar="NAMES", type=workload_names,
                        help="comma-separated subset of the workloads (default: all of "
                             f"{', '.join(w.name for w in WORKLOADS)}); for quick "
                             "comparisons, not for the published figures")
    parser.add_argument("--n-bins", type=bins_type, default=N_BINS, metavar="N",
                        help="quantile bins per time (remaining window, gap) of the history "
                             f"(default {N_BINS}, at most {MAX_BINS}); to compare binnings")
    parser.add_argument("--defer", type=whole_number(0, "deferred starts", MAX_DEFER),
                        default=policies.DEFER, metavar="D",
                        help="deferred window starts per partition and state of the history "
                             f"policies (default {policies.DEFER}, 0 = off; "
                             "docs/SHEDDING.md section 8)")
    parser.add_argument("--no-fit", action="store_true",
                        help="use the plain sketch: no reserves fitted to the budgets on the "
                             "training stream (docs/SHEDDING.md section 10); to compare")
    parser.add_argument("--search", type=whole_number(0, "cells to search"), default=SEARCH,
                        metavar="K",
                        help=f"cells per budget the fit tunes by coordinate search on the "
                             f"training stream (default {SEARCH}, 0 = off; docs/SHEDDING.md "
                             "section 10)")
    return parser.parse_args(argv)


def partial(args) -> bool:
    """Whether the run's figures are not the published ones (a subset of the workloads, other
    histories or policies): such a run, like --quick, goes to results/quick/ by default."""
    return (args.workloads is not None or args.n_bins != N_BINS or args.no_fit
            or args.defer != policies.DEFER or args.search != SEARCH)


def main(argv: list[str] | None = None) -> int:
    from .. import data

    args = parse_args(argv)
    sizes = QUICK if args.quick else FULL
    given = args.data
    if not ready(args, partial(args)):
        return 2
    results = {"benchmark": "shedding", "command": command(args, given), "machine": machine(),
               "settings": {"quick": args.quick, "fractions": list(FRACTIONS), "burst": BURST,
                            "learning_rate": LEARNING_RATE,
                            "explore": EXPLORE, "jobs": args.jobs, "seed": SEED,
                            "n_bins": args.n_bins, "defer": args.defer,
                            "fit": not args.no_fit, "search": args.search,
                            "sizes": sizes, "policies": list(policies.POLICIES),
                            "baselines": list(policies.BASELINES),
                            "drift_workload": DRIFT_WORKLOAD}}
    try:
        results.update(run_all(args, sizes))
    except data.DataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    results["settings"]["wall_seconds"] = results.pop("wall_seconds")
    from .plot import plot_drift, plot_recall
    from .table import markdown

    plots = {"shedding.png": plot_recall}
    drift = DRIFT_WORKLOAD in {w["name"] for w in results["workloads"]}
    if drift:
        plots["drift.png"] = plot_drift
    publish(results, args.out, "shedding", plots, markdown(results),
            drop=() if drift else ("drift.png",))
    return 0


def command(args, data: str | None = None) -> str:
    """The command that repeats the run: every option that changes its figures or was given
    (``data``: ``--data`` as given; the path in the JSON is where the flights were read)."""
    parts = ["python -m bench.shedding"]
    if args.quick:
        parts.append("--quick")
    if data is not None:
        parts.append(f"--data {data}")
    if args.jobs != JOBS:
        parts.append(f"--jobs {args.jobs}")
    if args.workloads is not None:
        parts.append(f"--workloads {','.join(args.workloads)}")
    if args.n_bins != N_BINS:
        parts.append(f"--n-bins {args.n_bins}")
    if args.defer != policies.DEFER:
        parts.append(f"--defer {args.defer}")
    if args.no_fit:
        parts.append("--no-fit")
    if args.search != SEARCH:
        parts.append(f"--search {args.search}")
    return " ".join(parts)
