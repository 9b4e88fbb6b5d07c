"""Engine benchmark: events/s of the compiled ACEP engine beside the pure-Python reference.

Run ``python -m bench.engine [--data PATH] [--quick] [--out DIR]``. It measures, in one run:

1. a throughput grid of the compiled engine (merging on): patterns of 3, 5, 7 and 10
   letters x k = 0..3 x windows 10, 100, 1000, on the flights stream (partitioned by
   origin, windows in minutes) and on a synthetic uniform stream (windows in events);
2. side by side on one prefix: the reference (``acep.reference``), the pure-Python kernel
   and the compiled kernel, each with merging off and on;
3. live match nodes per event with merging on and off, and what makes them (nodes created,
   merged and expired per event), and bytes per match node;
4. the targets of the issue, with pass/fail. The rate target is read on the headline config
   (5 letters, k = 2, a 60-minute window, the whole flights stream, best of 3 runs).

Every timed run has the garbage collector off (collected just before): the reference keeps
millions of small objects and would otherwise spend most of its time in the collector,
which would flatter the ratios. Figures go to ``engine.json`` and ``engine.png``.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
from tqdm import tqdm

from acep.events import EventBatch
from acep.matcher import Matcher
from acep.reference import acep_match

from .. import data
from ..common import bench_parser, machine, publish, ratio, ready

RESULTS = Path(__file__).with_name("results")

PATTERNS = {
    "flights": {
        3: "late ontime late",
        5: "late ontime late verylate late",
        7: "late ontime late verylate late early late",
        10: "late ontime late verylate late early late ontime verylate late",
    },
    "synthetic": {
        3: "a b c",
        5: "a b c d a",
        7: "a b c d a b c",
        10: "a b c d a b c d a b",
    },
}
KS = (0, 1, 2, 3)
WINDOWS = (10, 100, 1000)
WINDOW_UNIT = {"flights": "minutes", "synthetic": "events"}
TAG_PER_UNIT = {"flights": 60.0, "synthetic": 1.0}  # window tag = window x this
PARTITION = {"flights": "origin", "synthetic": None}
SPEEDUP_TARGET = 50.0
RATE_TARGET = 1_000_000.0


@dataclass(frozen=True)
class Config:
    """One matcher set-up: a stream, a pattern length, ``k`` and a window (stream units)."""

    stream: str
    letters: int
    k: int
    window: int

    @property
    def pattern(self) -> str:
        return PATTERNS[self.stream][self.letters]

    @property
    def window_tag(self) -> float:
        return self.window * TAG_PER_UNIT[self.stream]

    @property
    def partition(self) -> str | None:
        return PARTITION[self.stream]

    @property
    def label(self) -> str:
        unit = "min" if self.stream == "flights" else "ev"
        return f"{self.stream} {self.letters}L k={self.k} w={self.window}{unit}"

    @classmethod
    def of(cls, row: dict) -> Config:
        """The config a JSON row describes."""
        return cls(row["stream"], row["letters"], row["k"], row["window"])

    def describe(self) -> dict:
        return {**asdict(self), "pattern": self.pattern, "window_tag": self.window_tag,
                "partition": self.partition}

    def matcher(self, merge: bool = True, backend: str = "compiled") -> Matcher:
        return Matcher(self.pattern, self.window_tag, self.k, partition=self.partition,
                       merge=merge, backend=backend)


@dataclass(frozen=True)
class Sizes:
    """How much data each part of the benchmark uses."""

    synthetic_events: int
    flights_events: int | None  # None: the whole file
    probe_events: int  # a first run on this many events estimates the rate
    target_seconds: float  # each timed grid run covers about this long (or the stream)
    repeats: int
    comparisons: tuple[tuple[Config, int], ...]  # (config, prefix events)
    headline: Config


HEADLINE = Config("flights", 5, 2, 60)
FULL = Sizes(
    synthetic_events=3_000_000, flights_events=None, probe_events=50_000, target_seconds=1.0,
    repeats=3, headline=HEADLINE,
    comparisons=((Config("flights", 3, 2, 60), 100_000), (HEADLINE, 10_000),
                 (Config("flights", 7, 2, 60), 4_000), (Config("synthetic", 5, 2, 10), 100_000)),
)
QUICK = Sizes(
    synthetic_events=20_000, flights_events=5_000, probe_events=2_000, target_seconds=0.01,
    repeats=2, headline=HEADLINE,
    comparisons=((Config("flights", 3, 2, 60), 2_000), (HEADLINE, 2_000),
                 (Config("synthetic", 5, 2, 10), 2_000)),
)


# --------------------------------------------------------------------------- timing


def timed(run: Callable[[], object]) -> float:
    """Seconds ``run()`` takes, with the garbage collector collected before and off during."""
    gc.collect()
    gc.disable()
    try:
        start = time.perf_counter()
        run()
        return time.perf_counter() - start
    finally:
        gc.enable()


def run_engine(config: Config, batch: EventBatch, merge: bool = True, backend: str = "compiled",
               load: np.ndarray | None = None) -> tuple[float, Matcher, int]:
    """(seconds, matcher, matches) of one pass of the kernel over ``batch``."""
    matcher = config.matcher(merge, backend)
    found = []

    def run() -> None:
        found.append(len(matcher.match_batch(batch, load)))
        found.append(len(matcher.flush()))

    return timed(run), matcher, sum(found)


def run_reference(config: Config, rows: list[dict]) -> float:
    """Seconds of :func:`acep.reference.acep_match` over ``rows``."""
    where = [f"[{config.partition}]"] if config.partition else []
    return timed(lambda: acep_match(config.pattern, rows, config.window_tag, config.k, where))


# --------------------------------------------------------------------------- measurements


def grid_events(config: Config, batch: EventBatch, sizes: Sizes) -> int:
    """Events for one grid run: about ``target_seconds`` at the probed rate, at most all."""
    probe = data.prefix(batch, sizes.probe_events)
    seconds, _, _ = run_engine(config, probe)
    wanted = len(probe) / max(seconds, 1e-9) * sizes.target_seconds
    return min(len(batch), max(len(probe), int(wanted)))


def throughput(config: Config, batch: EventBatch, n: int, repeats: int) -> dict:
    """Events/s of the compiled engine (merging on) over the first ``n`` events."""
    events = data.prefix(batch, n)
    runs = [run_engine(config, events) for _ in range(repeats)]
    times = [seconds for seconds, _, _ in runs]
    return {**config.describe(), "events": n, "seconds": times, "events_per_s": n / min(times),
            "events_per_s_median": n / float(np.median(times)),
            "matches": runs[0][2], "peak_live": runs[0][1].stats["peak_live"]}


def comparison(config: Config, batch: EventBatch, n: int, repeats: int) -> dict:
    """The reference and both kernels, merging off and on, on the first ``n`` events.

    Each contender's time is the best of ``repeats`` runs.
    """
    events = data.prefix(batch, n)
    rows = data.as_dicts(events, (config.partition,) if config.partition else ())
    seconds = {"reference": min(run_reference(config, rows) for _ in range(repeats))}
    del rows
    for backend in ("python", "compiled"):
        for merge in (False, True):
            name = f"{backend}_merge_{'on' if merge else 'off'}"
            seconds[name] = min(run_engine(config, events, merge, backend)[0]
                                for _ in range(repeats))
    rates = {name: n / s for name, s in seconds.items()}
    speedup = {name: rate / rates["reference"] for name, rate in rates.items()}
    return {**config.describe(), "events": n, "seconds": seconds, "events_per_s": rates,
            "speedup_vs_reference": speedup}


def live_nodes(config: Config, batch: EventBatch, n: int, merges=(True, False)) -> dict:
    """Live match nodes per event, and their sources, from the kernel's load array."""
    events = data.prefix(batch, n)
    out = {**config.describe(), "events": n}
    for merge in merges:
        load = np.zeros((n, 4), dtype=np.int64)
        _, matcher, _ = run_engine(config, events, merge, load=load)
        out[f"merge_{'on' if merge else 'off'}"] = load_summary(load, matcher.stats)
    return out


