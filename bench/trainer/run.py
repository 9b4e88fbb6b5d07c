"""Trainer benchmark: the Spark trainer's wall time against the single process, on 1 and 2 cores.

Run ``python -m bench.trainer [--data PATH] [--quick] [--repeats N] [--out DIR]``. The first
0.5M, 1M and 3M flights of ``flights-3m.parquet`` are written as Parquet files (row groups as
in the source file) into a temporary directory; each file goes to a signed history sketch of
the demo's rising-delay pattern (``ontime late late+ verylate``, window 1 h, k = 1, the two
delay predicates, partitioned by origin) three ways, each in a fresh process
(:mod:`bench.trainer.worker`):

- ``single``: the single process, ``read_all`` + ``build_history`` (two traced passes) +
  ``canonical()`` + ``Sketch.from_graph(...).to_bytes(key)``;
- ``spark1`` / ``spark2``: a new local Spark session with 1 / 2 cores (a session's master
  cannot change within a process, hence one process per run), then ``trainer.train.train``
  and the same sketch.

The wall time of a run is from the start of the worker's ``main`` (before pyspark, acep and
history are imported) to the signed sketch bytes, so it includes the Spark session start,
which is also reported on its own; the process time seen by this parent (interpreter start
and JVM shutdown too) is kept beside it. Every size and variant runs ``--repeats`` times,
interleaved; the tables use the fastest repeat. Every Spark graph is compared byte for byte
with the single process's canonical graph of the same file. The ratios (2 cores vs 1, Spark
vs the single process), the linearity (seconds per million events, a least-squares line) and
the three targets of issue 6 (3M events to a signed sketch in at most 5 minutes on 2 cores;
time linear in the data; 2 cores faster than 1) go to ``trainer.json``, the figure to
``trainer.png``.

The reserves' fit (``--fit``, docs/SHEDDING.md 10) is timed apart, on the largest file only:
the single process with ``history.fit.fit_budgets`` after its build (``single-fit``) against
the Spark trainer on 2 cores with ``train(fit=...)`` (``spark2-fit``), at the budget ratios
``FIT_RATIOS`` and a bucket of ``FIT_BURST`` events, ``--repeats`` times each; their signed
sketches must be equal byte for byte.

``--quick``: 10,000 and 20,000 events (prefixes of the embedded 20,000-flight sample unless
``--data`` is given), one repeat.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from acep.arguments import whole_number

from .. import data
from ..common import bench_main, bench_parser, machine
from .worker import PATTERN

RESULTS = Path(__file__).with_name("results")
ROOT = Path(__file__).resolve().parents[2]
FULL_SIZES = (500_000, 1_000_000, 3_000_000)
QUICK_SIZES = (10_000, 20_000)
FULL_REPEATS = 2
TARGET_SECONDS = 300.0
LINEAR_RESIDUAL = 0.10  # the least-squares line must fit every size within 10%
LINEAR_PER_EVENT = 1.20  # and the largest size may cost at most 20% more per event
VARIANTS = {  # name in the JSON -> (worker arguments, what it is)
    "single": (["single"], "one process: read_all + build_history (two traced passes) + "
                           "canonical() + signed sketch"),
    "spark1": (["spark", "--cores", "1"], "Spark trainer on a new local[1] session "
                                          "(session start included) + signed sketch"),
    "spark2": (["spark", "--cores", "2"], "Spark trainer on a new local[2] session "
                                          "(session start included) + signed sketch"),
}
FIT_RATIOS = (0.05, 0.1, 0.25)
FIT_BURST = 1024
FIT_VARIANTS = {
    "single-fit": (["single"], "one process as single, then history.fit.fit_budgets"),
    "spark2-fit": (["spark", "--cores", "2"], "Spark trainer on a new local[2] session with "
                                              "train(fit=...)"),
}
SAMPLE = Path(__file__).resolve().parents[2] / "acep" / "data" / "flights-sample.jsonl.gz"


# --------------------------------------------------------------------------- inputs


def sample_table():
    """The embedded 20,000-flight sample as a table shaped like flights-3m.parquet."""
    import gzip
    from datetime import datetime

    import pyarrow as pa

    with gzip.open(SAMPLE, "rt") as f:
        records = [json.loads(line) for line in f]
    return pa.table({
        "date": pa.array([datetime.fromisoformat(r["t"]) for r in records], pa.timestamp("us")),
        "delay": pa.array([r["delay"] for r in records], pa.int64()),
        "distance": pa.array([r["distance"] for r in records], pa.int64()),
        "origin": pa.array([r["origin"] for r in records], pa.large_string()),
        "destination": pa.array([r["destination"] for r in records], pa.large_string())})


def write_inputs(work: Path, data_path: str | None, quick: bool,
                 sizes: tuple[int, ...]) -> tuple[dict, dict[int, Path]]:
    """Prefixes of the flights (or, quick without ``--data``, of the sample) as Parquet."""
    import pyarrow.parquet as pq

    if quick and data_path is None:
        table, source, group = sample_table(), "acep/data/flights-sample.jsonl.gz", None
    else:
        path = data.flights_path(data_path)
        meta = pq.ParquetFile(path).metadata
        group = meta.row_group(0).num_rows if meta.num_row_groups else None
        table, source = data.read_flights_table(path), path.name
    if max(sizes) > table.num_rows:
        raise data.DataError(f"{source} has {table.num_rows:,} rows, fewer than {max(sizes):,}")
    paths = {}
    for n in sizes:
        paths[n] = work / f"flights-{n}.parquet"
        pq.write_table(table.slice(0, n), paths[n], row_group_size=group)
    return {"source": source, "rows": table.num_rows, "row_group_rows": group,
            "files": {str(n): paths[n].stat().st_size for n in sizes}}, paths


# --------------------------------------------------------------------------- measuring


def env() -> dict:
    """Child processes import this checkout first."""
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": str(ROOT) + (os.pathsep + path if path else "")}


def measure(variant: str, parquet: Path, graph_out: Path, timeout: float,
            worker: list[str] | None = None) -> dict:
    """One worker process; its JSON line plus the process wall time seen from here."""
    load = os.getloadavg()[0]
    started = time.perf_counter()
    worker = VARIANTS[variant][0] if worker is None else worker
    proc = subprocess.run([sys.executable, "-m", "bench.trainer.worker", *worker,
                           str(parquet), str(graph_out)], cwd=ROOT, env=env(),
                          capture_output=True, text=True, timeout=timeout)
    process = time.perf_counter() - started
    lines = [x for x in proc.stdout.splitlines() if x.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{variant} on {parquet.name} failed ({proc.returncode}): "
                           f"{proc.stderr[-3000:]}")
    doc = json.loads(lines[-1])
    doc.update(variant=variant, process_seconds=process, load_before=load)
    return doc


def run_all(paths: dict[int, Path], work: Path, repeats: int, timeout: float) -> tuple[list,
                                                                                     list]:
    """Every (repeat, size, variant), interleaved; the equality checks against ``single``."""
    runs, checks = [], []
    total = repeats * len(paths) * len(VARIANTS)
    for repeat in range(repeats):
        for n, parquet in paths.items():
            reference = None
            for variant in VARIANTS:
                _say(f"[{len(runs) + 1}/{total}] repeat {repeat + 1}: {variant} on {n:,} "
                     f"events ...")
                out = work / f"graph-{variant}-{n}-{repeat}.bin"
                doc = measure(variant, parquet, out, timeout)
                doc.update(repeat=repeat, size=n)
                runs.append(doc)
                _say(f"    {doc['seconds']:.1f} s")
                raw = out.read_bytes()
                out.unlink()
                if variant == "single":
                    reference = raw
                else:
                    checks.append({"size": n, "variant": variant, "repeat": repeat,
                                   "equal": raw == reference, "graph_bytes": len(raw),
                                   "graph_sha256": doc["graph_sha256"]})
    return runs, checks


def run_fit(parquet: Path, work: Path, repeats: int, timeout: float) -> dict:
    """The reserves' fit on one file, each fit variant ``repeats`` times, interleaved."""
    fit = ["--fit", ",".join(map(str, FIT_RATIOS)), "--burst", str(FIT_BURST)]
    runs = []
    for repeat in range(repeats):
        for variant, (worker, _) in FIT_VARIANTS.items():
            _say(f"repeat {repeat + 1}: {variant} on {parquet.name} ...")
            out = work / f"graph-{variant}-{repeat}.bin"
            doc = measure(variant, parquet, out, timeout, worker + fit)
            out.unlink()
            doc["repeat"] = repeat
            runs.append(doc)
            _say(f"    fit {doc['fit_seconds']:.1f} s of {doc['seconds']:.1f} s")
    rows = {}
    for variant in FIT_VARIANTS:
        mine = [r for r in runs if r["variant"] == variant]
        best = min(mine, key=lambda r: r["fit_seconds"])
        rows[variant] = {"fit_seconds": best["fit_seconds"],
                         "fit_seconds_all": [r["fit_seconds"] for r in mine],
                         "seconds": best["seconds"], "seconds_all": [r["seconds"] for r in mine],
                         "sketch_bytes": best["sketch_bytes"], "chosen": best["fit_chosen"],
                         "load_before": best["load_before"]}
    return {"events": runs[0]["events"], "ratios": list(FIT_RATIOS), "burst": FIT_BURST,
            "variants": {v: d for v, (_, d) in FIT_VARIANTS.items()}, "table": rows,
            "spark2_vs_single": rows["spark2-fit"]["fit_seconds"] /
            rows["single-fit"]["fit_seconds"],
            "sketches_equal": len({r["sketch_sha256"] for r in runs}) == 1, "runs": runs}


