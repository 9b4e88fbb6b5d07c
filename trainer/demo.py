"""``acep demo``: the whole loop on one machine, on the week of flights embedded in acep.

A collector, the Spark trainer, an agent under a budget of a tenth of the unconstrained
operations (pattern :data:`LOOP`, fitted ratios :data:`FIT_RATIOS`), then a report of
bundle recall beside oldest-first. Inputs are checked before anything starts
(:class:`DemoInputError`). The steps and the work directory are described in
docs/DESIGN.md, "As built: the trainer", ``acep demo``; the options in docs/CLI.md.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

from acep import MatchBatch, Matcher, bundles, storage
from acep.events import PRESETS, EventBatch, EventError, iso_texts, read_all
from acep.shedding import Budget, OldestFirstPolicy
from history.sketch import read_key
from trainer.spark import machine_cores

__all__ = ["run", "main", "DemoInputError"]

WEEK = "flights-week.parquet"
# a late departure, more late ones, then one at least 30 minutes later than the last late one,
# at the same airport within an hour (the collector's exact re-check can translate it)
LOOP = {"pattern": "ontime late+ verylate", "where": ["verylate.delay > late.delay + 30"],
        "window": 3600.0, "k": 1}
DAY = 86400.0
PATTERN_ID = "rising-delays"
DEVICE = "demo-pi"
# budget ratios (of the training days' operations) the sketch's reserves are fitted to; the
# agent takes the nearest to its budget (docs/SHEDDING.md 10)
FIT_RATIOS = (0.025, 0.05, 0.1, 0.25)
RUN_FILES = ("agent.toml", "agent.log", "agent-metrics.jsonl", "agent-outbox.db",
             "collector.db", "collector.log", "archive", "device.token", "downloaded.sketch",
             "fleet.key", "learned.sketch", "learned.sketch.origin", "report.json",
             "report.png", "test.jsonl", "train.parquet")
# written first into a work directory: only where it is are RUN_FILES an earlier demo's
MARK = ".acep-demo"


class DemoInputError(ValueError):
    """An option, the work directory or the data refused before any process starts."""


@dataclass
class Options:
    workdir: Path | None  # None: a new temporary directory, made once the checks pass
    data: Path
    train_days: float = 4.0
    budget: float = 0.10
    burst: float = 1024.0
    cores: int | None = None


def _say(text: str) -> None:
    print(f"[demo] {text}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- data


def read_flights(path: Path) -> EventBatch:
    """The flights of ``--data``, refused unless a Parquet file of flights in time order
    (the trainer reads the first rows of the file itself)."""
    if os.path.isfile(path) and storage.suffix(path) not in (".parquet", ".pq"):
        raise DemoInputError(f"--data {path}: the demo takes a Parquet file of flights "
                             f"(date, delay, distance, origin, destination); convert it first")
    try:
        events = read_all(path, PRESETS["flights"])
    except (EventError, OSError) as exc:
        raise DemoInputError(f"--data: {storage.redact_text(str(exc))}") from None
    if not len(events):
        raise DemoInputError(f"--data {path}: no flights in it")
    back = np.flatnonzero(np.diff(events.tags) < 0)
    if back.size:
        i = int(back[0]) + 1
        before, after = iso_texts(events.tags[i - 1:i + 1])
        raise DemoInputError(f"--data {path}: the flights are not in time order (flight "
                             f"{i + 1:,} departs at {after}, before flight {i:,} at "
                             f"{before}): sort them by date first")
    return events


def check_split(events: EventBatch, train: EventBatch, test: EventBatch,
                days: float) -> None:
    """Both parts hold flights: the trainer learns from the first, the agent runs on the
    rest."""
    if not len(test):
        span = (events.tags[-1] - events.tags[0]) / DAY
        raise DemoInputError(f"--train-days {days:g} leaves no flights for the agent: the "
                             f"data spans {span:.4g} days ({_dates(events)}); give fewer")


def check_matches(train_found: MatchBatch, test_found: MatchBatch, days: float) -> None:
    """The unconstrained runs found matches on both parts: something to learn, something
    to score."""
    if not len(train_found) and not len(test_found):
        raise DemoInputError("--data: the flights hold no match of the demo's pattern "
                             f"({LOOP['pattern']!r} where {' and '.join(LOOP['where'])})")
    if not len(train_found):
        raise DemoInputError(f"--train-days {days:g}: the first {days:g} days hold no match "
                             "of the pattern, so there is no history to learn; give more")
    if not len(test_found):
        raise DemoInputError(f"--train-days {days:g}: the days after the first {days:g} hold "
                             "no match of the pattern, so there is no recall to measure; "
                             "give fewer")


def check_budget(budget: float, per_event: float, burst: float) -> float:
    """The agent's operations per event; refused when its bucket holds less than the one
    operation a match node costs (it would keep nothing)."""
    bucket = Budget(budget * per_event, burst)  # the agent's: depth as check_buckets reads it
    if bucket.depth < 1:
        least = _round_up(1 / (per_event * burst))
        raise DemoInputError(f"--budget {budget:g}: {bucket.ops_per_event:.3g} operations per "
                             f"event, so the agent's bucket of {burst:g} events holds "
                             f"{bucket.depth:.3g}, "
                             f"less than the one a match node costs; give --budget "
                             f"{least:g} or more")
    return bucket.ops_per_event


def _round_up(x: float) -> float:
    """``x`` rounded up to two significant digits."""
    scale = 10.0 ** (math.floor(math.log10(x)) - 1)
    return math.ceil(x / scale) * scale


def check_cores(cores: int | None) -> None:
    have = machine_cores()
    if cores is not None and cores > have:
        raise DemoInputError(f"--cores {cores}: this machine has {have}; a local Spark "
                             "session gains nothing from more (each core runs a Python "
                             "worker)")


def _dates(events: EventBatch) -> str:
    """The days the flights span: ``Jan 1-7, 2001``."""
    first, last = (np.datetime64(int(t), "s").item() for t in events.tags[[0, -1]])
    if first.date() == last.date():
        return f"{first:%b} {first.day}, {first.year}"
    if (first.year, first.month) == (last.year, last.month):
        return f"{first:%b} {first.day}-{last.day}, {first.year}"
    if first.year == last.year:
        return f"{first:%b} {first.day} - {last:%b} {last.day}, {first.year}"
    return f"{first:%b} {first.day}, {first.year} - {last:%b} {last.day}, {last.year}"


def _percent(share: float) -> str:
    return f"{share * 100:.3g}%"


def split(events: EventBatch, days: float) -> tuple[EventBatch, EventBatch]:
    """The first ``days`` of the stream and the rest."""
    cut = int(np.searchsorted(events.tags, events.tags[0] + days * DAY, side="left"))
    return events.slice(0, cut), events.slice(cut, len(events))


def write_jsonl(events: EventBatch, path: Path) -> None:
    """The agent's input: JSON Lines with ISO times, as a device would log them."""
    stamps = np.datetime_as_string(events.tags.astype("datetime64[s]"), unit="s")
    cols = {k: v.tolist() for k, v in events.columns.items()}
    names = events.types().tolist()
    with open(path, "w") as f:
        for i, t in enumerate(stamps.tolist()):
            row = {"type": names[i], "t": t, **{k: v[i] for k, v in cols.items()}}
            f.write(json.dumps(row) + "\n")


