"""``acep train`` on a real local Spark session: the trained history equals one process's.

The chunking arithmetic is checked on many random streams in test_history_pieces.py; here
the Spark job itself: read tasks over several files and row groups, the quarantine, the
collector's archive (two devices, windows uploaded twice), the command line and publishing
the sketch to a real collector on loopback.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.request
from dataclasses import replace
from pathlib import Path

import msgpack
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("pyspark", reason="the trainer needs PySpark (pip install 'acep[spark]')")

from support.cli import FIXTURE, run_acep  # noqa: E402
from support.collector import CollectorProcess  # noqa: E402
from support.damaged import corrupt_parquet  # noqa: E402
from support.sketches import key_fingerprint  # noqa: E402
from support.trainer import PATTERN, archive_from_devices, events, single_process

from acep import EventBatch, Matcher  # noqa: E402
from acep.events import EventSpec, read_all  # noqa: E402
from history import Sketch  # noqa: E402
from history.build import build_history  # noqa: E402
from history.fit import fit_budgets  # noqa: E402
from history.graph import VERSION, HistoryGraph  # noqa: E402
from trainer.sources import SourceError, plan_files  # noqa: E402
from trainer.train import PatternSpec, bins_of, train  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
KEY = b"trainer-test-key"
SHUFFLE_PARTITIONS = 4  # for this module's spark session (tests/conftest.py)


def write_parquet(rows: list[dict], path: Path, row_group_size: int) -> Path:
    pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=row_group_size)
    return path


# --------------------------------------------------------------------------- equality


@settings(max_examples=4, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), n=st.integers(50, 600), stretch=st.floats(1.0, 3.0),
       key_groups=st.integers(1, 3))
def test_trained_history_equals_one_process(spark, tmp_path_factory, seed, n, stretch,
                                            key_groups):
    """Two Parquet files in several row groups, tiny chunks: equal byte for byte."""
    rows = events(n, seed)
    tmp = tmp_path_factory.mktemp("files")
    half = len(rows) // 2
    files = [write_parquet(rows[:half] or rows[:1], tmp / "0.parquet", 37),
             write_parquet(rows[half:], tmp / "1.parquet", 53)] if half else \
        [write_parquet(rows, tmp / "0.parquet", 37)]
    result = train([str(f) for f in files], PATTERN, spark=spark, show_progress=False,
                   chunk=PATTERN.window * stretch, key_groups=key_groups)
    assert result.stats["events"] == len(rows) and result.stats["bad_rows"] == 0
    assert result.graph.to_bytes() == single_process(rows).to_bytes()


def test_chunk_edges_are_crossed_and_given_bins_are_kept(spark, tmp_path):
    rows = events(3000, 7)
    path = write_parquet(rows, tmp_path / "e.parquet", 500)
    whole = single_process(rows)
    result = train([str(path)], PATTERN, spark=spark, show_progress=False,
                   chunk=PATTERN.window, key_groups=2)
    assert result.stats["chunks"] > 100
    assert result.graph.to_bytes() == whole.to_bytes()
    edges = [PATTERN.window * c + rows[0]["t"] for c in range(1, result.stats["chunks"])]
    assert sum(any(f < e <= last for e in edges)
               for f, last in zip(whole.bundle_first, whole.bundle_last)) > 20
    bins = whole.bins()
    stale = tmp_path / "quarantine"  # an earlier run's: replaced although none are bad now
    stale.mkdir()
    pq.write_table(pa.table({"reason": ["an old bad row"]}), stale / "part-00000.parquet")
    (stale / "_SUCCESS").write_bytes(b"")
    again = train([str(path)], PATTERN, spark=spark, show_progress=False, bins=bins,
                  quarantine=str(stale))
    assert again.bins == bins
    assert again.stats["bad_rows"] == 0 and pq.read_table(stale).num_rows == 0
    assert again.graph.to_bytes() == single_process(rows, bins=bins).to_bytes()


def test_bins_from_a_history_of_another_definition_are_refused_naming_it():
    history = single_process(events(300, 2))
    assert bins_of(history, PATTERN) == history.bins()
    with pytest.raises(SourceError, match=r"another definition: window 5\.0 \(here 6\.0\), "
                                          r"partition 'p' \(here None\)$"):
        bins_of(history, replace(PATTERN, window=6.0, partition=None))
    with pytest.raises(SourceError, match=r"pattern 'a b\+ c' \(here 'a c'\), k 1 \(here 0\)"):
        bins_of(history, replace(PATTERN, text="a c", k=0))


def test_an_equivalence_test_partitions_like_partition_by(spark, tmp_path):
    rows = events(700, 11)
    path = write_parquet(rows, tmp_path / "e.parquet", 100)
    pattern = PatternSpec("a b+ c", 5.0, 1, ("[p]", "c.v > a.v"))
    result = train([str(path)], pattern, spark=spark, show_progress=False, chunk=15.0)
    assert result.graph.to_bytes() == single_process(rows, pattern, partition=None).to_bytes()
    assert np.array_equal(result.graph.visits, single_process(rows).visits)


# --------------------------------------------------------------------------- bad rows


def test_bad_rows_are_quarantined_with_reasons_and_counted(spark, tmp_path):
    rows = events(400, 3)
    lines = [json.dumps(r) for r in rows]
    bad = {5: "{not json", 17: json.dumps({"t": 9.0, "p": "x", "v": 1.0}),
           40: json.dumps({"type": "a", "t": "soon", "p": "x", "v": 1.0}),
           90: json.dumps({"type": "c", "t": rows[89]["t"], "v": 2.0})}  # no partition key
    for i, text in sorted(bad.items(), reverse=True):
        lines.insert(i, text)
    path = tmp_path / "events.jsonl"
    path.write_text("\n".join(lines) + "\n")
    result = train([str(path)], PATTERN, spark=spark, show_progress=False,
                   quarantine=str(tmp_path / "quarantine"), chunk=12.0)
    assert result.stats["bad_rows"] == 4 and result.stats["events"] == len(rows) + 1
    q = pq.read_table(tmp_path / "quarantine").to_pylist()
    by_line = {r["line"]: r for r in q if r["line"] is not None}
    line_of = {text: lines.index(text) + 1 for text in bad.values()}
    assert set(by_line) == {line_of[bad[i]] for i in (5, 17, 40)}
    assert "JSON" in by_line[line_of[bad[5]]]["reason"]
    assert by_line[line_of[bad[17]]]["field"] == "type"
    assert by_line[line_of[bad[40]]]["field"] == "t"
    missing = [r for r in q if r["line"] is None]
    assert len(missing) == 1 and missing[0]["field"] == "p"
    assert "missing" in missing[0]["reason"]
    assert result.graph.to_bytes() == single_process(rows).to_bytes()


def test_an_unreadable_file_fails_the_job_unless_skipped_and_then_is_listed(spark, tmp_path):
    rows = events(300, 4)
    spec = EventSpec(tag="t", type="type", attributes=("p", "v"))
    (tmp_path / "in").mkdir()
    write_parquet(rows, tmp_path / "in" / "a.parquet", 100)
    write_parquet([{k: r[k] for k in ("type", "t", "v")} for r in events(50, 5)],
                  tmp_path / "in" / "b.parquet", 50)  # no column p
    corrupt_parquet(write_parquet(events(40, 6), tmp_path / "in" / "c.parquet", 40))
    with pytest.raises(SourceError, match=r"b\.parquet, field 'p': no such column .*\(50 rows "
                                          r"unread\) \(and 1 more .*--skip-bad-files"):
        train([str(tmp_path / "in")], PATTERN, spec=spec, spark=spark, show_progress=False)
    (tmp_path / "in" / "d.parquet").write_bytes(b"")  # no footer: skipped all the same
    result = train([str(tmp_path / "in")], PATTERN, spec=spec, spark=spark,
                   show_progress=False, skip_bad_files=True, quarantine=str(tmp_path / "q"))
    assert result.stats["bad_files"] == 3 and result.stats["bad_rows"] == 0
    assert result.stats["events"] == len(rows) and result.quarantined == []
    assert [Path(f["source"]).name for f in result.skipped] == \
        ["b.parquet", "c.parquet", "d.parquet"]
    q = sorted(pq.read_table(tmp_path / "q").to_pylist(), key=lambda r: r["source"])
    assert [(Path(r["source"]).name, r["position"]) for r in q] == \
        [("b.parquet", None), ("c.parquet", None), ("d.parquet", None)]
    assert "\n" not in q[1]["reason"] and q[1]["reason"].endswith("(40 rows unread)")
    assert result.graph.to_bytes() == single_process(rows).to_bytes()


def test_a_first_file_without_a_readable_event_is_refused_naming_why(tmp_path):
    (tmp_path / "w.jsonl").write_text('{"when": 1, "lateness": 3}\n' * 3)
    with pytest.raises(SourceError, match=r"w\.jsonl: no readable event in its first rows "
                                          r"\(the first, line 1, field 'type': "):
        plan_files([tmp_path / "w.jsonl"], None)
    corrupt_parquet(write_parquet(events(40, 6), tmp_path / "c.parquet", 40))
    with pytest.raises(SourceError, match=r"c\.parquet: unreadable Parquet data \(Couldn't "
                                          r"deserialize"):
        plan_files([tmp_path / "c.parquet"], None)
    (tmp_path / "empty.parquet").write_bytes(b"")
    write_parquet(events(40, 7), tmp_path / "good.parquet", 40)
    inputs = [tmp_path / "empty.parquet", tmp_path / "c.parquet", tmp_path / "good.parquet"]
    with pytest.raises(SourceError, match=r"empty\.parquet: not a readable Parquet file "
                                          r"\(Parquet file size is 0 bytes\); "
                                          r"--skip-bad-files skips unreadable files$"):
        plan_files(inputs, None)
    plan = plan_files(inputs, None, skip_bad_files=True)  # the columns of the first good one
    assert plan.attributes == {"p": "text", "v": "number"} and len(plan.tasks) == 3


# --------------------------------------------------------------------------- the archive


def archived_events(root: Path) -> list[dict]:
    """The distinct archived events, keyed as the trainer keys them (device/partition)."""
    seen = {}
    for f in sorted(root.rglob("*.parquet")):
        device = f.parent.name.split("=", 1)[1]
        for r in pq.read_table(f).to_pylist():
            seen[(device, r["position"])] = {"type": r["type"], "t": r["tag"], "v": r["v"],
                                             "p": r["p"], "key": f"{device}/{r['p']}"}
    return [seen[k] for k in sorted(seen, key=lambda k: (seen[k]["t"], k))]


def jvm_directory(spark) -> Path:
    """The directory the session's JVM started in (where Spark takes relative paths)."""
    return Path(spark.sparkContext._jvm.System.getProperty("user.dir")).resolve()