# --------------------------------------------------------------------------- analysis


def table(runs: list[dict]) -> list[dict]:
    """One row per (variant, size): the fastest repeat, with every repeat's seconds."""
    rows = []
    for variant in VARIANTS:
        for n in sorted({r["size"] for r in runs}):
            mine = [r for r in runs if r["variant"] == variant and r["size"] == n]
            best = min(mine, key=lambda r: r["seconds"])
            row = {"variant": variant, "events": best["events"], "size": n,
                   "seconds": best["seconds"], "seconds_all": [r["seconds"] for r in mine],
                   "seconds_median": float(np.median([r["seconds"] for r in mine])),
                   "process_seconds": best["process_seconds"],
                   "events_per_s": best["events"] / best["seconds"],
                   "seconds_per_million": best["seconds"] / (best["events"] / 1e6),
                   "sketch_bytes": best["sketch_bytes"], "load_before": best["load_before"]}
            if variant == "single":
                row.update(read_seconds=best["read_seconds"],
                           build_seconds=best["build_seconds"])
            else:
                row.update(session_seconds=best["session_seconds"],
                           train_seconds=best["train_seconds"],
                           seconds_without_session=best["seconds"] - best["session_seconds"],
                           trainer_stats=best["trainer_stats"])
            row["sketch_seconds"] = best["sketch_seconds"]
            rows.append(row)
    return rows


