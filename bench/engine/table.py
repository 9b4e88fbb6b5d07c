"""Markdown tables of an ``engine.json``, for the README: ``python -m bench.engine.table``."""

from __future__ import annotations

from ..common import table_main
from .run import RESULTS, Config

ENGINE_NAMES = {
    "reference": "reference", "python_merge_off": "Python kernel, merging off",
    "python_merge_on": "Python kernel, merging on", "compiled_merge_off": "compiled, merging off",
    "compiled_merge_on": "compiled, merging on",
}


def targets_table(results: dict) -> list[str]:
    lines = ["| target | what | config | value | pass |", "|---|---|---|---:|:---:|"]
    for t in results["targets"]:
        value = f"{t['value']:,.0f} events/s" if "events/s" in t["name"] else f"{t['value']:.0f}x"
        lines.append(f"| {t['name']} | {t['meaning']} | {t['config']} | {value} | "
                     f"{'yes' if t['pass'] else '**no**'} |")
    return lines


def grid_table(results: dict, stream: str) -> list[str]:
    """Million events/s: one row per pattern length, one column per (k, window)."""
    rows = {(r["letters"], r["k"], r["window"]): r["events_per_s"]
            for r in results["throughput"] if r["stream"] == stream}
    ks, windows = results["ks"], results["windows"]
    head = " | ".join(f"k={k} w={w}" for k in ks for w in windows)
    lines = [f"| letters | {head} |", "|---" + "|---:" * len(ks) * len(windows) + "|"]
    for n in sorted({key[0] for key in rows}):
        cells = " | ".join(f"{rows[(n, k, w)] / 1e6:.2f}" for k in ks for w in windows)
        lines.append(f"| {n} | {cells} |")
    return lines


def comparison_table(results: dict) -> list[str]:
    names = list(ENGINE_NAMES)
    lines = ["| config | events | " + " | ".join(ENGINE_NAMES.values()) + " |",
             "|---|---:" + "|---:" * len(names) + "|"]
    for c in results["comparison"]:
        cells = " | ".join(f"{c['events_per_s'][n]:,.0f} ({c['speedup_vs_reference'][n]:,.1f}x)"
                           for n in names)
        lines.append(f"| {Config.of(c).label} | {c['events']:,} | {cells} |")
    return lines


def live_table(results: dict) -> list[str]:
    lines = ["| config | events | merging | live mean | live p99 | live max | created/ev | "
             "merged/ev | expired/ev | peak arena bytes |", "|---|---:|---|" + "---:|" * 7]
    for c in results["live_nodes"]:
        for key in ("merge_off", "merge_on"):
            if key not in c:
                continue
            s = c[key]
            lines.append(f"| {Config.of(c).label} | {c['events']:,} | {key[6:]} | "
                         f"{s['live_mean']:,.1f} | {s['live_p99']:,.0f} | {s['live_max']:,} | "
                         f"{s['created_per_event']:.2f} | {s['merged_per_event']:.2f} | "
                         f"{s['expired_per_event']:.2f} | {s['peak_live_bytes']:,} |")
    return lines


def markdown(results: dict) -> str:
    parts = [("Targets", targets_table(results))]
    parts += [(f"Throughput, {s} (million events/s, compiled, merging on)", grid_table(results, s))
              for s in results["patterns"]]
    parts += [("Side by side (events/s and speedup over the reference)",
               comparison_table(results)), ("Live match nodes per event", live_table(results))]
    return "\n\n".join(f"### {title}\n\n" + "\n".join(lines) for title, lines in parts) + "\n"


def main(argv: list[str] | None = None) -> int:
    return table_main("engine", markdown, RESULTS, argv, end="")


if __name__ == "__main__":
    raise SystemExit(main())
