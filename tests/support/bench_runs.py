"""A benchmark's quick mode as its test runs it: ``python -m bench.NAME --quick``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from bench import data

ROOT = Path(__file__).resolve().parents[2]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def run_quick(name: str, out: Path, timeout: float, *options: str, offline: bool = True,
              check: bool = True) -> subprocess.CompletedProcess:
    """``python -m bench.NAME --quick --out OUT [OPTIONS]`` from the clone's root. ``offline``: with
    a HOME and a cache of its own and no ``$ACEP_FLIGHTS``, so it reads only what ``acep``
    embeds (no download, no shared file). ``timeout`` guards against a hang, not speed (the
    benchmarks measure that): a quick run of 80 s took over 120 s on a busy 2-core CI."""
    env = None
    if offline:
        env = {**os.environ, "HOME": str(out), "XDG_CACHE_HOME": str(out / "cache")}
        env.pop(data.FLIGHTS_ENV, None)
    return subprocess.run([sys.executable, "-m", f"bench.{name}", "--quick", "--out", str(out),
                           *options],
                          cwd=ROOT, env=env, check=check, timeout=timeout,
                          capture_output=True, text=True)


def tiny_flights(path: Path, drop: str | None = None) -> Path:
    """A few thousand rows shaped like flights-3m.parquet (without the column ``drop``)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    n = 3000
    table = pa.table({"date": pa.array(np.arange(n) * 60_000_000, pa.timestamp("us")),
                      "delay": pa.array(np.arange(n) % 90 - 10, pa.int64()),
                      "distance": pa.array(np.full(n, 500), pa.int64()),
                      "origin": pa.array(["ATL", "ORD", "SFO"] * (n // 3), pa.large_string()),
                      "destination": pa.array(["LAX"] * n, pa.large_string())})
    pq.write_table(table.drop([drop]) if drop else table, path)
    return path
