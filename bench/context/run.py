"""Context benchmark: bundle recall of the history policy with cells split by a context tree.

Run ``python -m bench.context [--data PATH] [--quick] [--out DIR]``. Per workload of
``bench/shedding`` (the training and test streams it uses) and per set of context features
(none, ``act``, ``idle``, both: docs/SHEDDING.md 13) it builds the history of the training
stream with that context tree (``history.build.build_history(context=...)``), makes its
sketch, fits it to each budget (``history.fit.fit_budgets``, no coordinate search), and runs
the static history policy over the test stream at each budget, with the fitted sketch and
with the plain one. Figures go to ``context.json`` and ``context.png``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from acep.shedding import Budget
from history.build import build_history
from history.fit import fit_budgets
from history.policies import policy_options
from history.sketch import Sketch

from ..common import bench_main, bench_parser, machine
from ..shedding.measure import ground_truth, run_matcher, score
from ..shedding.workloads import WORKLOADS, flights_split, synthetic_split

RESULTS = Path(__file__).with_name("results")
CONTEXTS = ((), ("act",), ("idle",), ("act", "idle"))
LEAVES = 4
FRACTIONS = (0.05, 0.10, 0.25)
BURST = 1024.0
SEED = 2016
POLICY_SEED = 7
NAMES = ("sensors", "sensors-drift", "delay-wave", "rare-verylate")
FULL = {"flights_days": None, "synthetic_duration": 10_000.0}
QUICK = {"flights_days": None, "synthetic_duration": 300.0}


def label(context: tuple[str, ...]) -> str:
    return "+".join(context) or "none"


def variant(w, train, test, truth, context: tuple[str, ...]) -> dict:
    """One context set on one workload: the history's size and the recall per budget."""
    started = time.perf_counter()
    graph = build_history(w.pattern, _pieces(train), w.window, w.k, where=list(w.where),
                          partition=w.partition, context=context,
                          context_leaves=LEAVES).canonical()
    plain = Sketch.from_graph(graph)
    fitted, _ = fit_budgets(plain, train, FRACTIONS, partition=w.partition, burst=BURST,
                            search=0, seed=SEED)
    out = {"context": label(context), "cells": int(graph.n_cells), "leaves": graph.n_ctx,
           "tree": graph.context.describe() if graph.context is not None else [],
           "sketch_bytes": int(fitted.nbytes), "recall": {}, "plain_recall": {}}
    for f in FRACTIONS:
        budget = Budget(f * truth.summary["ops_per_event"], BURST)
        for key, sketch in (("recall", fitted), ("plain_recall", plain)):
            options = policy_options("history", sketch=sketch, budget=budget, seed=POLICY_SEED)
            found, _, _ = run_matcher(w, test, budget=budget, **options)
            out[key][str(f)] = score(truth, found)["bundle_recall"]
    out["seconds"] = time.perf_counter() - started
    return out


def _pieces(events):
    return [events.slice(i, i + (1 << 16)) for i in range(0, len(events), 1 << 16)]


def measure(work: Path, data: str | None, quick: bool, names: tuple[str, ...]) -> dict:
    sizes = QUICK if quick else FULL
    flights = None
    workloads = []
    for w in (x for x in WORKLOADS if x.name in names):
        print(f"{w.name} ...", file=sys.stderr, flush=True)
        if w.stream == "flights":
            flights = flights or flights_split(data, sizes["flights_days"])
            split = flights
        else:
            split = synthetic_split(w, sizes["synthetic_duration"], SEED)
        truth = ground_truth(w, split["test"])
        rows = [variant(w, split["train"], split["test"], truth, c) for c in CONTEXTS]
        workloads.append({"workload": w.name, "source": split.get("source", "synthetic"),
                          "train_events": len(split["train"]), "test_events": len(split["test"]),
                          "bundles": truth.summary["bundles"], "rows": rows})
    return {"benchmark": "context", "machine": machine(), "fractions": list(FRACTIONS),
            "leaves": LEAVES, "min_leaf": 0.02, "burst": BURST, "fit_search": 0,
            "workloads": workloads}


def markdown(results: dict) -> str:
    """The README's table: bundle recall (%) per workload, context and budget."""
    fractions = results["fractions"]
    head = " | ".join(f"{f:.0%}" for f in fractions)
    lines = [f"| workload | context | cells | {head} | plain sketch {head} |",
             "|---|---|---:|" + "---:|" * 2 * len(fractions)]
    for w in results["workloads"]:
        for r in w["rows"]:
            fitted = " | ".join(f"{100 * r['recall'][str(f)]:.1f}" for f in fractions)
            plain = " | ".join(f"{100 * r['plain_recall'][str(f)]:.1f}" for f in fractions)
            lines.append(f"| {w['workload']} | {r['context']} | {r['cells']} | {fitted} | "
                         f"{plain} |")
    return "\n".join(lines)


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    workloads = results["workloads"]
    fig, axes = plt.subplots(1, len(workloads), figsize=(4 * len(workloads), 3.4),
                             squeeze=False)
    x = [100 * f for f in results["fractions"]]
    for ax, w in zip(axes[0], workloads):
        for r in w["rows"]:
            ax.plot(x, [100 * r["recall"][str(f)] for f in results["fractions"]], marker="o",
                    label=r["context"])
        ax.set_title(w["workload"])
        ax.set_xlabel("budget (% of unconstrained ops)")
        ax.set_xscale("log")
        ax.minorticks_off()
        ax.set_xticks(x, [f"{v:g}" for v in x])
    axes[0][0].set_ylabel("bundle recall (%), fitted sketch")
    axes[0][-1].legend(title="context", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def parse_args(argv: list[str]):
    parser = bench_parser("context", __doc__, RESULTS, "context.json and context.png",
                          "short sensor streams and the embedded flights (about a minute)")
    parser.add_argument("--workloads", default=",".join(NAMES),
                        help=f"comma-separated, some of {', '.join(NAMES)} (default: all)")
    args = parser.parse_args(argv)
    names = tuple(x.strip() for x in args.workloads.split(",") if x.strip())
    if not names or any(n not in NAMES for n in names):
        parser.error(f"--workloads: give some of {', '.join(NAMES)}")
    args.workloads, args.partial = names, names != NAMES
    return args


def main(argv: list[str] | None = None) -> int:
    return bench_main("context", argv, parse_args, measure, lambda args: args.workloads,
                      plot, markdown)