# --------------------------------------------------------------------------- processes


class Collector:
    """``python -m edge.collector`` on a free loopback port."""

    def __init__(self, work: Path):
        self.work, self.db = work, work / "collector.db"
        self.key = work / "fleet.key"
        self.key.write_bytes(os.urandom(32).hex().encode() + b"\n")
        self.proc = None

    def _cmd(self, *extra: str) -> list[str]:
        return [sys.executable, "-m", "edge.collector", "--db", f"sqlite:///{self.db}", *extra]

    def token(self, flag: str, name: str) -> str:
        done = subprocess.run(self._cmd(flag, name), capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"the collector could not add {name!r} (exit "
                               f"{done.returncode}): {_last_line(done.stderr)}")
        return done.stdout.strip()

    def start(self) -> str:
        log = open(self.work / "collector.log", "w")
        self.proc = subprocess.Popen(
            self._cmd("--archive", str(self.work / "archive"), "--port", "0",
                      "--sketch-key-file", str(self.key)), stdout=log, stderr=log)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the collector exited: see {self.work / 'collector.log'}")
            for line in (self.work / "collector.log").read_text().splitlines():
                if "listening on http://" in line:
                    self.url = line.strip().rsplit(" ", 1)[1]
                    return self.url
            time.sleep(0.1)
        raise RuntimeError("the collector did not start within 60 s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(30)

    def stored(self) -> tuple[list, np.ndarray, dict]:
        """(partition keys, points) of the matches in the database, and their re-check
        outcomes: exact, not exact, and the reasons of those not checked."""
        with sqlite3.connect(self.db) as db:
            rows = db.execute("SELECT partition, point, exact, exact_reason FROM matches") \
                .fetchall()
        keys = [json.loads(p) for p, _, _, _ in rows]
        recheck = {"exact": sum(e == 1 for _, _, e, _ in rows),
                   "not_exact": sum(e == 0 for _, _, e, _ in rows),
                   "not_checked": sorted({r for _, _, e, r in rows if e is None})}
        return keys, np.array([pt for _, pt, _, _ in rows]), recheck


def agent_config(work: Path, url: str, ops: float, burst: float) -> Path:
    text = f"""
[device]
id = "{DEVICE}"
token_file = "device.token"

[collector]
url = "{url}"
timeout = 60.0

[pattern]
id = "{PATTERN_ID}"
text = "{LOOP['pattern']}"
where = {json.dumps(LOOP['where'])}
window = {LOOP['window']}
k = {LOOP['k']}
partition = "origin"

[source]
kind = "file"
path = "test.jsonl"
follow = false

[budget]
mode = "fixed"
ops_per_event = {ops}
burst = {burst}

[sketch]
download = true
path = "downloaded.sketch"
key_file = "fleet.key"
save_path = "learned.sketch"

[outbox]
path = "agent-outbox.db"
max_retained_events = 400000

[metrics]
path = "agent-metrics.jsonl"
interval = 5.0
"""
    path = work / "agent.toml"
    path.write_text(text)
    return path


def run_agent(work: Path, config: Path) -> dict:
    """``--once`` runs until the stream is matched and the outbox is empty; final metrics."""
    for _ in range(20):
        with open(work / "agent.log", "a") as log:
            done = subprocess.run([sys.executable, "-m", "acep", "agent", "--config", str(config),
                                   "--once"], stdout=log, stderr=log, cwd=work)
        if done.returncode:
            raise RuntimeError(f"the agent exited with code {done.returncode}: "
                               f"{_last_line((work / 'agent.log').read_text())} (see "
                               f"{work / 'agent.log'})")
        metrics = json.loads((work / "agent-metrics.jsonl").read_text().splitlines()[-1])
        if metrics.get("outbox_pending", 0) == 0:
            return metrics
        time.sleep(0.5)
    raise RuntimeError(f"the agent could not empty its outbox: see {work / 'agent.log'}")


def _last_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1].strip() if lines else "no message"


