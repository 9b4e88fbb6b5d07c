"""``shedding.png`` (bundle recall against budget, one panel per workload) and ``drift.png``
(bundle recall over the test stream: the static history against history + RL, and the
history retrained after the drift)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)
import numpy as np  # noqa: E402

from .policies import RETRAINED, TEST_HISTORY  # noqa: E402
from .run import ceiling  # noqa: E402
from .table import every_row, on_prefix, row_label  # noqa: E402

STYLE = {  # policy -> (colour, line, marker)
    "keep-first": ("0.6", ":", "v"), "random": ("#999999", "--", "x"),
    "oldest-first": ("#1f78b4", "--", "s"), "completion": ("#33a02c", "--", "D"),
    "pspice": ("#b2df8a", "--", "<"), "hspice": ("#a6cee3", "--", ">"),
    "hybrid": ("#fdbf6f", "--", "^"),
    "sampling": ("#b15928", ":", "^"), "history": ("#fb9a99", "-", "o"),
    "history+rl": ("#e31a1c", "-", "o"), "hindsight": ("black", "-.", "*"),
    RETRAINED: ("#6a3d9a", ":", "P"),  # the drift figure's reference
    TEST_HISTORY: ("#ff7f00", ":", "o"),  # every workload's reference
}


def plot_recall(results: dict, path: Path) -> None:
    """One panel per workload: bundle recall (solid) against the budget, every policy."""
    workloads = results["workloads"]
    cols = min(3, len(workloads))
    rows_n = -(-len(workloads) // cols)
    fig, axes = plt.subplots(rows_n, cols, figsize=(6 * cols, 4.6 * rows_n), squeeze=False,
                             layout="constrained")
    for ax, w in zip(axes.ravel(), workloads):
        _recall_panel(ax, results, w)
    for ax in axes.ravel()[len(workloads):]:
        ax.axis("off")
    axes[0, 0].legend(fontsize=8, loc="lower right")
    fig.suptitle(title(results), fontsize=12)
    fig.savefig(path, dpi=80)
    plt.close(fig)


def title(results: dict) -> str:
    m = results["machine"]
    return (f"Bundle recall against budget (share of the unconstrained run's ops per event, "
            f"burst {results['settings']['burst']:g}); hindsight on "
            f"{'a prefix' if on_prefix(results) else 'the whole test stream'}; "
            f"{m['cpu_count']} CPUs, {m['date'][:10]}")


def _recall_panel(ax, results: dict, w: dict) -> None:
    every = every_row(results)
    for policy, (colour, line, marker) in STYLE.items():
        rows = [r for r in every if r["workload"] == w["name"] and r["policy"] == policy]
        if not rows:
            continue
        x = [100 * r["fraction"] for r in rows]
        y = [r["bundle_recall"] for r in rows]
        ax.plot(x, y, linestyle=line, marker=marker, color=colour,
                label=row_label(results, w["name"], policy), linewidth=1.4)
    bound = w.get("recall_bound")
    if bound:
        fractions = results["settings"]["fractions"]
        ax.fill_between([100 * f for f in fractions], [ceiling(w, f) for f in fractions],
                        1.02, color="0.85", alpha=0.6, linewidth=0,
                        label="out of reach of any policy")
    t = w["truth"]
    ax.set_title(f"{w['name']}: {w['pattern']} (w={_window(w)}, k={w['k']})\n"
                 f"{t['bundles']:,} bundles, {t['match_points']:,} points, "
                 f"{t['bundles_per_partition_day']:.2f} bundles / partition-day, "
                 f"{t['ops_per_event']:.2f} ops/event", fontsize=9)
    ax.set_xlabel("budget, % of unconstrained ops per event")
    ax.set_ylabel("bundle recall")
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlim(0, 102)
    ax.axhline(0.9, color="0.8", linewidth=0.8)
    ax.axvline(25, color="0.8", linewidth=0.8)
    ax.grid(alpha=0.3)


def _window(w: dict) -> str:
    if w["stream"] == "flights":
        return f"{w['window'] / 60:g}min"
    return f"{w['window']:g}"


def plot_drift(results: dict, path: Path, fraction: float = 0.10) -> None:
    """Bundle recall per time slice at one budget: static history, history + RL, and the
    oldest-first baseline for scale; on the drift stream also the history retrained on the
    drifted regime (what RL would reach by following the drift); and the flights delay-wave
    (April to June drift from the January-March history, if any). 10%: at 25% the drift
    stream's recall does not move at the switch."""
    flights = [w["name"] for w in results["workloads"] if w["stream"] == "flights"]
    flights = [n for n in flights if n == "delay-wave"] or flights[:1]  # not saturated at 25%
    names = [results["settings"]["drift_workload"]] + flights
    fig, axes = plt.subplots(1, len(names), figsize=(7 * len(names), 4.4), squeeze=False,
                             layout="constrained")
    for ax, name in zip(axes[0], names):
        w = next(x for x in results["workloads"] if x["name"] == name)
        edges = np.array(w["time_edges"])
        scale, unit = (86400.0 * 7, "weeks") if w["stream"] == "flights" else (1.0, "time")
        mids = ((edges[:-1] + edges[1:]) / 2 - edges[0]) / scale
        rows = results["rows"] + (results.get("drift_reference") or [])
        for policy in ("oldest-first", "history", "history+rl", RETRAINED):
            row = next((r for r in rows if r["workload"] == name and
                        r["policy"] == policy and r["fraction"] == fraction), None)
            if row is None:
                continue
            y = [np.nan if v is None else v for v in row["over_time"]]
            colour, line, marker = STYLE[policy]
            label = {"history": "static history",
                     RETRAINED: "history retrained after the drift (reference)"
                     }.get(policy, policy)
            ax.plot(mids, y, linestyle=line, marker=marker, color=colour, label=label)
        if w["stream"] == "drift":
            ax.axvline((edges[0] + edges[-1]) / 2 - edges[0], color="0.5", linewidth=1)
            ax.text(0.5, 0.02, "drift", transform=ax.transAxes, ha="center", fontsize=8)
        ax.set_title(f"{name}: bundle recall over the test stream at "
                     f"{fraction:.0%} budget", fontsize=10)
        ax.set_xlabel(f"test stream ({unit} from its start)")
        ax.set_ylabel("bundle recall")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.savefig(path, dpi=80)
    plt.close(fig)
