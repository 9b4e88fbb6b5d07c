"""Markdown tables of a ``shedding.json``, for the README: ``python -m bench.shedding.table``."""

from __future__ import annotations

import numpy as np

from ..common import table_main
from .policies import TEST_HISTORY
from .run import RESULTS, targets


def on_prefix(results: dict, name: str | None = None) -> bool:
    """Whether hindsight ran on a prefix of the test stream (of workload ``name``, or any):
    the quick run gives it the whole stream."""
    return any(w["hindsight_prefix"]["events"] < w["truth"]["events"]
               for w in results["workloads"] if name in (None, w["name"]))


def every_row(results: dict) -> list[dict]:
    """The policy rows and the reference rows of the test stream's history."""
    return results["rows"] + (results.get("test_history_reference") or [])


def row_label(results: dict, name: str, policy: str) -> str:
    """A row's name in tables and legends: hindsight says where it ran, a reference so."""
    return policy + {"hindsight": " (prefix)" if on_prefix(results, name) else "",
                     TEST_HISTORY: " (reference)"}.get(policy, "")


def _pct(v, fine: bool = False) -> str:
    """A share in percent; ``fine``: a second decimal where one would show 0.0."""
    if v is None:
        return "-"
    return f"{100 * v:.{2 if fine and 0 < abs(v) < 5e-4 else 1}f}"


