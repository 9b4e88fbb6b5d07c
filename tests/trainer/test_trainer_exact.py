"""``acep exact-batch`` on a real local Spark session: the batch matches equal one process's.

The reference is what ``acep exact`` does in one process (``read_all`` with the same spec,
then ``acep.nfab.Engine(query).run``). Random streams (types a/b/c, tags with ties, a
partition attribute) are cut into many small chunks, for query shapes covering Kleene +,
middle/leading/trailing negation, RETURN and all four strategies; the tests check that
matches crossing chunk edges occur and are found once. Then bad rows (quarantined, counted,
the rest still matched), the collector's archive (two devices, a window uploaded twice, no
match across devices), a query without WITHIN, and the command line.
"""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("pyspark", reason="acep exact-batch needs PySpark (pip install 'acep[spark]')")

from acep.events import Event, read_all  # noqa: E402
from acep.nfab import Engine, parse_query  # noqa: E402
from trainer.chunks import ChunkPlan  # noqa: E402
from trainer.exact import _key_json, _plain, exact_batch, key_split, main  # noqa: E402
from trainer.sources import FILE_STRIDE  # noqa: E402

SHAPES = {
    "next-kleene": "PATTERN SEQ(a x, b+ y[], c z) WHERE skip_till_next_match([p]) "
                   "and y[i].v >= y[i-1].v WITHIN 4",
    "any-middle-neg": "PATTERN SEQ(a x, ~b n, c z) WHERE skip_till_any_match([p]) WITHIN 4",
    "any-leading-neg-no-key": "PATTERN SEQ(~c n, a x, b y) WHERE skip_till_any_match(n, x, y) "
                              "{ x.v <= y.v } WITHIN 3",
    "strict": "PATTERN SEQ(a x, b y) WHERE strict_contiguity([p]) WITHIN 4",
    "partition-contiguity": "PATTERN SEQ(a x, b+ y[], c z) WHERE partition_contiguity([p]) "
                            "WITHIN 4 RETURN y.len AS n, sum(y[].v) AS s",
    "any-kleene-trailing-neg": "PATTERN SEQ(a x, b+ y[], ~c n) WHERE skip_till_any_match([p]) "
                               "WITHIN 3",
}


CROSSING: dict[str, int] = {}  # shape -> matches crossing a chunk edge in its examples


# --------------------------------------------------------------------------- helpers


def write_jsonl(rows: list[dict], path: Path) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def single_process(path: Path, query: str, positions=None) -> set:
    """``acep exact``'s matches of a file, as (blocks, partition, values); ``positions``
    maps the batch's event index to the stream position the batch job reports."""
    batch = read_all(path)
    return _identities(Engine(query).run(batch), positions)


def _identities(found, positions=None) -> set:
    out = set()
    for m in found:
        blocks = tuple(tuple(int(p if positions is None else positions[p]) for p in b)
                       for b in m.positions)
        values = None if m.values is None else json.dumps(
            {k: _plain(v) for k, v in m.values.items()})
        out.add((blocks, _key_json(m.partition), values))
    return out


def batch_matches(out: Path) -> tuple[set, list[dict]]:
    rows = pq.read_table(out).to_pylist()
    found = set()
    for r in rows:
        flat, blocks, i = r["positions"], [], 0
        for n in r["sizes"]:
            blocks.append(tuple(flat[i:i + n]))
            i += n
        assert i == len(flat) == len(r["tags"])
        assert r["first_tag"] == r["tags"][0] and r["last_tag"] == r["tags"][-1]
        found.add((tuple(blocks), r["partition"], r["values"]))
    assert len(found) == len(rows), "a match was written twice"
    return found, rows


def crossing(rows: list[dict], stats: dict) -> int:
    """Matches whose first and last events lie in different chunks' owned ranges."""
    plan = ChunkPlan(stats["origin"], stats["chunk_length"], 0.0, 0.0, stats["chunks"])
    return sum(int(plan.home(np.array([r["first_tag"]]))[0]
                   != plan.home(np.array([r["last_tag"]]))[0]) for r in rows)


def stream(seed: int, n: int) -> list[dict]:
    """A random stream: types a/b/c, tags that tie often, partition p, value v. Drawn from a
    seed (each Spark run costs a second: no shrinking through degenerate streams)."""
    rng = np.random.default_rng(seed)
    tags = np.cumsum(rng.choice([0, 0, 1, 1, 1, 2, 3], n))
    return [{"type": str(rng.choice(list("abc"))), "t": int(t), "p": int(rng.integers(2)),
             "v": int(rng.integers(10))} for t in tags]


