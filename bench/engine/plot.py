"""``engine.png``: throughput grid, side-by-side comparison and live nodes, from the JSON."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)
import numpy as np  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402

ENGINES = {  # name in the JSON -> (legend, colour)
    "reference": ("reference (pure Python)", "0.55"),
    "python_merge_off": ("Python kernel, merging off", "#fdae6b"),
    "python_merge_on": ("Python kernel, merging on", "#e6550d"),
    "compiled_merge_off": ("compiled, merging off", "#9ecae1"),
    "compiled_merge_on": ("compiled, merging on", "#08519c"),
}
K_COLOURS = ("#1b9e77", "#d95f02", "#7570b3", "#e7298a")


def plot(results: dict, path: Path) -> None:
    """Draw the figure of one benchmark run into ``path``."""
    streams = list(results["patterns"])
    letters = list(results["patterns"][streams[0]])
    fig = plt.figure(figsize=(4 * len(letters), 3.6 * (len(streams) + 1.4)),
                     layout="constrained")
    grid = fig.add_gridspec(len(streams) + 1, len(letters),
                            height_ratios=[1] * len(streams) + [1.4])
    top = None
    for row, stream in enumerate(streams):
        for col, n in enumerate(letters):
            ax = fig.add_subplot(grid[row, col], sharey=top)
            top = top or ax
            _throughput_panel(ax, results, stream, int(n))
            if col == 0:
                ax.legend(fontsize=8, loc="best")
    half = len(letters) // 2
    _comparison_panel(fig.add_subplot(grid[-1, :half]), results["comparison"])
    _live_panel(fig.add_subplot(grid[-1, half:]), results["live_nodes"])
    machine = results["machine"]
    fig.suptitle(f"ACEP engine benchmark ({machine['acep_backend']} kernel, "
                 f"{machine['cpu_count']} CPUs, Python {machine['python']}, "
                 f"{machine['date'][:10]})", fontsize=13)
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _throughput_panel(ax: Axes, results: dict, stream: str, letters: int) -> None:
    rows = [r for r in results["throughput"] if r["stream"] == stream and r["letters"] == letters]
    for k, colour in zip(results["ks"], K_COLOURS):
        mine = sorted((r["window"], r["events_per_s"]) for r in rows if r["k"] == k)
        if mine:
            ax.plot(*zip(*mine), marker="o", color=colour, label=f"k={k}")
    ax.axhline(1e6, color="0.3", linestyle="--", linewidth=1, label="1M events/s")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(results["windows"], [str(w) for w in results["windows"]])
    unit = results["streams"][stream]["window_unit"]
    ax.set_xlabel(f"window ({unit})")
    ax.set_ylabel("events/s (merging on)")
    ax.set_title(f"{stream}: {letters} letters", fontsize=11)
    ax.grid(True, which="major", alpha=0.3)


def _comparison_panel(ax: Axes, comparisons: list[dict]) -> None:
    width = 0.8 / len(ENGINES)
    for j, (name, (legend, colour)) in enumerate(ENGINES.items()):
        xs = np.arange(len(comparisons)) + (j - (len(ENGINES) - 1) / 2) * width
        rates = [c["events_per_s"][name] for c in comparisons]
        ax.bar(xs, rates, width, color=colour, label=legend)
        if name.startswith("compiled"):
            for x, c in zip(xs, comparisons):
                ax.annotate(f"{c['speedup_vs_reference'][name]:,.0f}x",
                            (x, c["events_per_s"][name]), ha="center", va="top", fontsize=8,
                            rotation=90, xytext=(0, -3), textcoords="offset points",
                            color="white" if name.endswith("on") else "black")
    for x, c in enumerate(comparisons):
        target = 50 * c["events_per_s"]["reference"]
        ax.hlines(target, x - 0.45, x + 0.45, colors="crimson", linestyles=":",
                  label="50x the reference" if x == 0 else None)
    ax.set_xticks(range(len(comparisons)), [_label(c) for c in comparisons], fontsize=9)
    ax.set_yscale("log")
    ax.set_ylim(top=ax.get_ylim()[1] * 20)
    ax.set_ylabel("events/s")
    ax.set_title("side by side on one prefix (in the bars: speedup over the reference)",
                 fontsize=11)
    ax.grid(True, axis="y", which="major", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", ncols=2)


def _live_panel(ax: Axes, loads: list[dict]) -> None:
    loads = [c for c in loads if "merge_off" in c]
    width = 0.38
    for j, (key, legend, colour) in enumerate((("merge_off", "merging off", "#9ecae1"),
                                               ("merge_on", "merging on", "#08519c"))):
        xs = np.arange(len(loads)) + (j - 0.5) * width
        means = [c[key]["live_mean"] for c in loads]
        ax.bar(xs, means, width, color=colour, label=f"{legend}: mean")
        for x, mean in zip(xs, means):
            ax.annotate(f"{mean:,.0f}", (x, mean), ha="center", va="top", fontsize=8,
                        color="white" if j else "black", xytext=(0, -2),
                        textcoords="offset points")
        ax.scatter(xs, [c[key]["live_max"] for c in loads], marker="_", s=250, color="black",
                   zorder=3, label="max" if j else None)
    ax.set_xticks(range(len(loads)), [_label(c) for c in loads], fontsize=9)
    ax.set_yscale("log")
    ax.set_ylabel("live match nodes per event")
    ax.set_title("where the load comes from: live nodes, merging off vs on", fontsize=11)
    ax.grid(True, axis="y", which="major", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")


def _label(c: dict) -> str:
    unit = "min" if c["stream"] == "flights" else "ev"
    return (f"{c['stream']}\n{c['letters']} letters, k={c['k']}\n"
            f"w={c['window']} {unit}, {c['events']:,} ev")