def workloads_table(results: dict) -> list[str]:
    lines = ["| workload | pattern | w | k | test events | ops/event | wall us/event | "
             "match points | bundles | points/bundle | bundles per partition-day (per active "
             "one) | sketch bytes |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for w in results["workloads"]:
        t = w["truth"]
        where = f" where {' and '.join(w['where'])}" if w["where"] else ""
        sketch = w.get("history", {}).get("sketch_bytes")
        lines.append(
            f"| {w['name']} | `{w['pattern']}`{where} | {w['window']:g} | {w['k']} | "
            f"{t['events']:,} | {t['ops_per_event']:.3f} | "
            f"{1e6 * t['seconds'] / max(t['events'], 1):.2f} | {t['match_points']:,} | "
            f"{t['bundles']:,} | {t['points_per_bundle']:.1f} | "
            f"{t['bundles_per_partition_day']:.2f} ({t['bundles_per_active_partition_day']:.2f})"
            f" | {'-' if sketch is None else f'{sketch:,}'} |")
    return lines


def recall_table(results: dict, name: str) -> list[str]:
    """Bundle recall / point recall per policy (rows) and budget (columns)."""
    fractions = results["settings"]["fractions"]
    lines = ["| policy | " + " | ".join(f"{f:.0%}" for f in fractions) + " |",
             "|---|" + "---:|" * len(fractions)]
    every = every_row(results)
    for policy in (*results["settings"]["policies"], TEST_HISTORY):
        rows = {r["fraction"]: r for r in every
                if r["workload"] == name and r["policy"] == policy}
        if not rows:
            continue
        cells = [f"{_pct(rows[f]['bundle_recall'])} / {_pct(rows[f]['point_recall'])}"
                 for f in fractions]
        lines.append(f"| {row_label(results, name, policy)} | " + " | ".join(cells) + " |")
    bound = next((w.get("recall_bound") for w in results["workloads"] if w["name"] == name),
                 None)
    if bound:
        cells = [f"{_pct(bound[str(f)]['test'])} (prefix {_pct(bound[str(f)]['prefix'])})"
                 for f in fractions]
        lines.append("| upper bound, any policy (bundles only) | " + " | ".join(cells) + " |")
        cells = [f"{_pct(bound[str(f)].get('lp_test'))} (prefix "
                 f"{_pct(bound[str(f)].get('lp_prefix'))})" for f in fractions]
        if any(bound[str(f)].get("lp_prefix") is not None for f in fractions):
            lines.append("| upper bound, the bucket's programme | " + " | ".join(cells) + " |")
    return lines


def cost_table(results: dict, fraction: float = 0.25) -> list[str]:
    """At one budget: ops spent, shed, deferred starts, time deciding and wall time per
    event, precision."""
    lines = ["| workload | policy | ops spent/event | shed | deferred starts/event | "
             "deferred scans/event | decide ns/event | wall us/event | precision | "
             "prefix bundle recall |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results["rows"]:
        if r["fraction"] != fraction:
            continue
        lines.append(f"| {r['workload']} | {r['policy']} | {r['ops_spent_per_event']:.3f} | "
                     f"{r['shed']:,} | {r.get('deferred_per_event', 0.0):.3f} | "
                     f"{r.get('deferred_scans_per_event', 0.0):.3f} | "
                     f"{r['decide_ns_per_event']:,.0f} | "
                     f"{r['us_per_event']:.2f} | {_pct(r['precision'])} | "
                     f"{_pct(r['prefix']['bundle_recall'])} |")
    return lines


def targets_table(results: dict) -> list[str]:
    """The targets as the current code checks them, from the JSON's rows (a JSON of an older
    run gets today's targets)."""
    lines = ["| target | measure | per workload | pass |", "|---|---|---|:---:|"]
    for t in targets(results["rows"], results["workloads"],
                     results.get("test_history_reference") or []):
        parts = []
        for name, v in t["values"].items():
            ok = t["per_workload"][name]
            shown = "n/a" if v is None else (f"{v:,}" if "bytes" in t["measure"]
                                             else _pct(v, fine=True))
            top = (t.get("ceilings") or {}).get(name)
            note = "" if top is None or ok else f"; the ceiling there {100 * top:.1f}"
            ref = (t.get("references") or {}).get(name)
            note += "" if ref is None or ok else f"; {TEST_HISTORY} {100 * ref:.1f}"
            where = (t.get("at_budget") or {}).get(name)
            shown += "" if where is None else f" at {where:.0%}"
            against = (t.get("against") or {}).get(name)
            shown += "" if against is None else f" over {against}"
            parts.append(f"{name} {shown} ({'ok' if ok else 'no' if ok is False else '?'}"
                         f"{note})")
        lines.append(f"| {t['name']} | {t['measure']} | {'; '.join(parts)} | "
                     f"{'yes' if t['pass'] else '**no**'} |")
    return lines


def burst_table(results: dict) -> list[str]:
    rows = results.get("burst_sensitivity") or []
    lines = ["| workload | policy | budget | burst (events) | shed | bundle recall | "
             "point recall |", "|---|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['workload']} | {r['policy']} | {r['fraction']:.0%} | "
                     f"{r['burst']:,.0f} | {r['shed']:,} | {_pct(r['bundle_recall'])} | "
                     f"{_pct(r['point_recall'])} |")
    return lines


def drift_table(results: dict) -> list[str]:
    """Bundle recall before and after the drift (the mean over the time slices of each half
    of the test stream): static history, history + RL, and the history retrained on the
    drifted regime (the reference RL would reach if it followed the drift fully)."""
    reference = results.get("drift_reference") or []
    if not reference:
        return []
    name = results["settings"]["drift_workload"]
    rows = [r for r in results["rows"] if r["workload"] == name
            and r["policy"] in ("history", "history+rl")] + reference
    lines = [f"| {name} policy | budget | before the drift | after the drift |",
             "|---|---:|---:|---:|"]
    for fraction in sorted({r["fraction"] for r in rows if r["fraction"] < 1}):
        for r in (r for r in rows if r["fraction"] == fraction):
            slices = [np.nan if v is None else v for v in r["over_time"]]
            half = len(slices) // 2
            lines.append(f"| {r['policy']} | {fraction:.0%} | "
                         f"{_pct(np.nanmean(slices[:half]))} | "
                         f"{_pct(np.nanmean(slices[half:]))} |")
    return lines


def planted_table(results: dict) -> list[str]:
    """On the synthetic streams: bundle recall over the bundles with a planted motif and over
    the noise-only ones, per policy and budget (hindsight on its prefix)."""
    named = [w for w in results["workloads"] if w.get("planted_bundles") is not None]
    if not named:
        return []
    fractions = [f for f in results["settings"]["fractions"] if f < 1]
    lines = ["| workload | policy | " + " | ".join(f"{f:.0%}" for f in fractions) + " |",
             "|---|---|" + "---:|" * len(fractions)]
    for w in named:
        total = w["truth"]["bundles"]
        share = w["planted_bundles"] / total if total else 0.0
        for policy in results["settings"]["policies"]:
            rows = {r["fraction"]: r for r in results["rows"]
                    if r["workload"] == w["name"] and r["policy"] == policy}
            if not rows:
                continue
            cells = [f"{_pct(rows[f]['planted']['motif'])} / "
                     f"{_pct(rows[f]['planted']['noise'])}" for f in fractions]
            tag = " (prefix)" if policy == "hindsight" and on_prefix(results, w["name"]) else ""
            lines.append(f"| {w['name']} ({100 * share:.1f}% motif) | {policy}{tag} | "
                         + " | ".join(cells) + " |")
    return lines


def markdown(results: dict) -> str:
    out = ["### Workloads (ground truth: the unconstrained run on the test stream)", ""]
    out += workloads_table(results)
    out += ["", "### Targets", ""] + targets_table(results)
    for w in results["workloads"]:
        out += ["", f"### {w['name']}: bundle recall / match-point recall (%)", ""]
        out += recall_table(results, w["name"])
    planted = planted_table(results)
    if planted:
        out += ["", "### Synthetic streams: bundles with a planted motif / noise-only bundles, "
                "bundle recall (%)", ""] + planted
    out += ["", "### Cost at 25% budget", ""] + cost_table(results)
    out += ["", "### Burst: the same budgets with deeper queues", ""] + burst_table(results)
    drift = drift_table(results)
    if drift:
        out += ["", "### Drift: bundle recall before and after (mean over time slices)", ""]
        out += drift
    s = results["settings"]
    jobs = f"{s['jobs']} job" + ("" if s["jobs"] == 1 else "s")
    out += ["", f"Wall time {s['wall_seconds']:.0f} s with {jobs} on "
                f"{results['machine']['cpu_count']} CPUs ({results['machine']['cpu']})."]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    return table_main("shedding", markdown, RESULTS, argv)


if __name__ == "__main__":
    raise SystemExit(main())
