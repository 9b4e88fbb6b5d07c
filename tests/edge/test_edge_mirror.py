"""The archive's mirror (``acep serve --mirror``, edge/collector/mirror.py): a copy of the
collector's Parquet archive in object storage that a cluster's trainer reads. Against moto's
S3 server on loopback (signed HTTP, listing by prefix) and a real collector process: every stored
batch's file reaches the mirror byte for byte; uploads go on while the store is down and
the mirror catches up (credentials in its URI kept out of the log); a restart copies what
changed meanwhile; compaction is followed (the new file first), retention is not, and
keeps a day on disk until the mirror has it. A property test drives the collector's
ingest, compaction and retention, the mirror's steps and restarts in random orders and
checks that a batch once in the mirror never leaves it and that it ends there exactly
once."""

from __future__ import annotations

import asyncio
import datetime as dt
import io
import logging
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

pq = pytest.importorskip("pyarrow.parquet")
pytest.importorskip("moto.server", reason="needs moto's S3 server (pip install -e '.[test]')")

from hypothesis import HealthCheck, event, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from support.collector import (  # noqa: E402
    MAX_BODY,
    ROOT,
    CollectorProcess,
    make_batch,
    make_events,
    metrics,
    post,
    request,
)
from support.links import free_port  # noqa: E402
from support.s3_server import S3, credentials, uri  # noqa: E402
from support.wait import wait_for  # noqa: E402

from edge.collector import ClockBounds, Collector  # noqa: E402
from edge.collector.archive import Archive  # noqa: E402
from edge.collector.mirror import Mirror  # noqa: E402
from edge.collector.store import open_store  # noqa: E402
from edge.wire import encode_batch  # noqa: E402

NOON = dt.datetime(2023, 11, 14, 12, tzinfo=dt.UTC).timestamp()
DAY = 86400.0


def local_files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*.parquet")}


def batch_ids(files: dict[str, bytes]) -> Counter:
    """How many files of ``files`` (name: Parquet bytes) hold each batch."""
    found = Counter()
    for data in files.values():
        found.update(set(pq.read_table(io.BytesIO(data), columns=["batch_id"])
                         .column("batch_id").to_pylist()))
    return found


def running_collector(tmp: Path, *extra: str) -> CollectorProcess:
    srv = CollectorProcess(tmp, *extra, max_body=MAX_BODY)
    store = open_store(srv.db)
    srv.tokens = {d: store.add_device(d) for d in ("d1", "d2")}
    store.close()
    return srv.start()


def upload(srv: CollectorProcess, plan: list[tuple[str, int, float]]) -> None:
    for device, seq, created in plan:
        batch = make_batch(device, seq, events=make_events(seed=seq), created_at=created)
        status, doc = post(srv, encode_batch(batch), srv.tokens[device])
        assert (status, doc["status"]) == (200, "stored"), doc


# --------------------------------------------------------------------------- a real collector


def test_a_serving_collector_copies_each_stored_batch_to_s3(s3, tmp_path):
    key = "copies"
    srv = running_collector(tmp_path, "--mirror", s3.uri(key))
    try:
        upload(srv, [("d1", 0, NOON), ("d1", 1, NOON + DAY), ("d2", 0, NOON), ("d2", 1, NOON)])
        done = wait_for(lambda: (m := metrics(srv))["mirror_pending_files"] == 0
                        and m["mirror_files_copied"] == 4 and m,
                        lambda: f"four files copied\n{srv.log()}", 30.0)
        assert s3.files(key) == local_files(srv.archive)
        assert len(s3.files(key)) == 4 and done["mirror_failures"] == 0
        assert done["mirror_bytes_copied"] == sum(map(len, s3.files(key).values()))
        assert done["mirror_lag_seconds"] == 0
        text = request(srv.url + "/metrics?format=prometheus")[1].decode()
        assert "acep_collector_mirror_files_copied_total 4.0" in text
        assert "acep_collector_mirror_lag_seconds 0.0" in text
        # a batch sent again is a duplicate: nothing new to copy
        upload_again = encode_batch(make_batch("d1", 0, events=make_events(seed=0),
                                               created_at=NOON))
        assert post(srv, upload_again, srv.tokens["d1"])[1]["status"] == "duplicate"
        assert metrics(srv)["mirror_files_copied"] == 4
        assert "mirroring the archive to s3://fleet/copies" in srv.log()
    finally:
        assert srv.stop() == 0


