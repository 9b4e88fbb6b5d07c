"""The collector over months, as an operator runs it: backups of a database in use, a
damaged or mistaken database file, a restore from a backup and the archive files the
database then does not know, a move to another path. Real collectors on loopback, real
SQLite files and Parquet archives (the helpers of tests/edge/test_edge_collector.py)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from support.collector import (
    MAX_BODY,
    ROOT,
    CollectorProcess,
    beat,
    make_batch,
    make_events,
    post,
    request,
    uploading,
)

from edge.agent.outbox import Outbox
from edge.collector.store import SCHEMA_VERSION, open_store
from edge.wire import encode_batch


@pytest.fixture
def srv(tmp_path):
    """A serving collector with the devices d1 and d2."""
    server = CollectorProcess(tmp_path, max_body=MAX_BODY)
    server.tokens = filled_store(server.db, batches=0)
    server.start()
    yield server
    if server.proc.poll() is None:
        assert server.stop() == 0


def collector(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "edge.collector", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def damage(db: Path) -> None:
    """Zero the middle half of a database file: its header and schema still read."""
    size = db.stat().st_size
    with open(db, "r+b") as f:
        f.seek(size // 4)
        f.write(bytes(size // 2))


def filled_store(db: Path, batches: int = 40, devices=("d1", "d2")) -> dict[str, str]:
    """A collector database with ``batches`` batches of d1; the devices' tokens."""
    store = open_store(db)
    tokens = {d: store.add_device(d) for d in devices}
    for seq in range(batches):
        store.store_batch(make_batch("d1", seq), nbytes=1)
    store.close()
    return tokens


def one_line(done: subprocess.CompletedProcess, code: int, *words: str) -> None:
    assert done.returncode == code, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    for word in words:
        assert word in done.stderr, done.stderr


# --------------------------------------------------------------------------- --backup


def test_a_backup_of_a_big_database_written_all_the_time_finishes(tmp_path):
    server = CollectorProcess(tmp_path, max_body=MAX_BODY)
    server.tokens = filled_store(server.db)
    with sqlite3.connect(server.db) as db:  # 68 MiB: several steps of a page-wise copy
        for _ in range(8):
            db.execute("INSERT INTO matches SELECT batch_id || '+' || abs(random()), idx, "
                       "device, pattern_id, partition, point, start, errors, trajectory, "
                       "exact, exact_count, exact_matches, exact_reason FROM matches")
    db.close()
    assert server.db.stat().st_size > 48 << 20
    server.start()
    assert post(server, encode_batch(make_batch("d2", 0)), server.tokens["d2"])[0] == 200
    stop, beats = threading.Event(), [0]

    def heartbeats():  # a write every few milliseconds, as a big fleet's collector has
        while not stop.is_set():
            assert beat(server, b'{"consumed": 1}', server.tokens["d1"])[0] == 200
            beats[0] += 1
    writer = threading.Thread(target=heartbeats)
    writer.start()
    try:
        while beats[0] < 20:
            time.sleep(0.01)
        started = time.monotonic()
        try:
            done = server.manage("--backup", str(tmp_path / "copy.db"))
        except subprocess.TimeoutExpired:
            pytest.fail("the backup restarted at every write and never finished")
        seconds = time.monotonic() - started
    finally:
        stop.set()
        writer.join()
        server.stop()
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["batches"] == 41 and seconds < 50
    with sqlite3.connect(tmp_path / "copy.db") as copy:
        assert copy.execute("PRAGMA quick_check").fetchone() == ("ok",)
        assert copy.execute("SELECT 1 FROM batches WHERE batch_id = 'd2/0'").fetchone()
    assert sorted(p.name for p in tmp_path.iterdir() if "copy" in p.name) == ["copy.db"]