def _row(rows: list[dict], variant: str, n: int) -> dict:
    return next(r for r in rows if r["variant"] == variant and r["size"] == n)


def ratios(rows: list[dict]) -> list[dict]:
    """Per size: the 2-core speedup over 1 core, and each Spark run over the single process."""
    out = []
    for n in sorted({r["size"] for r in rows}):
        single, s1, s2 = (_row(rows, v, n)["seconds"] for v in VARIANTS)
        out.append({"size": n, "speedup_2_vs_1_cores": s1 / s2,
                    "spark1_vs_single": s1 / single, "spark2_vs_single": s2 / single,
                    "speedup_2_vs_1_cores_without_session":
                        _row(rows, "spark1", n)["seconds_without_session"] /
                        _row(rows, "spark2", n)["seconds_without_session"]})
    return out


def linearity(rows: list[dict]) -> dict:
    """Per variant: seconds per million events at each size and the least-squares line
    ``seconds = intercept + slope * millions``, with R^2 and the worst relative residual."""
    out = {}
    for variant in VARIANTS:
        mine = sorted((r for r in rows if r["variant"] == variant), key=lambda r: r["events"])
        x = np.array([r["events"] / 1e6 for r in mine])
        y = np.array([r["seconds"] for r in mine])
        slope, intercept = np.polyfit(x, y, 1)
        fit = intercept + slope * x
        ss = float(np.sum((y - y.mean()) ** 2))
        marginal = [float((y[i + 1] - y[i]) / (x[i + 1] - x[i])) for i in range(len(x) - 1)]
        out[variant] = {
            "events": [r["events"] for r in mine],
            "seconds": y.tolist(),
            "seconds_per_million": (y / x).tolist(),
            "marginal_seconds_per_million": marginal,
            "fit": {"intercept_seconds": float(intercept),
                    "slope_seconds_per_million": float(slope),
                    "r2": 1 - float(np.sum((y - fit) ** 2)) / ss if ss else 1.0,
                    "max_relative_residual": float(np.max(np.abs(y - fit) / y))},
            "per_event_largest_vs_smallest": float((y[-1] / x[-1]) / (y[0] / x[0])),
        }
    return out


