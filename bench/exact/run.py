"""Exact-engine benchmark: events/s and runs of the SASE+ engines on the [A08] stock ticker.

Run ``python -m bench.exact [--quick] [--out DIR] [--sase-jar PATH]``. It measures, in one
run (``docs/EXACT.md`` section 10):

1. a sweep of the [A08] query template over the strategies ``partition_contiguity``,
   ``skip_till_next_match`` and ``skip_till_any_match``, the iterator predicates p1, p2 and p3
   (min, max, avg) and partition windows W = 100 .. 2000, on a two-symbol ticker of 400 W
   events (capped): the run engine (``acep.nfab.runs``, one run object per partial match: the
   naive baseline) everywhere; under partition contiguity and skip-till-next-match also the
   shared-buffer engine (``acep.nfab.shared``); under skip-till-any-match also the postponing
   engine (``acep.nfab.postpone``) in verbose and compact output;
2. side by side at W = 500 under skip-till-any-match: the naive baseline and the postponing
   engine (verbose, compact, compact without early filters) on one prefix, the longest one the
   naive baseline finishes within its time budget;
3. ten partitions (symbols) with W = 100, compact output: skip-till-any-match (postponing) and
   skip-till-next-match (shared-buffer engine, and the run engine beside it), best of the
   repeats;
4. the targets of the issue, with pass/fail;
5. with ``--sase-jar``, SASE's jar beside our compiled core on the same events, four queries
   (``bench/exact/sase.py``: warm events/s, their ratio, the match sets compared).

Skip-till-any-match makes the naive baseline exponential in the events of a window, so every
measurement has a time budget: a run that exceeds it is stopped and reported "timed out",
with the event it had reached. Every timed run has the garbage collector off (collected just
before). Figures go to ``exact.json`` and ``exact.png``.
"""

from __future__ import annotations

import argparse
import gc
import math
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from acep.events import Event
from acep.nfab.ast import Query
from acep.nfab.engine import Engine
from acep.nfab.query import parse_query
from acep.nfab.runs import RunStats, match_runs
from acep.nfab.shared import SharedStats, Stream, match_shared

from ..common import bench_parser, machine, publish, ratio, ready
from . import sase
from .core import compiled_core
from .stock import PRICE_MAX, VOLUME_MAX, stock_ticker

try:  # the shared engine for skip_till_any_match (EXACT.md 7); absent in older trees
    from acep.nfab.postpone import PostponeStats, match_postponed
except ImportError:  # pragma: no cover - depends on the tree
    PostponeStats = match_postponed = None

RESULTS = Path(__file__).with_name("results")

TEMPLATE = ("PATTERN SEQ(Stock+ a[], Stock b) WHERE {es}(a[], b) {{ [symbol] and "
            "a[1].price % 500 == 0 and {p}b.volume < 150 }} WITHIN {within}")
PREDICATES = {  # [A08] l.324-337: P_a[i], the iterator predicate
    "p1": None,
    "p2": "a[i].price > a[i-1].price",
    "p3_min": "a[i].price > min(a[..i-1].price)",
    "p3_max": "a[i].price > max(a[..i-1].price)",
    "p3_avg": "a[i].price > avg(a[..i-1].price)",
}
STRATEGIES = ("partition_contiguity", "skip_till_next_match", "skip_till_any_match")
ANY = "skip_till_any_match"
NEXT = "skip_till_next_match"
WINDOWS = (100, 500, 1000, 1500, 2000)
P_RISE = 0.7
SEED = 2008
SYMBOLS = 2  # "We only considered two symbols" ([A08] l.323)

SYSTEMS = {  # name in the JSON -> what it is
    "runs": "run engine (acep.nfab.runs.match_runs), verbose: one run object per partial "
            "match, no sharing, no postponing (the naive baseline)",
    "runs_compact": "run engine through Engine(output='compact', engine='runs'): the same "
                    "runs, matches grouped by end event",
    "shared": "shared-buffer engine (acep.nfab.shared.match_shared), verbose: versioned "
              "buffer, computation state, merging, routing by partition (EXACT.md 6.2-6.6)",
    "shared_compact": "shared-buffer engine through Engine(output='compact', "
                      "engine='shared', core='off'): matches grouped by end event, as buffer "
                      "pointers",
    "postpone_verbose": "postponing engine (acep.nfab.postpone.match_postponed, on its "
                        "compiled core where built: 'core' in the row), early filters on, "
                        "verbose output (every match, as the naive baseline)",
    "postpone_compact": "postponing engine, early filters on, compact output (collapsed "
                        "records, one per main run and end event)",
    "postpone_compact_no_filters": "postponing engine, early filters off, compact output",
}

