"""``acep match`` end to end against only reading the file: CPU seconds, median of repeats.

``python -m bench.engine.cli [--data flights-3m.parquet] [--out DIR] [--repeats 3]``
writes ``DIR/cli.json`` and ``DIR/cli.png`` (default ``bench/engine/results``) and prints
one line per run:

- ``read_in_process``: ``read_events`` of the file into event batches in a running
  process (pyarrow imported, one read before, so no first-use costs);
- ``read_in_process_first``: the same, the first read of the process;
- ``start_process``: a process that only imports what reading needs (acep, pyarrow), the
  fixed cost every run below pays;
- ``read_process``: a process that only imports acep and reads the file;
- ``match_in_process``: what ``acep match`` does after its start, in a running process
  (one read before, as for ``read_in_process``): read, match, write the lines to /dev/null;
- ``match`` and ``match_bundles``: ``acep match`` (pattern ``late verylate late``,
  ``-w 1h -k 1 --spec flights --partition origin``) to /dev/null, per match and with
  ``--bundles``.

Every run is a child process under ``nice``; CPU is user + system time from
``getrusage`` (steadier than wall time on a shared machine).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MATCH = ["-p", "late verylate late", "-w", "1h", "-k", "1", "--spec", "flights",
         "--partition", "origin", "--no-progress"]
_START = "import pyarrow.parquet\nfrom acep import read_events\nfrom acep.events import PRESETS\n"
_READ = ("from acep import read_events\nfrom acep.events import PRESETS\n"
         "n = sum(len(b) for b in read_events({data!r}, PRESETS['flights']))\n")
_TIMED = ("import resource, time\nimport pyarrow.parquet\n"
          "from acep import read_events\nfrom acep.events import PRESETS\n{warm}"
          "r = resource.getrusage(resource.RUSAGE_SELF)\nc, w = r.ru_utime + r.ru_stime, "
          "time.perf_counter()\n" + _READ +
          "r = resource.getrusage(resource.RUSAGE_SELF)\n"
          "print(r.ru_utime + r.ru_stime - c, time.perf_counter() - w)\n")


def _child(args: list[str]) -> tuple[float, float]:
    """CPU and wall seconds of ``python ARGS`` (stdout to /dev/null)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall = time.perf_counter()
    subprocess.run(["nice", sys.executable, *args], stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, check=True, cwd=ROOT)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return cpu, time.perf_counter() - wall


_MATCH = ("from acep import Matcher, Pattern\nfrom acep._output import match_bytes\n"
          "m = Matcher(Pattern.compile('late verylate late'), 3600.0, 1, partition='origin')\n"
          "with open('/dev/null', 'wb') as out:\n"
          "    for b in read_events({data!r}, PRESETS['flights']):\n"
          "        out.write(match_bytes(m.match_batch(b)))\n"
          "    out.write(match_bytes(m.flush()))\n")


def _in_process(data: str, warm: bool, work: str = _READ) -> tuple[float, float]:
    timed = _TIMED.replace(_READ, work)
    code = timed.format(warm=_READ.format(data=data) if warm else "", data=data)
    out = subprocess.run(["nice", sys.executable, "-c", code], capture_output=True,
                         text=True, check=True, cwd=ROOT).stdout.split()
    return float(out[0]), float(out[1])


def measure(data: str, repeats: int) -> dict:
    """Every run's CPU and wall seconds, their medians and the ratios of ``match``."""
    runs = {
        "read_in_process": lambda: _in_process(data, True),
        "read_in_process_first": lambda: _in_process(data, False),
        "start_process": lambda: _child(["-c", _START]),
        "read_process": lambda: _child(["-c", _READ.format(data=data)]),
        "match_in_process": lambda: _in_process(data, True, _MATCH),
        "match": lambda: _child(["-m", "acep", "match", data, *MATCH]),
        "match_bundles": lambda: _child(["-m", "acep", "match", data, *MATCH, "--bundles"]),
    }
    out = {}
    for name, run in runs.items():
        times = [run() for _ in range(repeats)]
        out[name] = {"cpu_s": statistics.median(t[0] for t in times),
                     "wall_s": statistics.median(t[1] for t in times),
                     "cpu_runs": [round(t[0], 3) for t in times]}
        print(f"{name}: {out[name]['cpu_s']:.3f} s CPU ({out[name]['wall_s']:.3f} s wall)",
              flush=True)
    match = out["match"]["cpu_s"]
    ratios = {k: match / out[k]["cpu_s"] for k in
              ("read_in_process", "read_in_process_first", "read_process")}
    ratios["match_in_process / read_in_process"] = \
        out["match_in_process"]["cpu_s"] / out["read_in_process"]["cpu_s"]
    return {"runs": out, "match_over": ratios}


def main(argv: list[str] | None = None) -> int:
    """Measure and write ``cli.json``."""
    parser = argparse.ArgumentParser(prog="python -m bench.engine.cli",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=os.environ.get("ACEP_FLIGHTS",
                                                         "flights-3m.parquet"))
    parser.add_argument("--out", default=str(ROOT / "bench" / "engine" / "results"))
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    data = os.path.abspath(args.data)
    if not os.path.isfile(data):
        print(f"error: no such file: {data} (give --data)", file=sys.stderr)
        return 2
    result = measure(data, args.repeats)
    result.update(data=data, repeats=args.repeats, command=["acep", "match", "FILE", *MATCH],
                  load=os.getloadavg(), python=platform.python_version(),
                  date=time.strftime("%Y-%m-%d %H:%M", time.gmtime()))
    for name, ratio in result["match_over"].items():
        print(f"{name if '/' in name else 'match / ' + name}: {ratio:.2f}x")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "cli.json").write_text(json.dumps(result, indent=2) + "\n")
    plot(result, Path(args.out) / "cli.png")
    return 0


def plot(result: dict, path: Path) -> None:
    """``cli.png``: each run's CPU seconds (median, the repeats as dots), fastest at the top."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = sorted(result["runs"].items(), key=lambda kv: -kv[1]["cpu_s"])
    fig, ax = plt.subplots(figsize=(7.5, 0.45 * len(runs) + 1.4), layout="constrained")
    y = range(len(runs))
    ax.barh(y, [r["cpu_s"] for _, r in runs], color="#9ecae1")
    for i, (_, r) in enumerate(runs):
        ax.plot(r["cpu_runs"], [i] * len(r["cpu_runs"]), "k.", ms=4)
        ax.text(max(r["cpu_runs"]), i, f"  {r['cpu_s']:.2f} s", va="center", fontsize=8)
    ax.set_yticks(list(y), [name.replace("_", " ") for name, _ in runs], fontsize=8)
    ax.set_xlabel("CPU seconds (user + system), median of the repeats")
    ratios = result["match_over"]
    ax.set_title(f"acep match on {Path(result['data']).name}: "
                 f"{ratios['read_process']:.2f}x a process that only reads, "
                 f"{ratios['read_in_process']:.2f}x an in-process read", fontsize=9)
    ax.set_xlim(0, max(r["cpu_s"] for _, r in runs) * 1.25)
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
