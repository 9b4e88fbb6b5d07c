"""Drift benchmark: bundle recall over a test stream that drifts, per shedding policy.

Run ``python -m bench.drift [--data PATH] [--quick] [--out DIR] [--streams NAMES]``. Per
stream (``bench/drift/streams.py``) it runs the unconstrained matcher on the test stream
(the ground truth), builds the history of the old regime and of the new one
(``bench.shedding.run.build``, fits without search), then at every budget runs the rows:
the static history, history + RL, the history retrained periodically from the device's
uploads, the history of the new regime, oldest-first, and the ceiling
(``bench/shedding/bound.py``). It scores bundle recall per time slice and before and after
the switch, and checks the issue's two targets.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from acep.events import EventBatch
from acep.matcher import MatchBatch
from acep.shedding import Budget
from acep.windows import partition_groups, sample_mask, window_mask
from history.drift import MIN_MATCHES
from history.policies import policy_options

from ..common import bench_parser, machine, publish, ready
from ..shedding.bound import min_trajectory_nodes, recall_bound
from ..shedding.measure import ground_truth, recall_over_time, run_matcher, score
from ..shedding.run import BURST, build
from ..shedding.workloads import WORKLOADS, Workload, rebase
from . import streams as st

RESULTS = Path(__file__).with_name("results")
FRACTIONS = (0.05, 0.10, 0.25, 0.50)
QUICK_FRACTIONS = (0.05, 0.10, 0.25)
SEED = 2016
POLICY_SEED = 4
PERIODS = 16  # the retrained row: a new sketch from the uploads every sixteenth of the stream
SAMPLE_SHARE = 0.2  # the loops' devices upload a sample of this share of their time
SAMPLE_SEED = 0  # the agent's default [sample] seed
ROWS = ("history", "history+rl", "history retrained from uploads",
        "history retrained when finds drop", "history retrained on the new regime",
        "oldest-first")
RETRAIN, ON_DROP, NEW = ROWS[2], ROWS[3], ROWS[4]
LOOPS = (RETRAIN, ON_DROP)  # the rows that retrain from the device's uploads
STREAMS = ("switch", "gradual", "flights-place", "flights-weather")
FLIGHT_STREAMS = ("flights-place", "flights-weather")
TRAINERS = ("in-process", "spark")
FULL = {"duration": 10000.0, "slices": 20, "fractions": FRACTIONS, "periods": PERIODS,
        "sample_share": SAMPLE_SHARE}
QUICK = {"duration": 100.0, "slices": 8, "fractions": QUICK_FRACTIONS, "periods": 4,
         "sample_share": SAMPLE_SHARE}
# k = 0: with one error allowed a motif has many chains and a shed one is rarely missed
SENSOR_WORKLOAD = Workload("sensors-k0", "synthetic", "a b c d e", 10.0, 0, (), "sensor",
                           note="planted motifs among decoys, no error allowed")
FLIGHTS_WORKLOAD = next(w for w in WORKLOADS if w.name == "delay-wave")
# storm days: delay-wave hardly sheds there (99-100% at 10%); rare very late departures do
WEATHER_WORKLOAD = next(w for w in WORKLOADS if w.name == "rare-verylate")


def workload_of(stream: str) -> Workload:
    return {"flights-place": FLIGHTS_WORKLOAD,
            "flights-weather": WEATHER_WORKLOAD}.get(stream, SENSOR_WORKLOAD)


def make_stream(name: str, args, sizes: dict) -> dict:
    if name == "flights-place":
        return st.flights_place(args.data)
    if name == "flights-weather":
        return st.flights_weather(args.data)
    return st.synthetic(name, sizes["duration"], SEED)


# --------------------------------------------------------------------------- runs

def run_static(w: Workload, test: EventBatch, sketch, policy: str, budget: Budget):
    """One pass of a history policy (or oldest-first) over the test stream: its matches."""
    options = policy_options(policy, sketch=sketch, budget=budget, seed=POLICY_SEED)
    found, _, _ = run_matcher(w, test, budget=budget, **options)
    return found


def period_edges(test: EventBatch, periods: int) -> np.ndarray:
    """The tags where the periods of the retrained row start, and the end."""
    return np.linspace(float(test.tags[0]), float(test.tags[-1]) + 1e-9, periods + 1)


def period_bounds(test: EventBatch, periods: int) -> list[int]:
    """Event positions where the periods of the retrained row start, and the end."""
    edges = period_edges(test, periods)
    return [int(i) for i in np.searchsorted(test.tags, edges, side="left")]


def first_retrained(test: EventBatch, periods: int, switch: float) -> list[float] | None:
    """[start, end) of the first period that runs on a sketch trained on uploads from after
    the switch only (None: no such period)."""
    edges = period_edges(test, periods)
    later = [p for p in range(1, periods) if edges[p - 1] >= switch]
    return [float(edges[later[0]]), float(edges[later[0] + 1])] if later else None


def run_retrained(w: Workload, test: EventBatch, sketch, budget: Budget,
                  trainer=None, periods: int = PERIODS) -> tuple:
    """The device run period by period: after each of ``periods`` periods the windows of its
    matches (what the agent uploads) are trained into the sketch of the next period
    (``trainer``: by default :func:`retrain`, in this process; ``spark.SparkTrainer``: the
    collector's archive and ``trainer.train``). Each period starts ``window`` early, to warm
    the matcher up; only its points from the period's start count. Returns (matches,
    per-period facts)."""
    trainer = trainer or retrain
    bounds = period_bounds(test, periods)
    keys, points, facts = [], [], []
    for p in range(periods):
        lo, hi = bounds[p], bounds[p + 1]
        if hi <= lo:
            continue
        start = float(test.tags[lo])
        warm = int(np.searchsorted(test.tags, start - w.window, side="left"))
        period = rebase(test, warm, hi)
        found = only(run_static(w, period, sketch, "history", budget), start)
        keys.append(np.asarray(found.partition, dtype=object))
        points.append(np.asarray(found.point))
        if p + 1 < periods:
            sketch, fact = trainer(w, period, found, budget, sketch)
            facts.append({"period": p, "start": start, **fact})
    found = SimpleNamespace(partition=np.concatenate(keys), point=np.concatenate(points))
    return found, facts


def on_drop(trainer, test: EventBatch) -> Callable:
    """``trainer`` called once the device's finds have fallen (:class:`history.FindsDrop`,
    a new one per run): from the first fallen period on, after every period, on all the
    uploads since that period began, once they hold :data:`MIN_MATCHES` matches. Until
    then the device keeps its sketch."""
    from history.drift import FindsDrop

    trigger, since = FindsDrop(), []  # since: the periods' matches, positions in ``test``

    def train(w: Workload, period: EventBatch, found: MatchBatch, budget: Budget,
              sketch) -> tuple:
        fell = trigger.update(len(found), len(period))
        facts = {"fell": fell, "p_value": trigger.last_p_value, "uploaded_matches": len(found)}
        if not (fell or since):
            return sketch, {**facts, "retrained": False}
        first = int(np.searchsorted(test.tags, period.tags[0], side="left"))
        since.append((first, shifted(found, first)))
        uploads = MatchBatch.concat([m for _, m in since])
        facts["matches_since"] = len(uploads)
        if len(uploads) < MIN_MATCHES:
            return sketch, {**facts, "retrained": False}
        lo = since[0][0]
        sketch, more = trainer(w, rebase(test, lo, first + len(period)), shifted(uploads, -lo),
                               budget, sketch)
        return sketch, {**more, **facts, "retrained": True}
    return train


def shifted(found: MatchBatch, by: int) -> MatchBatch:
    """``found`` with its trajectories' event positions moved by ``by``."""
    return MatchBatch(found.partition, found.point, found.start, found.errors,
                      found.trajectory_ptr, np.asarray(found.trajectory) + by,
                      found.trajectory_tags, found.tag_is_time)