SPEEDUP_TARGET = 10.0
SPEEDUP_WINDOW = 500
PARTITION_SYMBOLS = 10
PARTITION_WINDOW = 100
ANY_RATE_TARGET = 100_000.0
NEXT_RATE_TARGET = 300_000.0
OUR_RUNS = 7  # our engine's runs per query and input beside SASE (the median counts)


@dataclass(frozen=True)
class Config:
    """One query: a strategy, an iterator predicate, a partition window W and the symbols."""

    strategy: str
    predicate: str
    window: int
    symbols: int = SYMBOLS

    @property
    def within(self) -> int:
        """``WITHIN`` in tags: W events per partition, one event per tag, 1/symbols of them
        in a partition (EXACT.md 10.1: ``2W`` for two symbols)."""
        return self.symbols * self.window

    @property
    def text(self) -> str:
        p = PREDICATES[self.predicate]
        return TEMPLATE.format(es=self.strategy, p=f"{p} and " if p else "", within=self.within)

    @property
    def label(self) -> str:
        short = {"partition_contiguity": "s2", NEXT: "s3", ANY: "any"}[self.strategy]
        return f"{self.predicate} {short} W={self.window} ({self.symbols} symbols)"

    @classmethod
    def of(cls, row: dict) -> Config:
        return cls(row["strategy"], row["predicate"], row["window"], row["symbols"])

    def describe(self) -> dict:
        return {**asdict(self), "within": self.within, "query": self.text}

    def query(self) -> Query:
        return parse_query(self.text)


@dataclass(frozen=True)
class Sizes:
    """How much data and time each part of the benchmark uses."""

    events_per_symbol_per_window: int  # the stream is this x symbols x W events ...
    max_events: int                    # ... but at most this many
    windows: tuple[int, ...]
    budget: float          # seconds per sweep measurement before it is stopped
    any_budget: float      # the same for what is exponential under skip_till_any_match
    compare_budget: float  # seconds the naive baseline gets to pick the side-by-side prefix
    count_budget: float    # seconds for counting the matches of compact records
    repeats: int           # best of, for the side by side and the partition targets
    compact_budget: float  # the sweep's postponing compact runs: linear, a guard on hangs


FULL = Sizes(events_per_symbol_per_window=200, max_events=200_000, windows=WINDOWS,
             budget=3.0, any_budget=2.0, compare_budget=5.0, count_budget=2.0, repeats=3,
             compact_budget=3.0)
QUICK = Sizes(events_per_symbol_per_window=10, max_events=10_000, windows=(100, 500),
              budget=0.3, any_budget=0.2, compare_budget=0.3, count_budget=0.2, repeats=1,
              compact_budget=3.0)


# --------------------------------------------------------------------------- timing


class Timeout(BaseException):
    """The time budget of one measurement ran out (a BaseException: nothing swallows it)."""

    def __init__(self, reached: int | None):
        super().__init__(reached)
        self.reached = reached


def _loop_codes() -> set:
    codes = {match_runs.__code__, Stream._process.__code__}
    if match_postponed is not None:
        codes.add(match_postponed.__code__)
    return codes


def _reached(frame) -> int | None:
    """The position of the event an engine's main loop is at, from the interrupted stack."""
    codes = _loop_codes()
    while frame is not None:
        if frame.f_code in codes:
            pos = frame.f_locals.get("pos", frame.f_locals.get("i"))
            return pos if isinstance(pos, int) else 0
        frame = frame.f_back
    return None


def timed(run: Callable[[], object], budget: float | None = None) -> tuple[float, object]:
    """(seconds, result) of ``run()``, the garbage collector collected before and off during.

    With a ``budget`` (seconds), ``run()`` is interrupted by a timer signal after that long
    and :class:`Timeout` is raised, carrying the position of the event the engine had reached.
    """
    def expire(signum, frame):
        raise Timeout(_reached(frame))

    previous = signal.signal(signal.SIGALRM, expire) if budget else None
    gc.collect()
    gc.disable()
    try:
        start = time.perf_counter()
        if budget:
            signal.setitimer(signal.ITIMER_REAL, budget)
        try:
            result = run()
        finally:
            if budget:
                signal.setitimer(signal.ITIMER_REAL, 0)
        return time.perf_counter() - start, result
    finally:
        gc.enable()
        if budget:
            signal.signal(signal.SIGALRM, previous)


