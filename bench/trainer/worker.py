"""One measured process: ``python -m bench.trainer.worker {single,spark} PARQUET OUT``.

``single``: the single-process reference, ``acep.events.read_all`` of the Parquet file with the
flights spec, ``history.build_history`` (two traced passes), ``.canonical()``, and the signed
sketch. ``spark --cores N``: a new local Spark session of N cores (``trainer.spark.session``),
then ``trainer.train.train`` over the same file, and the signed sketch of its graph.

With ``--fit RATIOS`` both also fit the sketch's reserves to those budget ratios
(``history.fit.fit_budgets`` after the build; ``train(fit=...)``), and ``fit_seconds`` says how
long that took.

Both write the canonical graph's bytes to ``OUT`` (the parent compares them byte for byte)
and print one JSON line: the seconds of each phase, ``seconds`` from the start of ``main``
(before the heavy imports) to the signed sketch bytes, the events, the graph's size and the
signed sketch's SHA-256.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time

PATTERN = {"text": "ontime late late+ verylate", "window": 3600.0, "k": 1,
           "where": ["late.delay > ontime.delay", "verylate.delay > late.delay + 30"],
           "partition": "origin"}
KEY = b"bench-trainer-signing-key"


def run_single(path: str, fit: list[float], burst: float) -> tuple[object, object, dict]:
    """The graph, the fitted sketch (None without ``fit``) and the phases' seconds."""
    from acep.events import PRESETS, read_all
    from history import Sketch, build_history
    from history.fit import fit_budgets

    t0 = time.perf_counter()
    events = read_all(path, PRESETS["flights"])
    t1 = time.perf_counter()
    graph = build_history(PATTERN["text"], events, PATTERN["window"], PATTERN["k"],
                          where=PATTERN["where"], partition=PATTERN["partition"]).canonical()
    t2 = time.perf_counter()
    doc = {"events": len(events), "read_seconds": t1 - t0, "build_seconds": t2 - t1}
    if not fit:
        return graph, None, doc
    sketch, report = fit_budgets(Sketch.from_graph(graph), events, fit,
                                 partition=PATTERN["partition"], burst=burst)
    doc.update(fit_seconds=time.perf_counter() - t2, fit_chosen=_chosen(report))
    return graph, sketch, doc


def run_spark(path: str, cores: int, fit: list[float],
              burst: float) -> tuple[object, object, dict]:
    from acep.events import PRESETS
    from trainer.spark import session
    from trainer.train import PatternSpec, train

    t0 = time.perf_counter()
    spark = session(None, cores)
    t1 = time.perf_counter()
    pattern = PatternSpec(PATTERN["text"], PATTERN["window"], PATTERN["k"],
                          tuple(PATTERN["where"]), PATTERN["partition"])
    result = train([path], pattern, spec=PRESETS["flights"], cores=cores, show_progress=False,
                   spark=spark, fit=fit, burst=burst)
    t2 = time.perf_counter()
    stats = {k: v for k, v in result.stats.items() if isinstance(v, (int, float, str))}
    doc = {"events": int(result.stats["events"]), "session_seconds": t1 - t0,
           "train_seconds": t2 - t1, "trainer_stats": stats,
           "master": spark.sparkContext.master,
           "default_parallelism": spark.sparkContext.defaultParallelism}
    if fit:
        doc.update(fit_seconds=result.stats["fit_seconds"],
                   fit_chosen=_chosen(result.stats["fit"]))
    return result.graph, result.sketch, doc


def _chosen(report: dict) -> dict[str, str]:
    return {str(ratio): row["chosen"] for ratio, row in report["ratios"].items()}


def main(argv: list[str] | None = None) -> int:
    started = time.perf_counter()
    parser = argparse.ArgumentParser(prog="python -m bench.trainer.worker")
    parser.add_argument("mode", choices=("single", "spark"))
    parser.add_argument("parquet")
    parser.add_argument("graph_out", help="where the canonical graph's bytes go")
    parser.add_argument("--cores", type=int, default=1)
    parser.add_argument("--fit", default="", help="budget ratios, comma-separated")
    parser.add_argument("--burst", type=float, default=1024.0)
    args = parser.parse_args(argv)
    fit = [float(x) for x in args.fit.split(",") if x]
    if args.mode == "single":
        graph, sketch, doc = run_single(args.parquet, fit, args.burst)
    else:
        graph, sketch, doc = run_spark(args.parquet, args.cores, fit, args.burst)
    t0 = time.perf_counter()
    from history import Sketch

    signed = (sketch or Sketch.from_graph(graph)).to_bytes(KEY)
    doc["sketch_seconds"] = time.perf_counter() - t0
    doc["seconds"] = time.perf_counter() - started  # the measured wall time
    raw = graph.to_bytes()
    with open(args.graph_out, "wb") as f:
        f.write(raw)
    doc.update(mode=args.mode, cores=args.cores if args.mode == "spark" else None,
               sketch_bytes=len(signed), sketch_sha256=hashlib.sha256(signed).hexdigest(),
               graph_bytes=len(raw),
               graph_sha256=hashlib.sha256(raw).hexdigest(), bundles=int(graph.n_bundles),
               visits=int(graph.visits.sum()), cells=int(graph.n_cells))
    print(json.dumps(doc), flush=True)
    if args.mode == "spark":  # stop the JVM here, outside the measured time
        from pyspark.sql import SparkSession

        active = SparkSession.getActiveSession()
        if active is not None:
            active.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