def load_summary(load: np.ndarray, stats: dict) -> dict:
    """Mean/p99/max live nodes per event, created/merged/expired per event, arena bytes."""
    live = load[:, 3]
    per_node = stats["bytes_per_node"]
    return {
        "live_mean": float(live.mean()), "live_p99": float(np.percentile(live, 99)),
        "live_max": int(live.max()), "peak_live": int(stats["peak_live"]),
        "created_per_event": float(load[:, 0].mean()),
        "merged_per_event": float(load[:, 1].mean()),
        "expired_per_event": float(load[:, 2].mean()),
        "bytes_per_node": int(per_node),
        "peak_live_bytes": int(stats["peak_live"] * per_node),
        "arena_capacity_bytes": int(stats["arena_capacity"] * per_node),
    }


def targets(headline: dict, comparisons: list[dict]) -> list[dict]:
    """The issue's targets with pass/fail; the worst compared config decides each ratio."""
    out = []
    for engine, meaning in (("compiled_merge_on", "the engine as shipped (merging on)"),
                            ("compiled_merge_off", "the same algorithm as the reference "
                                                   "(merging off)")):
        worst = min(comparisons, key=lambda c: c["speedup_vs_reference"][engine])
        out.append(_target(f"{engine} / reference >= {SPEEDUP_TARGET:g}x",
                           f"{meaning}, worst of the compared configs", worst,
                           worst["speedup_vs_reference"][engine], SPEEDUP_TARGET))
    out.append(_target(f"events/s >= {RATE_TARGET:,.0f}", "compiled engine, merging on, one "
                       "core, whole stream, best of the repeats", headline,
                       headline["events_per_s"], RATE_TARGET))
    return out