def test_relative_paths_are_taken_in_the_callers_directory(spark, tmp_path, monkeypatch):
    """A caller that changed directory after the session started: its relative inputs (a
    directory of files, an archive) are read and its quarantine written in its directory,
    not in the JVM's."""
    assert jvm_directory(spark) != tmp_path.resolve()  # else the test would prove nothing
    rows = events(300, 4)
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "0.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:150]))
    lines = [json.dumps(r) for r in rows[150:]]
    lines.insert(3, "{not json")
    (tmp_path / "in" / "1.jsonl").write_text("\n".join(lines) + "\n")
    archive_from_devices(tmp_path / "arch", {"pi-1": rows})
    monkeypatch.chdir(tmp_path)
    result = train(["in"], PATTERN, spark=spark, show_progress=False, quarantine="bad")
    assert result.stats["events"] == len(rows) and result.stats["bad_rows"] == 1
    assert result.graph.to_bytes() == single_process(rows).to_bytes()
    [bad] = pq.read_table(tmp_path / "bad").to_pylist()
    assert bad["line"] == 4 and "JSON" in bad["reason"]
    assert bad["source"] == str(tmp_path.resolve() / "in" / "1.jsonl")  # wherever it is read
    archived = train(["arch"], archive=True, spark=spark, show_progress=False)
    expect = archived_events(tmp_path / "arch")
    assert archived.stats["events"] == len(expect) and archived.stats["bad_rows"] == 0
    assert archived.graph.to_bytes() == \
        replace(single_process(expect, partition="key"), partition_by="p").to_bytes()
    assert not (jvm_directory(spark) / "bad").exists()