# --------------------------------------------------------------------------- scoring


def matcher_args() -> dict:
    return {"pattern": LOOP["pattern"], "window": LOOP["window"], "k": LOOP["k"],
            "where": LOOP["where"], "partition": "origin"}


def run_direct(events: EventBatch, **options) -> tuple[MatchBatch, dict]:
    m = Matcher(**matcher_args(), **options)
    found = MatchBatch.concat([m.match_batch(events), m.flush()])
    return found, m.stats


def recall(truth: MatchBatch, keys, points) -> dict:
    """Bundle and match-point recall of (key, point) pairs against the unconstrained run: a
    bundle is found when one of the pairs is a point inside it."""
    by_key: dict = {}
    for b in bundles(truth, LOOP["window"]):
        by_key.setdefault(b.partition, []).append((b.first, b.last))
    n_bundles = sum(map(len, by_key.values()))
    found = set(zip(keys, np.asarray(points, dtype=np.float64).tolist()))
    hit = set()
    for key, point in found:
        spans = by_key.get(key, [])
        i = int(np.searchsorted([f for f, _ in spans], point, side="right")) - 1
        if i >= 0 and point <= spans[i][1]:
            hit.add((key, i))
    true_points = set(zip(truth.partition.tolist(), truth.point.tolist()))
    right = len(found & true_points)
    return {"bundles": n_bundles, "bundles_found": len(hit),
            "bundle_recall": len(hit) / max(n_bundles, 1),
            "point_recall": right / max(len(true_points), 1),
            "precision": right / max(len(found), 1)}


# --------------------------------------------------------------------------- the loop


