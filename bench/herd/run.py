"""A fleet reconnecting at once to one collector: the collector's overload limits on and off.

After a collector outage (an upgrade, a network cut) every device has a backlog, and all of
them send it the moment the collector is back. This benchmark plays that moment with the
real parts and measures what the limits of ``edge/collector/admission.py`` (``--device-uploads``,
``--max-wait``) change:

1. **Batches.** The real agent (``edge.agent.Agent``, no budget, outbox only) over the
   first ``events`` flights as JSON Lines: its outbox's batches, as it would upload them
   (about 66 KB each).
2. **Fleet.** ``devices`` devices, each registered with the collector (its own token) and
   with an outbox of its own (``edge.agent.outbox.Outbox``, SQLite, the agent's default
   backoff) holding ``per_device`` of those batches re-labelled as its own (device id,
   sequence). Each device drains its outbox with the agent's own uploader thread
   (``edge.agent.uploader.Uploader`` over ``Uplink``, request timeout ``timeout``), all started at
   once.
3. **Collector.** ``python -m edge.collector`` on 127.0.0.1 (2 re-check workers, SQLite,
   Parquet archive), fresh for each run, with the limits:
   - ``none``: ``--max-wait 0 --device-uploads 1000000`` (as before the limits);
   - ``per-device``: ``--max-wait 0`` (one upload per device at a time);
   - ``both``: ``--max-wait {max_wait}`` and one upload per device (the defaults, 5 s
     against the agents' 10 s, unless ``--quick``);
   - ``both-at-once``: as ``both``, with agents that send each body at once
     (``collector.expect_continue = false``; the others wait for ``100 Continue``).
4. **Figures** per run: seconds until every batch is acknowledged; the devices' attempts,
   what became of them (200, 429, 503, timeouts) and the body bytes they put on the wire
   (``Uplink.bytes_on_wire``: a body refused before ``100 Continue`` is not sent); the
   collector's
   ``/metrics`` (batches decoded: each decode is a re-check; body bytes read), also once
   a second during the run (the timeline); its peak memory (``VmHWM`` of the server
   process, without its re-check workers); the batches in its database (every one
   exactly once, checked). Each limit is run ``repeats`` times, in turn, and the run of
   median drain time is reported with every run's time.

In ``--quick`` mode everything is scaled down together (100 devices; the agents' timeout
0.5 s and ``--max-wait`` 0.25 s, the defaults' ratio), so that its 200 batches also
overload the collector. ``--devices``, ``--limits`` and ``--repeats`` run a part of the
benchmark (its figures go to ``results/quick/``, as ``--quick``'s).
"""

from __future__ import annotations

import argparse
import gzip
import json
import logging
import os
import sqlite3
import sys
import time
import urllib.request
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from acep.arguments import whole_number

from ..common import bench_main, bench_parser, machine
from ..edge import streams
from ..edge.ingest import agent_bodies
from ..edge.procs import Collector

RESULTS = Path(__file__).with_name("results")


LIMITS = ("none", "per-device", "both", "both-at-once")


@dataclass(frozen=True)
class Sizes:
    events: int
    fleets: tuple[int, ...]  # devices, one run of each limit per fleet size
    per_device: int
    timeout: float  # the agents' request timeout, seconds
    max_wait: float  # --max-wait of the "both" runs
    repeats: int  # runs of each limit per fleet size, taken in turn
    limits: tuple[str, ...] = LIMITS  # the collector's limits, each run per fleet size


FULL = Sizes(events=60_000, fleets=(400, 1600), per_device=2, timeout=10.0, max_wait=5.0,
             repeats=3)
QUICK = Sizes(events=20_000, fleets=(100,), per_device=2, timeout=0.5, max_wait=0.25,
              repeats=1)
MAX_RUN = 600.0  # seconds a run may take to drain before it is called stuck
SAMPLE_EVERY = 1.0  # seconds between two looks at the collector's /metrics


def limits(sizes: Sizes) -> dict[str, tuple[tuple[str, ...], bool]]:
    """The collector options of each run, and whether its agents wait for 100 Continue."""
    both = ("--max-wait", f"{sizes.max_wait:g}")
    every = {"none": (("--max-wait", "0", "--device-uploads", "1000000"), True),
             "per-device": (("--max-wait", "0"), True),
             "both": (both, True),
             "both-at-once": (both, False)}
    return {name: every[name] for name in sizes.limits}


