"""``trainer.png``: wall time against events for the three variants, seconds per million, and
the time the reserves' fit adds on the largest file."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)
import numpy as np  # noqa: E402

STYLE = {  # variant -> (legend, colour, marker)
    "single": ("single process (read + build_history + sketch)", "0.35", "s"),
    "spark1": ("Spark trainer, local[1]", "#6baed6", "o"),
    "spark2": ("Spark trainer, local[2]", "#e6550d", "^"),
}


def plot(results: dict, path: Path) -> None:
    """Draw the figure of one benchmark run into ``path``."""
    fig, (left, middle, right) = plt.subplots(1, 3, figsize=(21, 6.2), layout="constrained",
                                              width_ratios=(3, 3, 2))
    _time_panel(left, results)
    _per_million_panel(middle, results)
    _fit_panel(right, results["fit"])
    m = results["machine"]
    eq = results["equality"]
    same = "every Spark graph equal to the single process's" if eq["all_equal"] else \
        "SPARK GRAPHS DIFFER FROM THE SINGLE PROCESS"
    fig.suptitle(f"Training a signed history sketch from flights Parquet "
                 f"({m['cpu_count']} CPUs, {m['date'][:10]}; best of "
                 f"{results['settings']['repeats']}; {same})", fontsize=12)
    fig.savefig(path, dpi=80)
    plt.close(fig)


def _time_panel(ax, results: dict) -> None:
    lin = results["linearity"]
    top = max(max(v["events"]) for v in lin.values())
    xs = np.linspace(0, top / 1e6, 50)
    for variant, (label, colour, marker) in STYLE.items():
        doc = lin[variant]
        ev = np.array(doc["events"]) / 1e6
        ax.plot(ev, doc["seconds"], marker=marker, color=colour, linewidth=1.8, markersize=8,
                label=label)
        fit = doc["fit"]
        ax.plot(xs, fit["intercept_seconds"] + fit["slope_seconds_per_million"] * xs,
                linestyle=":", color=colour, linewidth=1)
        for x, y in zip(ev, doc["seconds"]):
            ax.annotate(f"{y:.0f} s", (x, y), xytext=(6, -4), textcoords="offset points",
                        fontsize=8.5, color=colour)
    sessions = [r for r in results["table"] if r["variant"] == "spark2"]
    ax.plot([r["events"] / 1e6 for r in sessions],
            [r["seconds_without_session"] for r in sessions], linestyle="--", marker="^",
            markerfacecolor="white", color=STYLE["spark2"][1], linewidth=1,
            label="local[2] without the session start")
    target = next(t for t in results["targets"] if "5 min" in t["name"])
    if max(max(v["seconds"]) for v in lin.values()) > target["threshold"] / 3:
        ax.axhline(target["threshold"], color="crimson", linestyle="--", linewidth=1,
                   label="target: 5 min on 2 cores")
    ax.set_xlim(0, top / 1e6 * 1.08)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("events (millions)")
    ax.set_ylabel("wall time to the signed sketch (s)")
    ax.set_title("wall time against events (dotted: least-squares lines)", fontsize=11)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=9, loc="upper left")


def _per_million_panel(ax, results: dict) -> None:
    sizes = results["stream"]["sizes"]
    width = 0.8 / len(STYLE)
    for j, (variant, (label, colour, _)) in enumerate(STYLE.items()):
        rows = sorted((r for r in results["table"] if r["variant"] == variant),
                      key=lambda r: r["size"])
        xs = np.arange(len(rows)) + (j - (len(STYLE) - 1) / 2) * width
        ys = [r["seconds_per_million"] for r in rows]
        ax.bar(xs, ys, width, color=colour, label=label)
        for x, y, r in zip(xs, ys, rows):
            ax.annotate(f"{y:.0f}\n{_rate(r['events_per_s'])}", (x, y), ha="center",
                        va="bottom", fontsize=8, xytext=(0, 2), textcoords="offset points")
    ratio = {r["size"]: r for r in results["ratios"]}
    ax.set_xticks(range(len(sizes)), [f"{n:,} events\n2 vs 1 core: "
                                      f"{ratio[n]['speedup_2_vs_1_cores']:.2f}x" for n in sizes])
    ax.set_ylim(0, ax.get_ylim()[1] * 1.2)
    ax.set_ylabel("seconds per million events (above: s/M and events/s)")
    ax.set_title("time per million events at each size", fontsize=11)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=9, loc="upper right")


def _fit_panel(ax, fit: dict) -> None:
    names = {"single-fit": ("single process\n+ fit_budgets", STYLE["single"][1]),
             "spark2-fit": ("Spark, local[2]\ntrain(fit=...)", STYLE["spark2"][1])}
    for i, (variant, row) in enumerate(fit["table"].items()):
        label, colour = names[variant]
        rest = row["seconds"] - row["fit_seconds"]
        ax.bar(i, rest, 0.6, color=colour, alpha=0.35)
        ax.bar(i, row["fit_seconds"], 0.6, bottom=rest, color=colour)
        ax.annotate(f"fit {row['fit_seconds']:.0f} s\nof {row['seconds']:.0f} s",
                    (i, row["seconds"]), ha="center", va="bottom", fontsize=9,
                    xytext=(0, 2), textcoords="offset points")
    ax.set_xticks(range(len(fit["table"])), [names[v][0] for v in fit["table"]])
    ax.set_ylim(0, ax.get_ylim()[1] * 1.15)
    ax.set_ylabel("wall time (s): pale = history and sketch, dark = the fit")
    same = "equal" if fit["sketches_equal"] else "NOT EQUAL"
    ax.set_title(f"fitting reserves to {', '.join(map(str, fit['ratios']))} on "
                 f"{fit['events']:,} events\n(signed sketches {same})", fontsize=11)
    ax.grid(True, axis="y", alpha=0.3)


def _rate(events_per_s: float) -> str:
    return f"{events_per_s / 1e3:,.0f}k/s" if events_per_s >= 1e4 else f"{events_per_s:,.0f}/s"
