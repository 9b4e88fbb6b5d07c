"""The edge benchmark's figure: memory, speed, ingest steps and the soak, one panel each."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def plot(results: dict, path: Path) -> None:
    """Four panels from ``results`` (see :mod:`bench.edge.run`) into ``path``."""
    fig, axes = plt.subplots(1, 4, figsize=(17, 4.2))
    side = results["agent_vs_engine"]
    _memory(axes[0], side)
    _speed(axes[1], side)
    _ingest(axes[2], results["ingest"], results["ingest_steps"])
    _soak(axes[3], results["soak"])
    fig.suptitle(f"bench.edge ({results['stream']['events']:,} events, "
                 f"{results['machine']['cpu_count']} cores)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _memory(ax, side: dict) -> None:
    names = [n for n in ("engine", "agent", "agent_sample") if n in side]
    after = [side[n]["rss_after_imports_mib"] for n in names]
    peak = [side[n]["peak_rss_mib"] for n in names]
    names = [_label(n, side) for n in names]
    ax.bar(names, after, label="after imports", color="#9ecae1")
    ax.bar(names, [p - a for p, a in zip(peak, after)], bottom=after, label="while running",
           color="#3182bd")
    ax.axhline(64, color="red", ls="--", label="target 64 MiB")
    ax.set_ylabel("peak RSS (MiB)")
    ax.set_title("peak resident memory")
    ax.legend(fontsize=8)


def _speed(ax, side: dict) -> None:
    eng = side["engine"]
    rates = {"matching\nonly": eng["matching_events_per_s"],
             "engine +\nJSON reader": eng["events_per_s"],
             "agent": side["agent"]["events_per_s"]}
    if "agent_sample" in side:
        rates[_label("agent_sample", side)] = side["agent_sample"]["events_per_s"]
    ax.bar(list(rates), list(rates.values()),
           color=["#bdbdbd", "#9ecae1", "#3182bd", "#08519c"][:len(rates)])
    ax.axhline(eng["events_per_s"] / 1.2, color="red", ls="--",
               label="target: engine / 1.2")
    ax.set_ylabel("events/s")
    title = f"per-event cost (agent {side['overhead']:+.0%}"
    if "agent_sample" in side:
        title += f", with sample {side['overhead_sample']:+.0%}"
    ax.set_title(title + ")", fontsize=10)
    ax.legend(fontsize=8)


def _label(name: str, side: dict) -> str:
    """A bar's name: the sampled agent says its share."""
    if name == "agent_sample":
        return f"agent +\nsample {side['sample']['share']:g}"
    return name


def _ingest(ax, rate: dict, steps: dict) -> None:
    shares = steps["share"]
    ax.bar(list(shares), [100 * v for v in shares.values()], color="#3182bd")
    ax.set_ylabel("% of in-process ingest time")
    runs = ", ".join(f"{r / 1000:.1f}k" for r in rate["runs_matches_per_s"])
    ax.set_title(f"collector: {rate['matches_per_s']:,.0f} matches/s on loopback (median)\n"
                 f"runs {runs}; target 20,000; {rate['clients']} clients", fontsize=9)


def _soak(ax, soak: dict) -> None:
    names = ["expected", "stored", "lost", "duplicated"]
    values = [soak["matches_expected"], soak["matches_stored"], soak["losses"],
              soak["duplicates"]]
    ax.bar(names, values, color=["#bdbdbd", "#3182bd", "#de2d26", "#fc9272"])
    ax.set_title(f"soak: {soak['cycles']} cycles, {soak.get('agent_kills', 0)} agent and "
                 f"{soak.get('collector_kills', 0)} collector kills", fontsize=10)
    ax.set_ylabel("matches")
