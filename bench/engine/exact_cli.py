"""``acep exact`` end to end on generated events: CPU seconds, median of repeats.

``python -m bench.engine.exact_cli [--events 20000 200000] [--repeats 3] [--root DIR]
[--out DIR]`` writes ``DIR/exact_cli.json`` and ``DIR/exact_cli.png`` (default
``bench/engine/results``) and prints one line per size and engine: the compiled cores
(``ACEP_NFAB_CORE=auto``) and the pure-Python engines (``ACEP_NFAB_CORE=off``), side by
side. The query is any-match ``SEQ(A a, B+ b[], A c)`` partitioned by
``[symbol]`` within 4 s; the events (seeded) have fractional timestamps, two types and
five symbols. ``--root`` runs another checkout (e.g. the main one, for a before figure).
Each run is ``python -m acep.cli exact`` as a child process under ``nice`` with its output
to /dev/null; CPU is user + system time from ``getrusage``. With ``--output-share`` (this
checkout only), one more child times the stages in process: reading, the engine, and the
lines of its matches per match (a dict and ``json.dumps`` each, as before the bulk
writer) and in bulk (``acep/cli/_exact_lines.py``), median of the repeats.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

QUERY = "PATTERN SEQ(A a, B+ b[], A c)\nWHERE skip_till_any_match([symbol])\nWITHIN 4 seconds\n"


def write_events(path: Path, n: int, seed: int = 7) -> None:
    """``n`` events, 0.1-0.4 s apart, as JSON Lines with ISO timestamps to the millisecond."""
    rng = random.Random(seed)
    ms = 1_700_000_000_000
    with path.open("w") as out:
        for _ in range(n):
            ms += rng.randint(100, 400)
            stamp = datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")
            out.write(
                json.dumps(
                    {"type": rng.choice("AAB"), "t": stamp[:-3], "symbol": rng.choice("VWXYZ")}
                )
                + "\n"
            )


CORES = {"core": "auto", "pure": "off"}  # row name -> ACEP_NFAB_CORE


def _child(args: list[str], root: Path, core: str = "auto") -> tuple[float, float]:
    """CPU and wall seconds of ``python ARGS`` with ``root`` first on the path."""
    env = {**os.environ, "PYTHONPATH": str(root), "ACEP_NFAB_CORE": core}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall = time.perf_counter()
    subprocess.run(
        ["nice", sys.executable, *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=True,
        cwd=root,
        env=env,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return cpu, time.perf_counter() - wall


def measure(n: int, repeats: int, root: Path, work: Path, core: str = "auto") -> dict:
    events, query = work / f"events-{n}.jsonl", work / "query.sase"
    query.write_text(QUERY)
    if not events.exists():
        write_events(events, n)
    args = ["-m", "acep.cli", "exact", str(query), str(events)]
    runs = [_child(args, root, core) for _ in range(repeats)]
    return {
        "events": n,
        "cpu_s": statistics.median(c for c, _ in runs),
        "wall_s": statistics.median(w for _, w in runs),
        "runs": runs,
    }


_STAGES = """
import json, resource, statistics, sys
from acep.cli._exact_lines import verbose_lines
from acep.cli.exact import _ExactPrinter
from acep.events import read_all
from acep.nfab import Engine, load_query

def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime

def timed(work):
    c = cpu()
    out = work()
    return cpu() - c, out

query = load_query(sys.argv[1])
read, batch = timed(lambda: read_all(sys.argv[2]))
engine, found = timed(lambda: Engine(query, max_entries=1_000_000).run(batch))
printer = _ExactPrinter(query, batch)
per_match = [timed(lambda: [json.dumps(printer.match(m)) for m in found])[0]
             for _ in range(int(sys.argv[3]))]
args = (found, printer.components, printer.tags, printer.is_time)
bulk = [timed(lambda: "".join(verbose_lines(*args)))[0] for _ in range(int(sys.argv[3]))]
print(json.dumps({"read_s": read, "engine_s": engine, "matches": len(found),
                  "per_match_s": statistics.median(per_match), "bulk_s": statistics.median(bulk)}))
"""


def stages(n: int, repeats: int, work: Path) -> dict:
    """CPU seconds of the stages of ``acep exact`` in one process (see the module doc)."""
    out = subprocess.run(
        [
            "nice",
            sys.executable,
            "-c",
            _STAGES,
            str(work / "query.sase"),
            str(work / f"events-{n}.jsonl"),
            str(repeats),
        ],
        check=True,
        capture_output=True,
        text=True,
        cwd=ROOT,
    ).stdout
    return json.loads(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, nargs="+", default=[20_000, 200_000])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--root", type=Path, default=ROOT)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "engine" / "results")
    ap.add_argument("--output-share", action="store_true")
    args = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for n in args.events:
            row = {"events": n}
            for name, core in CORES.items():
                row[name] = measure(n, args.repeats, args.root.resolve(), Path(work), core)
                print(f"{n} events, {name}: {row[name]['cpu_s']:.2f} s CPU "
                      f"({row[name]['wall_s']:.2f} s wall), median", flush=True)
            row["pure_over_core"] = row["pure"]["cpu_s"] / row["core"]["cpu_s"]
            rows.append(row)
            if args.output_share:
                row["stages"] = s = stages(n, args.repeats, Path(work))
                print(
                    f"  in process: read {s['read_s']:.2f} s, engine {s['engine_s']:.2f} s, "
                    f"{s['matches']} matches' lines {s['per_match_s']:.2f} s per match, "
                    f"{s['bulk_s']:.2f} s in bulk",
                    flush=True,
                )
    args.out.mkdir(parents=True, exist_ok=True)
    root = "." if args.root.resolve() == ROOT else str(args.root)
    (args.out / "exact_cli.json").write_text(
        json.dumps(
            {
                "query": QUERY,
                "root": root,
                "python": sys.version.split()[0],
                "machine": platform.machine(),
                "rows": rows,
            },
            indent=1,
        )
        + "\n"
    )
    plot(rows, args.out / "exact_cli.png")
    return 0


def plot(rows: list[dict], path: Path) -> None:
    """``exact_cli.png``: CPU seconds of ``acep exact`` per size, cores beside pure engines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 3.6), layout="constrained")
    x = range(len(rows))
    for shift, (name, colour) in zip((-0.2, 0.2), (("pure", "0.6"), ("core", "#08519c"))):
        ax.bar([i + shift for i in x], [r[name]["cpu_s"] for r in rows], 0.4, color=colour,
               label={"pure": "pure-Python engines", "core": "compiled cores"}[name])
    for i, r in enumerate(rows):
        ax.text(i + 0.2, r["core"]["cpu_s"], f"{r['pure_over_core']:.1f}x", ha="center",
                va="bottom", fontsize=8)
    ax.set_xticks(list(x), [f"{r['events']:,} events" for r in rows])
    ax.set_ylabel("CPU seconds, median of the repeats")
    ax.set_title("acep exact, any-match SEQ(A a, B+ b[], A c) [symbol] within 4 s", fontsize=9)
    ax.legend(fontsize=8)
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
