"""``exact.png``: the W sweep, runs per event, the side by side and the 10-partition targets."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)
import numpy as np  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.ticker import FuncFormatter  # noqa: E402

PREDICATE_COLOURS = {"p1": "#1b9e77", "p2": "#d95f02", "p3_min": "#7570b3",
                     "p3_max": "#e7298a", "p3_avg": "#66a61e"}
SYSTEMS = {  # name in the JSON -> (legend, colour)
    "runs": ("naive (run engine, verbose)", "0.55"),
    "runs_compact": ("run engine, compact", "#6baed6"),
    "shared": ("shared buffer, verbose", "#31a354"),
    "shared_compact": ("shared buffer, compact", "#3182bd"),
    "postpone_verbose": ("postponing, verbose", "#fdae6b"),
    "postpone_compact": ("postponing, compact", "#e6550d"),
    "postpone_compact_no_filters": ("postponing, compact, no early filters", "#a63603"),
}
STRATEGY_TITLES = {"partition_contiguity": "partition_contiguity (s2)",
                   "skip_till_next_match": "skip_till_next_match (s3)",
                   "skip_till_any_match": "skip_till_any_match"}


def plot(results: dict, path: Path) -> None:
    """Draw the figure of one benchmark run into ``path``."""
    fig = plt.figure(figsize=(19, 16.5), layout="constrained")
    grid = fig.add_gridspec(3, 3)
    axes = np.array([[fig.add_subplot(grid[r, c]) for c in range(3)] for r in range(2)])
    for ax, strategy in zip(axes[0], results["strategies"]):
        _sweep_panel(ax, results, strategy)
    axes[0, 0].legend(handles=_predicate_handles(results), fontsize=9, loc="lower left",
                      title="iterator predicate", title_fontsize=9)
    _runs_panel(axes[1, 0], results)
    _side_panel(axes[1, 1], results)
    _partition_panel(axes[1, 2], results)
    _sase_panel(fig.add_subplot(grid[2, :2]), results.get("sase"))
    _sase_matches_panel(fig.add_subplot(grid[2, 2]), results.get("sase"))
    machine, stream = results["machine"], results["stream"]
    engine = "" if results["shared_engine"]["available"] else \
        " - shared engine not built yet"
    fig.suptitle(f"Exact SASE+ engines on the stock ticker (p = {stream['p']}, "
                 f"{stream['symbols']} symbols; {machine['cpu_count']} CPUs, Python "
                 f"{machine['python']}, {machine['date'][:10]}){engine}", fontsize=13)
    fig.savefig(path, dpi=80)
    plt.close(fig)


def _predicate_handles(results: dict) -> list:
    return [Line2D([], [], color=PREDICATE_COLOURS[p], marker="o", label=p)
            for p in results["predicates"]]


def _sweep_panel(ax: Axes, results: dict, strategy: str) -> None:
    rows = [r for r in results["sweep"] if r["strategy"] == strategy]
    styles = ({"shared": ("-", "o"), "runs": (":", "s")} if strategy != "skip_till_any_match"
              else {"postpone_compact": ("-", "o"), "postpone_verbose": ("--", "^"),
                    "runs": (":", "s")})
    used = set()
    for predicate, colour in PREDICATE_COLOURS.items():
        mine = sorted((r for r in rows if r["predicate"] == predicate), key=lambda r: r["window"])
        for system, (line, marker) in styles.items():
            # a timer that fired outside the engine's loop (e.g. while building verbose
            # matches) leaves no rate to show: such points are left out
            shown = [r for r in mine if system in r["systems"] and
                     (r["systems"][system]["status"] == "ok" or
                      r["systems"][system]["events_done"] > 0)]
            points = [(r["window"], _rate(r["systems"][system])) for r in shown]
            if not points:
                continue
            used.add(system)
            ws, rates = zip(*points)
            done = [r["systems"][system]["status"] == "ok" for r in shown]
            ax.plot(ws, rates, linestyle=line, color=colour, linewidth=1.3)
            ax.scatter([w for w, ok in zip(ws, done) if ok],
                       [x for x, ok in zip(rates, done) if ok], marker=marker, color=colour,
                       s=28, zorder=3)
            ax.scatter([w for w, ok in zip(ws, done) if not ok],
                       [x for x, ok in zip(rates, done) if not ok], marker=marker,
                       facecolors="white", edgecolors=colour, s=40, zorder=3)
    ax.set_xscale("log")
    ax.set_yscale("log")
    windows = results["windows"]
    ax.set_xticks(windows, [str(w) for w in windows])
    ax.minorticks_off()
    ax.set_xlabel("partition window W (events per symbol)")
    ax.set_ylabel("events/s")
    ax.set_title(STRATEGY_TITLES.get(strategy, strategy), fontsize=11)
    ax.grid(True, which="major", alpha=0.3)
    handles = [Line2D([], [], color="0.3", linestyle=styles[s][0], marker=styles[s][1],
                      label=SYSTEMS[s][0]) for s in styles if s in used]
    handles.append(Line2D([], [], color="0.3", linestyle="none", marker="o",
                          markerfacecolor="white", label="hollow: stopped by the time budget,\n"
                                                         "rate over the events it reached"))
    if strategy == "skip_till_any_match":  # between the postponing and the naive lines
        ax.legend(handles=handles, fontsize=9, loc="center right", bbox_to_anchor=(1, 0.58))
    else:
        ax.legend(handles=handles, fontsize=9, loc="best")
    if strategy == "skip_till_any_match" and "runs" in used:
        ax.set_ylim(bottom=ax.get_ylim()[0] / 8)  # room for the note below the lines
        ax.text(0.02, 0.02, "naive and verbose postponing stop near the first starts: the\n"
                "matches themselves are exponential in the window (same point for every W)",
                transform=ax.transAxes, fontsize=8.5, va="bottom", color="0.25")


def _rate(row: dict) -> float:
    if row["events_per_s"] is not None:
        return row["events_per_s"]
    return max(row["events_per_s_before_timeout"], 1e-1)


def _runs_panel(ax: Axes, results: dict) -> None:
    """Runs created per event processed by the naive baseline, per strategy and predicate."""
    styles = {"partition_contiguity": ("-", "o"), "skip_till_next_match": ("--", "s"),
              "skip_till_any_match": (":", "^")}
    for predicate, colour in PREDICATE_COLOURS.items():
        for strategy, (line, marker) in styles.items():
            mine = sorted((r for r in results["sweep"] if r["predicate"] == predicate
                           and r["strategy"] == strategy), key=lambda r: r["window"])
            points = [(r["window"], r["systems"]["runs"].get("runs_per_event")) for r in mine]
            points = [(w, x) for w, x in points if x]
            if points:
                ax.plot(*zip(*points), linestyle=line, marker=marker, color=colour,
                        linewidth=1.2, markersize=5)
    ax.set_xscale("log")
    ax.set_yscale("log")
    windows = results["windows"]
    ax.set_xticks(windows, [str(w) for w in windows])
    ax.minorticks_off()
    ax.set_xlabel("partition window W (events per symbol)")
    ax.set_ylabel("runs created per event processed")
    ax.set_title("naive baseline: runs created per event (any-match: until the timeout)",
                 fontsize=11)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(handles=[Line2D([], [], color="0.3", linestyle=line, marker=marker,
                              label=STRATEGY_TITLES[s]) for s, (line, marker) in styles.items()],
              fontsize=9, loc="best")


def _side_panel(ax: Axes, results: dict) -> None:
    sides = results["side_by_side"]
    names = [n for n in SYSTEMS if any(n in s["systems"] for s in sides)]
    width = 0.8 / len(names)
    for j, name in enumerate(names):
        legend, colour = SYSTEMS[name]
        xs = np.arange(len(sides)) + (j - (len(names) - 1) / 2) * width
        rates = [s["systems"].get(name, {}).get("events_per_s") or 0 for s in sides]
        ax.bar(xs, rates, width, color=colour, label=legend)
        if name != "runs":
            for x, s, rate in zip(xs, sides, rates):
                ratio = s["speedup_vs_naive"].get(name)
                if ratio:
                    ax.annotate(f"{ratio:,.0f}x", (x, rate), ha="center", va="bottom",
                                fontsize=8, rotation=90, xytext=(0, 2),
                                textcoords="offset points")
    for x, s in enumerate(sides):
        naive = s["systems"]["runs"]["events_per_s"]
        if naive:
            ax.hlines(10 * naive, x - 0.45, x + 0.45, colors="crimson", linestyles=":",
                      label="10x the naive baseline" if x == 0 else None)
    ax.set_xticks(range(len(sides)), [f"{s['predicate']}\n{s['events']:,} ev" for s in sides],
                  fontsize=9)
    ax.set_yscale("log")
    ax.set_ylim(top=ax.get_ylim()[1] * 30)
    ax.set_ylabel("events/s")
    window = sides[0]["window"] if sides else ""
    ax.set_title(f"skip_till_any_match, W = {window}, side by side on the prefix the naive\n"
                 "baseline finishes (above the bars: speedup over it)", fontsize=11)
    ax.grid(True, axis="y", which="major", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", ncols=2)


def _partition_panel(ax: Axes, results: dict) -> None:
    parts = results["partitions"]
    rows = [r for r in parts["rows"] if r["system"] != "runs"]
    series = sorted({(r["strategy"], r["system"]) for r in rows}, reverse=True)
    predicates = list(results["predicates"])
    width = 0.8 / max(len(series), 1)
    colours = {"skip_till_any_match": "#e6550d", "skip_till_next_match": "#3182bd"}
    for j, (strategy, system) in enumerate(series):
        xs = np.arange(len(predicates)) + (j - (len(series) - 1) / 2) * width
        rates = []
        for p in predicates:
            row = next(r for r in rows if r["predicate"] == p and r["strategy"] == strategy
                       and r["system"] == system)
            rates.append(row["events_per_s"] or 0)
        ax.bar(xs, rates, width, color=SYSTEMS[system][1],
               label=f"{strategy}: {SYSTEMS[system][0]}")
        for x, rate in zip(xs, rates):
            ax.annotate(f"{rate / 1e3:,.0f}k" if rate else "timed out", (x, rate),
                        ha="center", va="bottom", fontsize=8, xytext=(0, 2),
                        textcoords="offset points")
    for target in results["targets"]:
        if "events/s" in target["name"]:
            ax.axhline(target["threshold"], linestyle="--", linewidth=1,
                       color=colours.get(target["name"].split()[0], "0.3"),
                       label=f"target {target['threshold']:,.0f} events/s")
    ax.set_xticks(range(len(predicates)), predicates)
    ax.set_ylim(0, ax.get_ylim()[1] * 1.25)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y / 1e3:,.0f}k"))
    ax.set_ylabel("events/s (best of the repeats)")
    ax.set_title(f"{parts['symbols']} partitions, W = {parts['window']}, compact output, "
                 f"{parts['events']:,} events", fontsize=11)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")


SASE_CLASSES = {  # deviation class -> (legend, colour)
    "take_proceed_fork": ("take-proceed fork missed (ours only)", "#756bb1"),
    "kleene_close_outside_window": ("closing event outside W (SASE only)", "#fd8d3c"),
    "first_close_ends_run": ("run ends at first close (ours only)", "#74c476"),
}


def _not_measured(ax: Axes, section: dict | None) -> bool:
    """Say in the panel why SASE was not measured; True when it was not."""
    if section and section.get("measured"):
        return False
    why = (section or {}).get("why", "no SASE section in this JSON")
    ax.text(0.5, 0.5, f"SASE side by side not measured: {why}", ha="center", va="center",
            transform=ax.transAxes, fontsize=11, color="0.35")
    ax.set_axis_off()
    return True


def _sase_panel(ax: Axes, section: dict | None) -> None:
    """SASE's warm events/s beside ours per query, the ratio above, the 3x target marked."""
    if _not_measured(ax, section):
        return
    rows = section["rows"]
    xs = np.arange(len(rows))
    sase = [r["sase"]["events_per_s"] for r in rows]
    ours = [r["ours"]["events_per_s"] for r in rows]
    ax.bar(xs - 0.2, sase, 0.4, color="0.6", label="SASE jar (warm, median, its own timer)")
    ax.bar(xs + 0.2, ours, 0.4, color="#3182bd",
           label="acep.nfab compiled core on an EventBatch (verbose, median)")
    for key, marker, legend in (("objects", "D", "ours, every ExactMatch made"),
                                ("rows", "o", "ours on the Event list")):
        rates = [r["ours"].get(f"events_per_s_{key}") for r in rows]
        if all(rate is not None for rate in rates):
            ax.scatter(xs + 0.2, rates, marker=marker, s=28, facecolors="none",
                       edgecolors="black", zorder=3, label=legend)
    for x, r, rate in zip(xs, rows, ours):
        colour = "black" if r["pass"] else "crimson"
        ax.annotate(f"{r['ratio']:.1f}x", (x + 0.2, rate), ha="center", va="bottom",
                    fontsize=10, color=colour, xytext=(0, 2), textcoords="offset points")
        ax.hlines(r["target"] * r["sase"]["events_per_s"], x - 0.4, x + 0.4, colors="crimson",
                  linestyles=":", label=f"{r['target']:g}x SASE (target)" if x == 0 else None)
    ax.set_xticks(xs, [f"{r['query']}\n{r['events']:,} events" for r in rows], fontsize=9)
    ax.set_yscale("log")
    ax.set_ylim(top=ax.get_ylim()[1] * 4)
    ax.set_ylabel("events/s")
    ax.set_title("SASE side by side: the same events, engine loop against engine loop "
                 "(above the bars: ours / SASE; red: below the target)", fontsize=11)
    ax.grid(True, axis="y", which="major", alpha=0.3)
    ax.legend(fontsize=9, loc="upper right")


