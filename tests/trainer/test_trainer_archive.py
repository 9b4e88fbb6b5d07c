"""The trainer's archive: a pattern id uploaded with several definitions is refused with
every definition named (and one is picked with ``--pattern-hash``), a missing archive says
so, and an archive of many small batches is read in a few Spark tasks with the same result
as a few big files (real archive files, a real local Spark session)."""

from __future__ import annotations

import datetime as dt
import json
import sqlite3
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

pytest.importorskip("pyspark", reason="the trainer needs PySpark (pip install 'acep[spark]')")

from support.trainer import DAY, NEW, OLD, upload

from edge.collector.archive import Archive  # noqa: E402
from edge.wire import PatternRef  # noqa: E402
from history.graph import HistoryGraph  # noqa: E402
from trainer.cli import main as train_main  # noqa: E402
from trainer.exact import main as exact_main  # noqa: E402
from trainer.sources import (  # noqa: E402
    TASK_ROWS,
    ReadTask,
    SourceError,
    archive_days,
    plan_archive,
    task_groups,
)
from trainer.train import train  # noqa: E402


@pytest.fixture()
def changed(tmp_path, monkeypatch):
    """d1 uploads two batches under 'abc' with the old definition (2020), then one with the
    new (2023); d2 one with the new."""
    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(5)
    upload(tmp_path / "arch", "d1", 0, OLD, 18262 * DAY, range(0, 20), rng)
    upload(tmp_path / "arch", "d1", 1, OLD, 18263 * DAY, range(20, 40), rng)
    upload(tmp_path / "arch", "d1", 2, NEW, 19358 * DAY, range(40, 70), rng)
    upload(tmp_path / "arch", "d2", 0, NEW, 19358 * DAY, range(0, 30), rng)
    return tmp_path / "arch"