class TimedUplink:
    """An ``Uplink`` that notes each upload's answer, how long it took and whether its
    body was sent."""

    def __init__(self, uplink):
        self.uplink, self.answers = uplink, []

    def post_batch(self, body: bytes):
        t0, sent = time.perf_counter(), self.uplink.bytes_on_wire
        out = self.uplink.post_batch(body)
        status = out.status if out.status is not None else (
            "timeout" if "timed out" in out.detail else "network")
        self.answers.append((status, time.perf_counter() - t0,
                             self.uplink.bytes_on_wire > sent))
        return out

    def __getattr__(self, name):
        return getattr(self.uplink, name)


def fleet(run: Path, bodies: list[bytes], devices: int, sizes: Sizes
          ) -> tuple[list, dict, list[int]]:
    """Each device's outbox with its backlog, the tokens (registered in the database) and
    the size of every batch in the backlogs."""
    from edge.agent.outbox import Outbox
    from edge.collector.store import open_store
    from edge.wire import decode_batch, encode_batch

    store = open_store(run / "collector.db")
    tokens = {f"dev-{i:04d}": store.add_device(f"dev-{i:04d}") for i in range(devices)}
    store.close()
    outboxes, batch_sizes = [], []
    for i, device in enumerate(tokens):
        outbox = Outbox(run / "outboxes" / f"{device}.db")
        for seq in range(sizes.per_device):
            batch = replace(decode_batch(bodies[(i * sizes.per_device + seq) % len(bodies)]),
                            device=device, seq=seq)
            body = encode_batch(batch)
            outbox.put(body, batch.batch_id)
            batch_sizes.append(len(body))
        outboxes.append(outbox)
    return outboxes, tokens, batch_sizes


def one_run(run: Path, bodies: list[bytes], devices: int, sizes: Sizes,
            options: tuple[str, ...], expect_continue: bool) -> dict:
    """The fleet drains its backlogs into a fresh collector with ``options``."""
    from edge.agent.uplink import Uplink
    from edge.agent.uploader import Uploader

    (run / "outboxes").mkdir(parents=True)
    outboxes, tokens, batch_bytes = fleet(run, bodies, devices, sizes)
    backlog = sum(batch_bytes)
    collector = Collector(run / "collector.db", run / "archive", options=options)
    collector.start()
    try:
        uplinks = [TimedUplink(Uplink(collector.url, token, timeout=sizes.timeout,
                                      expect_continue=expect_continue))
                   for token in tokens.values()]
        uploaders = [Uploader(outbox, uplink) for outbox, uplink in zip(outboxes, uplinks)]
        total = devices * sizes.per_device
        t0 = time.perf_counter()
        for u in uploaders:
            u.start()
        timeline, next_sample = [], t0
        cpu0, collector_cpu0 = _cpu_seconds(), _tree_cpu_seconds(collector.proc.pid)
        while sum(u.counts["acked"] for u in uploaders) < total:
            now = time.perf_counter()
            if now - t0 > MAX_RUN:
                raise RuntimeError(f"the fleet did not drain in {MAX_RUN:.0f} s")
            if now >= next_sample:
                timeline.append(_sample(collector.url, now - t0))
                next_sample += SAMPLE_EVERY
            time.sleep(0.05)
        seconds = time.perf_counter() - t0
        fleet_cpu = _cpu_seconds() - cpu0
        collector_cpu = _tree_cpu_seconds(collector.proc.pid) - collector_cpu0
        metrics = json.load(urllib.request.urlopen(collector.url + "/metrics", timeout=30))
        peak_mib = _vm_hwm_mib(collector.proc.pid)
        _stop_all(uploaders)
    finally:
        t0 = time.perf_counter()
        collector.stop()
        stop_seconds = time.perf_counter() - t0
        for outbox in outboxes:
            outbox.close()
    sent = sum(u.bytes_on_wire for u in uplinks)
    return {"devices": devices, "batches": total, "options": list(options),
            "expect_continue": expect_continue, "expect_kept": sum(
                u.expect_continue for u in uplinks),
            "gzip_taken": sum(u.gzip_taken for u in uplinks),
            "seconds": seconds, "batches_per_s": total / seconds,
            **_answers([a for u in uplinks for a in u.answers]),
            "collector": {k: metrics[k] for k in (
                "batches_stored", "batches_duplicate", "batches_decoded", "bytes_in",
                "bytes_in_wire",
                "refused_busy", "refused_device_busy", "requests")},
            "decoded_per_batch": metrics["batches_decoded"] / total,
            "bytes_read_per_byte": metrics["bytes_in"] / backlog,
            "bytes_sent_per_byte": sent / backlog, "body_bytes_sent": sent,
            "backlog_bytes": backlog, "batch_bytes_range": [min(batch_bytes),
                                                            max(batch_bytes)],
            "collector_peak_rss_mib": peak_mib, "collector_stop_seconds": stop_seconds,
            "collector_cpu_s": collector_cpu, "fleet_cpu_s": fleet_cpu,
            "stored_once": _stored_once(run / "collector.db", set(tokens), sizes.per_device),
            "timeline": timeline}