# --------------------------------------------------------------------------- equality


@pytest.mark.parametrize("shape", list(SHAPES))
def test_random_streams_equal_single_process(spark, shape):
    query = SHAPES[shape]
    splittable, _ = key_split(parse_query(query))
    seen = {"crossing": 0, "matches": 0}

    @settings(max_examples=2, deadline=None, derandomize=True, database=None)
    @given(seed=st.integers(0, 2**32 - 1), n=st.integers(80, 150),
           chunk=st.sampled_from([1.0, 5.0, 9.0]), key_groups=st.sampled_from([None, 1, 3]))
    def check(seed, n, chunk, key_groups):
        rows = stream(seed, n)
        with tempfile.TemporaryDirectory() as tmp:
            path = write_jsonl(rows, Path(tmp) / "events.jsonl")
            out = Path(tmp) / "matches"
            result = exact_batch([str(path)], query, output_dir=str(out), chunk=chunk,
                                 key_groups=key_groups, spark=spark, show_progress=False)
            found, written = batch_matches(out)
            assert found == single_process(path, query)
            stats = result.stats
            assert stats["matches"] == len(found) and stats["events"] == len(rows)
            assert stats["bad_rows"] == 0
            assert stats["chunks"] > 1  # tiny chunks: the rule is exercised
            if not splittable:
                assert stats["key_groups"] == 1 and stats["key_split"].startswith("off:")
            elif key_groups is not None:
                assert stats["key_groups"] == key_groups
            seen["crossing"] += crossing(written, stats)
            seen["matches"] += len(found)

    check()
    assert seen["matches"] > 0, f"{shape}: no example had a match"
    CROSSING[shape] = seen["crossing"]


def test_matches_crossing_chunk_edges_occurred():
    """The random examples above (derandomized) include matches that cross chunk edges:
    their first and last events lie in different chunks, and they were found once."""
    if len(CROSSING) < len(SHAPES):
        pytest.skip("needs every test_random_streams_equal_single_process case to run first")
    assert sum(CROSSING.values()) > 10, CROSSING
    assert sum(n > 0 for n in CROSSING.values()) >= len(SHAPES) - 1, CROSSING


def test_key_split_rule():
    """Split by key only for skip-till-any/next-match or partition contiguity with an
    equivalence test binding every negation (EXACT.md 3.4, 3.6)."""
    def ok(q):
        return key_split(parse_query(q))[0]

    assert ok(SHAPES["next-kleene"]) and ok(SHAPES["partition-contiguity"])
    assert ok(SHAPES["any-middle-neg"]) and ok(SHAPES["any-kleene-trailing-neg"])
    assert not ok(SHAPES["strict"])  # strict contiguity sees every event of the input
    assert not ok(SHAPES["any-leading-neg-no-key"])
    # an equality written out is not an equivalence test: the negation sees other keys
    assert not ok("PATTERN SEQ(a x, ~b n, c z) WHERE skip_till_any_match(x, n, z) "
                  "{ x.p = z.p } WITHIN 4")


# --------------------------------------------------------------------------- bad rows