def test_a_backup_of_a_damaged_database_is_refused_and_writes_no_file(tmp_path):
    db = tmp_path / "c.db"
    filled_store(db, batches=200)
    damage(db)
    before = digest(db)
    done = collector("--db", str(db), "--backup", str(tmp_path / "copy.db"))
    one_line(done, 2, f"--backup: {db}: damaged", "restore")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.db"] and digest(db) == before


def test_a_backup_to_a_directory_a_missing_folder_or_an_unwritable_place_names_it(tmp_path):
    db = tmp_path / "c.db"
    filled_store(db, batches=2)
    (tmp_path / "backups").mkdir()
    for target, want in (
            (tmp_path / "backups", "is a directory"),
            (tmp_path / "nowhere" / "copy.db", f"no such directory {tmp_path / 'nowhere'}"),
            (Path("/proc/copy.db"), "cannot write there"),
            (db, "exists (a backup never overwrites)")):
        done = collector("--db", str(db), "--backup", str(target))
        one_line(done, 2, f"--backup: {target}: {want}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["backups", "c.db"]
    assert list((tmp_path / "backups").iterdir()) == []


@pytest.fixture
def small_disk(tmp_path):
    """A 256 KiB tmpfs: a real file system that fills up (mounting needs root)."""
    small = tmp_path / "small"
    small.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(small)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    yield small
    subprocess.run(["umount", "-l", str(small)], check=True)


def test_a_backup_that_fills_the_disk_names_it_exits_1_and_leaves_nothing_behind(
        tmp_path, small_disk):
    """The target passed the checks; the copy failed while it was written: the work failed,
    exit 1 (it was 2, the exit of a FILE refused before the work)."""
    db = tmp_path / "c.db"
    filled_store(db, batches=200)  # 600 KiB
    done = collector("--db", str(db), "--backup", str(small_disk / "copy.db"))
    one_line(done, 1, f"--backup: {small_disk / 'copy.db'}: database or disk is full")
    assert list(small_disk.iterdir()) == []


def test_the_admin_commands_whose_write_meets_a_full_disk_exit_1_in_one_line(
        tmp_path, small_disk):
    """The database opened (a serving collector keeps its -wal and -shm files, held here by
    a connection), then its write failed: a traceback, exit 1. Now one line naming the
    option, the database and SQLite's reason, exit 1, and nothing changed."""
    filled_store(tmp_path / "c.db", batches=10)
    db = Path(shutil.copy(tmp_path / "c.db", small_disk / "c.db"))
    held = sqlite3.connect(db)  # as a serving collector holds it
    try:
        assert held.execute("SELECT COUNT(*) FROM batches").fetchone() == (10,)
        before = collector("--db", str(db), "--list-devices").stdout
        with open(small_disk / "ballast", "wb", buffering=0) as ballast:
            with contextlib.suppress(OSError):
                while True:
                    ballast.write(b"\0" * 4096)
        for args in (["--add-device", "d3"], ["--add-admin", "ops"], ["--rotate-token", "d1"],
                     ["--revoke-device", "d1"], ["--prune-before", "2030-01-01"]):
            done = collector("--db", str(db), *args)
            one_line(done, 1, f"acep serve: {args[0]}: {db}: database or disk is full")
            assert "Traceback" not in done.stderr
        (small_disk / "ballast").unlink()
        assert collector("--db", str(db), "--list-devices").stdout == before
        assert held.execute("SELECT COUNT(*) FROM batches").fetchone() == (10,)
    finally:
        held.close()


def test_prune_before_whose_archive_cannot_be_deleted_from_exits_1_in_one_line(tmp_path):
    """The database's batches are pruned, then the archive's days are on a file system
    mounted read-only: a traceback, exit 1; now one line naming the file, exit 1. Run
    again once it is writable, it prunes the days it left."""
    db, archive = tmp_path / "c.db", tmp_path / "archive"
    filled_store(db, batches=2)
    day = archive / "date=2023-11-14" / "device=d1"
    day.mkdir(parents=True)
    (day / "part-1.parquet").write_bytes(b"events")
    bound = subprocess.run(["mount", "--bind", str(archive), str(archive)],
                           capture_output=True, text=True)
    if bound.returncode != 0:
        pytest.skip(f"cannot bind-mount here: {bound.stderr.strip()}")
    try:
        done = subprocess.run(["mount", "-o", "remount,bind,ro", str(archive)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"cannot mount read-only here: {done.stderr.strip()}")
        done = collector("--db", str(db), "--archive", str(archive), "--prune-before",
                         "2030-01-01")
        one_line(done, 1, f"acep serve: --prune-before: {day.parent}: Read-only file system")
        assert (day / "part-1.parquet").exists()
    finally:
        subprocess.run(["umount", "-l", str(archive)], check=True)
    done = collector("--db", str(db), "--archive", str(archive), "--prune-before", "2030-01-01")
    assert done.returncode == 0 and json.loads(done.stdout)["archive_files"] == 1, done.stderr
    assert list(archive.iterdir()) == []


# --------------------------------------------------------------------------- the --db file


def test_a_damaged_database_is_one_line_for_the_tools_that_read_it(tmp_path):
    db = tmp_path / "c.db"
    filled_store(db, batches=200)
    damage(db)
    for args in (["--list-devices"], ["--prune-before", "2030-01-01"]):
        before = digest(db)
        done = collector("--db", str(db), *args)
        one_line(done, 2, f"--db: {db}: damaged", "restore it from a backup")
        assert "Traceback" not in done.stderr and digest(db) == before


def test_a_sqlite_file_that_is_not_a_collector_s_database_is_refused_untouched(tmp_path):
    outbox = tmp_path / "agent-outbox.db"  # an easy mistake: the agent's database
    Outbox(outbox).close()
    before = digest(outbox)
    for args in (["--list-devices"], ["--add-device", "d1"],
                 ["--archive", str(tmp_path / "a"), "--port", "0"]):
        done = collector("--db", str(outbox), *args)
        one_line(done, 2, f"--db: {outbox}: a SQLite database but not a collector's",
                 "pending")
        assert digest(outbox) == before
    assert not (tmp_path / "a").exists()


def test_a_database_of_a_newer_schema_is_refused_and_a_new_one_says_its_version(tmp_path):
    db = tmp_path / "c.db"
    filled_store(db, batches=1)
    with sqlite3.connect(db) as c:
        assert c.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
        c.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    c.close()
    before = digest(db)
    for args in (["--list-devices"], ["--archive", str(tmp_path / "a"), "--port", "0"]):
        done = collector("--db", str(db), *args)
        one_line(done, 2, f"--db: {db}: schema version {SCHEMA_VERSION + 1}", "newer acep")
        assert digest(db) == before


def test_an_empty_file_is_no_database_for_the_tools_that_only_use_one(tmp_path):
    db = tmp_path / "c.db"
    db.touch()  # a copy that failed, a disk that filled up
    for args in (["--list-devices"], ["--backup", str(tmp_path / "copy.db")],
                 ["--prune-before", "2030-01-01"], ["--revoke-device", "d1"]):
        done = collector("--db", str(db), *args)
        one_line(done, 2, f"--db: {db}: an empty file")
        assert db.stat().st_size == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.db"]


def test_a_database_damaged_under_a_serving_collector_is_503_and_said_once(tmp_path):
    server = CollectorProcess(tmp_path, max_body=MAX_BODY)
    server.tokens = filled_store(server.db, batches=300)
    damage(server.db)  # the last batches too, which the start reads (their archive files)
    before = digest(server.db)
    done = collector("--db", str(server.db), "--archive", str(server.archive), "--port", "0")
    one_line(done, 2, f"--db: {server.db}: damaged", "restore it from a backup")
    assert digest(server.db) == before and not server.archive.exists()
    server.db.unlink()
    server.tokens = filled_store(server.db, batches=300)
    with sqlite3.connect(server.db) as db:  # the batches first, in pages the damage spares
        db.execute("VACUUM")
    db.close()
    damage(server.db)  # the pages of the matches: found by the first insert
    server.start()
    try:
        status, doc = post(server, encode_batch(make_batch("d1", 300)), server.tokens["d1"])
        assert status == 503 and "damaged" in doc["error"], doc
        status, doc = post(server, encode_batch(make_batch("d1", 301)), server.tokens["d1"])
        assert status == 503 and "restore it from a backup" in doc["error"], doc
        status, body, headers = request(server.url + "/health")
        assert status == 503 and "damaged" in json.loads(body)["error"]
        assert "Retry-After" in headers
        assert json.loads(request(server.url + "/metrics")[1])["storage_ok"] == 0
    finally:
        assert server.stop() == 0
    log = server.log()
    assert "Traceback" not in log and log.count("is damaged") == 1, log


# --------------------------------------------------------------------------- restore


def test_a_backup_put_in_place_beside_the_old_database_s_log_is_refused(tmp_path):
    server = CollectorProcess(tmp_path, max_body=MAX_BODY)
    server.tokens = filled_store(server.db, batches=0)
    server.start()
    assert post(server, encode_batch(make_batch("d1", 0)), server.tokens["d1"])[0] == 200
    assert server.manage("--backup", str(tmp_path / "backup.db")).returncode == 0
    for seq in range(1, 4):
        assert post(server, encode_batch(make_batch("d1", seq)), server.tokens["d1"])[0] == 200
    server.stop(signal.SIGKILL)  # the log of the killed collector stays beside its database
    wal = tmp_path / "collector.db-wal"
    assert wal.stat().st_size > 0
    shutil.copy(tmp_path / "backup.db", server.db)
    before = digest(server.db)
    for args in (["--archive", str(server.archive), "--port", "0"], ["--list-devices"]):
        done = collector("--db", str(server.db), *args)
        one_line(done, 2, f"--db: {server.db}", f"{wal} is beside it", "move")
        assert digest(server.db) == before
    wal.rename(tmp_path / "old-collector.db-wal")
    (tmp_path / "collector.db-shm").rename(tmp_path / "old-collector.db-shm")
    server.start()  # the backup, as it was
    assert server.rows("SELECT batch_id FROM batches") == [("d1/0",)]
    assert server.stop() == 0


def test_a_missing_archive_is_not_made_when_the_database_names_files_in_it(srv):
    assert post(srv, encode_batch(make_batch("d1", 0)), srv.tokens["d1"])[0] == 200
    assert srv.stop() == 0
    moved = srv.tmp / "archive-on-the-new-disk"
    srv.archive.rename(moved)
    done = collector("--db", str(srv.db), "--archive", str(srv.archive), "--port", "0")
    one_line(done, 2, f"--archive {srv.archive}: no such directory", "1 archive file")
    assert not srv.archive.exists()
    srv.archive = moved  # another path: the database's paths are relative to it
    check = collector("--db", str(srv.db), "--archive", str(moved), "--check-archive")
    assert check.returncode == 0, check.stdout + check.stderr
    srv.start()
    assert post(srv, encode_batch(make_batch("d1", 0)), srv.tokens["d1"])[1]["status"] == \
        "duplicate"


def test_an_archive_without_the_files_of_the_newest_batches_is_refused_at_the_start(srv):
    """An empty mount point where the archive's disk should be, or an archive that lacks
    the last batches' files (a wrong path, an old copy): the collector does not start
    writing new files beside nothing."""
    for seq in range(4):
        assert post(srv, encode_batch(make_batch("d1", seq)), srv.tokens["d1"])[0] == 200
    assert srv.stop() == 0
    newest = "date=2023-11-14/device=d1/part-00000000000000000003.parquet"
    disk = srv.archive.rename(srv.tmp / "archive-disk")
    srv.archive.mkdir()  # the mount point, nothing mounted on it
    serve = ("--db", str(srv.db), "--archive", str(srv.archive), "--port", "0")
    done = collector(*serve)
    one_line(done, 2, f"--archive {srv.archive}: {newest} is missing", "3 of the 3",
             "not mounted", f"--archive {srv.archive} --check-archive",
             "--accept-missing-archive")
    assert "listening" not in done.stdout and list(srv.archive.iterdir()) == []
    srv.archive.rmdir()
    disk.rename(srv.archive)
    (srv.archive / newest).rename(srv.tmp / "newest.parquet")  # the last file alone
    one_line(collector(*serve), 2, f"{newest} is missing", "1 of the 3")
    srv.extra = ("--accept-missing-archive",)  # the operator knows it is lost
    srv.start()
    assert f"acep serve: warning: --archive {srv.archive}: {newest} is missing" in srv.log()
    assert post(srv, encode_batch(make_batch("d1", 4)), srv.tokens["d1"])[0] == 200
    assert srv.stop() == 0
    (srv.tmp / "newest.parquet").rename(srv.archive / newest)
    srv.extra = ()
    srv.start()  # all there: it serves as before
    assert post(srv, encode_batch(make_batch("d1", 3)), srv.tokens["d1"])[1]["status"] == \
        "duplicate"
    assert srv.stop() == 0
    shutil.rmtree(srv.archive)
    srv.archive.mkdir()
    srv.extra = ("--retain-days", "1")  # files of days retention deletes at once: not needed
    srv.start()
    until = time.time() + 30
    while json.loads(request(srv.url + "/metrics")[1])["pruned_batches"] < 5:
        assert time.time() < until, srv.log()
        time.sleep(0.05)
    assert srv.rows("SELECT count(*) FROM batches") == [(0,)]


def test_the_start_looks_at_the_newest_files_in_steps_the_database_s_size_does_not_change(
        tmp_path):
    from edge.collector.consistency import newest_missing

    def steps(batches: int, summaries: int) -> tuple[int, tuple[list[str], int]]:
        """The SQLite VM steps of the start's look at a database of ``batches`` matches
        batches (each in its file) then ``summaries`` summary batches (in none)."""
        db = sqlite3.connect(tmp_path / f"{batches}-{summaries}.db")
        open_store(tmp_path / f"{batches}-{summaries}.db").close()
        with db:
            db.execute(
                "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < ?) "
                "INSERT INTO batches SELECT 'd1/' || i, 'd1', i, CASE WHEN i < ? THEN "
                "'matches' ELSE 'summary' END, 'p1', '{}', 1.7e9, 1.7e9, 1, 1, 1, CASE WHEN "
                "i < ? THEN printf('date=2023-11-14/device=d1/part-%020d.parquet', i) END, "
                "NULL FROM n", (batches + summaries, batches, batches))
        db.close()
        store, counted = open_store(tmp_path / f"{batches}-{summaries}.db"), [0]

        def count() -> int:
            counted[0] += 1
            return 0
        store._db.set_progress_handler(count, 1)
        try:
            missing = newest_missing(store, tmp_path / "empty")
        finally:
            store.close()
        return counted[0], missing

    (tmp_path / "empty").mkdir()
    small, missing = steps(10, 0)
    assert missing == ([f"date=2023-11-14/device=d1/part-{i:020d}.parquet"
                        for i in (9, 8, 7)], 3)
    large, (gone, looked) = steps(200_000, 0)
    assert large == small and (len(gone), looked) == (3, 3)
    few, nothing = steps(10, 2000)  # the newest batches hold no file: it stops looking
    assert nothing == ([], 0) and steps(10, 200_000)[0] == few


def test_check_archive_lists_what_a_restored_database_and_its_archive_disagree_on(tmp_path):
    server = CollectorProcess(tmp_path, max_body=MAX_BODY)
    server.tokens = filled_store(server.db, batches=0)
    server.start()
    now = time.time()

    def upload(seq: int, age_days: float = 2) -> None:
        batch = make_batch("d1", seq, events=make_events(seed=seq),
                           created_at=now - age_days * 86400)
        assert post(server, encode_batch(batch), server.tokens["d1"])[0] == 200

    for seq in range(3):
        upload(seq)
    done = server.manage("--archive", str(server.archive), "--check-archive")
    assert done.returncode == 0 and json.loads(done.stdout.splitlines()[-1])["ok"], done.stdout
    assert server.manage("--backup", str(tmp_path / "backup.db")).returncode == 0
    for seq in range(3, 5):  # acknowledged after the backup: no device sends them again
        upload(seq)
    assert server.stop() == 0
    server.extra = ("--compact",)
    server.start()  # --compact at its start merges the closed day's five files into one
    until = time.time() + 30
    while json.loads(request(server.url + "/metrics")[1])["compaction_written"] < 1:
        assert time.time() < until, server.log()
        time.sleep(0.05)
    assert server.stop() == 0
    (compacted,) = server.archive.rglob("compact-*.parquet")
    for name in ("collector.db", "collector.db-wal", "collector.db-shm"):
        (tmp_path / name).unlink(missing_ok=True)
    shutil.copy(tmp_path / "backup.db", server.db)
    server.extra = ()

    done = collector("--db", str(server.db), "--archive", str(server.archive), "--check-archive")
    assert done.returncode == 1, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    rel = compacted.relative_to(server.archive).as_posix()
    folder = rel.rsplit("/", 1)[0]
    assert lines[0] == {"file": rel, "problem": "no batch of the database is in it",
                        "batches": 5, "batches_not_in_database": ["d1/3", "d1/4"]}
    assert lines[1:4] == [{"file": f"{folder}/part-{seq:020d}.parquet", "problem": "missing",
                           "batches": 1, "rows_in": rel} for seq in range(3)]
    assert lines[4] == {"ok": False, "files": 1, "files_named": 3, "not_named": 1,
                        "missing": 3, "batches_not_in_database": 2}
    assert done.stderr == ""

    server.start()  # the restored collector serves on as before
    upload(5, age_days=0)
    assert server.stop() == 0
    done = collector("--db", str(server.db), "--archive", str(server.archive), "--check-archive")
    assert done.returncode == 1 and json.loads(done.stdout.splitlines()[-1])["files"] == 2


def test_check_archive_beside_a_collector_that_stores_batches_finds_nothing(srv):
    with uploading(srv, "d2"):
        checks = [srv.manage("--archive", str(srv.archive), "--check-archive")
                  for _ in range(3)]
    for done in checks:
        assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(checks[-1].stdout)["files"] >= 3


def test_check_archive_names_a_file_that_is_not_parquet_and_a_missing_archive(srv):
    assert post(srv, encode_batch(make_batch("d1", 0)), srv.tokens["d1"])[0] == 200
    (part,) = srv.archive.rglob("*.parquet")
    stray = part.with_name("part-00000000000000000099.parquet")
    stray.write_text("not parquet")
    done = srv.manage("--archive", str(srv.archive), "--check-archive")
    assert done.returncode == 1
    first = json.loads(done.stdout.splitlines()[0])
    assert first["file"].endswith("part-00000000000000000099.parquet")
    assert first["problem"].startswith("no batch of the database is in it; not readable")
    done = srv.manage("--archive", str(srv.tmp / "typo"), "--check-archive")
    one_line(done, 2, f"--archive {srv.tmp / 'typo'}: no such directory")
    done = srv.manage("--check-archive")
    one_line(done, 2, "--check-archive needs --archive DIR")
    assert not (srv.tmp / "typo").exists()
    os.unlink(stray)