def only(found: MatchBatch, start: float) -> MatchBatch:
    """The matches of ``found`` with points from ``start`` on."""
    keep = np.flatnonzero(np.asarray(found.point) >= start)
    ptr = found.trajectory_ptr
    spans = [np.arange(ptr[i], ptr[i + 1]) for i in keep]
    pick = np.concatenate(spans) if spans else np.zeros(0, np.int64)
    lengths = np.array([len(x) for x in spans], dtype=ptr.dtype)
    return MatchBatch(found.partition[keep], found.point[keep], found.start[keep],
                      found.errors[keep], np.concatenate([[0], np.cumsum(lengths)]).astype(
                          ptr.dtype), found.trajectory[pick], found.trajectory_tags[pick],
                      found.tag_is_time)


def upload_ratio(w: Workload, uploads: EventBatch, budget: Budget) -> float | None:
    """The device's budget over the uploads' own unconstrained operations per event: the
    ratio whose fitted table the device would take (None: no operation to fit to)."""
    _, m, _ = run_matcher(w, uploads)
    ops = m.stats["candidates"] / max(len(uploads), 1)
    return min(1.0, budget.ops_per_event / ops) if ops else None


def uploaded(w: Workload, period: EventBatch, found: MatchBatch,
             share: float = SAMPLE_SHARE) -> tuple[EventBatch, dict]:
    """What the agent uploads for a period (``[sample] share``): the windows of its matches
    and the seeded sample of its time (``acep.windows.sample_mask``), as a stream of
    their own; with the counts of events uploaded and sampled."""
    groups = partition_groups(period, w.partition)
    keep = window_mask(period, found.partition.tolist(), found.point, w.window, groups)
    sampled = sample_mask(period, w.partition, w.window, share, SAMPLE_SEED) \
        if share else np.zeros(len(period), dtype=bool)
    idx = np.flatnonzero(keep | sampled)
    lines = None if period.lines is None else period.lines[idx]
    uploads = EventBatch(period.type_codes[idx], period.type_names, period.tags[idx],
                         {k: v[idx] for k, v in period.columns.items()}, 0, period.source,
                         lines, period.tag_is_time)
    return uploads, {"uploaded_events": len(idx), "sampled_events": int(sampled.sum()),
                     "period_events": len(period), "uploaded_matches": len(found)}


