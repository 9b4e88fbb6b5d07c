"""Where a training run's time goes: ``python -m bench.trainer.phases PARQUET CORES``.

A diagnostic beside the benchmark (not part of it): one ``trainer.train.train`` run on a new
``local[CORES]`` session with the benchmark's pattern, printing one JSON line with the
session start, the seconds of each ``progress`` block of the job (reading, pass 1, pass 2;
the trainer's own progress context is replaced by a timer), the CPU seconds of this process
and its descendants (the JVM and the Python workers, from /proc) over the run, and how busy
the whole machine was (from /proc/stat).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from contextlib import contextmanager

from .worker import PATTERN


def _descendants(pid: int) -> list[int]:
    out = []
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/children") as f:
                kids = [int(k) for k in f.read().split()]
        except OSError:
            continue
        for k in kids:
            out += [k, *_descendants(k)]
    return out


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _machine_ticks() -> tuple[int, int]:
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:]]
    return sum(ticks), ticks[3] + ticks[4]  # total, idle + iowait


def _arguments(argv: list[str] | None) -> tuple[str, int]:
    """The Parquet file and the cores, checked before Spark starts (one line, exit 2)."""
    ap = argparse.ArgumentParser(prog="python -m bench.trainer.phases",
                                 description=__doc__.split("\n\n")[1].replace("\n", " "))
    ap.add_argument("parquet", help="the flights file to train on")
    ap.add_argument("cores", help="cores of the local Spark session (local[CORES])")
    args = ap.parse_args(argv)
    if not args.cores.isdigit() or int(args.cores) < 1:
        ap.error(f"CORES: {args.cores!r} is not a whole number of cores >= 1")
    if not os.path.isfile(args.parquet):
        ap.error(f"{args.parquet}: no such file")
    return args.parquet, int(args.cores)


def main(argv: list[str] | None = None) -> int:
    path, cores = _arguments(argv)
    import trainer.train as T
    from acep.events import PRESETS
    from trainer.spark import session

    phases: dict[str, float] = {}

    @contextmanager
    def timed(spark, label, enabled=True):
        t = time.perf_counter()
        yield
        phases[label] = round(time.perf_counter() - t, 1)

    T.progress = timed
    ticks0, t0 = _machine_ticks(), time.perf_counter()
    spark = session(None, cores)
    t1 = time.perf_counter()
    pattern = T.PatternSpec(PATTERN["text"], PATTERN["window"], PATTERN["k"],
                            tuple(PATTERN["where"]), PATTERN["partition"])
    result = T.train([path], pattern, spec=PRESETS["flights"], cores=cores,
                     show_progress=False, spark=spark)
    t2, ticks1 = time.perf_counter(), _machine_ticks()
    cpu = sum(_cpu_seconds(p) for p in [os.getpid(), *_descendants(os.getpid())])
    total, idle = ticks1[0] - ticks0[0], ticks1[1] - ticks0[1]
    print(json.dumps({"cores": cores, "session": round(t1 - t0, 1), "train": round(t2 - t1, 1),
                      "phases": phases, "cpu_seconds_tree": round(cpu, 1),
                      "cpu_per_wall": round(cpu / (t2 - t0), 2),
                      "machine_busy": round(1 - idle / total, 2), "stats": result.stats}))
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
