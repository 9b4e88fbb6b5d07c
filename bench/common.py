"""What every benchmark shares: the machine description and the atomic JSON write."""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

import acep

from . import data


def machine() -> dict:
    """The machine and software a result was measured on."""
    return {"cpu_count": os.cpu_count(), "cpu": _cpu_model(), "python": platform.python_version(),
            "platform": platform.platform(), "numpy": np.__version__,
            "acep_backend": acep.backend(),
            "date": datetime.now(timezone.utc).isoformat(timespec="seconds")}


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def write_json(results: dict, path: Path) -> None:
    """Write through a temporary file, so an interrupted run never leaves half a JSON."""
    partial = path.with_name(path.name + ".tmp")
    partial.write_text(json.dumps(results, indent=1) + "\n")
    partial.replace(path)


DATA_HELP = ("flights-3m.parquet (default: $ACEP_FLIGHTS, else a cached download of the npm "
             "package vega-datasets@3.2.1)")


def bench_parser(name: str, doc: str, results: Path, outputs: str, quick_help: str,
                 data: bool = True) -> argparse.ArgumentParser:
    """The options every benchmark takes: ``[--data PATH] [--quick] [--out DIR]``."""
    parser = argparse.ArgumentParser(prog=f"python -m bench.{name}",
                                     description=doc.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    if data:
        parser.add_argument("--data", metavar="PATH", help=DATA_HELP)
    parser.add_argument("--quick", action="store_true", help=quick_help)
    parser.add_argument("--out", metavar="DIR", type=Path, default=results,
                        help=f"where {outputs} go (default: {results})")
    return parser


def run_and_publish(name: str, argv: list[str], args: argparse.Namespace,
                    measure: Callable[[Path], dict], plot, summary: Callable[[dict], str],
                    **settings) -> dict | None:
    """A benchmark's ``main``: ``measure(work)`` in a temporary directory it may fill, its
    results after the command line (``command``) and before ``settings`` (``--quick``,
    these, the wall seconds), published into ``args.out`` (:func:`publish`). None, the
    reason printed, when the flights cannot be had (the benchmark exits 2)."""
    started = time.perf_counter()
    try:
        with tempfile.TemporaryDirectory(prefix=f"acep-bench-{name}-") as tmp:
            results = {"command": " ".join([f"python -m bench.{name}", *argv]),
                       **measure(Path(tmp))}
    except data.DataError as e:
        print(f"error: {e}", file=sys.stderr)
        return None
    results["settings"] = {"quick": args.quick, **settings,
                           "wall_seconds": round(time.perf_counter() - started, 1)}
    publish(results, args.out, name, plot, summary(results))
    return results


def publish(results: dict, out: Path, name: str, plot, summary: str) -> None:
    """Write ``<name>.json`` and ``<name>.png`` (by ``plot``) into ``out``; print the summary."""
    out.mkdir(parents=True, exist_ok=True)
    write_json(results, out / f"{name}.json")
    plot(results, out / f"{name}.png")
    print(summary)
    print(f"wrote {out / f'{name}.json'} and {out / f'{name}.png'}")


def table_main(name: str, markdown: Callable[[dict], str], results: Path,
               argv: list[str] | None, end: str = "\n") -> int:
    """``python -m bench.<name>.table [JSON or DIR]``: the README's tables of a results JSON."""
    parser = argparse.ArgumentParser(prog=f"python -m bench.{name}.table",
                                     description="The README's tables from a results JSON.")
    parser.add_argument("results", nargs="?", type=Path, default=results / f"{name}.json",
                        help=f"the JSON python -m bench.{name} wrote, or the --out directory "
                             "it wrote it in (default: %(default)s)")
    path = parser.parse_args(argv).results
    if path.is_dir():
        path = path / f"{name}.json"
    try:
        shown = markdown(json.loads(path.read_text()))
    except OSError as e:
        return _table_error(f"{path}: {e.strerror or e}")
    except ValueError as e:
        return _table_error(f"{path}: not JSON ({e})")
    except (KeyError, TypeError, IndexError) as e:
        return _table_error(f"{path}: not the results of python -m bench.{name} "
                            f"({type(e).__name__}: {e})")
    print(shown, end=end)
    return 0


def _table_error(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2