def test_archive_of_two_devices_with_windows_uploaded_twice(spark, tmp_path):
    archive_from_devices(tmp_path / "archive", {"pi-1": events(500, 1), "pi-2": events(500, 2)})
    result = train([str(tmp_path / "archive")], archive=True, spark=spark, show_progress=False,
                   chunk=10.0)
    expect = archived_events(tmp_path / "archive")
    assert result.stats["events"] == len(expect) and result.stats["bad_rows"] == 0
    # the run keys partitions by device and value; the history records the devices' attribute
    direct = replace(single_process(expect, partition="key"), partition_by="p")
    assert result.graph.partition_by == "p"
    assert result.graph.to_bytes() == direct.to_bytes()
    assert {k.split("/")[0] for k in result.graph.partition_keys} == {"pi-1", "pi-2"}


# --------------------------------------------------------------------------- fitted reserves


def test_fit_on_event_files_equals_the_one_process_fit(spark, tmp_path):
    """``train(fit=..., search=...)`` ships the sketch ``history.fit.fit_budgets`` makes in
    one process on the same events: same tables, same report, same signed bytes."""
    rows = events(3000, 4)
    path = write_parquet(rows, tmp_path / "e.parquet", 500)
    ratios = [0.1, 0.3, 0.6]
    result = train([str(path)], PATTERN, spark=spark, show_progress=False, fit=ratios,
                   burst=16, chunk=PATTERN.window * 4, search=3)
    direct, report = fit_budgets(Sketch.from_graph(single_process(rows)),
                                 EventBatch.from_events(rows), ratios, partition="p", burst=16,
                                 search=3)
    assert result.stats["fit"] == report and report["streams"] == 1
    assert sum(row["searched"]["changed"] for row in report["ratios"].values()) > 0
    assert result.sketch.fitted_ratios.tolist() == ratios
    assert result.sketch.to_bytes(KEY) == direct.to_bytes(KEY)
    assert train([str(path)], PATTERN, spark=spark, show_progress=False).sketch is None


