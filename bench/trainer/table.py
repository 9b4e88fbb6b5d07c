"""Markdown tables of a ``trainer.json`` for the README: ``python -m bench.trainer.table
[JSON]``."""

from __future__ import annotations

from ..common import table_main
from .run import RESULTS

NAMES = {"single": "single process", "spark1": "Spark, 1 core", "spark2": "Spark, 2 cores",
         "single-fit": "single process + `fit_budgets`", "spark2-fit": "Spark, 2 cores, `--fit`"}


def markdown(results: dict) -> str:
    """The targets, the wall times, the ratios and the linearity, as Markdown."""
    out = ["### Targets", "", "| target | value | threshold | met |", "|---|---|---|---|"]
    for t in results["targets"]:
        out.append(f"| {t['name']} | {t['value']:,.3f} {t['unit']} | {t['threshold']:,} | "
                   f"{'met' if t['pass'] else '**not met**'} |")
    out += ["", "### Wall time, Parquet file to signed sketch (fastest of "
            f"{results['settings']['repeats']})", "",
            "| variant | events | wall s | of which session start s | events/s | s per M events "
            "| every repeat s |", "|---|---:|---:|---:|---:|---:|---|"]
    for r in results["table"]:
        session = f"{r['session_seconds']:.1f}" if "session_seconds" in r else "-"
        runs = ", ".join(f"{s:.1f}" for s in r["seconds_all"])
        out.append(f"| {NAMES[r['variant']]} | {r['events']:,} | {r['seconds']:.1f} | {session} "
                   f"| {r['events_per_s']:,.0f} | {r['seconds_per_million']:.1f} | {runs} |")
    out += ["", "### Ratios", "", "| events | 2 cores vs 1 (speedup) | same without session "
            "start | Spark 1 core / single | Spark 2 cores / single |",
            "|---:|---:|---:|---:|---:|"]
    for r in results["ratios"]:
        out.append(f"| {r['size']:,} | {r['speedup_2_vs_1_cores']:.2f}x | "
                   f"{r['speedup_2_vs_1_cores_without_session']:.2f}x | "
                   f"{r['spark1_vs_single']:.2f}x | {r['spark2_vs_single']:.2f}x |")
    out += ["", "### Linearity", "", "| variant | s per M events at each size | marginal s per M "
            "| fit: s = a + b x M | R^2 | worst residual |", "|---|---|---|---|---:|---:|"]
    for v, d in results["linearity"].items():
        f = d["fit"]
        per = ", ".join(f"{x:.1f}" for x in d["seconds_per_million"])
        marg = ", ".join(f"{x:.1f}" for x in d["marginal_seconds_per_million"])
        out.append(f"| {NAMES[v]} | {per} | {marg} | {f['intercept_seconds']:.1f} + "
                   f"{f['slope_seconds_per_million']:.1f} M | {f['r2']:.4f} | "
                   f"{f['max_relative_residual']:.1%} |")
    fit = results["fit"]
    out += ["", f"### Fitting the reserves ({', '.join(map(str, fit['ratios']))} of the "
            f"operations, bucket of {fit['burst']:,} events) on {fit['events']:,} events", "",
            "| variant | fit s (fastest) | every repeat | whole run s | signed sketch bytes "
            "| tables chosen |", "|---|---:|---|---:|---:|---|"]
    for v, r in fit["table"].items():
        chosen = ", ".join(f"{k}: {c}" for k, c in r["chosen"].items())
        out.append(f"| {NAMES[v]} | {r['fit_seconds']:.1f} | "
                   f"{', '.join(f'{x:.1f}' for x in r['fit_seconds_all'])} | "
                   f"{r['seconds']:.1f} | {r['sketch_bytes']:,} | {chosen} |")
    out += ["", f"Spark's fit takes {fit['spark2_vs_single']:.2f}x the single process's; the "
            f"signed sketches are {'equal' if fit['sketches_equal'] else '**not equal**'}, "
            "byte for byte."]
    eq = results["equality"]
    out += ["", f"Graphs: {'every' if eq['all_equal'] else '**not every**'} Spark graph equals "
            f"the single process's, byte for byte ({sum(c['equal'] for c in eq['checks'])} of "
            f"{len(eq['checks'])} checks)."]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    return table_main("trainer", markdown, RESULTS, argv)


if __name__ == "__main__":
    raise SystemExit(main())