def _sample(url: str, t: float) -> dict:
    """The collector's progress and admission gauges at ``t`` seconds into the run."""
    doc = json.load(urllib.request.urlopen(url + "/metrics", timeout=30))
    return {"t": round(t, 2), **{k: doc[k] for k in (
        "batches_stored", "uploads_pending", "expected_wait_seconds", "departure_rate_bytes",
        "refused_busy", "refused_device_busy")}}


def _answers(answers: list[tuple]) -> dict:
    """The attempts by answer, the refusals (429, 503) whose body was sent all the same,
    and the seconds of the 200s (median, 95th percentile)."""
    by = {}
    for status, _, _ in answers:
        by[str(status)] = by.get(str(status), 0) + 1
    ok = sorted(s for status, s, _ in answers if status == 200)
    pick = (lambda q: ok[min(int(q * len(ok)), len(ok) - 1)]) if ok else (lambda q: None)
    return {"attempts": len(answers), "answers": by, "timeouts": by.get("timeout", 0),
            "refusals_with_body": sum(sent for status, _, sent in answers
                                      if status in (429, 503)),
            "ok_seconds_p50": pick(0.5), "ok_seconds_p95": pick(0.95)}


def _stored_once(db: Path, devices: set, per_device: int) -> bool:
    with sqlite3.connect(db) as c:
        rows = c.execute("SELECT device, seq FROM batches").fetchall()
    return sorted(rows) == sorted((d, s) for d in devices for s in range(per_device))


def _cpu_seconds() -> float:
    """CPU seconds of this process (the fleet's threads) so far."""
    t = os.times()
    return t.user + t.system


