"""The collector over months, as an operator runs it: backups of a database in use.
Real collectors on loopback, real SQLite files (the helpers of
tests/test_edge_collector.py)."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from test_edge_collector import (
    ROOT,
    Server,
    beat,
    fleet,
    make_batch,
    post,
)

from edge.store import open_store
from edge.wire import encode_batch


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
    server = Server(tmp_path)
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
            done = fleet(server, "--backup", str(tmp_path / "copy.db"))
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


def test_a_backup_that_fills_the_disk_names_it_and_leaves_nothing_behind(tmp_path):
    db = tmp_path / "c.db"
    filled_store(db, batches=200)  # 600 KiB
    small = tmp_path / "small"
    small.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(small)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        done = collector("--db", str(db), "--backup", str(small / "copy.db"))
        one_line(done, 2, f"--backup: {small / 'copy.db'}: database or disk is full")
        assert list(small.iterdir()) == []
    finally:
        subprocess.run(["umount", "-l", str(small)], check=True)
