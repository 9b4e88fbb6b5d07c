"""Inputs in object storage (``acep.storage``): event files and the collector's archive read
from ``s3://`` URIs exactly as from disk, by ``acep match``, the readers and the Spark
trainer, against a real S3 API server on loopback (moto's server: HTTP, signed requests,
listing by prefix) and a real local Spark session. The endpoint is given in the URIs' query
(``?endpoint_override=...``), which the trainer's executors receive with each task."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import msgpack
import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
pytest.importorskip("moto.server", reason="needs moto's S3 server (pip install -e '.[test]')")

import pyarrow.parquet as pq  # noqa: E402
from support.s3_server import BUCKET  # noqa: E402

from acep import storage  # noqa: E402
from acep.cli import main as acep_main  # noqa: E402
from acep.events import EventError, read_all, read_chunks  # noqa: E402


def random_rows(n: int, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    tags = np.cumsum(rng.choice([0, 1, 1, 2, 5], n))
    return [{"type": str(rng.choice(list("abc"))), "t": float(t),
             "p": str(rng.choice(["x", "y"])), "v": float(rng.integers(0, 9))} for t in tags]


def write_events(rows: list[dict], path: Path) -> Path:
    """``rows`` in the format of ``path``'s extension."""
    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    elif path.suffix == ".csv":
        with open(path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    elif path.suffix == ".msgpack":
        path.write_bytes(b"".join(msgpack.packb(r) for r in rows))
    else:
        pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=37)
    return path


def same_batch(a, b) -> None:
    assert a.type_names == b.type_names and (a.type_codes == b.type_codes).all()
    assert (a.tags == b.tags).all() and a.columns.keys() == b.columns.keys()
    for name in a.columns:
        assert list(a.columns[name]) == list(b.columns[name])
    assert (a.lines is None) == (b.lines is None)
    assert a.lines is None or (a.lines == b.lines).all()


# --------------------------------------------------------------------------- reading


@pytest.mark.parametrize("suffix", [".jsonl", ".csv", ".parquet", ".msgpack"])
def test_an_event_file_in_s3_reads_as_the_same_file_on_disk(s3, tmp_path, suffix, capsys):
    local = write_events(random_rows(300, len(suffix)), tmp_path / f"events{suffix}")
    uri = s3.put(local, f"files/events{suffix}")
    same_batch(read_all(uri), read_all(local))
    if suffix == ".parquet":  # row groups read apart, as the trainer's tasks read them
        pieces = [c.rows for c in read_chunks(uri, row_groups=[2, 3])]
        assert np.concatenate(pieces).tolist() == list(range(74, 148))
    # acep match prints the same matches (Hadoop's s3a:// spelling read as s3://)
    args = ["match", "-p", "a b+ c", "-w", "6", "-k", "1", "--partition", "p", "--no-progress"]
    assert acep_main([*args, str(local)]) == 0
    on_disk = capsys.readouterr().out
    assert acep_main([*args, s3.uri(f"files/events{suffix}", scheme="s3a")]) == 0
    assert capsys.readouterr().out == on_disk and on_disk.count("\n") > 5


def test_a_bad_event_in_s3_is_named_by_its_uri_line_and_field(s3, tmp_path, capsys):
    rows = [json.dumps(r) for r in random_rows(10, 1)]
    rows[4] = json.dumps({"type": "a", "t": "soon", "p": "x", "v": 1})
    local = tmp_path / "bad.jsonl"
    local.write_text("\n".join(rows) + "\n")
    uri = s3.put(local, "files/bad.jsonl")
    with pytest.raises(EventError) as err:
        read_all(uri)
    assert (err.value.source, err.value.line, err.value.field) == (uri, 5, "t")
    assert acep_main(["match", "-p", "a b", "-w", "5", uri]) == 1
    assert f"{uri}, line 5, field 't'" in capsys.readouterr().err


