"""The collector's archive as a fleet of quiet devices leaves it, before and after compaction.

An agent closes a batch every second or every ``batch_events`` events, so a device with few
events a second uploads many small batches, and the collector's archive holds a Parquet
file per batch. This benchmark makes such an archive from the flights stream and measures
what the trainer pays for it, then compacts it as ``acep serve --compact`` does and
measures again:

1. **Batches.** The real agent (``edge.agent.Agent``, no budget, outbox only) over the first
   ``events`` flights as JSON Lines, closing a batch every ``batch_events`` events: its
   outbox's batches, as it would upload them. They are dealt round-robin to ``devices``
   device ids and their ``created_at`` spread over ``days`` days, so the archive has a
   folder per device and day, as a fleet's has.
2. **Archive.** The batches go through the collector's own ingest (``Collector.ingest_group``,
   64 to a commit: decode, exact re-check, archive file, SQLite), into a real archive and
   database.
3. **What the trainer pays**, before and after: the files and bytes; ``plan_archive`` (list
   the files, read every footer: the driver's part of ``acep train --archive``); reading
   every task with ``read_task`` in this process, one after the other (the executors'
   part); and, unless ``--quick``, ``acep train`` itself on a local Spark session
   (``trainer.train.train``, after one untimed job that warms the JVM up), whose history
   must come out byte for byte the same.
4. **Compaction**: ``Collector.compact_pass`` over the days before the last one, timed.
5. **Mirror** (``acep serve --mirror``): the same ingest into fresh archives, once plain
   and once with the mirror's thread copying to a local folder (``repeats`` times each,
   alternating, fastest kept), then the wait until the copy has caught up, and the copy
   compared with the archive byte for byte. A local folder measures the mirror's own cost
   in the collector's process (reading, writing, the GIL); a network store adds waiting in
   the mirror's thread, not in the ingest.

Each read is timed ``repeats`` times and the fastest kept (the files are in the page
cache: a trainer reading them cold, or over a network file system, pays more per file).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from ..common import bench_main, bench_parser, machine
from ..edge import streams
from ..edge.ingest import agent_bodies

RESULTS = Path(__file__).with_name("results")
DAY = 86400.0


@dataclass(frozen=True)
class Sizes:
    events: int
    batch_events: int
    devices: int
    days: int
    repeats: int
    spark: bool


FULL = Sizes(events=300_000, batch_events=20, devices=4, days=7, repeats=3, spark=True)
QUICK = Sizes(events=20_000, batch_events=20, devices=2, days=3, repeats=1, spark=False)


def make_batches(work: Path, data_path: str | None, quick: bool, sizes: Sizes) -> tuple:
    """The agent's batches over the stream, dealt to devices and days (encoded bodies)."""
    from edge.wire import decode_batch, encode_batch

    bodies, described = agent_bodies(work, data_path, quick, sizes.events, sizes.batch_events)
    start = dt.datetime(2026, 1, 1, tzinfo=dt.UTC).timestamp()
    dealt = []
    for i, body in enumerate(bodies):
        batch = decode_batch(body)
        batch.device, batch.seq = f"dev-{i % sizes.devices}", i // sizes.devices
        batch.created_at = start + sizes.days * DAY * i / len(bodies)
        dealt.append((encode_batch(batch), batch.device))
    return dealt, described, start


def build_archive(work: Path, bodies: list[tuple[bytes, str]], mirror: str | None = None):
    """The collector (store, archive) with every batch ingested, 64 to a commit; with
    ``mirror``, its mirror's thread running meanwhile."""
    from edge.collector import Collector
    from edge.collector.archive import Archive
    from edge.collector.store import open_store

    collector = Collector(open_store(work / "collector.db"), Archive(work / "archive"),
                          mirror=mirror)
    if collector.mirror is not None:
        collector.mirror.start()
    for i in range(0, len(bodies), 64):
        answers = collector.ingest_group([(b, d, None) for b, d in bodies[i:i + 64]])
        assert all(status == 200 for status, _ in answers), answers
    return collector


def mirror_cost(work: Path, bodies: list[tuple[bytes, str]], repeats: int) -> dict:
    """Ingest seconds without and with a mirror (fastest of ``repeats``, alternating), the
    seconds the mirror then needed to catch up, what it copied, and whether the copy is the
    archive byte for byte."""
    import shutil

    plain_s, mirrored_s, catch_up_s = [], [], []
    for k in range(repeats):
        for mirrored in ((False, True) if k % 2 == 0 else (True, False)):
            run = work / f"mirror-run-{k}-{int(mirrored)}"
            copy = run / "copy"
            t0 = time.perf_counter()
            collector = build_archive(run, bodies, str(copy) if mirrored else None)
            (mirrored_s if mirrored else plain_s).append(time.perf_counter() - t0)
            if mirrored:
                t0 = time.perf_counter()
                while not collector.mirror.idle():
                    time.sleep(0.01)
                catch_up_s.append(time.perf_counter() - t0)
                copied = {n: collector.metrics[f"mirror_{n}"]
                          for n in ("files_copied", "bytes_copied", "failures")}
                same = _tree(copy) == _tree(collector.archive.root)
            collector.close()
            shutil.rmtree(run)
    return {"ingest_plain_s": min(plain_s), "ingest_mirrored_s": min(mirrored_s),
            "catch_up_s": min(catch_up_s), **copied, "same_files": same}


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*.parquet")}