def test_uploads_go_on_while_the_store_is_down_and_the_mirror_catches_up(tmp_path):
    port = free_port()
    with credentials():
        srv = running_collector(tmp_path, "--mirror", uri(f"127.0.0.1:{port}", "outage",
                                                          user="AKIDMIRROR:s3cr3tvalue@"))
        try:
            started = time.time()
            upload(srv, [("d1", seq, NOON + seq) for seq in range(3)])
            assert time.time() - started < 10  # no upload waited for the store
            down = wait_for(lambda: (m := metrics(srv))["mirror_failures"] >= 2 and m,
                            lambda: f"failures counted\n{srv.log()}", 30.0)
            assert down["mirror_pending_files"] == 3 and down["batches_stored"] == 3
            assert down["mirror_lag_seconds"] > 0
            assert "failed (tried again)" in srv.log()
            assert "s3://***@fleet/outage" in srv.log() and "s3cr3t" not in srv.log()
            s3 = S3(port)  # the store is back
            try:
                wait_for(lambda: metrics(srv)["mirror_pending_files"] == 0,
                         lambda: f"caught up\n{srv.log()}", 30.0)
                assert s3.files("outage") == local_files(srv.archive)
                assert metrics(srv)["mirror_lag_seconds"] == 0
            finally:
                s3.stop()
        finally:
            assert srv.stop() == 0


def test_a_restart_copies_what_changed_while_the_mirror_was_not_kept(s3, tmp_path):
    key = "restart"
    srv = running_collector(tmp_path)  # no --mirror yet
    try:
        upload(srv, [("d1", seq, NOON + seq) for seq in range(3)])
    finally:
        assert srv.stop() == 0
    first = sorted(local_files(srv.archive))[0]
    s3.fs.open_output_stream(f"fleet/{key}/{first}").close()  # a copy cut short, say
    srv.extra = ("--mirror", s3.uri(key))
    srv.start()
    try:
        wait_for(lambda: metrics(srv)["mirror_files_copied"] == 3,
                 lambda: f"three copied\n{srv.log()}", 30.0)
        assert s3.files(key) == local_files(srv.archive)
        assert "3 archive files to copy, 0 to delete" in srv.log()
    finally:
        assert srv.stop() == 0


def test_bad_mirrors_exit_2_naming_them(tmp_path):
    archive = tmp_path / "archive"
    archive.mkdir()
    for mirror, words in ((str(archive / "copy"), "inside the archive"),
                          (str(tmp_path), "a folder the archive is in"),
                          (f"file://{archive}", "the archive itself"),
                          ("nosuch://bucket/x", "nosuch")):
        done = subprocess.run([sys.executable, "-m", "edge.collector", "--db",
                               str(tmp_path / "c.db"), "--archive", str(archive), "--port", "0",
                               "--mirror", mirror], cwd=ROOT, capture_output=True, text=True,
                              timeout=60)
        assert done.returncode == 2 and f"--mirror {mirror}:" in done.stderr, done.stderr
        assert words in done.stderr, done.stderr


# --------------------------------------------------------------------------- compaction, retention


def collector_with(tmp: Path, mirror: str) -> Collector:
    store = open_store(tmp / "c.db")
    for d in ("d1", "d2"):
        store.add_device(d)
    collector = Collector(store, Archive(tmp / "archive"), compact=True, retain_days=3,
                          mirror=mirror)
    collector.clock = ClockBounds()  # the 2023 batches came in their day, when it was kept
    return collector