def retrain(w: Workload, period: EventBatch, found: MatchBatch, budget: Budget,
            sketch, share: float = SAMPLE_SHARE) -> tuple:
    """The sketch a trainer builds from one period's uploads (:func:`uploaded`; ``acep
    history build``'s path: ``build_history``, ``Sketch.from_graph``, ``fit_budgets``
    without search), fitted at :func:`upload_ratio`. With no upload it returns ``sketch``,
    the one the device runs."""
    from history.build import build_history
    from history.fit import fit_budgets
    from history.sketch import Sketch

    started = time.perf_counter()
    uploads, facts = uploaded(w, period, found, share)
    ratio = upload_ratio(w, uploads, budget)
    facts.update(fit_ratio=ratio, path="in-process")
    if ratio is None:  # nothing uploaded to train on: the device keeps its sketch
        return sketch, {**facts, "kept": True, "seconds": 0.0}
    graph = build_history(w.pattern, [uploads], w.window, w.k, where=list(w.where),
                          partition=w.partition).canonical()
    sketch, _ = fit_budgets(Sketch.from_graph(graph), uploads, [ratio], partition=w.partition,
                            burst=BURST, search=0, seed=SEED)
    return sketch, {**facts, "kept": False, "seconds": time.perf_counter() - started}


# --------------------------------------------------------------------------- one stream

def measure_stream(name: str, split: dict, sizes: dict, trainer=None) -> dict:
    """Every row at every budget on one stream, with the ceiling and the targets."""
    started = time.perf_counter()
    w, test = workload_of(name), split["test"]
    truth = ground_truth(w, test)
    edges = np.linspace(float(test.tags[0]), float(test.tags[-1]) + 1e-9, sizes["slices"] + 1)
    switch = st.switch_time(test, split["switch"])
    old = fitted(w, split["train"], sizes["fractions"])
    new = fitted(w, split["new_regime"], sizes["fractions"])
    after = truth.bundle_first >= switch
    first = first_retrained(test, sizes["periods"], switch)
    in_first = None if first is None else \
        (truth.bundle_first >= first[0]) & (truth.bundle_first < first[1])
    rows, periods = [], {}
    for f in sizes["fractions"]:
        budget = Budget(f * truth.summary["ops_per_event"], BURST)
        for row in ROWS:
            if row in LOOPS:
                loop = trainer or partial(retrain, share=sizes["sample_share"])
                found, periods.setdefault(row, {})[str(f)] = run_retrained(
                    w, test, old["sketch"], budget, on_drop(loop, test) if row == ON_DROP else loop,
                    sizes["periods"])
            else:
                sketch = new["sketch"] if row == NEW else old["sketch"]
                found = run_static(w, test, sketch, "history" if row == NEW else row, budget)
            rows.append(row_figures(row, f, truth, found, edges, switch, after, in_first))
    return {"name": name, "workload": w.describe(), "source": split["source"],
            "events": {"train": len(split["train"]), "test": len(test),
                       "new_regime": len(split["new_regime"])},
            "hubs": split.get("hubs"), "truth": truth.summary,
            "switch_tag": switch, "switch_share": split["switch"],
            "time_edges": [float(x) for x in edges],
            "histories": {"old": old["history"], "new": new["history"]},
            "retrain_periods": periods, "first_retrained_period": first, "rows": rows,
            "ceiling": ceiling(w, test, truth, after, sizes["fractions"]),
            "targets": targets(rows, sizes["fractions"]),
            "seconds": time.perf_counter() - started}