def _found_bundles(truth, found) -> int:
    """Bundles of ``truth`` with a point of ``found`` in their span, by brute force."""
    return sum(any(p == b.partition and b.first <= t <= b.last
                   for p, t in zip(found.partition, found.point))
               for b in _bundles(truth))


def test_fit_on_an_archive_gives_every_device_its_own_bucket(spark, tmp_path):
    """Two devices: the budget is per device, so the fit's ops per event and the recall it
    reports for the table it chose are those of each device's stream replayed alone, from
    a full bucket, summed."""
    from acep.shedding import Budget
    from history import HistoryPolicy

    archive_from_devices(tmp_path / "archive", {"pi-1": events(900, 1),
                                                "pi-2": events(600, 2)})
    ratios = [0.2, 0.5]
    result = train([str(tmp_path / "archive")], archive=True, spark=spark,
                   show_progress=False, chunk=10.0, fit=ratios, burst=8)
    fit, sketch = result.stats["fit"], result.sketch
    expect = archived_events(tmp_path / "archive")
    streams = {d: EventBatch.from_events([r for r in expect if r["key"].startswith(d + "/")])
               for d in ("pi-1", "pi-2")}
    matcher = dict(pattern=PATTERN.text, window=PATTERN.window, k=PATTERN.k,
                   where=list(PATTERN.where), partition="key")
    ops = events_in = 0
    truth = {}
    for d, batch in streams.items():
        m = Matcher(**matcher)
        truth[d] = m.match(batch)
        ops, events_in = ops + m.stats["candidates"], events_in + len(batch)
    assert fit["streams"] == 2 and fit["ops_per_event"] == pytest.approx(ops / events_in)
    n = sum(len(_bundles(t)) for t in truth.values())
    assert fit["bundles"] == n
    for ratio in ratios:
        budget = Budget(ratio * fit["ops_per_event"], 8)
        found = 0
        for d, batch in streams.items():
            policy = HistoryPolicy(sketch, learning_rate=0.0, explore=0.0, budget=budget)
            run = Matcher(**matcher, bins=sketch.bins(), budget=budget, policy=policy)
            found += _found_bundles(truth[d], run.match(batch))
        row, slack = fit["ratios"][ratio], fit["ratios"][ratio]["slack"]
        assert slack["bundle_recall"][f"{slack['chosen']:g}"] == pytest.approx(found / n)
        assert max(slack["bundle_recall"].values()) == pytest.approx(found / n)
        assert slack["bundle_recall"][f"{sketch.default_cover_slack:g}"] == pytest.approx(
            row["bundle_recall"][row["chosen"]])


