"""The herd benchmark's figure: per fleet size, each limit's drain time (median and range),
work done per batch, bytes read per byte of backlog and uploads per batch; and for the
largest fleet, the batches stored over time in each limit's median run."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

PANELS = [("seconds", "seconds until every batch is stored\n(median; bar: all runs)", "{:.1f}"),
          ("decoded_per_batch", "batches decoded and re-checked\nper batch stored", "{:.2f}"),
          ("bytes_read_per_byte", "body bytes the collector decoded\nper byte of backlog",
           "{:.2f}"),
          ("bytes_sent_per_byte", "body bytes the devices sent\nper byte of backlog", "{:.2f}"),
          ("collector_peak_rss_mib", "collector's peak memory (MiB)", "{:.0f}")]
COLORS = {"none": "#fc9272", "per-device": "#fdae6b", "both": "#74c476",
          "both-at-once": "#9ecae1"}
LABELS = {"both-at-once": "both, bodies sent at once\n(agents without Expect)"}


def plot(results: dict, path: Path) -> None:
    medians = results["medians"]
    fleets = sorted({r["devices"] for r in medians})
    names = list(dict.fromkeys(r["limits"] for r in medians))
    fig, grid = plt.subplots(2, 3, figsize=(13, 8))
    axes = grid.ravel()
    for ax, panel in zip(axes, PANELS):
        _bars(ax, panel, medians, fleets, names)
    axes[0].legend(title="collector limits", fontsize=7)
    _timeline(axes[-1], results, max(fleets), names)
    s = results["sizes"]
    fig.suptitle(f"bench.herd: each device sends its backlog ({s['per_device']} batches of "
                 f"~{results['mean_batch_bytes'] / 1000:.0f} KB) to one collector at once\n"
                 f"agents' timeout {s['timeout']:g} s, --max-wait {s['max_wait']:g} s, "
                 f"{s['repeats']} run(s) each")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _bars(ax, panel, medians, fleets, names) -> None:
    key, title, fmt = panel
    width = 0.8 / len(names)
    for k, name in enumerate(names):
        rows = [next(r for r in medians if r["devices"] == n and r["limits"] == name)
                for n in fleets]
        values = [r[key] for r in rows]
        x = np.arange(len(fleets)) + (k - (len(names) - 1) / 2) * width
        bars = ax.bar(x, values, width, label=LABELS.get(name, name), color=COLORS.get(name))
        ax.bar_label(bars, labels=[fmt.format(v) for v in values], fontsize=7)
        if key == "seconds":
            spans = np.array([[v - min(r["runs_seconds"]), max(r["runs_seconds"]) - v]
                              for v, r in zip(values, rows)]).T
            ax.errorbar(x, values, yerr=spans, fmt="none", ecolor="#444", capsize=3, lw=1)
    ax.set_xticks(range(len(fleets)), [f"{n:,} devices" for n in fleets])
    ax.set_title(title, fontsize=10)


def _timeline(ax, results: dict, fleet: int, names) -> None:
    for name in names:
        median = next(r for r in results["medians"]
                      if r["devices"] == fleet and r["limits"] == name)
        run = next(r for r in results["runs"] if r["devices"] == fleet and
                   r["limits"] == name and r["seconds"] == median["seconds"])
        t = [p["t"] for p in run["timeline"]] + [run["seconds"]]
        stored = [p["batches_stored"] for p in run["timeline"]] + [run["batches"]]
        ax.plot(t, stored, label=LABELS.get(name, name), color=COLORS.get(name))
    ax.set_xlabel("seconds")
    ax.set_title(f"batches stored, {fleet:,} devices (median runs)", fontsize=10)
    ax.legend(fontsize=8)
