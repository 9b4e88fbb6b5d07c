"""Tests of acep.events: the event model, the readers of every format, specs and bad input.

Every reader test writes a real file in ``tmp_path`` and reads it back."""

from __future__ import annotations

import csv
import io
import json
import sys
from datetime import UTC, datetime
from pathlib import Path

import msgpack
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from acep.events import (
    PRESETS,
    Event,
    EventBatch,
    EventError,
    EventSpec,
    TypeClasses,
    file_size_hint,
    read_all,
    read_events,
)

FIXTURE = Path(__file__).parents[1] / "data" / "flights-2000.parquet"  # first 2000 flights
FORMATS = ["jsonl", "csv", "parquet", "msgpack"]


def write(path: Path, rows: list[dict]) -> Path:
    """Write ``rows`` in the format named by ``path``'s extension."""
    ext = path.suffix
    if ext in (".jsonl", ".json", ".ndjson"):
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    elif ext == ".csv":
        names = list(dict.fromkeys(k for r in rows for k in r))
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, names)
            w.writeheader()
            w.writerows(rows)
    elif ext == ".parquet":
        pq.write_table(pa.Table.from_pylist(rows), path)
    elif ext == ".msgpack":
        path.write_bytes(b"".join(msgpack.packb(utc(r), datetime=True) for r in rows))
    return path


def utc(row: dict) -> dict:
    """msgpack packs only timezone-aware datetimes."""
    return {k: v.replace(tzinfo=UTC) if isinstance(v, datetime) else v
            for k, v in row.items()}


def assert_same_events(a: EventBatch, b: EventBatch) -> None:
    assert list(a.types()) == list(b.types())
    np.testing.assert_array_equal(a.tags, b.tags)
    assert a.tag_is_time == b.tag_is_time
    assert set(a.columns) == set(b.columns)
    for name in a.columns:
        assert a.columns[name].dtype == b.columns[name].dtype, name
        np.testing.assert_array_equal(a.columns[name], b.columns[name])


ROWS = [
    {"type": "a", "t": 1, "price": 10.5, "sym": "x"},
    {"type": "b", "t": 2.5, "price": None, "sym": "y"},
    {"type": "a", "t": 4, "price": 3, "sym": None},
    {"type": "c", "t": 4, "price": -1.25, "sym": "x"},
]


# --------------------------------------------------------------------------- round trips


@pytest.mark.parametrize("fmt", FORMATS)
def test_each_format_reads_the_same_columns(tmp_path, fmt):
    batch = read_all(write(tmp_path / f"ev.{fmt}", ROWS))
    assert batch.type_names == ["a", "b", "c"]
    assert list(batch.types()) == ["a", "b", "a", "c"]
    assert batch.type_codes.dtype == np.int32
    np.testing.assert_array_equal(batch.tags, [1, 2.5, 4, 4])
    assert batch.tags.dtype == np.float64 and not batch.tag_is_time
    assert set(batch.columns) == {"price", "sym"}
    np.testing.assert_array_equal(batch.columns["price"], [10.5, np.nan, 3, -1.25])
    assert batch.columns["sym"].dtype == object
    assert list(batch.columns["sym"]) == ["x", "y", None, "x"]
    assert batch.source == str(tmp_path / f"ev.{fmt}")


def test_lines_are_file_lines(tmp_path):
    path = tmp_path / "ev.jsonl"
    path.write_text('{"type": "a", "t": 1}\n\n  \n{"type": "b", "t": 2}\n')
    assert list(read_all(path).lines) == [1, 4]  # blank lines skipped but counted
    assert list(read_all(write(tmp_path / "ev.csv", ROWS)).lines) == [2, 3, 4, 5]
    assert read_all(write(tmp_path / "ev.parquet", ROWS)).lines is None
    assert read_all(write(tmp_path / "ev.msgpack", ROWS)).line_of(0) is None