def _sase_matches_panel(ax: Axes, section: dict | None) -> None:
    """Per query, the matches both found and each class of difference, stacked."""
    if _not_measured(ax, section):
        return
    rows = section["rows"]
    ys = np.arange(len(rows))
    left = np.zeros(len(rows))
    parts = [("identical", "identical", "#3182bd")]
    parts += [(name, legend, colour) for name, (legend, colour) in SASE_CLASSES.items()]
    parts.append(("unexplained", "unexplained", "crimson"))
    counts = np.array([[_count(r["comparison"], key) for key, _, _ in parts] for r in rows],
                      dtype=float)
    shares = counts / np.maximum(counts.sum(axis=1, keepdims=True), 1)
    for j, (_, legend, colour) in enumerate(parts):
        ax.barh(ys, shares[:, j], left=left, color=colour, label=legend)
        for y, share, count, x in zip(ys, shares[:, j], counts[:, j], left):
            if share > 0.08:
                ax.text(x + share / 2, y, f"{count:,.0f}", ha="center", va="center",
                        fontsize=8, color="white")
        left += shares[:, j]
    ax.set_yticks(ys, [r["query"] for r in rows], fontsize=9)
    ax.set_xlim(0, 1)
    ax.set_ylim(len(rows) + 1.2, -0.6)  # below the bars: room for the legend
    ax.set_xlabel("share of the matches either engine found (counts in the bars)")
    ax.set_title("match sets compared: identical, known SASE deviations, unexplained",
                 fontsize=11)
    ax.legend(fontsize=8, loc="lower center", ncols=2)


def _count(comparison: dict, key: str) -> int:
    if key in ("identical", "unexplained"):
        return comparison[key]
    return comparison["deviations"][key]