def targets(rows: list[dict], ratio: list[dict], linear: dict) -> list[dict]:
    """The three targets of issue 6, with the numbers."""
    largest = max(r["size"] for r in rows)
    top = _row(rows, "spark2", largest)
    lin = linear["spark2"]
    residual, per_event = lin["fit"]["max_relative_residual"], lin["per_event_largest_vs_smallest"]
    slowest = min(ratio, key=lambda r: r["speedup_2_vs_1_cores"])
    return [
        _target(f"{largest:,} events to a signed sketch in <= 5 min on 2 cores",
                top["seconds"], TARGET_SECONDS, top["seconds"] <= TARGET_SECONDS, "s",
                f"Spark trainer, local[2], from the Parquet file to the signed sketch bytes, "
                f"Spark session start included ({top['session_seconds']:.1f} s of it); "
                f"process wall {top['process_seconds']:.1f} s with interpreter start and JVM "
                "shutdown"),
        _target("time linear in the data (Spark, 2 cores)", residual, LINEAR_RESIDUAL,
                residual <= LINEAR_RESIDUAL and per_event <= LINEAR_PER_EVENT,
                "max relative residual of the least-squares line",
                f"seconds = {lin['fit']['intercept_seconds']:.1f} + "
                f"{lin['fit']['slope_seconds_per_million']:.1f} x millions of events "
                f"(R^2 {lin['fit']['r2']:.4f}); pass when the line fits every size within "
                f"{LINEAR_RESIDUAL:.0%} and the largest size costs at most "
                f"{LINEAR_PER_EVENT - 1:.0%} more per event than the smallest "
                f"(it costs {per_event:.2f}x)"),
        _target("2 cores faster than 1", slowest["speedup_2_vs_1_cores"], 1.0,
                slowest["speedup_2_vs_1_cores"] > 1.0, "x (1-core s / 2-core s)",
                "the smallest speedup over the sizes (" + ", ".join(
                    f"{r['size']:,}: {r['speedup_2_vs_1_cores']:.2f}x" for r in ratio) +
                "); pass when 2 cores are faster at every size"),
    ]


def _target(name: str, value: float, threshold: float, ok: bool, unit: str,
            meaning: str) -> dict:
    return {"name": name, "value": value, "threshold": threshold, "unit": unit,
            "pass": bool(ok), "meaning": meaning}


def benchmark(work: Path, data_path: str | None, quick: bool, repeats: int) -> dict:
    """Every measurement, as one JSON-ready dict."""
    sizes = QUICK_SIZES if quick else FULL_SIZES
    described, paths = write_inputs(work, data_path, quick, sizes)
    timeout = 600 if quick else 3600
    runs, checks = run_all(paths, work, repeats, timeout)
    fit = run_fit(paths[max(sizes)], work, repeats, timeout)
    rows = table(runs)
    ratio, linear = ratios(rows), linearity(rows)
    return {"benchmark": "trainer", "machine": machine(), "pattern": PATTERN,
            "stream": {**described, "sizes": list(sizes)},
            "variants": {v: d for v, (_, d) in VARIANTS.items()},
            "targets": targets(rows, ratio, linear),
            "equality": {"all_equal": all(c["equal"] for c in checks), "checks": checks},
            "table": rows, "ratios": ratio, "linearity": linear, "fit": fit, "runs": runs}


def _say(message: str) -> None:
    print(f"[bench.trainer] {message}", file=sys.stderr, flush=True)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = bench_parser("trainer", __doc__, RESULTS, "trainer.json and trainer.png",
                          "10,000 and 20,000 events (the embedded sample without --data), "
                          "one repeat")
    parser.add_argument("--repeats", type=whole_number(1, "repeats"), default=None,
                        help=f"runs of every size and variant (default: {FULL_REPEATS}; "
                             "1 with --quick)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    from .plot import plot

    return bench_main("trainer", argv, parse_args, benchmark, _repeats, plot, summary,
                      setting="repeats", verdict=_verdict)


def _repeats(args: argparse.Namespace) -> int:
    return args.repeats if args.repeats is not None else 1 if args.quick else FULL_REPEATS


def _verdict(results: dict) -> int:
    """Exit 1 when a Spark graph or a fitted sketch differs from the single process's."""
    return 0 if results["equality"]["all_equal"] and results["fit"]["sketches_equal"] else 1


def summary(results: dict) -> str:
    """Seconds per variant and size, the equality check and the targets."""
    lines = []
    for r in results["table"]:
        extra = f" (session {r['session_seconds']:.1f} s)" if "session_seconds" in r else ""
        lines.append(f"{r['variant']:7s} {r['events']:>10,} events: {r['seconds']:8.1f} s"
                     f"{extra}, {r['events_per_s']:,.0f} events/s")
    eq = results["equality"]
    lines.append(f"{'every' if eq['all_equal'] else 'NOT every'} Spark graph equals the single "
                 f"process's ({len(eq['checks'])} checks)")
    fit = results["fit"]
    lines.append(f"fitting reserves on {fit['events']:,} events: " + ", ".join(
        f"{v} {r['fit_seconds']:.1f} s" for v, r in fit["table"].items()) +
        f"; the signed sketches {'are' if fit['sketches_equal'] else 'are NOT'} equal")
    lines += [f"{'PASS' if t['pass'] else 'FAIL'}  {t['name']}: {t['value']:,.3f} {t['unit']}"
              for t in results["targets"]]
    return "\n".join(lines)