def test_a_bad_csv_row_in_s3_is_named_by_the_line_it_starts_on(s3, tmp_path, capsys):
    """The lines are counted in the bytes pyarrow reads: the object is read once."""
    local = tmp_path / "bad.csv"
    local.write_bytes(b'type,t,v\r\na,1,"two\r\nlines"\r\n\r\n\r\nb,soon,2\r\n')
    uri = s3.put(local, "files/bad.csv")
    with pytest.raises(EventError) as err:
        read_all(uri)
    assert (err.value.source, err.value.line, err.value.field) == (uri, 6, "t")
    assert acep_main(["match", "-p", "a b", "-w", "5", uri]) == 1
    assert f"{uri}, line 6, field 't'" in capsys.readouterr().err


def test_missing_objects_and_unknown_filesystems_say_so(s3, capsys):
    missing = s3.uri("files/none.jsonl")
    with pytest.raises(EventError, match="no such file") as err:
        read_all(missing)
    assert err.value.source == missing
    with pytest.raises(EventError, match="cannot read") as err:
        read_all("nosuchfs://host/events.jsonl")
    assert "nosuchfs" in str(err.value)
    with pytest.raises(EventError, match="cannot use this filesystem") as err:
        read_all("hdfs://namenode:8020/events.jsonl")  # no Hadoop here: one line, a hint
    assert "\n" not in str(err.value) and "libhdfs" in str(err.value)
    assert acep_main(["match", "-p", "a b", "-w", "5", missing]) == 2
    err = capsys.readouterr().err
    assert "no such file" in err and "Traceback" not in err
    # credentials in the URI (S3 takes KEY:SECRET@) are not shown
    with pytest.raises(EventError, match="no such file") as err:
        read_all(s3.uri("files/none.jsonl", user="AKIDSHOWN:s3cr3tvalue@"))
    assert "s3://***@fleet/files/none.jsonl" in str(err.value)
    assert "s3cr3t" not in str(err.value) and "AKIDSHOWN" not in str(err.value)