def fitted(w: Workload, train: EventBatch, fractions) -> dict:
    """``bench.shedding.run.build``'s history and sketch, fitted to ``fractions`` without
    the coordinate search (``search=0``: minutes less per stream)."""
    from history.fit import fit_budgets

    out = build(w, train, fit=False)
    started = time.perf_counter()
    out["sketch"], report = fit_budgets(out["sketch"], train, fractions, partition=w.partition,
                                        burst=BURST, search=0, seed=SEED)
    out["history"]["fit"] = {"seconds": time.perf_counter() - started,
                             "ops_per_event": report["ops_per_event"],
                             "chosen": {str(f): r.get("chosen")
                                        for f, r in report["ratios"].items()}}
    return out


def row_figures(row: str, f: float, truth, found, edges, switch: float, after,
                in_first=None) -> dict:
    """One row's bundle recall: overall, per time slice, before and after the switch, and
    over the bundles of ``in_first`` (the first period retrained from post-switch uploads)."""
    over = recall_over_time(truth, found, edges)
    hit = _hits(truth, found)
    return {"row": row, "fraction": f, "bundle_recall": score(truth, found)["bundle_recall"],
            "over_time": over, "before": _share(hit, ~after), "after": _share(hit, after),
            "first_retrained": None if in_first is None else _share(hit, in_first)}


def _share(hit: np.ndarray, mask: np.ndarray) -> float | None:
    return float(hit[mask].mean()) if mask.any() else None


def _hits(truth, found) -> np.ndarray:
    hit = np.zeros(len(truth.bundle_first), dtype=bool)
    for p in zip(np.asarray(found.partition).tolist(), np.asarray(found.point).tolist()):
        b = truth.point_bundle.get(p)
        if b is not None:
            hit[b] = True
    return hit


def ceiling(w: Workload, test: EventBatch, truth, after: np.ndarray, fractions) -> dict:
    """The runs' upper bound on bundle recall (``bound.recall_bound``) per budget, on the
    whole test stream and on the bundles after the switch (the programme bound,
    ``lp_recall_bound``, is left out: minutes per stream)."""
    from acep.matcher import Matcher

    nodes = min_trajectory_nodes(Matcher(**w.matcher_args()).pattern.automaton, w.k)
    budgets = [(f * truth.summary["ops_per_event"], f * truth.summary["ops_per_event"] * BURST)
               for f in fractions]
    whole = recall_bound(test.tags, truth.bundle_first, truth.bundle_last, w.window, budgets,
                         nodes)
    late = recall_bound(test.tags, truth.bundle_first[after], truth.bundle_last[after],
                        w.window, budgets, nodes)
    return {str(f): {"whole": float(a), "after": float(b)}
            for f, a, b in zip(fractions, whole, late)}


# --------------------------------------------------------------------------- targets

def targets(rows: list[dict], fractions) -> list[dict]:
    """Per budget, after the switch: (a) history + RL recovers at least half of the gap
    between the static history and the new regime's (mean recall of the bundles after the
    switch), and the same share for the learning loops, the rows retrained from uploads;
    (b) the history retrained from uploads beats history + RL on the first period that runs
    on a sketch retrained from post-switch uploads only (None: no such period, or RL finds
    every bundle there)."""
    out = []
    for f in fractions:
        get = {r["row"]: r for r in rows if r["fraction"] == f}
        static, new = get["history"]["after"], get[NEW]["after"]
        gap = new - static
        shares = {row: (get[row]["after"] - static) / gap if gap > 0 else None
                  for row in ("history+rl", *LOOPS)}
        retrained, rl_then = (get[k]["first_retrained"] for k in (RETRAIN, "history+rl"))
        out.append({"fraction": f, "gap": gap,
                    "recovered": {row: get[row]["after"] - static for row in shares},
                    "share_of_gap": shares,
                    "a_pass": {row: None if x is None else bool(x >= 0.5)
                               for row, x in shares.items()},
                    "first_retrained_period": {"retrained": retrained, "history+rl": rl_then},
                    "b_pass": None if retrained is None or rl_then >= 1.0
                    else bool(retrained > rl_then)})
    return out


# --------------------------------------------------------------------------- driver