def test_a_pattern_id_with_two_definitions_is_refused_naming_both(changed, capsys):
    assert train_main(["--archive", "arch", "--pattern-id", "abc", "-o", "h.history",
                       "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "pattern 'abc' has 2 different definitions" in err and "--pattern-hash" in err
    assert (f"{NEW.hash[:12]}: pattern 'a c', k=0, window=4, where=[], partition=None: "
            "2 file(s) from 2 device(s), 2023-01-01") in err
    assert (f"{OLD.hash[:12]}: pattern 'a b c', k=1, window=4, where=[], partition=None: "
            "2 file(s) from 1 device(s), 2020-01-01 to 2020-01-02") in err
    assert "Traceback" not in err and not Path("h.history").exists()
    # the same without --pattern-id (one id), and for exact-batch, which reads the same way
    assert train_main(["--archive", "arch", "-o", "h.history", "--no-progress"]) == 2
    assert "2 different definitions" in capsys.readouterr().err
    Path("q.sase").write_text("PATTERN SEQ(a x, c z) WITHIN 4")
    assert exact_main(["q.sase", "--archive", "arch", "--out", "m", "--no-progress"]) == 2
    assert "2 different definitions" in capsys.readouterr().err


def test_a_pattern_hash_that_picks_no_single_definition_is_refused(changed, capsys):
    prefix = "0" * 12 if not NEW.hash.startswith("0") else "f" * 12
    assert train_main(["--archive", "arch", "--pattern-hash", prefix, "-o", "h.history",
                       "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "matches none" in err and OLD.hash[:12] in err and NEW.hash[:12] in err


@pytest.mark.parametrize("prefix", ["", "  ", "\t"])
def test_an_empty_pattern_hash_is_refused_by_the_api_as_by_the_cli(tmp_path, changed, prefix):
    """It matched every definition: the one of an archive that holds one was taken, as if
    none was given, and two were refused as "several" (acep train refuses it as empty)."""
    single = tmp_path / "single"
    upload(single, "d1", 0, NEW, 19358 * DAY, range(0, 30), np.random.default_rng(1))
    assert plan_archive(single, "abc", None).pattern == plan_archive(single).pattern
    for root in (single, changed):
        with pytest.raises(ValueError) as refused:
            plan_archive(root, "abc", prefix)
        assert str(refused.value) == (f"pattern_hash {prefix!r}: an empty or blank prefix "
                                      "matches every definition; give the first digits of "
                                      "one, or None")


@pytest.mark.parametrize("options, message", [
    ({"pattern_hash": "ab12"}, "pattern_hash and days pick an archive's windows"),
    ({"days": ("2023-01-01", None)}, "pattern_hash and days pick an archive's windows"),
    ({"archive": True, "spec": object()}, "spec is for event files"),
])
def test_options_the_source_would_ignore_are_refused_before_spark(changed, options, message):
    """As acep train refuses --pattern-hash and --since without --archive, and --spec with
    it: a caller of the API who passed them would otherwise train on what they excluded."""
    with pytest.raises(ValueError, match=message):
        train([str(changed)], spark=object(), **options)


def test_the_chosen_definition_alone_is_trained(changed, spark):
    plan = plan_archive(changed, "abc", NEW.hash[:8].upper())
    assert sorted(Path(t.source).name for t in plan.tasks) == \
        ["part-00000000000000000000.parquet", "part-00000000000000000002.parquet"]
    result = train([str(changed)], archive=True, pattern_hash=NEW.hash[:8], spark=spark,
                   show_progress=False)
    assert result.stats["events"] == 60  # d1/2 and d2/0, none of the old definition's 40
    graph = result.graph
    assert (graph.pattern, graph.k) == ("a c", 0)
    old = train([str(changed)], archive=True, pattern_hash=OLD.hash[:8], spark=spark,
                show_progress=False)
    assert old.stats["events"] == 40 and (old.graph.pattern, old.graph.k) == ("a b c", 1)


def test_since_and_before_read_those_days_alone(changed, spark, capsys):
    names = [(Path(t.source).parent.parent.name, Path(t.source).name)
             for t in plan_archive(changed, days=(None, "2020-01-02")).tasks]
    assert names == [("date=2020-01-01", "part-00000000000000000000.parquet")]
    # the definition changed in 2021: training on the days since needs no --pattern-hash
    recent = train([str(changed)], archive=True, days=("2021-01-01", None), spark=spark,
                   show_progress=False)
    assert recent.stats["events"] == 60 and recent.graph.pattern == "a c"
    Path("q.sase").write_text("PATTERN SEQ(a x, c z) WITHIN 4")
    assert exact_main(["q.sase", "--archive", "arch", "--since", "2020-01-02", "--before",
                       "2021-01-01", "--out", "m", "--no-progress"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["events"] == 20  # d1/1

    today = dt.date(2023, 1, 11)  # "Nd": N days before today, UTC
    assert archive_days("arch", "10d", "0d", today) == ("2023-01-01", "2023-01-11")
    assert archive_days("arch", "20230101", None, today) == ("2023-01-01", None)
    with pytest.raises(SourceError, match=r"no archive files from 2021-01-01 to before "
                                          r"2022-01-01 \(it holds 2020-01-01 to 2023-01-01\)"):
        plan_archive(changed, days=("2021-01-01", "2022-01-01"))
    for args, message in [(["--since", "2020-13-01"], "--since '2020-13-01' is not a day"),
                          (["--before", "3days"], "--before '3days' is not a day"),
                          (["--since", "2021-01-01", "--before", "2021-01-01"],
                           "--since 2021-01-01 is not before --before 2021-01-01")]:
        assert train_main(["--archive", "arch", "-o", "h.history", "--no-progress", *args]) == 2
        assert message in capsys.readouterr().err
    assert train_main(["x.jsonl", "-p", "a b", "-w", "4", "-o", "h.history", "--since",
                       "2021-01-01"]) == 2
    assert "--since and --before pick days of an --archive" in capsys.readouterr().err
    assert not Path("h.history").exists()


@pytest.fixture()
def fell(tmp_path, monkeypatch):
    """d1 runs 'abc' under a sketch published on 2023-01-01; its matches per event halve
    from 2023-01-05 on. The archive holds its uploads of 01-02 (20 events) and of 01-05 and
    01-06 (30 each); the collector's database its heartbeats and batches."""
    from support.collector import make_batch

    from edge.collector.store import open_store

    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(2)
    for seq, (day, n) in enumerate([(19359, 20), (19362, 30), (19363, 30)]):
        upload(tmp_path / "arch", "d1", seq, NEW, day * DAY, range(100 * seq, 100 * seq + n),
               rng)
    store = open_store(tmp_path / "collector.db")
    store.add_device("d1")
    events = matches = 0
    for day in range(19359, 19364):  # 2023-01-02 to 2023-01-06
        events, matches = events + 100_000, matches + (300 if day < 19362 else 150)
        store.heartbeat("d1", {"started_at": 1.0, "events_in": events, "matches": matches},
                        now=day * DAY + 3600)
    for seq in range(4):
        store.store_batch(make_batch("d1", seq, created_at=19362 * DAY + seq, ref=NEW))
    store.put_sketch("abc", b"the sketch in use")
    store.close()
    with sqlite3.connect(tmp_path / "collector.db") as con:
        con.execute("UPDATE sketches SET updated_at = ?", (19358 * DAY + 60,))
    return tmp_path / "collector.db"


def test_when_finds_drop_trains_on_the_uploads_from_the_day_they_fell(fell, spark, capsys):
    args = ["--archive", "arch", "--pattern-id", "abc", "--when-finds-drop", "collector.db",
            "-o", "h.history", "--no-progress"]
    assert train_main(args) == 0
    out, err = capsys.readouterr()
    stats = json.loads(out.splitlines()[-1])
    assert stats["events"] == 60 and stats["retrained"]  # 01-05 and 01-06, not 01-02
    assert [d["day"] for d in stats["finds"] if d["fell"]] == ["2023-01-05", "2023-01-06"]
    assert "acep train: retraining: the finds fell on 2023-01-05 (p = " in err
    assert Path("h.history").exists()
    assert train_main([*args, "--since", "2023-01-06"]) == 0  # the later day of the two
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["events"] == 30


def test_when_finds_hold_nothing_is_trained_and_the_line_says_why(fell, capsys):
    with sqlite3.connect(fell) as con:  # steady finds: 300 matches a day throughout
        con.execute("UPDATE finds SET matches = 300")
    assert train_main(["--archive", "arch", "--pattern-id", "abc", "--when-finds-drop",
                       "collector.db", "-o", "h.history", "--no-progress"]) == 0
    out, err = capsys.readouterr()
    assert err.strip() == ("acep train: not retrained: the finds have not dropped since the "
                           "sketch was published on 2023-01-01 (5 days; matches per event "
                           "0.003 on the first, 0.003 on 2023-01-06)")
    doc = json.loads(out)
    assert doc["retrained"] is False and len(doc["finds"]) == 5
    assert not Path("h.history").exists()


@pytest.mark.parametrize("args, message", [
    (["--when-finds-drop", "collector.db"], "--when-finds-drop needs --archive and "
                                            "--pattern-id"),
    (["--pattern-id", "abc", "--when-finds-drop", "missing.db"],
     "--when-finds-drop: missing.db: no collector database there"),
    (["--pattern-id", "abc", "--when-finds-drop", "collector.db", "--before", "2023-01-04"],
     "--when-finds-drop: the uploads to train on start on 2023-01-05, not before --before "
     "2023-01-04"),
])
def test_when_finds_drop_refuses_what_it_cannot_decide(fell, capsys, args, message):
    assert train_main(["--archive", "arch", *args, "-o", "h.history", "--no-progress"]) == 2
    assert capsys.readouterr().err.strip() == f"acep train: {message}"
    assert not Path("h.history").exists()


def test_a_missing_archive_says_so(tmp_path, capsys):
    assert train_main(["--archive", str(tmp_path / "nonexist"), "-o", "h", "--no-progress"]) == 2
    assert f"{tmp_path / 'nonexist'}: no such directory" in capsys.readouterr().err
    (tmp_path / "q.sase").write_text("PATTERN SEQ(a x, c z) WITHIN 4")
    assert exact_main([str(tmp_path / "q.sase"), "--archive", str(tmp_path / "nonexist"),
                       "--out", str(tmp_path / "m"), "--no-progress"]) == 2
    assert "no such directory" in capsys.readouterr().err


def test_damaged_archive_files_are_named_and_skipped_with_skip_bad_files(spark, tmp_path,
                                                                          monkeypatch, capsys):
    """A file the collector's disk or a copy left damaged, whose footer does not read (zero
    bytes, cut short, text), stops the job in one line naming it and --skip-bad-files;
    with it the job runs on the rest. Before, --skip-bad-files still refused such a file,
    and one whose data is corrupt when it came first (the file that gives the columns)."""
    from support.damaged import corrupt_parquet

    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(3)
    ref = PatternRef("ac", "a c", 4.0, 0, (), None)
    for device in ("d1", "d2"):
        for seq in range(4):
            upload(tmp_path / "arch", device, seq, ref, 1.7e9 + seq * DAY,
                   range(seq * 20, seq * 20 + 20), rng)
    files = sorted((tmp_path / "arch").rglob("*.parquet"))  # by day, then device
    files[0].write_text("date,device\n2023-11-14,d1\n")  # not Parquet at all
    corrupt_parquet(files[1])  # its footer reads: the first file read for the columns
    files[2].write_bytes(b"")
    files[5].write_bytes(files[5].read_bytes()[:300])
    argv = ["--archive", "arch", "-o", "h.history", "--quarantine", "q", "--no-progress"]
    assert train_main(argv) == 2
    err = capsys.readouterr().err
    assert err == (f"acep train: {files[0]}: not a readable Parquet file (Parquet magic bytes "
                   "not found in footer. Either the file is corrupted or this is not a "
                   "parquet file.) (and 2 more); --skip-bad-files skips unreadable files\n")
    assert not Path("h.history").exists() and not Path("q").exists()

    assert train_main([*argv, "--skip-bad-files"]) == 0
    out, err = capsys.readouterr()
    stats = json.loads(out)
    assert stats["events"] == 4 * 20 and stats["bad_files"] == 4 and stats["bad_rows"] == 0
    skipped = [line for line in err.splitlines() if line.startswith("acep train: skipped file")]
    assert sorted(line.split()[4].rstrip(",:") for line in skipped) == \
        sorted(str(files[i]) for i in (0, 1, 2, 5))
    assert "Traceback" not in err and len(err.splitlines()) == 4, err
    quarantine = pq.read_table("q").to_pylist()
    assert sorted(r["source"] for r in quarantine) == sorted(str(files[i]) for i in (0, 1, 2, 5))
    assert all(r["position"] is None for r in quarantine)
    assert HistoryGraph.load("h.history").pattern == "a c"

    for damaged in files[1:2] + files[3:5] + files[6:]:  # nothing readable, with the flag or not
        damaged.write_bytes(b"")
    for flag, says in (([], "(and 7 more); --skip-bad-files skips"),
                       (["--skip-bad-files"], "none of its 8 archive files can be read; the "
                                              f"first: {files[0]}: not a readable Parquet")):
        assert train_main([*argv, *flag]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and says in err, err


# --------------------------------------------------------------------------- many small files


def test_task_groups_pack_small_tasks_and_keep_big_or_unknown_ones_alone():
    small = [ReadTask(f"f{i}", rows=10) for i in range(400)]
    groups = task_groups(small, parallelism=2)
    assert len(groups) == 4 and [i for g in groups for i in g] == list(range(400))
    many = [ReadTask(f"f{i}", rows=100_000) for i in range(30)]
    groups = task_groups(many, parallelism=2)
    assert all(len(g) * 100_000 <= TASK_ROWS for g in groups)
    assert [i for g in groups for i in g] == list(range(30))
    mixed = [ReadTask("a", rows=5), ReadTask("b.csv"), ReadTask("c", rows=5),
             ReadTask("d", rows=TASK_ROWS + 1), ReadTask("e", rows=5)]
    assert task_groups(mixed, parallelism=1) == [[0], [1], [2], [3], [4]]
    assert task_groups([], parallelism=4) == []


def test_many_small_batches_train_as_the_same_events_in_few_files(spark, tmp_path):
    rng = np.random.default_rng(9)
    ref = PatternRef("ac", "a c", 4.0, 0, (), None)
    for device in ("d1", "d2"):
        types, values = rng.integers(0, 3, 300), rng.integers(0, 5, 300)
        # a batch every few events, as an agent closes them; and the same in 2 batches
        for root, size in ((tmp_path / "small", 5), (tmp_path / "big", 150)):
            for seq in range(300 // size):
                lo, hi = seq * size, (seq + 1) * size
                upload(root, device, seq, ref, 1.7e9, range(lo, hi), rng, types[lo:hi],
                       values[lo:hi])
    small = train([str(tmp_path / "small")], archive=True, spark=spark, show_progress=False)
    big = train([str(tmp_path / "big")], archive=True, spark=spark, show_progress=False)
    assert small.stats["read_tasks"] == 120 and small.stats["events"] == 600
    assert small.graph.to_bytes() == big.graph.to_bytes()
    assert len(task_groups(plan_archive(tmp_path / "small").tasks, 2)) == 4


def test_a_compacted_archive_trains_the_same_history_in_big_files_split_by_row_group(
        spark, tmp_path, monkeypatch):
    """``acep serve --compact`` merges a day's small files of a device (the collector's
    own merge, edge.collector.archive.Archive.compact); a compacted file above TASK_ROWS is read in
    tasks of whole row groups."""
    import edge.collector.archive as archive_module
    import trainer.sources as sources

    rng = np.random.default_rng(11)
    root, ref = tmp_path / "arch", PatternRef("ac", "a c", 4.0, 0, (), None)
    for device in ("d1", "d2"):
        for seq in range(80):  # three days of small batches
            upload(root, device, seq, ref, 1.7e9 + seq * 2000, range(seq * 5, seq * 5 + 5), rng)
    before = train([str(root)], archive=True, spark=spark, show_progress=False)
    monkeypatch.setattr(archive_module, "ROW_GROUP_ROWS", 40)
    monkeypatch.setattr(sources, "TASK_ROWS", 100)
    archive = Archive(root)
    folders = archive.device_folders("9999-12-31")
    for folder in folders:
        for _new, olds in archive.compact(sorted(folder.iterdir())):
            for old in olds:
                old.unlink()
    files = sorted(root.rglob("*.parquet"))
    assert len(files) == len(folders) == 6 and all(f.name.startswith("compact-") for f in files)
    tasks = plan_archive(root).tasks
    assert all(t.rows <= 100 + 40 for t in tasks)  # a whole row group past TASK_ROWS at most
    assert sum(t.row_groups is not None for t in tasks) > len(files)  # some files split
    assert sum(t.rows for t in tasks) == 800 and len(tasks) >= 8
    after = train([str(root)], archive=True, spark=spark, show_progress=False)
    assert after.stats["events"] == before.stats["events"] == 800
    assert after.graph.to_bytes() == before.graph.to_bytes()