def run(opts: Options) -> dict:
    """The loop; returns the report (also written to ``workdir/report.json``)."""
    from .train import PatternSpec, publish_sketch, train

    work = check_workdir(opts.workdir) if opts.workdir is not None else None
    check_cores(opts.cores)
    events, train_part, test_part, truth, stats = _checked_split(opts)
    per_event = stats["candidates"] / len(test_part)
    ops = check_budget(opts.budget, per_event, opts.burst)
    work = claim_workdir(work)
    timings: dict = {}
    _say(f"{len(events):,} flights; training on the first {opts.train_days:g} days "
         f"({len(train_part):,}), testing on the rest ({len(test_part):,})")
    train_file = work / "train.parquet"
    _write_parquet(opts.data, train_file, len(train_part))
    write_jsonl(test_part, work / "test.jsonl")

    collector = Collector(work)
    (work / "device.token").write_text(collector.token("--add-device", DEVICE) + "\n")
    admin = collector.token("--add-admin", "trainer")
    try:
        url = collector.start()
        _say(f"collector listening on {url}")
        started = time.perf_counter()
        pattern = PatternSpec(LOOP["pattern"], LOOP["window"], LOOP["k"], tuple(LOOP["where"]),
                              "origin")
        trained = train([str(train_file)], pattern, spec=PRESETS["flights"], cores=opts.cores,
                        fit=FIT_RATIOS, burst=opts.burst)
        key = read_key(str(collector.key))
        sketch = trained.sketch.to_bytes(key)
        publish_sketch(url, PATTERN_ID, sketch, admin)
        timings["train_s"] = time.perf_counter() - started
        _say(f"Spark trained the history in {timings['train_s']:.1f} s: "
             f"{trained.graph.n_bundles:,} bundles, {int(trained.graph.visits.sum()):,} match "
             f"nodes; signed sketch of {len(sketch):,} bytes published")

        _say(f"unconstrained run: {len(truth):,} matches, {stats['candidates']:,} operations "
             f"({per_event:.2f} per event); agent budget {ops:.3f} per event "
             f"({_percent(opts.budget)})")
        started = time.perf_counter()
        metrics = run_agent(work, agent_config(work, url, ops, opts.burst))
        timings["agent_s"] = time.perf_counter() - started
        keys, points, recheck = collector.stored()
    finally:
        collector.stop()
    baseline, _ = run_direct(test_part, budget=Budget(ops, opts.burst),
                             policy=OldestFirstPolicy())
    report = {
        "workdir": str(work), "events": len(events), "dates": _dates(events),
        "train_events": len(train_part),
        "test_events": len(test_part), "budget_fraction": opts.budget,
        "ops_per_event": ops, "train": trained.stats, "sketch_bytes": len(sketch),
        "agent": {k: metrics.get(k) for k in ("events_in", "candidates", "shed", "matches",
                                              "batches_sent", "bytes_sent", "policy",
                                              "policy_error", "sketch_saves")},
        "collector": {"matches": len(points), **recheck},
        "unconstrained": {"matches": len(truth), "operations": int(stats["candidates"])},
        "history_rl": recall(truth, keys, points),
        "oldest_first": recall(truth, baseline.partition.tolist(), baseline.point),
        "seconds": {k: round(v, 1) for k, v in timings.items()},
    }
    report["plot"] = _plot(report, work / "report.png")
    (work / "report.json").write_text(json.dumps(report, indent=2))
    return report


def _checked_split(opts: Options):
    """The flights, their two parts, and the unconstrained run on the second (the truth and
    its stats), refused when a part has no flights or no match."""
    events = read_flights(opts.data)
    train_part, test_part = split(events, opts.train_days)
    check_split(events, train_part, test_part, opts.train_days)
    truth, stats = run_direct(test_part, budget=Budget(1e12, 1e12))
    check_matches(run_direct(train_part)[0], truth, opts.train_days)
    return events, train_part, test_part, truth, stats


def check_workdir(work: Path) -> Path:
    """``--workdir`` as an absolute path (the agent runs inside it), refused when it is a
    file, cannot be written, or holds files of the demo's names that no demo run wrote."""
    work = work.expanduser().absolute()
    there = next(p for p in (work, *work.parents) if os.path.lexists(p))
    if not there.is_dir():
        where = "" if there == work else f" ({there} is a file)"
        raise DemoInputError(f"--workdir {work}: not a directory{where}")
    why = storage.unwritable(there)
    if why:
        raise DemoInputError(f"--workdir {work}: cannot write in {there} ({why})")
    if there == work and not (work / MARK).exists():
        theirs = [name for name in RUN_FILES if os.path.lexists(work / name)]
        if theirs:
            names = ", ".join(theirs[:3]) + (f" and {len(theirs) - 3} more" if theirs[3:] else "")
            raise DemoInputError(
                f"--workdir {work} holds {names}, which the demo would replace, and no {MARK} "
                "file to say an earlier demo run wrote them; give a new or empty directory")
    return work


