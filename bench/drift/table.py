"""The README's tables from ``drift.json`` (``python -m bench.drift.table [JSON or DIR]``)."""

from __future__ import annotations

from ..common import table_main
from .run import ON_DROP, RESULTS, RETRAIN, ROWS


def _pct(x) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}"


def markdown(results: dict) -> str:
    out = []
    for s in results["streams"]:
        out += [f"**{s['name']}** ({s['truth']['bundles']} bundles, "
                f"{s['events']['test']:,} test events): bundle recall before / after the "
                "switch, %", "",
                "| row | " + " | ".join(f"{f:.0%}" for f in results["settings"]["fractions"])
                + " |", "|---|" + "---:|" * len(results["settings"]["fractions"])]
        for row in ROWS:
            cells = [next(r for r in s["rows"] if r["row"] == row and r["fraction"] == f)
                     for f in results["settings"]["fractions"]]
            out.append(f"| {row} | " + " | ".join(f"{_pct(c['before'])} / {_pct(c['after'])}"
                                                  for c in cells) + " |")
        out.append("| ceiling (whole / after) | " + " | ".join(
            f"{_pct(s['ceiling'][str(f)]['whole'])} / {_pct(s['ceiling'][str(f)]['after'])}"
            for f in results["settings"]["fractions"]) + " |")
        out += ["", *(_target_lines(s)), ""]
    return "\n".join(out)


def _target_lines(s: dict) -> list[str]:
    lines = []
    for t in s["targets"]:
        first = t["first_retrained_period"]
        recovered = "; ".join(
            f"{_LABELS[row]} {_pct(t['recovered'][row])} ({_verdict(t['a_pass'][row])})"
            for row in _LABELS)
        lines.append(f"- {t['fraction']:.0%}: gap static -> new regime {_pct(t['gap'])} "
                     f"points; recovered (a): {recovered}. First retrained period "
                     f"{_pct(first['retrained'])} vs RL {_pct(first['history+rl'])} "
                     f"(b: {_verdict(t['b_pass'], 'RL at 100% or no such period')})")
    return lines


_LABELS = {"history+rl": "RL", RETRAIN: "retrained every period", ON_DROP: "when finds drop"}


def _verdict(passed: bool | None, none: str = "no gap") -> str:
    return f"n/a ({none})" if passed is None else ("pass" if passed else "fail")


def main(argv: list[str] | None = None) -> int:
    return table_main("drift", markdown, RESULTS, argv)


if __name__ == "__main__":
    raise SystemExit(main())