def _bundles(matches):
    from acep import bundles

    return bundles(matches, PATTERN.window)


# --------------------------------------------------------------------------- command line


def test_cli_trains_writes_and_publishes_a_signed_sketch(tmp_path):
    """``acep train`` in its own process: history file, signed sketch, PUT to a collector
    on loopback, which then serves the same bytes."""
    rows = events(800, 5)
    path = tmp_path / "events.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "fleet.key").write_bytes(KEY + b"\n")
    (tmp_path / "collector").mkdir()
    collector = CollectorProcess(tmp_path / "collector", sketch_key=KEY)
    token = collector.add("ops", "--add-admin")
    (tmp_path / "ops.token").write_text(token + "\n")
    url = collector.start().url
    try:
        done = run_acep("train", str(path), "-p", PATTERN.text, "-w", "5", "-k", "1",
                        "--where", PATTERN.where[0], "--partition", "p", "--cores", "2",
                        "-o", str(tmp_path / "h.history"), "--sketch", str(tmp_path / "h.sketch"),
                        "--key-file", str(tmp_path / "fleet.key"), "--publish", url,
                        "--token-file", str(tmp_path / "ops.token"), "--pattern-id", "abc",
                        "--fit", "0.2,0.5", "--burst", "16", "--no-progress", timeout=300)
        assert done.returncode == 0, done.stderr
        stats = json.loads(done.stdout.strip().splitlines()[-1])
        assert stats["events"] == len(rows) and stats["published"]["pattern_id"] == "abc"
        assert stats["published"]["checked"] == 0  # no device uploaded "abc": nothing to check
        # the key's fingerprint, as the collector and the devices report it
        assert stats["sketch_key_id"] == stats["published"]["key_id"] == key_fingerprint(KEY)
        graph = HistoryGraph.load(tmp_path / "h.history")
        assert graph.to_bytes() == single_process(rows).to_bytes()
        written = msgpack.unpackb((tmp_path / "h.history").read_bytes())
        assert written["version"] == VERSION and "crc32" in written  # the checksummed version
        sketch = (tmp_path / "h.sketch").read_bytes()
        fitted, report = fit_budgets(Sketch.from_graph(graph), EventBatch.from_events(rows),
                                     [0.2, 0.5], partition="p", burst=16)
        assert sketch == fitted.to_bytes(KEY) and stats["fit"]["bundles"] == report["bundles"]
        assert done.stderr.count(" reserves (training bundle recall ") == 2
        one = run_acep("history", "build", str(path), "-p", PATTERN.text, "-w", "5", "-k", "1",
                       "--where", PATTERN.where[0], "--partition", "p", "-o",
                       str(tmp_path / "one.history"), "--sketch", str(tmp_path / "one.sketch"),
                       "--key-file", str(tmp_path / "fleet.key"), "--fit", "0.2,0.5",
                       "--burst", "16", timeout=300)
        assert one.returncode == 0, one.stderr  # one process: the same files, byte for byte
        assert one.stderr.splitlines()[-1] == (
            f"acep: sketch signed with key {key_fingerprint(KEY)}, {stats['sketch_bytes']:,} "
            f"bytes -> {tmp_path / 'one.sketch'}")
        assert (tmp_path / "one.sketch").read_bytes() == sketch
        assert (tmp_path / "one.history").read_bytes() == (tmp_path / "h.history").read_bytes()
        req = urllib.request.Request(f"{url}/v1/sketches/abc",
                                     headers={"Authorization": f"Bearer {token}"})
        assert urllib.request.urlopen(req, timeout=10).read() == sketch
    finally:
        collector.stop()