def trainer_cost(root: Path, repeats: int, spark) -> dict:
    """Files, bytes, plan and read seconds (fastest of ``repeats``), events read, and
    with ``spark`` the training run."""
    from trainer.sources import plan_archive, read_task

    files = [p for p in root.rglob("*.parquet")]
    out = {"files": len(files), "bytes": sum(p.stat().st_size for p in files)}
    plan_s, read_s = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        plan = plan_archive(root)
        plan_s.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        rows = sum(read_task(task, plan).num_rows for task in plan.tasks)
        read_s.append(time.perf_counter() - t0)
    out.update(tasks=len(plan.tasks), rows=rows, plan_s=min(plan_s), read_s=min(read_s))
    if spark is not None:
        from trainer.train import train

        t0 = time.perf_counter()
        trained = train([str(root)], archive=True, spark=spark, show_progress=False)
        out.update(train_s=time.perf_counter() - t0, train_events=trained.stats["events"],
                   history_bytes=trained.graph.to_bytes())
    return out


def benchmark(work: Path, data_path: str | None, quick: bool, sizes: Sizes) -> dict:
    _say(f"agent batches over {sizes.events:,} events ...")
    bodies, described, start = make_batches(work, data_path, quick, sizes)
    _say(f"collector ingest of {len(bodies):,} batches ...")
    t0 = time.perf_counter()
    collector = build_archive(work, bodies)
    ingest_s = time.perf_counter() - t0
    spark = None
    if sizes.spark:
        from trainer.spark import session

        spark = session(cores=2, shuffle_partitions=2)
    try:
        if spark is not None:  # the first job of a session also warms up the JVM
            _say("a Spark job to warm up ...")
            from trainer.train import train

            train([str(collector.archive.root)], archive=True, spark=spark, show_progress=False)
        _say("the trainer's reads before compaction ...")
        before = trainer_cost(collector.archive.root, sizes.repeats, spark)
        last_day = (dt.datetime.fromtimestamp(start, dt.UTC).date()
                    + dt.timedelta(days=sizes.days - 1))
        _say("compaction ...")
        t0 = time.perf_counter()
        done = asyncio.run(collector.compact_pass(today=last_day))
        compact_s = time.perf_counter() - t0
        _say("the trainer's reads after compaction ...")
        after = trainer_cost(collector.archive.root, sizes.repeats, spark)
        _say("ingest without and with a mirror ...")
        mirror = mirror_cost(work, bodies, sizes.repeats)
    finally:
        collector.close()
        if spark is not None:
            spark.stop()
    same = None
    if spark is not None:
        same = before.pop("history_bytes") == after.pop("history_bytes")
    return {"benchmark": "archive", "machine": machine(), "sizes": asdict(sizes),
            "pattern": streams.PATTERN, "stream": described, "batches": len(bodies),
            "ingest_s": ingest_s, "before": before, "after": after,
            "compaction": {**done, "seconds": compact_s, "days_compacted": sizes.days - 1},
            "mirror": mirror,
            "same_rows": before["rows"] == after["rows"], "same_history": same}


def _say(message: str) -> None:
    print(f"[bench.archive] {message}", file=sys.stderr, flush=True)


def parse_args(argv: list[str]) -> argparse.Namespace:
    return bench_parser("archive", __doc__, RESULTS, "archive.json and archive.png",
                        "20,000 events (the embedded sample without --data), no Spark"
                        ).parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    from .plot import plot

    return bench_main("archive", argv, parse_args, benchmark,
                      lambda args: QUICK if args.quick else FULL, plot, summary)


def summary(results: dict) -> str:
    """Before and after, one line each."""
    lines = []
    for name in ("before", "after"):
        r = results[name]
        train = f", train {r['train_s']:.1f} s" if "train_s" in r else ""
        lines.append(f"{name:6}  {r['files']:,} files, {r['bytes'] / 2**20:.1f} MiB, "
                     f"{r['tasks']:,} tasks, plan {r['plan_s']:.2f} s, read {r['read_s']:.2f} s"
                     f"{train}")
    c = results["compaction"]
    same = results["same_history"]
    history = "not compared (no Spark in --quick)" if same is None else same
    lines.append(f"compaction: {c['merged']:,} files into {c['written']:,} in "
                 f"{c['seconds']:.1f} s; same rows: {results['same_rows']}, same history: "
                 f"{history}")
    m = results["mirror"]
    lines.append(f"mirror: ingest {m['ingest_plain_s']:.1f} s plain, "
                 f"{m['ingest_mirrored_s']:.1f} s mirrored "
                 f"({m['ingest_mirrored_s'] / m['ingest_plain_s']:.2f}x), caught up "
                 f"{m['catch_up_s']:.2f} s later; {m['files_copied']:,} files copied, same "
                 f"files: {m['same_files']}")
    return "\n".join(lines)