def _target(name: str, meaning: str, row: dict, value: float, threshold: float) -> dict:
    return {"name": name, "meaning": meaning, "config": Config.of(row).label, "value": value,
            "threshold": threshold, "pass": bool(value >= threshold)}


# --------------------------------------------------------------------------- the run


def load_streams(data_path: str | None, quick: bool, sizes: Sizes) -> dict[str, EventBatch]:
    """The synthetic stream, and flights unless quick mode was given no ``--data``."""
    streams = {"synthetic": data.synthetic_uniform(sizes.synthetic_events)}
    if quick and data_path is None:
        return streams
    path = data.flights_path(data_path)
    print(f"reading {path} ...", file=sys.stderr, flush=True)
    flights = data.read_flights(path)
    if sizes.flights_events is not None:
        flights = data.prefix(flights, sizes.flights_events)
    return {"flights": flights, **streams}


def describe(name: str, batch: EventBatch) -> dict:
    counts = np.bincount(batch.type_codes, minlength=len(batch.type_names))
    return {"events": len(batch), "source": os.path.basename(batch.source),
            "partition": PARTITION[name], "window_unit": WINDOW_UNIT[name],
            "type_share": {t: round(float(c) / max(len(batch), 1), 4)
                           for t, c in zip(batch.type_names, counts)}}


def benchmark(streams: dict[str, EventBatch], sizes: Sizes) -> dict:
    """Every measurement over the given streams, as one JSON-ready dict."""
    headline_config = sizes.headline
    if headline_config.stream not in streams:  # quick mode without flights
        headline_config = replace(headline_config, stream="synthetic")
    headline_stream = streams[headline_config.stream]
    headline = throughput(headline_config, headline_stream, len(headline_stream), sizes.repeats)
    compared = [(c, n) for c, n in sizes.comparisons if c.stream in streams]
    sides = [comparison(c, streams[c.stream], n, sizes.repeats)
             for c, n in tqdm(compared, desc="side by side", file=sys.stderr)]
    loads = [live_nodes(c, streams[c.stream], n) for c, n in compared]
    loads.append(live_nodes(headline_config, headline_stream, len(headline_stream),
                            merges=(True,)))
    return {
        "benchmark": "engine", "machine": machine(),
        "settings": {"repeats": sizes.repeats, "target_seconds": sizes.target_seconds,
                     "probe_events": sizes.probe_events, "gc_during_timing": "off"},
        "streams": {name: describe(name, batch) for name, batch in streams.items()},
        "patterns": {s: {str(n): p for n, p in PATTERNS[s].items()} for s in streams},
        "ks": list(KS), "windows": list(WINDOWS),
        "targets": targets(headline, sides), "headline": headline,
        "throughput": throughput_grid(streams, sizes), "comparison": sides,
        "live_nodes": loads, "bytes_per_node": headline_config.matcher().bytes_per_node,
    }


def throughput_grid(streams: dict[str, EventBatch], sizes: Sizes) -> list[dict]:
    """Every pattern length x k x window of every stream, compiled engine, merging on."""
    grid = [Config(s, n, k, w) for s in streams for n in PATTERNS[s] for k in KS for w in WINDOWS]
    return [throughput(c, streams[c.stream], grid_events(c, streams[c.stream], sizes),
                       sizes.repeats)
            for c in tqdm(grid, desc="throughput grid", file=sys.stderr)]


def parse_args(argv: list[str]) -> argparse.Namespace:
    return bench_parser("engine", __doc__, RESULTS, "engine.json and engine.png",
                        "tiny sizes for a smoke test (flights only with --data)").parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    from .plot import plot

    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    sizes = QUICK if args.quick else FULL
    if not ready(args):
        return 2
    try:
        streams = load_streams(args.data, args.quick, sizes)
    except data.DataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    started = time.perf_counter()
    results = {"command": " ".join(["python -m bench.engine", *argv]),
               **benchmark(streams, sizes)}
    results["settings"].update(quick=args.quick,
                               wall_seconds=round(time.perf_counter() - started, 1))
    publish(results, args.out, "engine", {"engine.png": plot}, summary(results))
    return 0


def summary(results: dict) -> str:
    """A few lines for the terminal: the targets and the side-by-side ratios."""
    lines = []
    for t in results["targets"]:
        verdict = "PASS" if t["pass"] else "FAIL"
        lines.append(f"{verdict}  {t['name']}: {t['value']:,.1f} ({t['config']})")
    for c in results["comparison"]:
        label = Config.of(c).label
        ratios = ", ".join(f"{name} {ratio(x)}" for name, x in c["speedup_vs_reference"].items()
                           if name != "reference")
        lines.append(f"{label} ({c['events']:,} events): {ratios}")
    return "\n".join(lines)
