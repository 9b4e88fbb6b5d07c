"""``acep match`` end to end against only reading the file: CPU seconds, median of repeats.

``python -m bench.engine.cli [--data flights-3m.parquet] [--out DIR] [--repeats 3]``
writes ``DIR/cli.json`` (default ``bench/engine/results``) and prints one line per run:

- ``read_in_process``: ``read_events`` of the file into event batches in a running
  process (pyarrow imported, one read before, so no first-use costs);
- ``read_in_process_first``: the same, the first read of the process;
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
