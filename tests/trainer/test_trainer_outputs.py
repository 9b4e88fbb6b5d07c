"""The Spark jobs replace only what they wrote: ``acep exact-batch --out``/``--quarantine``
and ``acep train --quarantine`` refuse a file, the input (or a directory inside or around
it), each other, and a non-empty directory that is not an earlier output; an earlier output
is replaced (real files, a real local Spark session for the runs that write)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pyarrow.parquet as pq
import pytest

pytest.importorskip("pyspark", reason="the trainer needs PySpark (pip install 'acep[spark]')")

from support.procs import alive, descendants  # noqa: E402

from trainer.cli import main as train_main  # noqa: E402
from trainer.exact import main as exact_main  # noqa: E402
from trainer.outputs import absolute, remove_abandoned, replacing  # noqa: E402
from trainer.spark import run_command  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
QUERY = "PATTERN SEQ(a x, b y) WHERE skip_till_any_match(x, y) { x.v <= y.v } WITHIN 3"


def _archive(root: Path) -> None:
    from edge.collector.archive import Archive

    for seq in range(3):
        rows = [{"type": "ab"[i % 2], "t": float(10 * seq + i), "v": float(i % 4)}
                for i in range(8)]
        Archive(root).write(SimpleNamespace(
            event_position=np.arange(8 * seq, 8 * seq + 8), type_names=["a", "b"],
            event_type=np.array([i % 2 for i in range(8)], np.int32),
            event_tag=np.array([r["t"] for r in rows]),
            columns={"v": np.array([r["v"] for r in rows])},
            pattern=SimpleNamespace(id="ab", text="a b", window=3.0, k=0, where=[],
                                    partition_by=None, hash="h"),
            created_at=1.7e9, device="d1", seq=seq, batch_id=f"d1/{seq}", tag_is_time=False))


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


@pytest.fixture()
def work(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _archive(tmp_path / "archive")
    (tmp_path / "q.sase").write_text(QUERY)
    (tmp_path / "fleet.key").write_bytes(b"secret key bytes\n")
    rows = [{"type": "ab"[i % 2], "t": i, "v": i % 4} for i in range(12)]
    del rows[5]["t"]  # one bad row, for the quarantine
    (tmp_path / "e.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "todo.txt").write_text("keep me")
    return tmp_path


@pytest.mark.parametrize("argv, message", [
    (["--archive", "archive", "--out", "archive"], "would replace the input archive"),
    (["--archive", "archive", "--out", "archive/date=2023-11-14"], "would replace the input"),
    (["--archive", "archive", "--out", "."], "would replace the input archive"),
    (["e.jsonl", "--out", "."], "would replace the input e.jsonl"),
    (["--archive", "archive", "--out", "fleet.key"], "fleet.key: an existing file"),
    (["--archive", "archive", "--out", "q.sase"], "an existing file"),
    (["--archive", "archive", "--out", "notes"], "holds 'todo.txt'"),
    (["--archive", "archive", "--out", "m", "--quarantine", "m"], "overlaps --quarantine m"),
    (["--archive", "archive", "--out", "m", "--quarantine", "archive"], "--quarantine archive"),
    (["--archive", "archive", "--out", "m", "--quarantine", "fleet.key"], "an existing file"),
    (["--archive", "archive", "--out", "/proc/acep-m"],
     "--out /proc/acep-m: cannot write in the directory /proc"),
])
def test_exact_batch_refuses_an_output_it_did_not_write(work, capsys, argv, message):
    before = {d: _tree(work / d) for d in ("archive", "notes")}
    key = (work / "fleet.key").read_bytes()
    assert exact_main(["q.sase", *argv, "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err, err
    assert {d: _tree(work / d) for d in ("archive", "notes")} == before
    assert (work / "fleet.key").read_bytes() == key and not (work / "m").exists()


@pytest.mark.parametrize("quarantine, message", [
    ("archive", "would replace the input archive"), ("fleet.key", "an existing file"),
    ("notes", "not an earlier output"),
    # found only when the trained job wrote it, before: the work lost, a Java stack printed
    ("/proc/acep-q", "--quarantine /proc/acep-q: cannot write in the directory /proc ("),
    ("fleet.key/q", "--quarantine fleet.key/q: {work}/fleet.key is not a directory")])
def test_train_refuses_a_quarantine_it_did_not_write(work, capsys, quarantine, message):
    before = _tree(work / "archive")
    assert train_main(["--archive", "archive", "-o", "h.history", "--quarantine", quarantine,
                       "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert message.format(work=work.resolve()) in err and "Traceback" not in err, err
    assert err.count("\n") == 1 and _tree(work / "archive") == before
    assert not (work / "h.history").exists()
    assert (work / "fleet.key").read_bytes() == b"secret key bytes\n"


@pytest.mark.parametrize("argv, message", [
    (["-o", "e.jsonl"], "-o e.jsonl: would replace the input e.jsonl"),
    (["-o", "link.history"], "-o link.history: would replace the input e.jsonl"),
    (["-o", "same", "--sketch", "same", "--key-file", "fleet.key"],
     "-o same: overlaps --sketch same"),
    (["--sketch", "fleet.key", "--key-file", "fleet.key"], "would replace the input fleet.key"),
    (["-o", "nowhere/h.history"], "-o nowhere/h.history: no such directory"),
    (["--sketch", "nowhere/s", "--key-file", "fleet.key"], "--sketch nowhere/s: no such dir"),
    (["-o", "notes"], "-o notes: a directory"),
    (["-o", "bad/h", "--quarantine", "bad"], "-o bad/h: overlaps --quarantine bad"),
])
def test_train_refuses_output_files_before_the_job(work, capsys, argv, message):
    (work / "link.history").symlink_to(work / "e.jsonl")
    (work / "bad").mkdir()
    events = (work / "e.jsonl").read_bytes()
    assert train_main(["e.jsonl", "-p", "a b", "-w", "3", *argv, "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and "reading" not in err, err
    assert (work / "e.jsonl").read_bytes() == events
    assert (work / "fleet.key").read_bytes() == b"secret key bytes\n"


def test_an_earlier_output_is_replaced_and_one_with_a_stranger_is_not(work, capsys):
    # absolute paths: the module's Spark session may have started in another directory
    argv = [str(work / "q.sase"), str(work / "e.jsonl"), "--out", str(work / "m"),
            "--quarantine", str(work / "bad"), "--no-progress"]
    assert exact_main(argv) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["matches"] > 0 and first["bad_rows"] == 1
    assert (work / "m" / "_SUCCESS").exists() and (work / "bad" / "_SUCCESS").exists()
    assert exact_main(argv) == 0  # the same command again replaces its own output
    second = json.loads(capsys.readouterr().out)
    assert second["matches"] == first["matches"]
    assert pq.read_table(work / "bad").column("line").to_pylist() == [6]
    clean = (work / "e.jsonl").read_text().splitlines()
    (work / "clean.jsonl").write_text("".join(line + "\n" for line in clean if '"t"' in line))
    assert exact_main([argv[0], str(work / "clean.jsonl"), *argv[2:]]) == 0
    assert json.loads(capsys.readouterr().out)["bad_rows"] == 0
    assert pq.read_table(work / "bad").num_rows == 0  # the earlier quarantine is replaced
    (work / "m" / "mine.csv").write_text("a file the job did not write")
    assert exact_main(argv) == 2
    assert "holds 'mine.csv'" in capsys.readouterr().err
    assert (work / "m" / "mine.csv").exists()


def test_outputs_are_made_absolute_in_the_current_directory_and_uris_are_kept(tmp_path,
                                                                              monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert absolute("out/m") == str(tmp_path.resolve() / "out" / "m")
    assert absolute(Path("bad")) == str(tmp_path.resolve() / "bad")
    assert absolute("/srv/m") == "/srv/m" and absolute(None) is None
    assert absolute("hdfs://namenode:8020/acep/bad") == "hdfs://namenode:8020/acep/bad"
    assert absolute("file:///srv/m") == "file:///srv/m"


def test_an_interrupted_write_leaves_the_earlier_output_whole(tmp_path):
    out = tmp_path / "m"
    out.mkdir()
    (out / "_SUCCESS").write_bytes(b"")
    (out / "part-0.parquet").write_bytes(b"earlier")
    with pytest.raises(KeyboardInterrupt), replacing(str(out)) as staging:
        Path(staging).mkdir()
        (Path(staging) / "part-1.parquet").write_bytes(b"half")
        raise KeyboardInterrupt
    assert _tree(out) == {"_SUCCESS": b"", "part-0.parquet": b"earlier"}
    remove_abandoned()  # after an interrupt, once Spark has stopped (run_command), or at exit
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]
    with replacing(str(out)) as staging:
        Path(staging).mkdir()
        (Path(staging) / "part-1.parquet").write_bytes(b"new")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]
    assert _tree(out) == {"part-1.parquet": b"new"}


def _interrupted_job(args):
    from py4j.protocol import Py4JError

    try:
        raise KeyboardInterrupt
    except KeyboardInterrupt:  # as pyspark's handler does: the cancelled call then fails
        raise Py4JError("An error occurred while calling o412.getResult") from None


def _failed_job(args):
    from py4j.protocol import Py4JError

    raise Py4JError("An error occurred while calling o9.collect.\n: org.apache.spark."
                    "SparkException: Job aborted\n\tat org.apache.spark.Some(Some.scala:1)")


@pytest.mark.parametrize("job, code, line", [
    (_interrupted_job, 130, "acep train: interrupted"),
    (lambda args: (_ for _ in ()).throw(KeyboardInterrupt), 130, "acep train: interrupted"),
    (_failed_job, 1, "acep train: error: org.apache.spark.SparkException: Job aborted"),
])
def test_an_interrupt_or_a_spark_failure_is_one_line(capsys, job, code, line):
    assert run_command("acep train", job, None, ()) == code
    assert capsys.readouterr().err == line + "\n"


def test_train_refuses_a_bucket_that_cannot_hold_one_operation_and_writes_nothing(work, capsys):
    """The fit's budget check (acep.shedding.check_buckets) after Spark has counted the
    operations: exit 2 naming the smallest --burst, as acep history build says it, and no
    history or sketch written."""
    rows = [{"type": "ab"[i % 2], "t": i, "v": i % 4} for i in range(40)]
    (work / "good.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    argv = ["good.jsonl", "-p", "a b", "-w", "3", "-o", "h.history", "--sketch", "h.sketch",
            "--key-file", "fleet.key", "--fit", "0.01,0.5", "--burst", "1", "--no-progress"]
    assert train_main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("acep train: budgets 0.01, 0.5 x ") and err.count("\n") == 1, err
    assert "the bucket of 0.01 holds 0.01 operations" in err and "bucket of 0.5" not in err
    assert "give --burst 100 or more" in err, err
    assert not (work / "h.history").exists() and not (work / "h.sketch").exists()


def test_java_home_without_java_is_refused_though_the_path_has_one(tmp_path, monkeypatch):
    """Spark's launcher runs $JAVA_HOME/bin/java whatever the PATH holds: a JAVA_HOME
    left pointing at nothing failed later, with a traceback from the gateway launch."""
    pytest.importorskip("pyspark")
    from trainer.spark import SparkUnavailable, check_installed

    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    with pytest.raises(SparkUnavailable, match=f"^JAVA_HOME is {tmp_path}, which has no "
                                                "bin/java: point it at a Java 17 or newer"):
        check_installed()
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "java").write_text("#!/bin/sh\n")
    check_installed()


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs /proc")
@pytest.mark.parametrize("signum, group, code, line", [
    (signal.SIGTERM, False, 143, "acep train: terminated"),  # kill PID, a timeout
    (signal.SIGINT, True, 130, "acep train: interrupted"),  # Ctrl-C: the terminal's group
])
def test_a_run_stopped_while_it_writes_is_one_line_and_leaves_the_earlier_outputs(
        work, signum, group, code, line):
    """Stopped while Spark writes the quarantine: before, SIGTERM ended acep train with no
    line but Spark's Java stacks, and the hidden directory the write went to stayed (Ctrl-C
    too, at times, with its Java stacks after the line): the cancelled tasks wrote on
    after it was removed. Now the session is stopped (its logging off) before that."""
    (work / "bad").mkdir()  # an earlier quarantine and history, to be kept whole
    (work / "bad" / "_SUCCESS").write_bytes(b"")
    (work / "bad" / "part-00000-earlier.parquet").write_bytes(b"earlier rows")
    (work / "h.history").write_bytes(b"earlier history")
    before = _tree(work), sorted(os.listdir(work))
    proc = subprocess.Popen(
        [sys.executable, "-m", "acep.cli", "train", "--archive", "archive", "--cores", "2",
         "-o", "h.history", "--quarantine", "bad"], cwd=work, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, start_new_session=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 240
        while not any(p.name.startswith(".bad.") for p in work.iterdir()):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.005)
        children = descendants(proc.pid)
        (os.killpg if group else os.kill)(proc.pid, signum)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    spark_banner = ("WARNING: Using incubator", "Setting default log level",
                    "To adjust logging level", "reading:", "pass ")
    said = [t for t in err.splitlines() if not t.startswith(spark_banner)]
    assert proc.returncode == code and said == [line], err[-3000:]
    assert (_tree(work), sorted(os.listdir(work))) == before  # nothing left beside, or changed
    deadline = time.monotonic() + 20
    while any(map(alive, children)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert children and not [p for p in children if alive(p)]  # Spark's JVM too