def test_gcs_without_credentials_says_what_to_set_instead_of_hanging(
        tmp_path, monkeypatch, capsys):
    """Google's client retries for 15 minutes by default, so a machine without Google
    credentials looked hung; the retry time is bounded and the refusal says what to set."""
    for name in ("GOOGLE_APPLICATION_CREDENTIALS", "GCE_METADATA_HOST", "GCE_METADATA_ROOT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))
    storage._filesystem.cache_clear()
    try:
        uri = "gs://acep-no-such-bucket/events.jsonl?retry_limit_seconds=1"
        assert acep_main(["match", "-p", "a b", "-w", "5", uri]) == 2
        err = capsys.readouterr().err
        assert "GOOGLE_APPLICATION_CREDENTIALS" in err and "anonymous@" in err
        assert len(err.strip().splitlines()) == 1 and "google::cloud" not in err
    finally:
        storage._filesystem.cache_clear()


@pytest.mark.parametrize("netloc, query, retry, scheme", [
    ("bucket", "", 30, "https"),
    ("bucket", "retry_limit_seconds=600", 600, "https"),
    ("anonymous@public", "", 30, "https"),  # pyarrow alone would speak plain HTTP
    ("anonymous@public", "scheme=http&endpoint_override=localhost:4443", 30, "http"),
])
def test_gcs_filesystems_retry_for_a_bounded_time(netloc, query, retry, scheme):
    options = storage._filesystem("gs", netloc, query).__reduce__()[1][0]
    assert options["retry_time_limit"].total_seconds() == retry
    assert options["scheme"] == scheme


def test_a_device_without_pyarrow_is_told_what_to_install(monkeypatch):
    """The device side has numpy and msgpack alone: a URI says what it needs."""
    import sys

    monkeypatch.setitem(sys.modules, "pyarrow.fs", None)  # as if not installed
    storage._filesystem.cache_clear()
    try:
        with pytest.raises(EventError, match=r"needs pyarrow \(pip install 'acep\[files\]'\)"):
            read_all(f"s3a://{BUCKET}/files/events.jsonl")
    finally:
        storage._filesystem.cache_clear()


def test_the_endpoint_may_come_from_the_environment(s3, tmp_path, monkeypatch):
    """AWS_ENDPOINT_URL, as for MinIO; the URI then is the plain s3://bucket/key."""
    local = write_events(random_rows(50, 3), tmp_path / "env.jsonl")
    s3.put(local, "files/env.jsonl")
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://{s3.endpoint}")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    storage._filesystem.cache_clear()
    try:
        same_batch(read_all(f"s3://{BUCKET}/files/env.jsonl"), read_all(local))
    finally:
        storage._filesystem.cache_clear()


def test_listing_keeps_the_callers_spelling(s3, tmp_path):
    for name in ("a.jsonl", "sub/b.jsonl"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        write_events(random_rows(5, 0), tmp_path / name)
    s3.put(tmp_path, "listing")
    root = s3.uri("listing", scheme="s3a")
    found = sorted(storage.list_files(root))
    assert [rel for _, rel in found] == ["a.jsonl", "sub/b.jsonl"]
    assert [uri for uri, _ in found] == [s3.uri("listing/a.jsonl", scheme="s3a"),
                                         s3.uri("listing/sub/b.jsonl", scheme="s3a")]
    assert (storage.kind(root), storage.kind(found[0][0]), storage.kind(s3.uri("listin"))) == \
        ("dir", "file", None)
    assert storage.suffix(found[0][0]) == ".jsonl"


# --------------------------------------------------------------------------- the trainer


def test_an_archive_in_s3_trains_the_history_trained_from_disk(s3, spark, tmp_path):
    from support.trainer import archive_from_devices, events

    from trainer.train import train

    archive_from_devices(tmp_path / "archive", {"pi-1": events(400, 1), "pi-2": events(400, 2)})
    uri = s3.put(tmp_path / "archive", "archive")
    on_disk = train([str(tmp_path / "archive")], archive=True, spark=spark,
                    show_progress=False, chunk=10.0)
    remote = train([s3.uri("archive", scheme="s3a")], archive=True, spark=spark,
                   show_progress=False, chunk=10.0)
    assert remote.stats["events"] == on_disk.stats["events"] > 0
    assert remote.graph.to_bytes() == on_disk.graph.to_bytes()
    assert uri.startswith("s3://")


def test_event_files_in_s3_train_and_match_as_on_disk(s3, spark, tmp_path):
    from support.trainer import PATTERN, events, single_process

    from trainer.exact import exact_batch
    from trainer.train import train

    rows = events(600, 7)
    (tmp_path / "in").mkdir()
    write_events(rows[:300], tmp_path / "in" / "0.jsonl")
    write_events(rows[300:], tmp_path / "in" / "1.parquet")
    (tmp_path / "in" / ".hidden.jsonl").write_text("not read\n")
    uri = s3.put(tmp_path / "in", "in")
    result = train([uri], PATTERN, spark=spark, show_progress=False)
    assert result.stats["events"] == 600 and result.stats["bad_rows"] == 0
    assert result.graph.to_bytes() == single_process(rows).to_bytes()
    query = "PATTERN SEQ(a x, b y, c z) WHERE skip_till_any_match(x, y, z) { x.v <= z.v } WITHIN 5"
    found = {}
    for name, source in (("disk", str(tmp_path / "in")), ("s3", uri)):
        out = tmp_path / f"matches-{name}"
        exact_batch([source], query, output_dir=str(out), spark=spark, show_progress=False)
        found[name] = sorted(map(json.dumps, pq.read_table(out).to_pylist()))
    assert found["s3"] == found["disk"] and found["disk"]


def test_archive_definitions_days_and_refusals_read_in_s3(s3, tmp_path, capsys):
    from support.trainer import DAY, NEW, OLD, upload

    from trainer.cli import main as train_main
    from trainer.sources import SourceError, plan_archive

    rng = np.random.default_rng(5)
    local = tmp_path / "arch"
    upload(local, "d1", 0, OLD, 18262 * DAY, range(0, 20), rng)
    upload(local, "d1", 2, NEW, 19358 * DAY, range(40, 70), rng)
    upload(local, "d2", 0, NEW, 19358 * DAY, range(0, 30), rng)
    root = s3.put(local, "changed")
    with pytest.raises(SourceError) as err:
        plan_archive(root)
    listing = str(err.value)
    assert listing.startswith(f"{root}: pattern 'abc' has 2 different definitions")
    assert f"{NEW.hash[:12]}: pattern 'a c', k=0, window=4, where=[], partition=None: " \
           "2 file(s) from 2 device(s), 2023-01-01" in listing
    plan = plan_archive(root, days=("2021-01-01", None))
    assert plan.pattern["text"] == "a c"
    assert sorted((t.stream, storage.parts(t.source)[-1]) for t in plan.tasks) == \
        [("d1", "part-00000000000000000002.parquet"), ("d2", "part-00000000000000000000.parquet")]
    assert all(t.source.startswith(f"s3://{BUCKET}/changed/date=2023-01-01/") and
               t.source.endswith(f"?endpoint_override={s3.endpoint}&scheme=http&region=us-east-1")
               for t in plan.tasks)
    assert train_main(["--archive", s3.uri("nothing"), "-o", str(tmp_path / "h"),
                       "--no-progress"]) == 2
    assert f"{s3.uri('nothing')}: no such directory" in capsys.readouterr().err


def test_credentials_in_a_uri_stay_out_of_the_quarantine_and_the_messages(
        s3, spark, tmp_path, capsys):
    from support.trainer import events

    from trainer.cli import main as train_main

    lines = [json.dumps(r) for r in events(200, 4)]
    lines[9] = json.dumps({"type": "a", "t": "soon", "p": "x", "v": 1.0})
    (tmp_path / "bad.jsonl").write_text("\n".join(lines) + "\n")
    s3.put(tmp_path / "bad.jsonl", "secret/bad.jsonl")
    uri = s3.uri("secret/bad.jsonl", user="AKIDSHOWN:s3cr3tvalue@")
    quarantine = tmp_path / "quarantine"
    assert train_main([uri, "-p", "a b+ c", "-w", "5", "-k", "1", "--partition", "p",
                       "-o", str(tmp_path / "h"), "--quarantine", str(quarantine),
                       "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert "quarantined s3://***@fleet/secret/bad.jsonl?" in err
    assert ", line 10, position 9, field 't'" in err
    rows = pq.read_table(quarantine).to_pylist()
    assert [r["source"] for r in rows] == [storage.redact(uri)]
    assert train_main(["--archive", s3.uri("nothing", user="AKIDSHOWN:s3cr3tvalue@"),
                       "-o", str(tmp_path / "h2"), "--no-progress"]) == 2
    err += capsys.readouterr().err
    assert "s3://***@fleet/nothing?" in err and "no such directory" in err
    assert "s3cr3t" not in err and "AKIDSHOWN" not in err


def test_messages_of_any_library_are_redacted_where_a_command_prints_them():
    text = ("ListObjects failed for 's3://K:S@fleet/a?region=x': (s3a://K2:S2@other/b, "
            "gs://g/c?access_token=T) beside /data/user@host/x and email user@host")
    assert storage.redact_text(text) == (
        "ListObjects failed for 's3://***@fleet/a?region=x': (s3a://***@other/b, "
        "gs://g/c?access_token=***) beside /data/user@host/x and email user@host")
    assert storage.redact_text("s3://K:S@fleet/x: no such directory") == \
        "s3://***@fleet/x: no such directory"


def test_outputs_beside_an_input_uri(s3):
    from trainer.outputs import OutputError, check_outputs

    check_outputs({"--out": "matches"}, [s3.uri("in")])  # local and remote never overlap
    check_outputs({"--out": "s3://fleet/out"}, ["s3://fleet/in"])
    with pytest.raises(OutputError, match="would replace the input"):
        check_outputs({"--out": "s3://fleet/in/out"}, ["s3://fleet/in"])


@pytest.mark.parametrize("source, shown", [
    ("s3://KEY:SECRET@fleet/a.parquet?region=eu-west-1", "s3://***@fleet/a.parquet?region=eu-west-1"),
    ("gs://fleet/a?access_token=SECRET&scheme=http", "gs://fleet/a?access_token=***&scheme=http"),
    ("s3://fleet/a?endpoint_override=minio:9000", "s3://fleet/a?endpoint_override=minio:9000"),
    ("hdfs://namenode:8020/archive", "hdfs://namenode:8020/archive"),
    ("/data/user@host/events.jsonl", "/data/user@host/events.jsonl"),
])
def test_messages_show_uris_without_their_credentials(source, shown):
    assert storage.redact(source) == shown
    assert str(storage.StorageError(source, "refused")) == f"{shown}: refused"