events_strategy = st.lists(
    st.fixed_dictionaries({
        "type": st.sampled_from(["a", "b", "late"]),
        "t": st.one_of(st.integers(-10**6, 10**6),
                       st.floats(-1e9, 1e9, allow_nan=False, allow_infinity=False)),
        "price": st.one_of(st.none(), st.floats(-1e6, 1e6, allow_nan=False)),
        "sym": st.one_of(st.none(), st.text(alphabet="xyz", min_size=1, max_size=3)),
    }),
    min_size=1, max_size=20,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=events_strategy, batch_size=st.integers(1, 7))
def test_random_events_round_trip_through_every_format(tmp_path_factory, rows, batch_size):
    folder = tmp_path_factory.mktemp("rt")
    expected = EventBatch.from_events(rows)
    for fmt in FORMATS:
        batches = list(read_events(write(folder / f"ev.{fmt}", rows), batch_size=batch_size))
        assert all(0 < len(b) <= batch_size for b in batches)
        assert [b.position for b in batches] == list(range(0, len(rows), batch_size))
        assert_same_events(EventBatch.concat(batches), expected)
    assert [e.type for e in expected.to_events()] == [r["type"] for r in rows]


def test_timestamps_agree_across_formats(tmp_path):
    stamps = [datetime(2001, 1, 1, 0, 5), datetime(2001, 1, 1, 0, 5, 30), datetime(2001, 1, 2)]
    seconds = [s.replace(tzinfo=UTC).timestamp() for s in stamps]
    iso = [{"type": "a", "t": s.isoformat(), "v": i} for i, s in enumerate(stamps)]
    typed = [{"type": "a", "t": s, "v": i} for i, s in enumerate(stamps)]
    batches = [read_all(write(tmp_path / "ev.jsonl", iso)),
               read_all(write(tmp_path / "ev.csv", iso)),
               read_all(write(tmp_path / "ev.parquet", typed)),
               read_all(write(tmp_path / "ev.msgpack", typed))]
    for b in batches:
        assert b.tag_is_time
        np.testing.assert_allclose(b.tags, seconds, rtol=0, atol=1e-6)
    np.testing.assert_array_equal(batches[0].tags, [978307500.0, 978307530.0, 978393600.0])


def test_timezone_offsets_are_honoured(tmp_path):
    rows = [{"type": "a", "t": "2001-01-01T01:00:00+01:00"}, {"type": "a", "t": "2001-01-01Z"}]
    np.testing.assert_array_equal(read_all(write(tmp_path / "ev.jsonl", rows)).tags,
                                  [978307200.0, 978307200.0])


# --------------------------------------------------------------------------- chunking