@pytest.mark.parametrize("args, message", [
    ((), "give event files or --archive"),
    (("x.jsonl", "-o", "h"), "--pattern and --window are needed"),
    (("x.jsonl", "-p", "a b", "-w", "3"), "nothing to write"),
    (("x.jsonl", "-p", "a b", "-w", "3", "--sketch", "s"), "need --key-file"),
    (("x.jsonl", "-p", "a b", "-w", "3", "-o", "h", "--publish-unchecked"),
     "--publish-unchecked goes with --publish"),
    (("missing.jsonl", "-p", "a b", "-w", "3", "-o", "h"), "no such file"),
    (("x.jsonl", "-p", "a (b", "-w", "3", "-o", "h"), "a (b"),
    (("--archive", "nowhere", "-o", "h"), "nowhere: no such directory"),
    (("--archive", "x.jsonl", "-o", "h"), "x.jsonl: not a directory"),
    (("x.jsonl", "-p", "a b", "-w", "3", "-o", "h", "--pattern-hash", "ab"),
     "--pattern-hash goes with --archive"),
    (("x.jsonl", "-p", "a b", "-w", "3", "-o", "h", "--fit", "0.1"), "--fit fits a sketch"),
    (("x.jsonl", "-p", "a b", "-w", "3", "-o", "h", "--cores", "-2"), "cores must be >= 1"),
    (("x.jsonl", "-p", "a b", "-w", "3", "-o", "h", "--bins", "0"), "bins must be >= 1"),
    (("x.jsonl", "-p", "a b", "-w", "3", "-o", "h", "--bins", "65"), "bins must be <= 64"),
    (("x.jsonl", "-p", "a b", "-w", "3", "--sketch", "s", "--key-file", "x.jsonl", "--fit",
      "0.1", "--burst", "-5"), "argument --burst: the bucket depth must be a number of events"),
    (("x.jsonl", "-p", "a b", "-w", "3", "-o", "h", "--chunk", "0"), "chunk length must be > 0"),
    (("x.jsonl", "-p", "a b", "-w", "3", "-o", "h", "--key-groups", "0"),
     "key groups must be >= 1"),
    (("x.jsonl", "-p", "a b", "-w", "3", "-o", "h", "--bins", "4", "--bins-from", "x.jsonl"),
     "argument --bins-from: not allowed with argument --bins"),
    (("x.jsonl", "-p", "a b", "-w", "3", "--sketch", "s", "--key-file", "x.jsonl",
      "--fit", "0.1,x"), "argument --fit: '0.1,x' is not a comma-separated list"),
    (("x.jsonl", "-p", "a b", "-w", "3", "--sketch", "s", "--key-file", "x.jsonl",
      "--search", "8"), "--search tunes the fitted reserves: it needs --fit"),
])
def test_cli_refuses_bad_usage_with_one_clear_line(tmp_path, args, message):
    (tmp_path / "x.jsonl").write_text('{"type": "a", "t": 1}\n')
    done = run_acep("train", *args, "--no-progress", cwd=tmp_path, timeout=300)
    assert done.returncode == 2
    assert message in done.stderr and "Traceback" not in done.stderr