def ingest(collector: Collector, device: str, seq: int, day: int) -> None:
    batch = make_batch(device, seq, events=make_events(seed=seq + 50 * (device == "d2")),
                       created_at=NOON + day * DAY + seq)
    assert collector.ingest(encode_batch(batch), device)[1]["status"] == "stored"


def cut_compaction(collector: Collector, today: dt.date) -> set[str]:
    """A compaction pass stopped before its database transaction: the compacted files
    written (their paths returned), no batch moved into them, the files they replace still
    there."""
    since = (today - dt.timedelta(days=collector.retain_days)).isoformat()
    written = set()
    for folder in collector.archive.device_folders(today.isoformat(), since):
        rel = folder.relative_to(collector.archive.root).as_posix()
        live = collector.store.archive_files(rel)
        held = [p for p in folder.glob("*.parquet") if f"{rel}/{p.name}" in live]
        if len(held) > 1:
            written |= {f"{rel}/{new.name}" for new, _ in collector.archive.compact(held)}
    return written


def drain(mirror: Mirror) -> None:
    for _ in range(1000):
        if mirror.idle():
            return
        assert mirror.step()
    raise AssertionError("the mirror does not catch up")


def test_compaction_moves_to_the_mirror_and_retention_leaves_it(s3, tmp_path):
    key = "compaction"
    collector = collector_with(tmp_path, s3.uri(key))
    try:
        for seq in range(6):
            ingest(collector, "d1", seq, seq // 2)  # two batches a day, days 0-2
        ingest(collector, "d2", 0, 0)
        drain(collector.mirror)
        assert s3.files(key) == local_files(collector.archive.root)
        stored = set(batch_ids(s3.files(key)))

        asyncio.run(collector.compact_pass(today=dt.date(2023, 11, 16)))  # days 0 and 1
        assert collector.mirror.gauges()["mirror_pending_files"] == 2 + 4
        assert collector.mirror.step()  # the first compacted file is copied first
        assert batch_ids(s3.files(key)).keys() == stored
        drain(collector.mirror)
        assert s3.files(key) == local_files(collector.archive.root)
        assert batch_ids(s3.files(key)) == Counter(dict.fromkeys(stored, 1))
        assert collector.metrics["mirror_files_deleted"] == 4

        asyncio.run(collector.prune_pass(today=dt.date(2023, 11, 19)))  # keeps day 2 only
        drain(collector.mirror)
        assert len(local_files(collector.archive.root)) == 2
        assert batch_ids(s3.files(key)) == Counter(dict.fromkeys(stored, 1))
    finally:
        collector.close()


def test_retention_keeps_a_day_on_disk_until_the_mirror_has_it(tmp_path, caplog):
    caplog.set_level(logging.INFO, "acep.collector")
    root, copy = tmp_path / "archive", tmp_path / "copy"
    collector = collector_with(tmp_path, str(copy))
    later = dt.date(2023, 11, 20)  # retention deletes the days before 11-17
    try:
        ingest(collector, "d1", 0, 0)
        ingest(collector, "d1", 1, 4)
        assert asyncio.run(collector.prune_pass(today=later))["archive_files"] == 0
        assert "kept until the mirror is compared" in caplog.text
        assert collector.mirror.step()  # the comparison: both files to copy
        assert collector.mirror.step()  # day 0's copied, day 4's not yet
        ingest(collector, "d1", 2, 1)  # late, for a day retention deletes
        assert collector.mirror.held_days() == {"2023-11-15", "2023-11-18"}
        assert asyncio.run(collector.prune_pass(today=later))["archive_files"] == 1
        assert "days 2023-11-15 are kept until the mirror has them" in caplog.text
        assert sorted(local_files(root)) == ["date=2023-11-15/device=d1/part-00000000000000000002"
                                             ".parquet", "date=2023-11-18/device=d1/part-"
                                             "00000000000000000001.parquet"]
        drain(collector.mirror)
        assert asyncio.run(collector.prune_pass(today=later))["archive_files"] == 1
        assert batch_ids(local_files(copy)) == Counter({"d1/0": 1, "d1/1": 1, "d1/2": 1})
    finally:
        collector.close()


def four_batches_mirrored(tmp: Path) -> tuple[Path, Path, Collector]:
    """A collector mirroring to a folder, with 4 batches of one day copied: the archive's
    root, the copy, the collector."""
    root, copy = tmp / "archive", tmp / "copy"
    collector = collector_with(tmp, str(copy))
    for seq in range(4):
        ingest(collector, "d1", seq, 0)
    drain(collector.mirror)
    return root, copy, collector


def test_a_compaction_cut_off_before_the_mirror_deletes_is_finished_at_the_next_start(
        tmp_path):
    """The collector stopped after copying a compacted file and before deleting what it
    replaced; the next start compacted again (a late batch) before the mirror compared:
    the files of both generations leave the mirror."""
    root, copy, collector = four_batches_mirrored(tmp_path)
    try:
        asyncio.run(collector.compact_pass(today=dt.date(2023, 11, 16)))
        assert collector.mirror.step()  # the compacted file, not the deletions: then it stops
        collector.mirror = Mirror(root, str(copy), collector.metrics)  # the next start
        ingest(collector, "d1", 9, 0)  # late
        asyncio.run(collector.compact_pass(today=dt.date(2023, 11, 16)))
        drain(collector.mirror)
        assert local_files(copy) == local_files(root)
        assert len(local_files(copy)) == 1
        assert batch_ids(local_files(copy)) == Counter({f"d1/{q}": 1 for q in (0, 1, 2, 3, 9)})
    finally:
        collector.close()


def test_a_compaction_cut_off_before_its_commit_leaves_no_duplicate_in_the_mirror(
        tmp_path):
    """The collector stopped in a compaction's merge; the next start copied the file it
    wrote, then deleted it as a leftover and stopped before the mirror did: the start
    after that deletes it there (its batches are all in files the collector has)."""
    root, copy, collector = four_batches_mirrored(tmp_path)
    try:
        cut_compaction(collector, dt.date(2023, 11, 16))
        collector.mirror = Mirror(root, str(copy), collector.metrics)  # the next start
        drain(collector.mirror)  # the comparison copies the leftover too
        assert len(local_files(copy)) == 5
        done = asyncio.run(collector.compact_pass(today=dt.date(2023, 11, 16)))
        assert (done["leftovers"], done["merged"], done["written"]) == (1, 4, 1)
        collector.mirror = Mirror(root, str(copy), collector.metrics)  # its deletions lost
        drain(collector.mirror)
        assert local_files(copy) == local_files(root) and len(local_files(copy)) == 1
        assert batch_ids(local_files(copy)) == Counter({f"d1/{q}": 1 for q in range(4)})
    finally:
        collector.close()


# --------------------------------------------------------------------------- any order


ACTIONS = st.one_of(
    st.tuples(st.just("ingest"), st.sampled_from(["d1", "d2"]), st.integers(0, 3),
              st.integers(1, 3)),
    st.tuples(st.just("compact"), st.integers(1, 4)),
    st.tuples(st.just("cut"), st.integers(1, 4)),
    st.tuples(st.just("prune"), st.integers(4, 7)),
    st.tuples(st.just("step"), st.integers(1, 4)),
    st.tuples(st.just("restart")),
)


@settings(max_examples=int(os.environ.get("MIRROR_EXAMPLES", 30)), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(actions=st.lists(ACTIONS, max_size=20))
# found by it: a compacted file whose rows retention deleted, kept on disk for the mirror,
# was taken for an interrupted compaction's file and deleted there and in the mirror
@example(actions=[("ingest", "d1", 0, 2), ("compact", 1), ("prune", 4), ("compact", 1)])
# a batch file copied, then compacted twice across a restart: the first compacted file never
# reached the mirror, so only a list passed on from it names the batch file to delete
@example(actions=[("ingest", "d2", 1, 2), ("step", 2), ("compact", 2), ("restart",),
                  ("ingest", "d2", 1, 1), ("compact", 2)])
# a compaction cut off, its file copied by the next start's comparison, then deleted as a
# leftover and the collector stopped before the mirror deleted it too
@example(actions=[("ingest", "d1", 1, 2), ("cut", 3), ("restart",), ("step", 4), ("compact", 3),
                  ("restart",)])
# a cut-off compaction's file copied, then its day deleted by retention: the mirror kept it
# beside the batch files it merged
@example(actions=[("ingest", "d1", 0, 2), ("cut", 1)])
# a cut-off compaction's file copied, deleted as a leftover after a restart, before the
# comparison: the deletion went ahead of the copies of the files holding its batches
@example(actions=[("ingest", "d1", 0, 2), ("cut", 1), ("restart",), ("step", 2), ("restart",),
                  ("prune", 4), ("step", 2)])
# retention deleted the day of a leftover's deletion not made yet, then a restart lost it
@example(actions=[("ingest", "d1", 0, 2), ("cut", 1), ("step", 4), ("prune", 4),
                  ("restart",)])
def test_a_batch_once_in_the_mirror_stays_and_ends_there_once(tmp_path_factory, actions):
    """Whatever the order of uploads, compactions (some cut off before their commit),
    retention passes, the mirror's steps and restarts (its queue lost), no batch leaves the
    mirror once in it; once the mirror caught up it holds every batch ever stored, each file
    it shares with the archive byte for byte; and once retention deleted every day from the
    collector's disk, the mirror holds every batch exactly once."""
    tmp = tmp_path_factory.mktemp("mirror")
    root, copy = tmp / "archive", tmp / "copy"
    collector = collector_with(tmp, str(copy))
    seqs, stored, seen, cut = Counter(), set(), set(), set()
    try:
        for action in actions + [("drain",)]:
            if action[0] == "ingest":
                _, device, day, n = action
                for _ in range(n):
                    ingest(collector, device, seqs[device], day)
                    stored.add(f"{device}/{seqs[device]}")
                    seqs[device] += 1
            elif action[0] in ("compact", "prune"):
                today = dt.date(2023, 11, 14) + dt.timedelta(days=action[1])
                step = collector.compact_pass if action[0] == "compact" else \
                    collector.prune_pass
                done = asyncio.run(step(today=today))
                event(f"{action[0]} changed files" if done.get("merged") or
                      done.get("archive_files") else f"{action[0]} changed nothing")
            elif action[0] == "cut":
                cut |= cut_compaction(collector,
                                      dt.date(2023, 11, 14) + dt.timedelta(days=action[1]))
            elif action[0] == "step":
                for _ in range(action[1]):
                    assert collector.mirror.step()
            elif action[0] == "restart":
                event(f"restart with {'changes' if not collector.mirror.idle() else 'none'} "
                      "pending")
                collector.mirror = Mirror(root, str(copy), collector.metrics)
            else:
                drain(collector.mirror)
            now = batch_ids(local_files(copy)) if copy.exists() else Counter()
            assert seen <= set(now), (action, seen - set(now))
            seen = set(now)
        assert set(now) == stored
        mirrored, local = local_files(copy), local_files(root)
        assert set(local) - cut <= set(mirrored)  # a cut-off file: copied at the next start
        assert {rel: mirrored[rel] for rel in local if rel in mirrored} == \
            {rel: local[rel] for rel in local if rel in mirrored}
        for _ in range(2):  # every day retained out: the copy alone holds the batches
            asyncio.run(collector.prune_pass(today=dt.date(2023, 11, 30)))
            drain(collector.mirror)
        assert local_files(root) == {}
        assert batch_ids(local_files(copy)) == Counter(dict.fromkeys(stored, 1))
    finally:
        collector.close()