@pytest.mark.parametrize("fmt", FORMATS)
def test_chunks_give_the_same_events_as_one_batch(tmp_path, fmt):
    rows = [{"type": "ab"[i % 3 == 0], "t": i // 2, "v": i * 1.5} for i in range(23)]
    path = write(tmp_path / f"ev.{fmt}", rows)
    batches = list(read_events(path, batch_size=5))
    assert [len(b) for b in batches] == [5, 5, 5, 5, 3]
    assert [b.position for b in batches] == [0, 5, 10, 15, 20]
    whole = next(read_events(path))
    assert len(whole) == 23
    assert_same_events(EventBatch.concat(batches), whole)
    if whole.lines is not None:
        np.testing.assert_array_equal(EventBatch.concat(batches).lines, whole.lines)


def test_count_windows_tag_with_global_positions(tmp_path):
    rows = [{"type": "a", "t": 100 - i} for i in range(7)] + [{"t": 0}] + [{"type": "b"}]
    spec = EventSpec(tag=None)
    bad: list = []
    batches = list(read_events(write(tmp_path / "ev.jsonl", rows), spec, batch_size=3,
                               on_bad_event="skip", bad_events=bad))
    whole = EventBatch.concat(batches)
    np.testing.assert_array_equal(whole.tags, np.arange(8.0))  # the bad row leaves no gap
    np.testing.assert_array_equal(whole.columns["t"][:3], [100, 99, 98])  # "t" is data here
    assert [(p, line) for p, line, _ in bad] == [(7, 8)]


# --------------------------------------------------------------------------- flights


def test_flights_preset_on_the_real_fixture():
    assert FIXTURE.stat().st_size < 100_000
    batch = read_all(FIXTURE, PRESETS["flights"])
    assert len(batch) == 2000 == file_size_hint(FIXTURE)
    assert batch.tag_is_time
    assert batch.tags[0] == datetime(2001, 1, 1, 0, 1, tzinfo=UTC).timestamp()
    assert set(batch.columns) == {"delay", "distance", "origin", "destination"}
    types = batch.types()
    # hand-checked rows: (index, delay, type)
    for i, delay, kind in [(0, 33, "late"), (1, 19, "late"), (2, 14, "ontime"),
                           (3, -13, "early"), (4, 1, "ontime"), (11, 105, "verylate"),
                           (14, 0, "ontime"), (66, 60, "verylate"), (103, -1, "early"),
                           (213, 15, "late")]:
        assert batch.columns["delay"][i] == delay
        assert types[i] == kind, (i, delay)
    expected = ["early" if d < 0 else "ontime" if d < 15 else "late" if d < 60 else "verylate"
                for d in batch.columns["delay"]]
    assert list(types) == expected
    assert list(batch.columns["origin"][:3]) == ["LAS", "ATL", "MCI"]
    assert batch.columns["distance"][0] == 2176


def test_flights_preset_in_small_batches_matches_one_batch():
    spec = EventSpec.load("flights")
    batches = list(read_events(FIXTURE, spec, batch_size=300))
    assert [b.position for b in batches] == list(range(0, 2000, 300))
    assert_same_events(EventBatch.concat(batches), read_all(FIXTURE, spec))


def test_flights_spec_from_dict_and_file(tmp_path):
    d = {"tag": "date",
         "type": {"column": "delay", "bins": ["-inf", 0, 15, 60, "inf"],
                  "labels": ["early", "ontime", "late", "verylate"]},
         "attributes": ["delay", "distance", "origin", "destination"]}
    assert EventSpec.from_dict(d) == PRESETS["flights"]
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(d))
    assert EventSpec.load(str(path)) == PRESETS["flights"]
    assert EventSpec.from_dict({"tag": None}) == EventSpec(tag=None)


def test_type_classes_bounds_are_half_open(tmp_path):
    delays = [-1000, -1, 0, 14.9, 15, 59, 60, 10**6]
    rows = [{"date": "2001-01-01T00:00:00", "delay": d, "distance": 1, "origin": "A",
             "destination": "B"} for d in delays]
    batch = read_all(write(tmp_path / "f.jsonl", rows), PRESETS["flights"])
    assert list(batch.types()) == ["early", "early", "ontime", "ontime", "late", "late",
                                   "verylate", "verylate"]


@pytest.mark.parametrize("bad", [
    {"column": "d", "bins": [0, 1], "labels": ["a", "b"]},  # too few bins
    {"column": "d", "bins": [0, 2, 1], "labels": ["a", "b"]},  # not increasing
    {"column": "d", "bins": ["zero", 1], "labels": ["a"]},
    {"column": "d", "bins": [0, 1]},
])
def test_bad_type_classes_are_refused(bad):
    with pytest.raises(ValueError, match="bin|label|type classes"):
        EventSpec.from_dict({"type": bad})


def test_unknown_spec_key_unknown_preset_and_broken_file(tmp_path):
    with pytest.raises(ValueError, match="unknown keys"):
        EventSpec.from_dict({"tags": "t"})
    with pytest.raises(ValueError, match="neither a file nor a preset.*flights"):
        EventSpec.load("no-such-spec")
    broken = tmp_path / "spec.json"
    broken.write_text("{")
    with pytest.raises(ValueError, match=f"event spec {broken}"):
        EventSpec.load(str(broken))


# --------------------------------------------------------------------------- bad events

JSONL_BAD = [
    ('{"type": "a", "t": 1', None, "not valid JSON"),
    ('[1, 2]', None, "not an object (list)"),
    ('{"t": 3}', "type", "type is missing"),
    ('{"type": "", "t": 3}', "type", "type is missing"),
    ('{"type": ["a"], "t": 3}', "type", "type is not a string"),
    ('{"type": "a"}', "t", "tag is missing"),
    ('{"type": "a", "t": "abc"}', "t", "'abc'"),
    ('{"type": "a", "t": true}', "t", "not a number"),
    ('{"type": "a", "t": NaN}', "t", "not a finite number"),
    ('{"type": "a", "t": "2001-01-01T00:00:00"}', "t", "earlier tags, which are numbers"),
]


@pytest.mark.parametrize("text, field, reason", JSONL_BAD)
def test_bad_jsonl_line_names_file_line_and_field(tmp_path, text, field, reason):
    path = tmp_path / "events.jsonl"
    path.write_text('{"type": "a", "t": 1}\n\n{"type": "b", "t": 2}\n' + text + "\n")
    with pytest.raises(EventError) as info:
        read_all(path)
    err = info.value
    assert (err.source, err.line, err.field, err.position) == (str(path), 4, field, 2)
    assert str(err).startswith(f"{path}, line 4")
    assert reason in str(err)
    if field:
        assert f"field '{field}'" in str(err)


def test_error_message_format():
    err = EventError("tag is not a number ('abc')", "events.jsonl", 12, "t", 7)
    assert str(err) == "events.jsonl, line 12, field 't': tag is not a number ('abc')"
    assert isinstance(err, ValueError)
    assert str(EventError("tag is missing", "f.parquet", None, "date", 5)) == \
        "f.parquet, event 5, field 'date': tag is missing"


def test_error_yields_the_good_rows_before_it(tmp_path):
    rows = [{"type": "a", "t": i} for i in range(5)] + [{"t": 5}] + \
        [{"type": "a", "t": i} for i in range(6, 9)]
    got = []
    with pytest.raises(EventError) as info:
        for batch in read_events(write(tmp_path / "ev.jsonl", rows), batch_size=4):
            got.append(batch)
    assert [len(b) for b in got] == [4, 1]
    assert list(EventBatch.concat(got).tags) == [0, 1, 2, 3, 4]
    assert (info.value.position, info.value.line, info.value.field) == (5, 6, "type")


def test_skip_mode_counts_bad_events_and_keeps_the_rest(tmp_path):
    path = tmp_path / "ev.jsonl"
    lines = [json.dumps({"type": "a", "t": 1}), "not json", json.dumps({"type": "b", "t": 2}),
             json.dumps({"type": "b", "t": "x"}), json.dumps({"type": "b"}),
             json.dumps({"type": "c", "t": 3})]
    path.write_text("\n".join(lines) + "\n")
    bad: list = []
    batches = list(read_events(path, batch_size=2, on_bad_event="skip", bad_events=bad))
    whole = EventBatch.concat(batches)
    assert list(whole.types()) == ["a", "b", "c"]
    assert list(whole.lines) == [1, 3, 6]
    assert [b.position for b in batches] == [0, 1, 2]  # continuous over accepted events
    assert [(p, line) for p, line, _ in bad] == [(1, 2), (2, 4), (2, 5)]
    assert "line 4, field 't'" in bad[1][2] and "tag is missing" in bad[2][2]
    assert len(list(read_events(path, on_bad_event="skip"))[0]) == 3  # list is optional


def test_bad_csv_rows_name_their_lines(tmp_path):
    path = tmp_path / "ev.csv"
    path.write_text("type,t,v\na,1,2\n,2,3\nb,abc,4\nc,4,5\n")
    with pytest.raises(EventError) as info:
        read_all(path)
    assert (info.value.line, info.value.field, info.value.position) == (3, "type", 1)
    assert str(info.value).startswith(f"{path}, line 3, field 'type'")
    bad: list = []
    batch = read_all(path, on_bad_event="skip", bad_events=bad)
    assert list(batch.types()) == ["a", "c"] and list(batch.lines) == [2, 5]
    assert [(p, line) for p, line, _ in bad] == [(1, 3), (1, 4)]
    assert "'abc'" in bad[1][2]


def test_malformed_csv_is_an_error_after_the_rows_before_it(tmp_path):
    path = tmp_path / "ev.csv"
    path.write_text("type,t,v\na,1,2\nb,2\n")
    with pytest.raises(EventError, match="Expected 3 columns, got 2"):
        read_all(path, on_bad_event="skip")


def test_a_value_past_the_rows_types_are_inferred_from_is_one_value_not_the_end(tmp_path):
    """pyarrow infers a CSV column's type from about its first megabyte; a later value that
    does not fit it used to end the read. Now the rest is read all the same: its numbers
    stay numbers, the value stays text, and each row keeps its line."""
    n = 200_000
    path = tmp_path / "late.csv"
    path.write_text("type,t,v,note\n" + "".join(f"a,{i},{i % 7},{i}\n" for i in range(n))
                    + f"a,{n},x,oops\nb,{n + 1},3,{n + 1}\n")
    batch = read_all(path)
    assert len(batch) == n + 2 and list(batch.lines[-3:]) == [n + 1, n + 2, n + 3]
    v, note = batch.columns["v"].tolist(), batch.columns["note"].tolist()
    assert v[:n] == [i % 7 for i in range(n)] and v[n:] == ["x", 3]
    assert note[n - 1:] == [n - 1, "oops", n + 1]
    assert list(batch.tags[-2:]) == [n, n + 1]


def test_a_late_value_that_is_no_number_is_one_bad_event_for_acep_match(tmp_path, capsys):
    from acep.cli import main

    n = 200_000
    rows = "".join(f"{'ab'[i % 2]},{i},{i % 7}\n" for i in range(n))
    good, late = tmp_path / "good.csv", tmp_path / "late.csv"
    good.write_text("type,t,v\n" + rows)
    late.write_text("type,t,v\n" + rows + f"b,{n},oops\n")
    argv = ["match", "-p", "a b", "-w", "1", "--where", "b.v > a.v", "--no-progress"]
    assert main([*argv, str(good)]) == 0
    expected = capsys.readouterr().out
    assert main([*argv, "--on-bad-event", "skip", str(late)]) == 0
    out, err = capsys.readouterr()
    assert out == expected and expected.count("\n") > 1000
    assert main([*argv, str(late)]) == 1
    out, err = capsys.readouterr()
    assert out == expected and f"{late}, line {n + 2}, field 'v'" in err and "'oops'" in err


def test_bad_parquet_rows_name_their_position(tmp_path):
    rows = [{"type": "a", "t": 1.0}, {"type": "b", "t": None}, {"type": None, "t": 3.0},
            {"type": "a", "t": float("nan")}, {"type": "c", "t": 5.0}]
    path = write(tmp_path / "ev.parquet", rows)
    with pytest.raises(EventError) as info:
        read_all(path)
    assert (info.value.field, info.value.position, info.value.line) == ("t", 1, None)
    assert str(info.value) == f"{path}, event 1, field 't': tag is missing"
    bad: list = []
    batch = read_all(path, on_bad_event="skip", bad_events=bad)
    assert list(batch.types()) == ["a", "c"] and batch.type_names == ["a", "c"]
    assert [(p, field_of(r)) for p, _, r in bad] == [(1, "t"), (1, "type"), (1, "t")]
    assert "not a finite number (nan)" in bad[2][2]


def field_of(reason: str) -> str:
    return reason.split("field '")[1].split("'")[0]


def test_class_value_out_of_range_or_missing_is_bad(tmp_path):
    spec = EventSpec(tag="t", type=TypeClasses("delay", (0, 10), ("small",)))
    path = write(tmp_path / "ev.jsonl", [{"t": 1, "delay": 3}, {"t": 2, "delay": 10},
                                         {"t": 3}, {"t": 4, "delay": "x"}, {"t": 5, "delay": 0}])
    with pytest.raises(EventError) as info:
        read_all(path, spec)
    assert (info.value.line, info.value.field) == (2, "delay")
    assert "value 10 is outside the type classes [0, 10)" in str(info.value)
    bad: list = []
    batch = read_all(path, spec, on_bad_event="skip", bad_events=bad)
    assert list(batch.tags) == [1, 5] and list(batch.types()) == ["small", "small"]
    assert ["missing" in r for _, _, r in bad] == [False, True, False]
    assert "not a number ('x')" in bad[2][2]
    # the same from Parquet, vectorised
    pq_path = write(tmp_path / "ev.parquet", [{"t": 1, "delay": 3}, {"t": 2, "delay": -1},
                                              {"t": 3, "delay": None}])
    bad = []
    assert len(read_all(pq_path, spec, on_bad_event="skip", bad_events=bad)) == 1
    assert [field_of(r) for _, _, r in bad] == ["delay", "delay"]


def test_bad_msgpack_record_and_stream(tmp_path):
    path = tmp_path / "ev.msgpack"
    path.write_bytes(msgpack.packb({"type": "a", "t": 1}) + msgpack.packb([1, 2]))
    with pytest.raises(EventError, match=r"ev.msgpack, event 1: record is not an object"):
        read_all(path)
    first = msgpack.packb({"type": "a", "t": 1})
    path.write_bytes(first + msgpack.packb({"type": "b"})[:-2])
    with pytest.raises(EventError, match=f"truncated msgpack data after byte {len(first)}"):
        read_all(path, on_bad_event="skip")
    path.write_bytes(msgpack.packb({"type": "a", "t": 1}) + b"\xc1")
    got = []
    with pytest.raises(EventError, match="undecodable msgpack data"):
        got.extend(read_events(path))
    assert len(got) == 1


def test_a_record_over_a_limit_is_one_bad_event(tmp_path, monkeypatch):
    """A line nested 1,500 deep raised RecursionError, ``on_bad_event="skip"`` included."""
    deep = '{"type": "a", "t": 2, "v": ' + "[" * 1500 + "]" * 1500 + "}"
    long = json.dumps({"type": "a", "t": 3, "v": "x" * 6000})
    path = tmp_path / "ev.jsonl"
    path.write_text(f'{{"type": "a", "t": 1}}\n{deep}\n{long}\n{{"type": "b", "t": 4}}\n')
    monkeypatch.setattr("acep._bounds.MAX_LINE_BYTES", 5000)
    with pytest.raises(EventError, match=r"ev.jsonl, line 2: nested deeper than the limit"):
        read_all(path)
    bad: list = []
    assert list(read_all(path, on_bad_event="skip", bad_events=bad).tags) == [1, 4]
    assert [line for _, line, _ in bad] == [2, 3]
    assert "line is longer than the limit of 5000 bytes" in bad[1][2]


def test_a_msgpack_record_nested_too_deep_is_a_bad_event(tmp_path):
    def record(depth: int) -> bytes:
        return (b"\x83" + b"".join(map(msgpack.packb, ["type", "a", "t", 2, "v"]))
                + b"\x91" * depth + b"\x90")

    path = tmp_path / "ev.msgpack"
    ends = msgpack.packb({"type": "a", "t": 1}), msgpack.packb({"type": "b", "t": 3})
    path.write_bytes(ends[0] + record(500) + ends[1])
    bad: list = []
    assert list(read_all(path, on_bad_event="skip", bad_events=bad).tags) == [1, 3]
    assert "event 1: nested deeper than the limit of 64 levels" in bad[0][2]
    path.write_bytes(ends[0] + record(3000) + ends[1])
    with pytest.raises(EventError, match="nested too deep to decode after byte 11"):
        read_all(path, on_bad_event="skip")


@pytest.mark.parametrize("text", ['{"type": "a", "t": 1}\n', '[{"type": "a", "t": 1}]'])
def test_json_text_named_msgpack_is_said_to_be_json(tmp_path, text):
    """JSON's first byte reads as a msgpack integer (123 for '{'): without a word about it
    the file would be 'event 0: record is not an object (int)'."""
    path = tmp_path / "ev.msgpack"
    path.write_text(text)
    for skip in ("error", "skip"):
        with pytest.raises(EventError) as info:
            read_all(path, on_bad_event=skip)
        assert str(info.value) == f"{path}: JSON text, not msgpack (it starts with " \
                                  f"'{text[0]}'); a JSON Lines file's name ends in .jsonl"


def test_a_directory_is_said_to_be_one(tmp_path):
    for name in ("events", "events.jsonl", "events.parquet"):
        (tmp_path / name).mkdir()
        with pytest.raises(EventError, match="a directory, not a file of events"):
            read_all(tmp_path / name)


def test_unknown_extension_and_missing_file(tmp_path):
    with pytest.raises(EventError) as info:
        read_events(tmp_path / "ev.xml")
    assert str(tmp_path / "ev.xml") in str(info.value)
    assert ".jsonl" in str(info.value) and ".parquet" in str(info.value)
    with pytest.raises(EventError, match="no such file"):
        read_events(tmp_path / "nothere.jsonl")


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_missing_columns_are_named(tmp_path, fmt):
    path = write(tmp_path / f"ev.{fmt}", [{"type": "a", "t": 1, "v": 2}])
    with pytest.raises(EventError) as info:
        read_events(path, EventSpec(attributes=("v", "w")))
    assert info.value.field == "w" and "columns: type, t, v" in str(info.value)
    with pytest.raises(EventError) as info:
        read_events(path, EventSpec(tag="date"))
    assert info.value.field == "date"


def test_bad_options_are_refused(tmp_path):
    path = write(tmp_path / "ev.jsonl", ROWS)
    with pytest.raises(ValueError, match="on_bad_event"):
        read_events(path, on_bad_event="ignore")
    with pytest.raises(ValueError, match="batch_size"):
        read_events(path, batch_size=0)


# --------------------------------------------------------------------------- the row API


def test_from_events_and_to_events_round_trip():
    events = [Event("a", 1.0, {"price": 2.5, "t": 9.0}), {"type": "b", "t": 2, "price": 3},
              Event("a", 3.0)]
    batch = EventBatch.from_events(events, position=10, source="api")
    assert batch.position == 10 and list(batch.types()) == ["a", "b", "a"]
    assert set(batch.columns) == {"price", "t"}  # an Event's attributes may be named "t"
    assert batch.to_events() == [Event("a", 1.0, {"price": 2.5, "t": 9.0}),
                                 Event("b", 2.0, {"price": 3.0}), Event("a", 3.0, {})]
    assert_same_events(EventBatch.from_events(batch.to_events()), batch)


def test_from_events_refuses_a_bad_event():
    with pytest.raises(EventError) as info:
        EventBatch.from_events([{"type": "a", "t": 1}, {"type": "a", "t": "later"}],
                               position=5, source="api")
    assert (info.value.source, info.value.position, info.value.field) == ("api", 6, "t")
    assert len(EventBatch.from_events([])) == 0


def test_concat_merges_type_names_and_promotes_columns():
    a = EventBatch.from_events([{"type": "x", "t": 1, "v": 1.5, "n": 1}])
    b = EventBatch.from_events([{"type": "y", "t": 2, "v": "hi"}, {"type": "x", "t": 3}],
                               position=1)
    c = EventBatch.concat([a, b])
    assert c.type_names == ["x", "y"] and list(c.types()) == ["x", "y", "x"]
    assert list(c.columns["v"]) == [1.5, "hi", None]  # numbers stay numbers
    np.testing.assert_array_equal(c.columns["n"], [1, np.nan, np.nan])
    assert c.position == 0 and len(EventBatch.concat([])) == 0


def test_mixed_value_kinds_in_one_column_keep_each_value_kind(tmp_path):
    rows = [{"type": "a", "t": 1, "id": 7}, {"type": "a", "t": 2, "id": "b7"},
            {"type": "a", "t": 3, "flag": True}, {"type": "a", "t": 4, "id": 2.5}]
    batch = read_all(write(tmp_path / "ev.jsonl", rows))
    values = list(batch.columns["id"])
    assert values == [7, "b7", None, 2.5] and type(values[0]) is int
    np.testing.assert_array_equal(batch.columns["flag"], [np.nan, np.nan, 1.0, np.nan])


def test_integers_beyond_2_53_stay_exact(tmp_path):
    rows = [{"type": "a", "t": 1, "id": 12345678901234567},
            {"type": "a", "t": 2, "id": 12345678901234568}, {"type": "a", "t": 3, "id": 5}]
    batch = read_all(write(tmp_path / "ev.jsonl", rows))
    assert batch.columns["id"].tolist() == [12345678901234567, 12345678901234568, 5]


@pytest.mark.parametrize("ext", [".parquet", ".csv"])
def test_an_int64_column_beyond_2_53_is_read_exactly_not_refused(tmp_path, ext):
    big = 1234567890123456789
    rows = [{"type": "a", "t": 1, "id": big, "n": 1}, {"type": "a", "t": 2, "id": big + 1,
                                                       "n": 2}]
    batch = read_all(write(tmp_path / f"ev{ext}", rows))
    assert batch.columns["id"].tolist() == [big, big + 1]
    assert batch.columns["n"].dtype == np.float64  # small integers stay float64


def test_stdin_is_json_lines(monkeypatch):
    data = b'{"type": "a", "t": 1}\n{"type": "b", "t": 2}\n'
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    batch = read_all("-")
    assert list(batch.types()) == ["a", "b"] and batch.source == "<stdin>"


def test_file_size_hint(tmp_path):
    assert file_size_hint(write(tmp_path / "ev.parquet", ROWS)) == 4
    assert file_size_hint(write(tmp_path / "ev.jsonl", ROWS)) is None
    assert file_size_hint(tmp_path / "missing.parquet") is None


def test_empty_file_gives_an_empty_batch(tmp_path):
    path = tmp_path / "ev.jsonl"
    path.write_text("\n")
    assert list(read_events(path)) == []
    batch = read_all(path)
    assert len(batch) == 0 and batch.source == str(path)


def test_slice_keeps_positions_lines_and_columns():
    batch = EventBatch.from_events([{"type": "a", "t": i, "x": i * 2} for i in range(10)],
                                   position=100)
    part = batch.slice(3, 7)
    assert len(part) == 4 and part.position == 103
    assert part.tags.tolist() == [3, 4, 5, 6]
    assert part.columns["x"].tolist() == [6, 8, 10, 12]
    assert [e.t for e in part.to_events()] == [3, 4, 5, 6]
    assert len(batch.slice(8, 50)) == 2


def test_a_spec_attribute_written_as_one_string_is_one_attribute(tmp_path):
    spec = EventSpec.from_dict({"attributes": "price"})
    assert spec.attributes == ("price",)
    batch = read_all(write(tmp_path / "ev.jsonl", [{"type": "a", "t": 1, "price": 3}]), spec)
    assert list(batch.columns) == ["price"]
    with pytest.raises(ValueError, match="attributes must be a list"):
        EventSpec.from_dict({"attributes": 5})
