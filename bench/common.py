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
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

import acep

from . import data


def machine() -> dict:
    """The machine and software a result was measured on."""
    return {"cpu_count": os.cpu_count(), "cpu": _cpu_model(), "python": platform.python_version(),
            "platform": platform.platform(), "numpy": np.__version__,
            "acep_backend": acep.backend(),
            "date": datetime.now(UTC).isoformat(timespec="seconds")}


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
QUICK_DIR = "quick"  # under results/, git-ignored: where runs not to publish go by default


def bench_parser(name: str, doc: str, results: Path, outputs: str, quick_help: str,
                 data: bool = True) -> argparse.ArgumentParser:
    """The options every benchmark takes: ``[--data PATH] [--quick] [--out DIR]``."""
    parser = argparse.ArgumentParser(prog=f"python -m bench.{name}",
                                     description=doc.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    if data:
        parser.add_argument("--data", metavar="PATH", help=DATA_HELP)
    parser.add_argument("--quick", action="store_true", help=quick_help)
    parser.add_argument("--out", metavar="DIR", type=Path,
                        help=f"where {outputs} go (default: {results} for a full run, "
                             f"{results / QUICK_DIR} for --quick and other runs whose figures "
                             "are not the published ones)")
    parser.set_defaults(results=results)
    return parser


def ready(args: argparse.Namespace, partial: bool = False) -> bool:
    """Check what a run needs before it measures anything: ``args.out`` made a directory
    to write in, ``args.data`` a readable flights file (downloaded if need be; none for
    ``--quick`` without ``--data``, which uses the embedded sample). ``--out`` defaults to
    ``results/`` (from :func:`bench_parser`), or ``results/quick/`` for ``--quick``, a
    ``partial`` run (the argument, or ``args.partial``: options that chose part of it)
    or data other than the published flights file, so that none replaces the published
    full-run figures. False, the reason printed in one line, when the
    benchmark should exit 2."""
    partial = partial or args.quick or getattr(args, "partial", False)
    try:
        if args.out is not None:  # before a download
            args.out = output_dir(args.out, args.results)
        if hasattr(args, "data") and (args.data is not None or not args.quick):
            args.data = str(data.flights_path(args.data))
            if args.out is None and not partial and not data.is_published(args.data):
                partial = True
                print(f"note: {args.data} is not the flights file of the published figures "
                      f"(SHA-256): the results go to {args.results / QUICK_DIR}",
                      file=sys.stderr)
        if args.out is None:
            args.out = output_dir(None, args.results, partial)
    except (OutputError, data.DataError) as e:
        print(f"error: {e}", file=sys.stderr)
        return False
    return True


class OutputError(ValueError):
    """``--out`` cannot hold the results; the message names it."""


def output_dir(out: Path | None, results: Path, partial: bool = False) -> Path:
    """``out`` (else ``results``, or its ``quick/`` for a ``partial`` run), made a
    directory this process can write in."""
    if out is None:
        out = results / QUICK_DIR if partial else results
    if out.exists() and not out.is_dir():
        raise OutputError(f"--out {out}: not a directory")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputError(f"--out {out}: {e.strerror or e}") from None
    if not os.access(out, os.W_OK | os.X_OK):
        raise OutputError(f"--out {out}: not writable")
    return out


def bench_main(name: str, argv: list[str] | None,
               parse_args: Callable[[list[str]], argparse.Namespace],
               benchmark: Callable[..., dict], scale: Callable[[argparse.Namespace], object],
               plot, summary: Callable[[dict], str], setting: str | None = None,
               verdict: Callable[[dict], int] = lambda results: 0) -> int:
    """The ``main`` of ``python -m bench.<name>``: the command line (``argv``, else
    ``sys.argv[1:]``) read by ``parse_args``, then ``benchmark(work, args.data, args.quick,
    scale(args))`` measured and published (:func:`run_and_publish`; the scale in the
    settings as ``setting`` when one is named). Exit 2 when the inputs or the flights
    cannot be had, else ``verdict(results)``."""
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    size = scale(args)
    results = run_and_publish(name, argv, args, lambda work: benchmark(
        work, args.data, args.quick, size), plot, summary, **({setting: size} if setting else {}))
    return 2 if results is None else verdict(results)


def run_and_publish(name: str, argv: list[str], args: argparse.Namespace,
                    measure: Callable[[Path], dict], plot, summary: Callable[[dict], str],
                    **settings) -> dict | None:
    """A benchmark's ``main``: :func:`ready`, then ``measure(work)`` in a temporary directory
    it may fill, its results after the command line (``command``) and before ``settings``
    (``--quick``, these, the wall seconds), published into ``args.out`` (:func:`publish`).
    None, the reason printed, when the inputs or the flights cannot be had (the benchmark
    exits 2)."""
    if not ready(args):
        return None
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
    publish(results, args.out, name, {f"{name}.png": plot}, summary(results))
    return results


def publish(results: dict, out: Path, name: str, plots: dict[str, Callable[[dict, Path], None]],
            summary: str, drop: tuple[str, ...] = ()) -> None:
    """Write ``<name>.json`` and every figure of ``plots`` (file name -> function) into
    ``out`` as one set: all are made in a folder beside them first, so a figure that fails
    leaves the JSON and figures of the run before as they were. ``drop``: figures of earlier
    runs that this run has not made (removed, not left beside a JSON they do not show).
    Print the summary."""
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out, prefix=".publishing-") as tmp:
        made = [f"{name}.json", *plots]
        write_json(results, Path(tmp) / made[0])
        for file, plot in plots.items():
            plot(results, Path(tmp) / file)
        for file in made:
            (Path(tmp) / file).replace(out / file)
    for file in drop:
        (out / file).unlink(missing_ok=True)
    print(summary)
    print(f"wrote {' and '.join(str(out / file) for file in made)}")


def ratio(x: float) -> str:
    """A speed-up for a summary line: whole above 10, else two significant digits."""
    return f"{x:,.0f}x" if x >= 10 else f"{x:.2g}x"


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
