"""Markdown tables of an ``exact.json``, for the README: ``python -m bench.exact.table``."""

from __future__ import annotations

from ..common import table_main
from .core import core_table
from .run import RESULTS, Config
from .sase import sase_table

SYSTEM_NAMES = {
    "runs": "naive (run engine, verbose)", "runs_compact": "run engine, compact",
    "shared": "shared buffer, verbose", "shared_compact": "shared buffer, compact",
    "postpone_verbose": "postponing, verbose", "postpone_compact": "postponing, compact",
    "postpone_compact_no_filters": "postponing, compact, no early filters",
}


def targets_table(results: dict) -> list[str]:
    lines = ["| target | what | config | value | pass |", "|---|---|---|---:|:---:|"]
    for t in results["targets"]:
        if t["value"] is None:
            value = t.get("note", "n/a")
        elif "events/s" in t["name"]:
            value = f"{t['value']:,.0f} events/s"
        else:
            value = f"{t['value']:,.1f}x"
        lines.append(f"| {t['name']} | {t['meaning']} | {t['config'] or '-'} | {value} | "
                     f"{'yes' if t['pass'] else '**no**'} |")
    return lines


def rate(row: dict) -> str:
    """events/s, or the rate until the budget stopped it, with the event it reached."""
    if row["events_per_s"] is not None:
        return f"{row['events_per_s']:,.0f}"
    return (f"*{row['events_per_s_before_timeout']:,.0f}* (stopped at "
            f"{row['events_done']:,} of {row['events']:,})")


def side_table(results: dict) -> list[str]:
    sides = results["side_by_side"]
    names = [n for n in SYSTEM_NAMES if any(n in s["systems"] for s in sides)]
    lines = ["| predicate | prefix events | matches | naive runs created | "
             + " | ".join(SYSTEM_NAMES[n] for n in names) + " |",
             "|---|---:|---:|---:" + "|---:" * len(names) + "|"]
    for s in sides:
        naive = s["systems"]["runs"]
        cells = []
        for n in names:
            row = s["systems"][n]
            ratio = s["speedup_vs_naive"].get(n)
            cells.append(rate(row) + (f" ({ratio:,.1f}x)" if ratio and n != "runs" else ""))
        matches = naive.get("matches")
        lines.append(f"| {s['predicate']} | {s['events']:,} | "
                     f"{'-' if matches is None else f'{matches:,}'} | "
                     f"{naive.get('runs_created', 0):,} | " + " | ".join(cells) + " |")
    return lines


def partition_table(results: dict) -> list[str]:
    rows = results["partitions"]["rows"]
    lines = ["| strategy | system | predicate | events/s | runs or main runs per event | "
             "matches | records |", "|---|---|---|---:|---:|---:|---:|"]
    for r in rows:
        per_event = r.get("runs_per_event", r.get("main_runs_per_event"))
        lines.append(f"| {r['strategy']} | {SYSTEM_NAMES[r['system']]} | {r['predicate']} | "
                     f"{rate(r)} | {_num(per_event, '.4f')} | {_num(r.get('matches'))} | "
                     f"{_num(r.get('records'))} |")
    return lines


def _num(x, fmt: str = ",") -> str:
    if x is None:
        return "-"
    if isinstance(x, float) and x >= 1e15:
        return f"{x:.2e}"
    return format(x, fmt)


def sweep_table(results: dict, strategy: str, system: str, key: str = "rate") -> list[str]:
    """One row per predicate, one column per W: events/s (key "rate") or runs per event."""
    rows = {(r["predicate"], r["window"]): r for r in results["sweep"]
            if r["strategy"] == strategy and system in r["systems"]}
    windows = results["windows"]
    lines = ["| predicate | " + " | ".join(f"W={w} ({_events(rows, w)} ev)" for w in windows)
             + " |", "|---" + "|---:" * len(windows) + "|"]
    for p in results["predicates"]:
        cells = []
        for w in windows:
            row = rows.get((p, w))
            if row is None:
                cells.append("-")
                continue
            s = row["systems"][system]
            if key == "rate":
                cells.append(rate(s))
            else:
                per_event = s.get("runs_per_event", s.get("main_runs_per_event"))
                cells.append(_num(per_event, ".4f"))
        lines.append(f"| {p} | " + " | ".join(cells) + " |")
    return lines


def _events(rows: dict, w: int) -> str:
    n = next((r["events"] for (_, win), r in rows.items() if win == w), None)
    return "-" if n is None else f"{n:,}"


def markdown(results: dict) -> str:
    window = Config.of(results["side_by_side"][0]).window
    parts = [("Targets", targets_table(results)),
             ("SASE side by side: the jar's engine and our compiled core, same events, "
              "verbose (--sase-jar)", sase_table(results)),
             (f"Side by side: skip_till_any_match, W = {window}, one prefix per predicate "
              "(events/s and speedup over the naive baseline)", side_table(results)),
             (f"{results['partitions']['symbols']} partitions, W = "
              f"{results['partitions']['window']}, compact output (best of the repeats)",
              partition_table(results)),
             ("Compiled core beside shared.py: Engine.run, verbose, same events (issue 43)",
              core_table(results))]
    for strategy in results["strategies"]:
        systems = sorted({s for r in results["sweep"] if r["strategy"] == strategy
                          for s in r["systems"]}, key=list(SYSTEM_NAMES).index)
        for system in systems:
            parts.append((f"Sweep, {strategy}, {SYSTEM_NAMES[system]}: events/s",
                          sweep_table(results, strategy, system)))
    for strategy in results["strategies"]:
        parts.append((f"Sweep, {strategy}, naive baseline: runs created per event processed",
                      sweep_table(results, strategy, "runs", key="runs")))
    return "\n\n".join(f"### {title}\n\n" + "\n".join(lines) for title, lines in parts) + "\n"


def main(argv: list[str] | None = None) -> int:
    return table_main("exact", markdown, RESULTS, argv, end="")


if __name__ == "__main__":
    raise SystemExit(main())