# --------------------------------------------------------------------------- one measurement


def measure(system: str, query: Query, events: list[Event], budget: float | None,
            repeats: int = 1, count_budget: float | None = None) -> dict:
    """One system on ``events``: the best of ``repeats`` runs, or a timed-out run.

    ``status`` is "ok" or "timed out"; ``events_per_s`` is None when timed out, and then
    ``events_done`` is the position the engine had reached and ``events_per_s_before_timeout``
    its rate until then. Counters: ``runs_created`` (run engine, initiations + clones),
    ``main_runs`` and ``candidates`` (postponing), per event processed too.
    """
    best = None
    for _ in range(repeats):
        row = _measure_once(system, query, events, budget, count_budget)
        if best is None or (row["status"] == "ok" and row["seconds"] < best["seconds"]):
            best = row
        if row["status"] != "ok":
            break
    return best


def _measure_once(system: str, query: Query, events: list[Event], budget: float | None,
                  count_budget: float | None) -> dict:
    n = len(events)
    engine = None
    if system == "runs":
        stats = RunStats()
        work = lambda: match_runs(query, events, stats)  # noqa: E731
    elif system in ("runs_compact", "shared_compact"):
        engine = Engine(query, output="compact", engine=system.split("_")[0], core="off")
        work = lambda: engine.run(events)  # noqa: E731
    elif system == "shared":
        stats = SharedStats()
        work = lambda: match_shared(query, events, stats=stats)  # noqa: E731
    else:
        stats = PostponeStats()
        output = "verbose" if system == "postpone_verbose" else "compact"
        filters = system != "postpone_compact_no_filters"
        work = lambda: match_postponed(query, events, early_filters=filters,  # noqa: E731
                                       output=output, stats=stats)
    try:
        seconds, found = timed(work, budget)
        row = {"status": "ok", "events": n, "seconds": seconds, "events_done": n,
               "events_per_s": n / max(seconds, 1e-9)}
    except Timeout as stop:
        seconds, found = budget, None
        done = stop.reached if stop.reached is not None else 0
        row = {"status": "timed out", "events": n, "seconds": seconds, "events_done": done,
               "events_per_s": None, "events_per_s_before_timeout": done / seconds}
    done = max(row["events_done"], 1)
    if engine is not None:
        if found is not None:
            row["runs_created"] = engine.stats["runs_created"]
            if "runs_merged" in engine.stats:
                row["runs_merged"] = engine.stats["runs_merged"]
    elif system == "runs":
        row["runs_created"] = stats.runs_created
    elif system == "shared":
        row.update(runs_created=stats.runs_created, runs_merged=stats.runs_merged,
                   max_live_runs=stats.max_live_runs)
    else:
        row.update(main_runs=stats.main_runs, candidates=stats.candidates, core=stats.core,
                   main_runs_per_event=stats.main_runs / done,
                   candidates_per_event=stats.candidates / done)
    if "runs_created" in row:
        row["runs_per_event"] = row["runs_created"] / done
    if found is not None:
        row.update(_output_figures(system, found, count_budget))
    return row


def _output_figures(system: str, found: list, count_budget: float | None) -> dict:
    """Matches (and mean match length) of a verbose output; records (and matches when they
    can be counted within ``count_budget``) of a compact one."""
    if system in ("runs", "shared", "postpone_verbose"):
        lengths = [sum(len(block) for block in m.positions) for m in found]
        return {"matches": len(found),
                "match_length_mean": float(np.mean(lengths)) if lengths else None}
    out = {"records": len(found)}
    if system in ("runs_compact", "shared_compact"):
        out["matches"] = sum(g.count() for g in found)
        return out
    # A record counts its matches with a dynamic program when it has nothing left to check;
    # otherwise count() enumerates them, exponential under skip_till_any_match.
    if any(r.residual or r.negation for r in found):
        out["matches"] = None
        out["matches_note"] = "not counted: residual predicates, counting would enumerate"
        return out
    try:
        _, total = timed(lambda: sum(r.count() for r in found), count_budget)
        if total < 2 ** 53:
            out["matches"] = total
        elif total < 10 ** 300:
            out["matches"] = float(total)
        else:  # beyond a JSON number
            out["matches"] = None
            out["matches_log10"] = math.log10(total)
    except Timeout:
        out["matches"] = None
        out["matches_note"] = "not counted: the count ran out of time"
    return out


