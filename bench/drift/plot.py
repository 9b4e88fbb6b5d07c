"""``drift.png``: bundle recall per time slice of the test stream, one line per row, one
panel per stream and budget, the switch marked."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)
import numpy as np  # noqa: E402

from .run import NEW, ON_DROP, RETRAIN  # noqa: E402

STYLE = {  # row -> (colour, line, marker)
    "history": ("#fb9a99", "-", "o"), "history+rl": ("#e31a1c", "-", "o"),
    RETRAIN: ("#33a02c", "-", "D"), ON_DROP: ("#b2df8a", "-", "v"), NEW: ("#6a3d9a", ":", "P"),
    "oldest-first": ("#1f78b4", "--", "s"),
}
PANEL_FRACTIONS = (0.05, 0.10, 0.25)


def plot_drift(results: dict, path: Path) -> None:
    streams = results["streams"]
    fractions = [f for f in results["settings"]["fractions"] if f in PANEL_FRACTIONS]
    fig, axes = plt.subplots(len(fractions), len(streams), squeeze=False,
                             figsize=(6 * len(streams), 4.2 * len(fractions)),
                             layout="constrained")
    for j, s in enumerate(streams):
        for i, f in enumerate(fractions):
            _panel(axes[i, j], s, f)
    axes[0, 0].legend(fontsize=7, loc="lower left")
    m, kind = results["machine"], "quick" if results["settings"]["quick"] else "full"
    fig.suptitle(f"Bundle recall over the test stream ({kind} run, {m['cpu_count']} CPUs, "
                 f"{m['date'][:10]}); the vertical line: the switch", fontsize=11)
    fig.savefig(path, dpi=80)
    plt.close(fig)


def _panel(ax, s: dict, fraction: float) -> None:
    edges = np.array(s["time_edges"])
    scale = 86400.0 if s["workload"]["stream"] == "flights" else 1.0
    mids = ((edges[:-1] + edges[1:]) / 2 - edges[0]) / scale
    for row, (colour, line, marker) in STYLE.items():
        r = next((x for x in s["rows"] if x["row"] == row and x["fraction"] == fraction), None)
        if r is not None:
            y = [np.nan if v is None else v for v in r["over_time"]]
            ax.plot(mids, y, linestyle=line, marker=marker, color=colour, label=row, ms=4)
    bound = (s.get("ceiling") or {}).get(str(fraction))
    if bound:
        ax.axhline(bound["whole"], color="0.6", linewidth=1, linestyle="-.",
                   label="ceiling (bound.py)")
    ax.axvline((s["switch_tag"] - edges[0]) / scale, color="0.4", linewidth=1)
    ax.set_title(f"{s['name']} at {fraction:.0%} budget", fontsize=10)
    ax.set_xlabel("test stream (days from its start)" if scale > 1 else "test stream (time)")
    ax.set_ylabel("bundle recall")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