def _tree_cpu_seconds(pid: int) -> float:
    """CPU seconds of a process and its children (the collector and its re-check workers)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for p in [pid, *_children(pid)]:
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / tick  # utime, stime
    return total


def _children(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            pass
    return out


def _vm_hwm_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _stop_all(uploaders) -> None:
    for u in uploaders:
        u.stop_event.set()
        u.wake.set()
    for u in uploaders:
        u.join(30)


def benchmark(work: Path, data_path: str | None, quick: bool, sizes: Sizes) -> dict:
    agent_log = logging.getLogger("edge.agent")
    level = agent_log.level
    agent_log.setLevel(logging.ERROR)  # a warning per refused device
    try:
        return _benchmark(work, data_path, quick, sizes)
    finally:
        agent_log.setLevel(level)  # a caller in the same process logs as before


def _benchmark(work: Path, data_path: str | None, quick: bool, sizes: Sizes) -> dict:
    _say(f"agent batches over {sizes.events:,} events ...")
    bodies, described = agent_bodies(work, data_path, quick, sizes.events)
    packed = gzip_figures(bodies)
    _say("gzip: " + ", ".join(f"level {k}: {v['ratio']:.3f} of the bytes, "
                              f"{v['compress_ms']:.2f} ms per batch"
                              for k, v in packed["levels"].items()))
    runs = []
    for devices in sizes.fleets:
        for repeat in range(sizes.repeats):  # in turn: a slow spell hits every limit alike
            for name, (options, expect) in limits(sizes).items():
                _say(f"{devices} devices x {sizes.per_device} batches, limits: {name}, "
                     f"run {repeat + 1} of {sizes.repeats} ...")
                result = one_run(work / f"{devices}-{name}-{repeat}", bodies, devices, sizes,
                                 options, expect)
                runs.append({"limits": name, "repeat": repeat, **result})
                _say(_line(runs[-1]))
    return {"benchmark": "herd", "machine": machine(), "sizes": asdict(sizes),
            "pattern": streams.PATTERN, "stream": described, "distinct_bodies": len(bodies),
            "mean_batch_bytes": sum(map(len, bodies)) / len(bodies), "gzip": packed,
            "runs": runs,
            "medians": medians(runs)}


def gzip_figures(bodies: list[bytes]) -> dict:
    """What gzip makes of the agent's batches at levels 1, 6 (the agent's) and 9: the bytes
    after per byte before, and the milliseconds per batch to compress and to decompress
    (on this machine; one pass over the distinct batches)."""
    from edge.agent.uplink import GZIP_LEVEL

    raw, levels = sum(map(len, bodies)), {}
    for level in (1, 6, 9):
        t0 = time.perf_counter()
        packed = [gzip.compress(body, level, mtime=0) for body in bodies]
        t1 = time.perf_counter()
        assert [gzip.decompress(p) for p in packed] == bodies
        t2 = time.perf_counter()
        levels[str(level)] = {"ratio": sum(map(len, packed)) / raw,
                              "compress_ms": (t1 - t0) * 1000 / len(bodies),
                              "decompress_ms": (t2 - t1) * 1000 / len(bodies)}
    return {"agent_level": GZIP_LEVEL, "batches": len(bodies), "levels": levels}


def medians(runs: list[dict]) -> list[dict]:
    """Per fleet size and limits, the run of median drain time, with every run's time."""
    out = []
    for key in dict.fromkeys((r["devices"], r["limits"]) for r in runs):
        same = sorted((r for r in runs if (r["devices"], r["limits"]) == key),
                      key=lambda r: r["seconds"])
        median = {k: v for k, v in same[len(same) // 2].items() if k != "timeline"}
        out.append({**median, "runs_seconds": [r["seconds"] for r in same]})
    return out


def _say(message: str) -> None:
    print(f"[bench.herd] {message}", file=sys.stderr, flush=True)


def _line(r: dict) -> str:
    return (f"{r['devices']:5} devices  {r['limits']:12}  {r['seconds']:6.1f} s  "
            f"{r['batches_per_s']:6.1f} batches/s  attempts {r['attempts']:6,}  "
            f"timeouts {r['timeouts']:5,}  decoded/batch {r['decoded_per_batch']:.2f}  "
            f"read/backlog {r['bytes_read_per_byte']:.2f}  "
            f"sent/backlog {r['bytes_sent_per_byte']:.2f}  "
            f"peak {r['collector_peak_rss_mib']:.0f} MiB  cpu: collector "
            f"{r['collector_cpu_s']:.0f} s, fleet {r['fleet_cpu_s']:.0f} s  "
            f"once {r['stored_once']}")


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = bench_parser("herd", __doc__, RESULTS, "herd.json and herd.png",
                          "100 devices, the embedded sample without --data, timeouts scaled "
                          "down")
    part = parser.add_argument_group(
        "a part of the run (its figures go to results/quick/ unless --out is given)")
    part.add_argument("--devices", metavar="N", type=whole_number(1, "devices"), nargs="+",
                      help="fleet sizes (default: 400 1600; 100 with --quick)")
    part.add_argument("--limits", metavar="NAME", nargs="+", choices=LIMITS,
                      help=f"the collector's limits to run, of {', '.join(LIMITS)} "
                           "(default: all)")
    part.add_argument("--repeats", metavar="N", type=whole_number(1, "repeats"),
                      help="runs of each limit per fleet size (default: 3; 1 with --quick)")
    args = parser.parse_args(argv)
    args.partial = any(v is not None for v in (args.devices, args.limits, args.repeats))
    return args


def scale(args: argparse.Namespace) -> Sizes:
    """The sizes of the run: ``--quick``'s or the full run's, with the part asked for."""
    sizes = QUICK if args.quick else FULL
    return replace(sizes, fleets=tuple(dict.fromkeys(args.devices or sizes.fleets)),
                   limits=tuple(dict.fromkeys(args.limits or sizes.limits)),
                   repeats=args.repeats or sizes.repeats)


def main(argv: list[str] | None = None) -> int:
    from .plot import plot

    return bench_main("herd", argv, parse_args, benchmark, scale, plot, summary)


def summary(results: dict) -> str:
    """One line per fleet size and limits: its median run, and every run's seconds."""
    return "\n".join(f"{_line(r)}  (runs: {', '.join(f'{s:.1f}' for s in r['runs_seconds'])} s)"
                     for r in results["medians"])