def stream_names(text: str) -> list[str]:
    """An argparse type: ``--streams``, a comma-separated list of known streams."""
    wanted = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in wanted if n not in STREAMS]
    if unknown or not wanted:
        raise argparse.ArgumentTypeError(f"unknown stream(s) {', '.join(unknown) or '(none)'}; "
                                         f"known: {', '.join(STREAMS)}")
    return wanted


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = bench_parser("drift", __doc__, RESULTS, "drift.json and drift.png",
                          "small streams, for tests (about two minutes; the embedded flights "
                          "without --data)")
    parser.add_argument("--streams", type=stream_names, metavar="NAMES",
                        help=f"comma-separated subset of {', '.join(STREAMS)} (default: all)")
    parser.add_argument("--trainer", choices=TRAINERS, default=TRAINERS[0],
                        help="how the retrained row trains on the uploads: in this process "
                             "(acep history build's path, default) or through the collector's "
                             "archive and trainer.train on local Spark (slow)")
    parser.add_argument("--periods", type=_periods, metavar="N",
                        help=f"how many periods the retrained row splits the test stream into, "
                             f"a new sketch after each (default: {PERIODS}; quick: "
                             f"{QUICK['periods']})")
    parser.add_argument("--sample-share", type=_sample_share, metavar="Q",
                        help=f"the share of their time the retrained rows' devices upload as a "
                             f"seeded sample beside their match windows (the agent's [sample] "
                             f"share; default {SAMPLE_SHARE}; 0: match windows only)")
    args = parser.parse_args(argv)
    args.partial = (args.streams is not None and set(args.streams) != set(STREAMS)) \
        or args.trainer != TRAINERS[0] or args.periods is not None \
        or args.sample_share is not None
    return args


def command(args, given: str | None) -> str:
    parts = ["python -m bench.drift"]
    if args.quick:
        parts.append("--quick")
    if given is not None:
        parts.append(f"--data {given}")
    if args.streams is not None:
        parts.append(f"--streams {','.join(args.streams)}")
    if args.trainer != TRAINERS[0]:
        parts.append(f"--trainer {args.trainer}")
    if args.periods is not None:
        parts.append(f"--periods {args.periods}")
    if args.sample_share is not None:
        parts.append(f"--sample-share {args.sample_share:g}")
    return " ".join(parts)


def _periods(text: str) -> int:
    """An argparse type: ``--periods``, a whole number from 2 on."""
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 2:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of periods >= 2")
    return n


def _sample_share(text: str) -> float:
    """An argparse type: ``--sample-share``, a number in [0, 1]."""
    try:
        share = float(text)
    except ValueError:
        share = -1.0
    if not 0.0 <= share <= 1.0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a share in [0, 1]")
    return share


def main(argv: list[str] | None = None) -> int:
    from .. import data

    args = parse_args(argv)
    given, sizes = args.data, dict(QUICK if args.quick else FULL)
    if args.periods is not None:
        sizes["periods"] = args.periods
    if args.sample_share is not None:
        sizes["sample_share"] = args.sample_share
    names = args.streams or list(STREAMS)
    if not _ready(args, names):
        return 2
    started = time.perf_counter()
    out = []
    trainer = None
    if args.trainer == "spark":
        from .spark import SparkTrainer

        trainer = SparkTrainer(share=sizes["sample_share"])
    try:
        for name in names:
            print(f"{name} ...", file=sys.stderr, flush=True)
            out.append(measure_stream(name, make_stream(name, args, sizes), sizes, trainer))
    except data.DataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    finally:
        if trainer is not None:
            trainer.close()
    results = {"benchmark": "drift", "command": command(args, given), "machine": machine(),
               "settings": {"quick": args.quick, "fractions": list(sizes["fractions"]),
                            "burst": BURST,
                            "periods": sizes["periods"], "sample_share": sizes["sample_share"],
                            "seed": SEED, "sizes": sizes,
                            "fit_search": 0, "rows": list(ROWS), "trainer": args.trainer,
                            "wall_seconds": time.perf_counter() - started},
               "streams": out}
    from .plot import plot_drift
    from .table import markdown

    publish(results, args.out, "drift", {"drift.png": plot_drift}, markdown(results))
    return 0


def _ready(args, names: list[str]) -> bool:
    """``bench.common.ready``, without fetching the flights when no flights stream runs."""
    if set(FLIGHT_STREAMS) & set(names):
        return ready(args)
    data_given = args.data
    args.data = None
    quick = args.quick
    args.quick = True  # ready() fetches no flights for a quick run without --data
    ok = ready(args, args.partial or quick)
    args.quick, args.data = quick, data_given
    return ok