def test_bad_rows_quarantined_and_the_rest_matched(spark, tmp_path):
    query = SHAPES["next-kleene"]
    rng = np.random.default_rng(7)
    good1 = [{"type": str(rng.choice(list("abc"))), "t": float(i // 2), "p": int(rng.integers(2)),
              "v": int(rng.integers(10))} for i in range(60)]
    raw2 = [{"type": str(rng.choice(list("abc"))), "t": float(30 + i // 2),
             "p": int(rng.integers(2)), "v": int(rng.integers(10))} for i in range(60)]
    bad_at = {5: ("v", "oops"), 17: ("type", None), 29: ("p", None), 41: ("v", "12x")}
    for i, (field, value) in bad_at.items():
        if field == "p":
            raw2[i]["type"] = "a"  # a component event lacking the equivalence attribute
        if value is None:
            del raw2[i][field]
        else:
            raw2[i][field] = value
    raw2[50].pop("p")
    raw2[50]["type"] = "d"  # not a component type: never read, not bad
    f1 = write_jsonl(good1, tmp_path / "1.jsonl")
    f2 = write_jsonl(raw2, tmp_path / "2.jsonl")
    out, quarantine = tmp_path / "matches", tmp_path / "bad"
    result = exact_batch([str(f1), str(f2)], query, output_dir=str(out), chunk=1.0,
                         key_groups=2, quarantine=str(quarantine), spark=spark,
                         show_progress=False)
    assert result.stats["bad_rows"] == 4
    assert result.stats["events"] == 116
    bad = {r["position"] - FILE_STRIDE: r for r in pq.read_table(quarantine).to_pylist()}
    assert sorted(bad) == sorted(bad_at)
    for i in (5, 41):  # a text value in a numeric column: field, value, file and line
        assert bad[i]["field"] == "v" and bad[i]["line"] == i + 1
        assert bad[i]["reason"].startswith("expected a number, got text '")
    assert "type" in bad[17]["reason"] and bad[17]["line"] == 18
    assert bad[29]["reason"] == "a event lacks attribute 'p' that the query reads"
    assert bad[29]["field"] == "p"
    # the reference: one process over the good rows, mapped to the batch's positions
    kept = [(r, i) for i, r in enumerate(good1)] + \
        [(r, FILE_STRIDE + i) for i, r in enumerate(raw2) if i not in bad_at]
    clean = write_jsonl([r for r, _ in kept], tmp_path / "clean.jsonl")
    expected = single_process(clean, query, [p for _, p in kept])
    found, _ = batch_matches(out)
    assert found == expected and len(found) > 0
    assert any(max(p for b in m[0] for p in b) >= FILE_STRIDE for m in found)


def test_relative_paths_are_taken_in_the_callers_directory(spark, tmp_path, monkeypatch):
    """A caller that changed directory after the session started: its relative input is
    read, and the matches and the quarantine are written, in its directory (the part files
    and _query.json together), not in the one the JVM started in."""
    jvm = Path(spark.sparkContext._jvm.System.getProperty("user.dir")).resolve()
    assert jvm != tmp_path.resolve()  # else the test would prove nothing
    query = SHAPES["next-kleene"]
    (tmp_path / "in").mkdir()
    good = write_jsonl(stream(8, 150), tmp_path / "in" / "e.jsonl")
    write_jsonl([{"t": 1000, "p": 0, "v": 1}], tmp_path / "in" / "f.jsonl")  # no type: bad
    monkeypatch.chdir(tmp_path)
    result = exact_batch(["in/e.jsonl", "in/f.jsonl"], query, output_dir="out/m",
                         quarantine="out/bad", chunk=4.0, spark=spark, show_progress=False)
    found, _ = batch_matches(tmp_path / "out" / "m")
    assert found == single_process(good, query) and len(found) == result.stats["matches"] > 0
    assert json.loads((tmp_path / "out" / "m" / "_query.json").read_text())["query"] == query
    assert (tmp_path / "out" / "m" / "_SUCCESS").exists()
    [bad] = pq.read_table(tmp_path / "out" / "bad").to_pylist()
    assert bad["source"] == str(tmp_path.resolve() / "in" / "f.jsonl") and bad["line"] == 1
    assert not (jvm / "out").exists()
    assert result.output_dir == str(tmp_path.resolve() / "out" / "m")  # it stays valid


# --------------------------------------------------------------------------- archive


def _archive(root: Path, device: str, seq: int, positions, rows, created: float) -> None:
    from edge.collector.archive import Archive

    names = sorted({r["type"] for r in rows})
    batch = SimpleNamespace(
        event_position=np.asarray(positions, np.int64),
        event_type=np.array([names.index(r["type"]) for r in rows], np.int32),
        type_names=names, event_tag=np.array([r["t"] for r in rows], np.float64),
        columns={"p": np.array([r["p"] for r in rows], np.float64),
                 "v": np.array([r["v"] for r in rows], np.float64)},
        pattern=SimpleNamespace(id="abc", text="a b c", window=4.0, k=0, where=[],
                                partition_by="p", hash="h"),
        created_at=created, device=device, seq=seq, batch_id=f"{device}-{seq}",
        tag_is_time=False)
    Archive(root).write(batch)


def test_archive_devices_and_duplicates(spark, tmp_path):
    query = "PATTERN SEQ(a x, b y, c z) WHERE skip_till_any_match(x, y, z) { x.v <= z.v } " \
            "WITHIN 4"
    rng = np.random.default_rng(3)
    root = tmp_path / "archive"
    expected = set()
    for d, device in enumerate(["dev1", "dev2"]):
        t = np.cumsum(rng.choice([0, 1, 1, 2], 50)).astype(float)
        rows = [{"type": str(rng.choice(list("abc"))), "t": float(x), "p": float(d),
                 "v": float(rng.integers(10))} for x in t]
        positions = 1000 * d + 10 + np.arange(50)
        # two batches that overlap (the window 20..29 uploaded twice) on different days
        _archive(root, device, 1, positions[:30], rows[:30], 86400 * 11000)
        _archive(root, device, 2, positions[20:], rows[20:], 86400 * 11001)
        events = [Event(r["type"], r["t"], {"p": r["p"], "v": r["v"]}) for r in rows]
        expected |= _identities(Engine(query).run(events), positions)
    # device 2's events would complete device 1's matches if the streams were merged
    out = tmp_path / "matches"
    result = exact_batch([str(root)], query, archive=True, output_dir=str(out), chunk=1.0,
                         key_groups=2, spark=spark, show_progress=False)
    found, rows = batch_matches(out)
    assert found == expected and len(found) > 0
    assert result.stats["events"] == 100  # the overlap counts once
    assert result.stats["key_groups"] == 2
    assert result.stats["key_split"].startswith("by device only")
    for r in rows:  # every match within one device, named by it
        assert {p // 1000 for p in r["positions"]} == {int(r["stream"][-1]) - 1}


# --------------------------------------------------------------------------- no window, CLI


def test_no_within_is_one_chunk(spark, tmp_path):
    query = "PATTERN SEQ(a x, b y) WHERE skip_till_next_match([p])"
    rows = [{"type": "ab"[i % 2], "t": i, "p": i % 3, "v": 0} for i in range(40)]
    path = write_jsonl(rows, tmp_path / "e.jsonl")
    result = exact_batch([str(path)], query, output_dir=str(tmp_path / "m"), chunk=1.0,
                         key_groups=3, spark=spark, show_progress=False)
    assert result.stats["chunks"] == 1 and result.stats["key_groups"] == 3
    assert "no WITHIN" in result.stats["note"]
    found, rows_out = batch_matches(tmp_path / "m")
    assert found == single_process(path, query)
    assert max(r["last_tag"] - r["first_tag"] for r in rows_out) > 1


def test_command_line(spark, tmp_path, capsys):
    rows = [{"type": "abc"[i % 3], "t": i // 2, "p": i % 2, "v": i % 5} for i in range(30)]
    path = write_jsonl(rows, tmp_path / "e.jsonl")
    qfile = tmp_path / "q.sase"
    qfile.write_text(SHAPES["any-middle-neg"])
    assert main([str(qfile), str(path), "--out", str(tmp_path / "m"), "--chunk", "1",
                 "--key-groups", "2", "--no-progress"]) == 0
    stats = json.loads(capsys.readouterr().out)
    found, _ = batch_matches(tmp_path / "m")
    assert stats["matches"] == len(found) > 0
    assert found == single_process(path, SHAPES["any-middle-neg"])
    assert json.loads((tmp_path / "m" / "_query.json").read_text())["query"] == \
        SHAPES["any-middle-neg"]


def test_an_unreadable_file_fails_the_job_unless_skipped(spark, tmp_path, capsys):
    from support.damaged import corrupt_parquet

    rows = [{"type": "abc"[i % 3], "t": i // 2, "p": i % 2, "v": i % 5} for i in range(30)]
    (tmp_path / "in").mkdir()
    path = write_jsonl(rows, tmp_path / "in" / "a.jsonl")
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "in" / "b.parquet")
    corrupt_parquet(tmp_path / "in" / "b.parquet")
    qfile = tmp_path / "q.sase"
    qfile.write_text(SHAPES["any-middle-neg"])
    argv = [str(qfile), str(tmp_path / "in"), "--out", str(tmp_path / "m"), "--no-progress"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "b.parquet: unreadable Parquet data (Couldn't deserialize thrift" in err
    assert "--skip-bad-files" in err
    assert "Traceback" not in err and not (tmp_path / "m").exists()
    assert main([*argv, "--skip-bad-files"]) == 0
    out, err = capsys.readouterr()
    stats = json.loads(out)
    assert stats["bad_files"] == 1 and stats["bad_rows"] == 0 and stats["events"] == 30
    assert "acep exact-batch: skipped file " in err and "(30 rows unread)" in err
    assert batch_matches(tmp_path / "m")[0] == single_process(path, SHAPES["any-middle-neg"])


@pytest.mark.parametrize("argv, message", [
    (["missing.sase", "e.jsonl", "--out", "m"], "query file missing.sase"),
    (["bad.sase", "e.jsonl", "--out", "m"], "query error"),
    (["q.sase", "nowhere.jsonl", "--out", "m"], "no such file"),
    (["q.sase", "e.jsonl", "--out", "m", "--chunk", "soon"], "bad window"),
    (["q.sase", "e.jsonl", "--out", "m", "--key-groups", "0"], "key groups must be >= 1"),
    (["q.sase", "e.jsonl", "--out", "m", "--cores", "-2"], "cores must be >= 1, got -2"),
    (["q.sase", "e.jsonl", "--out", "m", "--chunk", "0"], "chunk length must be > 0"),
    (["q.sase", "e.jsonl", "--out", "m", "--archive", "."], "one of the two"),
    (["q.sase", "--out", "m"], "one of the two"),
    (["q.sase", "--out", "m", "--archive", "."], "no archive files"),
    (["w.sase", "e.jsonl", "--out", "m"], "attribute 'weight'"),
])
def test_command_line_errors(tmp_path, monkeypatch, capsys, argv, message):
    """Bad input: one clear message, exit 2, no traceback, before any Spark job."""
    monkeypatch.chdir(tmp_path)
    write_jsonl([{"type": "a", "t": 1, "p": 0, "v": 1}], tmp_path / "e.jsonl")
    (tmp_path / "q.sase").write_text(SHAPES["next-kleene"])
    (tmp_path / "bad.sase").write_text("PATTERN SEQ(a x, b y) WHERE x.v >")
    (tmp_path / "w.sase").write_text("PATTERN SEQ(a x, b y) WHERE x.weight > y.v WITHIN 2")
    if any(o in argv for o in ("--chunk", "--key-groups", "--cores")):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2
    else:
        assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_tags_are_plain_seconds(spark, tmp_path):
    """Timestamp tags: first/last tags in seconds since the epoch; --chunk in durations."""
    rows = [{"type": "abc"[i % 3], "t": f"2001-01-01T00:{i // 2:02d}:00", "p": 0, "v": 1}
            for i in range(40)]
    path = write_jsonl(rows, tmp_path / "e.jsonl")
    query = "PATTERN SEQ(a x, b y, c z) WHERE skip_till_next_match([p]) WITHIN 2 minutes"
    result = exact_batch([str(path)], query, output_dir=str(tmp_path / "m"), chunk=240.0,
                         spark=spark, show_progress=False)
    found, out = batch_matches(tmp_path / "m")
    assert found == single_process(path, query) and result.stats["chunks"] > 1
    assert math.isclose(min(r["first_tag"] for r in out), 978307200.0)
    assert crossing(out, result.stats) > 0
    assert json.loads((tmp_path / "m" / "_query.json").read_text())["tag_is_time"]


def test_unit_events_match_read_all(tmp_path):
    """The executors' event conversion gives the events ``acep exact`` reads."""
    from trainer.exact import unit_events
    from trainer.sources import plan_files, read_task

    rows = [{"type": "ab"[i % 2], "t": i, "p": i % 3, "s": f"k{i % 2}", "v": 1.5 * i}
            for i in range(20)]
    rows[3].pop("s")
    path = write_jsonl(rows, tmp_path / "e.jsonl")
    plan = plan_files([str(path)], None)
    table = read_task(plan.tasks[0], plan)
    got = unit_events(table, plan).to_events()
    assert got == read_all(path).to_events()


def test_a_column_mixing_numbers_and_text_is_read_as_text(tmp_path):
    """Columns keep numbers as numbers when they mix with text (acep.events); the executors
    read such a column as text, numbers as acep prints them (7.0 is "7"), exact ids too."""
    from trainer.exact import unit_events
    from trainer.sources import plan_files, read_task

    big = 12345678901234567
    rows = [{"type": "a", "t": i, "id": v, "big": big + i}
            for i, v in enumerate([7, "other", 7.0, 2.5])]
    path = write_jsonl(rows, tmp_path / "e.jsonl")
    plan = plan_files([str(path)], None)
    events = unit_events(read_task(plan.tasks[0], plan), plan)
    assert events.columns["id"].tolist() == ["7", "other", "7", "2.5"]
    assert events.columns["big"].tolist() == [str(big + i) for i in range(4)]


def test_only_bad_rows_gives_an_empty_result(spark, tmp_path):
    out = tmp_path / "m"
    out.mkdir()
    (out / "part-00000-old.parquet").write_bytes(b"stale")  # a previous run's output goes
    (out / "_SUCCESS").write_bytes(b"")
    path = write_jsonl([{"type": "a", "t": i, "p": None, "v": 1} for i in range(5)],
                       tmp_path / "e.jsonl")  # every a event lacks the key p
    result = exact_batch([str(path)], SHAPES["strict"], output_dir=str(out), spark=spark,
                         show_progress=False)
    assert result.stats["events"] == 0 and result.stats["bad_rows"] == 5
    assert result.stats["matches"] == 0 and pq.read_table(out).num_rows == 0
    assert pq.read_table(out).schema.names[:2] == ["stream", "partition"]