# --------------------------------------------------------------------------- the parts


def stream_events(sizes: Sizes, symbols: int, window: int) -> int:
    return min(sizes.events_per_symbol_per_window * symbols * window, sizes.max_events)


def sweep(stream: list[Event], sizes: Sizes, postpone: bool) -> list[dict]:
    """Every strategy x predicate x W on the two-symbol stream, each system once, within
    the budget (the run engine slows down with W under every strategy, as runs get longer)."""
    configs = [Config(s, p, w) for w in sizes.windows for s in STRATEGIES for p in PREDICATES]
    rows = []
    for config in tqdm(configs, desc="sweep", file=sys.stderr):
        events = stream[:stream_events(sizes, config.symbols, config.window)]
        if config.strategy != ANY:
            systems = ("runs", "shared")
        else:
            systems = ("runs", "postpone_verbose", "postpone_compact") if postpone else ("runs",)
        query = config.query()
        rows.append({**config.describe(), "events": len(events),
                     "systems": {s: measure(s, query, events, _budget(sizes, config, s),
                                            count_budget=sizes.count_budget)
                                 for s in systems}})
    return rows


def _budget(sizes: Sizes, config: Config, system: str) -> float:
    """The short budget for what is exponential under skip_till_any_match (the naive
    baseline, and any verbose output: the matches are), the long one for the rest."""
    if config.strategy == ANY and system in ("runs", "runs_compact", "postpone_verbose"):
        return sizes.any_budget
    if system == "postpone_compact":
        return sizes.compact_budget
    return sizes.budget


