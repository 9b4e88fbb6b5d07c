"""The archive benchmark's figure: files, the trainer's plan and read, training, before and
after compaction; and the collector's ingest without and with ``--mirror``."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

PANELS = [("files", "archive files", "files"), ("plan_s", "plan (list, read footers)", "s"),
          ("read_s", "read every task", "s"), ("train_s", "acep train (local Spark)", "s")]


def plot(results: dict, path: Path) -> None:
    """One bar pair per panel (before, after) into ``path``."""
    panels = [p for p in PANELS if p[0] in results["before"]]
    fig, axes = plt.subplots(1, len(panels) + 1, figsize=(4 * (len(panels) + 1), 3.8))
    _mirror(axes[-1], results["mirror"])
    for ax, (key, title, unit) in zip(axes, panels):
        values = [results["before"][key], results["after"][key]]
        bars = ax.bar(["before", "after"], values, color=["#fc9272", "#74c476"])
        ax.bar_label(bars, labels=[f"{v:,.0f}" if unit == "files" else f"{v:.2f}"
                                   for v in values], fontsize=8)
        ax.set_title(title)
        ax.set_ylabel(unit)
    c = results["compaction"]
    fig.suptitle(f"bench.archive: {results['batches']:,} batches of {results['sizes']['devices']}"
                 f" devices over {results['sizes']['days']} days; --compact merged "
                 f"{c['merged']:,} files into {c['written']:,} in {c['seconds']:.1f} s")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _mirror(ax, m: dict) -> None:
    values = [m["ingest_plain_s"], m["ingest_mirrored_s"], m["catch_up_s"]]
    bars = ax.bar(["ingest", "ingest\n--mirror", "mirror\ncatch-up"], values,
                  color=["#9ecae1", "#3182bd", "#bdbdbd"])
    ax.bar_label(bars, labels=[f"{v:.2f}" for v in values], fontsize=8)
    ax.set_title("collector ingest, mirrored to a folder")
    ax.set_ylabel("s")