def test_help_says_what_every_option_does_by_default(capsys):
    """Before, --pattern-id, --spec, --where, --partition, -o, --sketch, --publish,
    --quarantine, --since, --before, --chunk and others left their default (or when they
    are needed) unsaid."""
    import argparse

    from trainer.cli import _parser

    with pytest.raises(SystemExit) as done:
        _parser().parse_args(["--help"])
    assert done.value.code == 0 and "usage: acep train" in capsys.readouterr().out
    unsaid = [a.option_strings[0] for a in _parser()._actions
              if a.option_strings and a.nargs != 0 and a.help != argparse.SUPPRESS
              and not re.search(r"\bdefault\b|\bneeded\b", a.help or "")]
    assert unsaid == []


def test_spec_files_are_read_as_acep_match_reads_them(spark, tmp_path):
    """A CSV with an event spec (type classes of a numeric column): the same events."""
    rng = np.random.default_rng(9)
    rows = [{"when": float(t), "delay": float(rng.integers(-10, 90)), "site": str(rng.choice(
        ["A", "B"]))} for t in np.cumsum(rng.integers(0, 4, 700))]
    path = tmp_path / "d.csv"
    import pyarrow.csv as pcsv

    pcsv.write_csv(pa.Table.from_pylist(rows), path)
    spec = EventSpec.from_dict({"tag": "when", "type": {"column": "delay", "bins": [
        "-inf", 15, 60, "inf"], "labels": ["ontime", "late", "verylate"]},
        "attributes": ["delay", "site"]})
    pattern = PatternSpec("ontime late+ verylate", 20.0, 1, ("verylate.delay > late.delay",),
                          "site")
    result = train([str(path)], pattern, spec=spec, spark=spark, show_progress=False,
                   chunk=40.0)
    batch = read_all(path, spec)
    whole = build_history(pattern.text, batch, pattern.window, pattern.k,
                          where=list(pattern.where), partition="site").canonical()
    assert whole.n_bundles >= 5
    assert result.graph.to_bytes() == whole.to_bytes()


def test_progress_off_a_terminal_is_one_line_per_step(capsys):
    """Spark's task counts under a log file or CI: no redraws, one line when a step ends."""
    from trainer.spark import _Bar

    bar = _Bar("pass 1 (bins)")
    for done in range(9):
        bar.show(done, 8)
    bar.close()
    assert capsys.readouterr().err == "pass 1 (bins): 8 tasks\n"


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no CPU affinity here")
def test_a_local_session_takes_the_cores_the_process_may_use():
    """Under taskset or a container's CPU limit, a local session on every core of the
    machine would run more Python workers than the process has cores."""
    code = ("import os; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}); "
            "from trainer.spark import local_master; print(local_master(), local_master(3))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, cwd=Path(__file__).parents[2],
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])})
    assert done.stdout.split() == ["local[1]", "local[3]"]


def test_a_sketch_over_what_an_agent_takes_is_trained_with_a_warning(tmp_path):
    """k = 4 and 64 bins make a sketch over the 1 MiB an agent downloads on its defaults:
    acep train says so as acep history build does (it wrote it silently)."""
    (tmp_path / "fleet.key").write_bytes(KEY + b"\n")
    sketch = tmp_path / "big.sketch"
    done = run_acep("train", FIXTURE, "--spec", "flights", "--partition", "origin",
                    "-p", "ontime late verylate late ontime late", "-w", "6h", "-k", "4",
                    "--bins", "64", "--sketch", str(sketch), "--key-file",
                    str(tmp_path / "fleet.key"), "--cores", "1", "--no-progress", timeout=300)
    assert done.returncode == 0, done.stderr
    size = sketch.stat().st_size
    assert size > 1 << 20 and json.loads(done.stdout.splitlines()[-1])["sketch_bytes"] == size
    cells = Sketch.load(sketch, KEY, max_bytes=None).n_cells
    assert (f"acep train: warning: the sketch ({size:,} bytes, {cells:,} cells) is above the "
            "1,048,576 bytes an agent takes by default: raise sketch.max_bytes in its config"
            in done.stderr), done.stderr