def claim_workdir(work: Path | None) -> Path:
    """The work directory made (a new temporary one for None) and marked as the demo's,
    with an earlier demo run's files removed."""
    if work is None:
        work = Path(tempfile.mkdtemp(prefix="acep-demo-"))
    work.mkdir(parents=True, exist_ok=True)
    (work / MARK).touch()
    _clear_previous_run(work)
    return work


def _clear_previous_run(work: Path) -> None:
    """Remove what an earlier demo wrote here: its agent would find the stream already
    matched and its collector the old matches, and the report would mix the two runs."""
    old = [work / name for name in RUN_FILES if (work / name).exists()]
    old += [p for p in work.glob("*.db-*") if p.is_file()]  # SQLite journals
    for path in old:
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    if old:
        _say(f"removed the previous demo run's {len(old)} files from {work}")


def _write_parquet(source: Path, dest: Path, rows: int) -> None:
    import pyarrow.parquet as pq

    pq.write_table(pq.read_table(source).slice(0, rows), dest, row_group_size=16384)


def _plot(report: dict, path: Path) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    names = ["oldest-first\n(agent default)", "Spark-trained history\n+ RL (the agent)"]
    runs = [report["oldest_first"], report["history_rl"]]
    fig, ax = plt.subplots(figsize=(7, 4))
    x = np.arange(len(names))
    for off, metric, label in ((-0.2, "bundle_recall", "bundle recall"),
                               (0.2, "point_recall", "match-point recall")):
        bars = ax.bar(x + off, [r[metric] * 100 for r in runs], 0.38, label=label)
        ax.bar_label(bars, fmt="%.1f%%")
    ax.set_xticks(x, names)
    ax.set_ylim(0, 105)
    ax.set_ylabel("% of the unconstrained run")
    ax.set_title(f"{report['test_events']:,} flights at {_percent(report['budget_fraction'])} "
                 "of the unconstrained operations")
    ax.legend(loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return str(path)


def print_report(report: dict) -> None:
    h, o = report["history_rl"], report["oldest_first"]
    a, c = report["agent"], report["collector"]
    print(f"acep demo: the loop on {report['events']:,} flights ({report['dates']})")
    print(f"  trained on {report['train_events']:,} flights with Spark in "
          f"{report['seconds']['train_s']} s -> signed sketch of {report['sketch_bytes']:,} "
          f"bytes, published to the collector")
    print(f"  agent: {a['events_in']:,} flights at {_percent(report['budget_fraction'])} of the "
          f"unconstrained operations ({report['ops_per_event']:.3f} per event), policy "
          f"{a['policy']}, {a['shed']:,} of {a['candidates']:,} candidates shed, "
          f"{a['matches']:,} matches uploaded in {a['batches_sent']} batches")
    print(f"  collector: {c['matches']:,} matches stored; the exact NFA^b re-check found "
          f"{c['exact']:,} exact and {c['not_exact']:,} approximate (errors > 0)"
          + (f"; {c['matches'] - c['exact'] - c['not_exact']:,} not checked "
             f"({c['not_checked'][0]})" if c["not_checked"] else ""))
    print(f"  bundle recall vs the unconstrained run ({h['bundles']:,} bundles):")
    print(f"    Spark-trained history + RL : {h['bundle_recall']:6.1%}  "
          f"(match points {h['point_recall']:.1%}, precision {h['precision']:.1%})")
    print(f"    oldest-first (no sketch)   : {o['bundle_recall']:6.1%}  "
          f"(match points {o['point_recall']:.1%})")
    if report.get("plot"):
        print(f"  plot: {report['plot']}")
    print(f"  everything is kept in {report['workdir']}")


def default_data() -> Path:
    return Path(str(resources.files("acep").joinpath("data", WEEK)))


def main(workdir: str | None = None, data: str | None = None, budget: float = 0.10,
         train_days: float = 4.0, cores: int | None = None) -> int:
    opts = Options(Path(workdir) if workdir else None, Path(data) if data else default_data(),
                   train_days, budget, cores=cores)
    print_report(run(opts))
    return 0