def side_by_side(stream: list[Event], sizes: Sizes, postpone: bool) -> list[dict]:
    """At W = 500 under skip_till_any_match, every system on one prefix per predicate.

    The prefix is where the naive baseline got to on the stream within ``compare_budget``
    (all of it if it finished); on that prefix the naive baseline then runs once more with
    twice the budget (the prefix shrinks by 2% until it finishes) and the other systems run
    ``repeats`` times each.
    """
    rows = []
    full = stream[:stream_events(sizes, SYMBOLS, SPEEDUP_WINDOW)]
    for predicate in tqdm(PREDICATES, desc="side by side", file=sys.stderr):
        config = Config(ANY, predicate, SPEEDUP_WINDOW)
        query = config.query()
        probe = measure("runs", query, full, sizes.compare_budget)
        n = probe["events_done"]
        while True:
            naive = measure("runs", query, full[:n], 2 * sizes.compare_budget)
            if naive["status"] == "ok" or n <= 1:
                break
            n = max(1, n - max(1, n // 50))
        systems = {"runs": naive}
        if postpone:
            for s in ("postpone_verbose", "postpone_compact", "postpone_compact_no_filters"):
                systems[s] = measure(s, query, full[:n], 2 * sizes.compare_budget,
                                     sizes.repeats, sizes.count_budget)
        speedup = {s: (r["events_per_s"] / naive["events_per_s"]
                       if r["events_per_s"] and naive["events_per_s"] else None)
                   for s, r in systems.items()}
        rows.append({**config.describe(), "events": n, "stream_events": len(full),
                     "probe": {k: probe[k] for k in ("status", "events", "seconds",
                                                     "events_done", "runs_created")},
                     "systems": systems, "speedup_vs_naive": speedup,
                     "same_matches": _same_matches(systems)})
    return rows


def _same_matches(systems: dict) -> bool | None:
    counts = {r.get("matches") for r in systems.values() if r.get("matches") is not None}
    return None if not counts else len(counts) == 1


def partitions(sizes: Sizes, postpone: bool) -> dict:
    """Ten symbols, W = 100, compact output: any-match (postponing, and the naive baseline
    once within the budget) and next-match (shared-buffer engine, best of the repeats, and
    the run engine once), every system on the whole stream."""
    n = stream_events(sizes, PARTITION_SYMBOLS, PARTITION_WINDOW)
    events = stock_ticker(n, PARTITION_SYMBOLS, P_RISE, SEED)
    rows = []
    jobs = []
    for predicate in PREDICATES:
        any_systems = ("postpone_compact", "runs") if postpone else ("runs_compact",)
        jobs += [(Config(ANY, predicate, PARTITION_WINDOW, PARTITION_SYMBOLS), s)
                 for s in any_systems]
        jobs += [(Config(NEXT, predicate, PARTITION_WINDOW, PARTITION_SYMBOLS), s)
                 for s in ("shared_compact", "runs_compact")]
    for config, system in tqdm(jobs, desc="10 partitions", file=sys.stderr):
        repeats = 1 if system.startswith("runs") else sizes.repeats
        # only the naive any-match baseline is stopped: the targets cover the whole stream
        budget = sizes.any_budget if config.strategy == ANY and system.startswith("runs") \
            else None
        rows.append({**config.describe(), "system": system,
                     **measure(system, config.query(), events, budget, repeats,
                               sizes.count_budget)})
    return {"symbols": PARTITION_SYMBOLS, "window": PARTITION_WINDOW, "events": n,
            "stream": describe_stream(events, PARTITION_SYMBOLS), "rows": rows}


def targets(sides: list[dict], parts: dict, postpone: bool) -> list[dict]:
    """The issue's targets with pass/fail; the worst predicate decides each."""
    out = []
    for system, meaning in (("postpone_compact", "postponing, compact output"),
                            ("postpone_verbose", "postponing, verbose output (the same "
                                                 "output as the naive baseline)")):
        name = f"{system} / naive >= {SPEEDUP_TARGET:g}x"
        what = (f"{meaning}, skip_till_any_match, W = {SPEEDUP_WINDOW}, on the prefix the "
                f"naive baseline finishes; worst of p1-p3")
        ratios = [(s["speedup_vs_naive"].get(system), s) for s in sides]
        out.append(_worst(name, what, ratios, SPEEDUP_TARGET, postpone))
    for strategy, system, threshold in ((ANY, "postpone_compact", ANY_RATE_TARGET),
                                        (NEXT, "shared_compact", NEXT_RATE_TARGET)):
        if strategy == ANY and not postpone:
            system = "runs_compact"
        name = f"{strategy} events/s >= {threshold:,.0f}"
        engine = {"postpone_compact": "postponing engine", "runs_compact": "run engine",
                  "shared_compact": "shared-buffer engine"}[system]
        what = (f"{engine}, compact output, {PARTITION_SYMBOLS} "
                f"partitions, W = {PARTITION_WINDOW}, {parts['events']:,} events, best of "
                f"the repeats; worst of p1-p3")
        rates = [(r["events_per_s"], r) for r in parts["rows"]
                 if r["strategy"] == strategy and r["system"] == system]
        out.append(_worst(name, what, rates, threshold, True))
    return out


def _worst(name: str, what: str, values: list[tuple], threshold: float, built: bool) -> dict:
    """The target's row from (value, row) pairs: a missing value (timed out) is the worst."""
    if not built or not values:
        return {"name": name, "meaning": what, "config": None, "value": None,
                "threshold": threshold, "pass": False,
                "note": "the shared (postponing) engine is not built yet"}
    value, row = min(values, key=lambda vr: -1.0 if vr[0] is None else vr[0])
    target = {"name": name, "meaning": what, "config": Config.of(row).label, "value": value,
              "threshold": threshold, "pass": bool(value is not None and value >= threshold)}
    if value is None:
        target["note"] = "timed out"
    return target


# --------------------------------------------------------------------------- the run


def describe_stream(events: list[Event], symbols: int) -> dict:
    prices = np.array([e.attrs["price"] for e in events])
    volumes = np.array([e.attrs["volume"] for e in events])
    return {"events": len(events), "symbols": symbols, "p": P_RISE, "seed": SEED,
            "price_range": [1, PRICE_MAX], "volume_range": [1, VOLUME_MAX],
            "start_share": float(np.mean(prices % 500 == 0)),
            "b_share": float(np.mean(volumes < 150))}


def shared_engine() -> dict:
    if match_postponed is None:
        return {"module": "acep.nfab.postpone", "available": False,
                "note": "the postponing engine is not built yet: skip_till_any_match has "
                        "only the run engine"}
    return {"module": "acep.nfab.postpone, acep.nfab.shared", "available": True,
            "note": "postponing with early filters for skip_till_any_match (EXACT.md 7); "
                    "the shared-buffer engine (EXACT.md 6.2-6.6) for partition_contiguity "
                    "and skip_till_next_match"}


def benchmark(sizes: Sizes, jar: Path | None = None) -> dict:
    """Every measurement, as one JSON-ready dict (SASE's beside ours with a ``jar``)."""
    postpone = match_postponed is not None
    beside_sase = sase.measure(jar, sizes is QUICK, OUR_RUNS)  # first: a bad JDK fails early
    n = max(stream_events(sizes, SYMBOLS, w) for w in sizes.windows)
    stream = stock_ticker(n, SYMBOLS, P_RISE, SEED)
    sides = side_by_side(stream, sizes, postpone)
    parts = partitions(sizes, postpone)
    return {
        "benchmark": "exact", "machine": machine(),
        "settings": {"events_per_symbol_per_window": sizes.events_per_symbol_per_window,
                     "max_events": sizes.max_events, "budget_seconds": sizes.budget,
                     "any_budget_seconds": sizes.any_budget,
                     "compare_budget_seconds": sizes.compare_budget,
                     "count_budget_seconds": sizes.count_budget, "repeats": sizes.repeats,
                     "gc_during_timing": "off"},
        "shared_engine": shared_engine(), "systems": SYSTEMS,
        "stream": describe_stream(stream, SYMBOLS), "template": TEMPLATE,
        "predicates": PREDICATES, "strategies": list(STRATEGIES), "windows": list(sizes.windows),
        "targets": targets(sides, parts, postpone), "side_by_side": sides,
        "partitions": parts, "sweep": sweep(stream, sizes, postpone),
        "compiled_core": compiled_core(sizes.max_events // 2, sizes.repeats),
        "sase": beside_sase,
    }


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = bench_parser("exact", __doc__, RESULTS, "exact.json and exact.png",
                          "tiny sizes and budgets for a smoke test (W = 100, 500)", data=False)
    parser.add_argument("--sase-jar", metavar="PATH", type=Path,
                        help="SASE's build/sase.jar: run it beside our engine on the same "
                             "events (needs a JDK: javac and java)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    from .plot import plot

    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    if not ready(args):
        return 2
    try:
        if args.sase_jar is not None:
            sase.check(args.sase_jar)
        sizes = QUICK if args.quick else FULL
        started = time.perf_counter()
        results = {"command": " ".join(["python -m bench.exact", *argv]),
                   **benchmark(sizes, args.sase_jar)}
    except sase.SaseError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    results["settings"].update(quick=args.quick,
                               wall_seconds=round(time.perf_counter() - started, 1))
    publish(results, args.out, "exact", {"exact.png": plot}, summary(results))
    return 0


def summary(results: dict) -> str:
    """A few lines for the terminal: the targets and the side-by-side ratios."""
    lines = []
    if not results["shared_engine"]["available"]:
        lines.append(results["shared_engine"]["note"])
    for t in results["targets"]:
        verdict = "PASS" if t["pass"] else "FAIL"
        value = "n/a" if t["value"] is None else f"{t['value']:,.1f}"
        lines.append(f"{verdict}  {t['name']}: {value} ({t['config'] or t.get('note')})")
    for s in results["side_by_side"]:
        ratios = ", ".join(f"{name} {ratio(x)}" for name, x in s["speedup_vs_naive"].items()
                           if name != "runs" and x is not None)
        naive = s["systems"]["runs"]
        rate = "timed out" if naive["events_per_s"] is None else \
            f"{naive['events_per_s']:,.0f} events/s"
        lines.append(f"{Config.of(s).label} ({s['events']:,} events; naive {rate}): {ratios}")
    for r in results["compiled_core"]["rows"]:
        lines.append(f"compiled core, {r['query']}: {r['core']['events_per_s']:,.0f} events/s, "
                     f"{r['speedup']:.1f}x shared.py ({r['core']['ran']})")
    lines += sase.summary_lines(results.get("sase") or sase.NOT_MEASURED)
    return "\n".join(lines)
