"""The compiled JSON Lines reader (``acep/events/_jsonl.pyx``) against the pure-Python one.

Each test reads the same real file (or rows) twice, once with the compiled reader and once
with ``rows._compiled`` set to None, which is how a machine without the compiled module
reads, and asserts the same batches, bad events and errors."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from acep.events import (
    PRESETS,
    EventBatch,
    EventError,
    EventSpec,
    TypeClasses,
    read_events,
    reading,
    rows,
)

SPECS = [
    EventSpec(),
    PRESETS["flights"],
    EventSpec(tag=None, type="kind"),
    EventSpec(tag="t", type=TypeClasses("x", (-math.inf, 0, 10, math.inf), ("lo", "mid", "hi"))),
    EventSpec(tag="t", type="type", attributes=("x", "é", "t", "")),
    EventSpec(tag="t", type=TypeClasses("x", (0, 5), ("in",)), attributes=("x", "y")),
]
KEYS = ["t", "type", "kind", "x", "y", "é", "", "date", "delay", "origin"]
NUMBER_TEXTS = ["0", "-0", "-0.0", "1", "12", "1.5", "1e3", "1E400", "-1e400", "1e-400",
                "123456789012345678", "1234567890123456789", "-9007199254740993",
                "9007199254740992", "9007199254740993", "18446744073709551616", "0.1e+5",
                "2.5E-3", "01", "1.", ".5", "+1", "-", "2e", "1e+", "-01", "0x1", "1_0",
                "NaN", "Infinity", "-Infinity", "tru", "nul", "True"]
ISO = ["2001-01-01T00:01:00", "2001-01-01 00:01:00Z", "2001-01-01T00:01:00.5+02:00",
       "2001-13-01", "1e3", " 7 ", "x", "2000-02-29T23:59:59", "2001-02-29T00:00:00",
       "1900-02-29T00:00:00", "2001-04-31T00:00:00", "2001-01-01T24:00:00",
       "2001-01-01T23:60:00", "2001-01-01T00:00:60", "0000-01-01T00:00:00",
       "0001-01-01T00:00:00", "9999-12-31T23:59:59", "2001-00-10T00:00:00",
       "2001-01-0aT00:00:00", "2001-01-01t00:00:00", "\ud800001-01-01T00:00:00",
       "2001-01-01T00:00:00\u0660"]
STAMPS = st.datetimes().map(lambda d: d.isoformat(timespec="seconds"))
BAD_LINES = [b"{", b"}", b"[1]", b'"x"', b"7", b"null", b'{"a":}', b'{"a" 1}', b'{"a":1,}',
             b'{,"a":1}', b'{"a":1}}', b'{"a":1} x', b'{"a":[1,{"b":2}]}', b'{"a":{}}',
             b'\xef\xbb\xbf{"type":"a","t":1}', b'{"type":"\xff","t":1}',
             b'{"type":"\xed\xa0\x80","t":1}', b'{"ty\xc3\xa9pe":"a"}', b'{"\xff":1}',
             b'{"type":"a\tb","t":1}', b'{"type":"a\\u00e9","t":1}', b'{"a\\"b":1}',
             b'{"t":1,"type":"a","deep":' + b"[" * 70 + b"]" * 70 + b"}", b"\x00",
             b'{"type":"a","t":1}\r', b'\x0c{"type":"a","t":2}', b"\x0b \t",
             b'{"type":"a","t":"2001-01-01T00:00:00"}\x00']


def values():
    """JSON values a record may hold: every kind, numbers near and beyond 2**53."""
    big = st.integers(-2**70, 2**70)
    near = st.integers(-3, 3).map(lambda d: 2**53 + d) | st.integers(-3, 3).map(
        lambda d: -2**53 + d)
    floats = st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from([0.5, -0.0, 1e300])
    text = st.text(max_size=6) | st.sampled_from(ISO + ["lo", "hi", "", "a", "b"]) | STAMPS
    scalars = (st.none() | st.booleans() | st.integers(-1000, 1000) | near | big | floats
               | text)
    return st.recursive(scalars, lambda inner: st.lists(inner, max_size=2)
                        | st.dictionaries(st.sampled_from(KEYS), inner, max_size=2), max_leaves=3)


@st.composite
def json_line(draw) -> bytes:
    """A record as json.dumps writes it, ASCII or UTF-8, spaced or compact."""
    record = draw(st.dictionaries(st.sampled_from(KEYS), values(), max_size=6))
    if draw(st.booleans()):
        record["t"] = draw(st.sampled_from(ISO) | STAMPS | st.integers(-5, 5)
                           | st.floats(-10, 10))
    seps = draw(st.sampled_from([(",", ":"), (", ", ": "), (" ,\t", " :\r ")]))
    text = json.dumps(record, ensure_ascii=draw(st.booleans()), separators=seps)
    return text.encode("utf-8", "surrogatepass")


@st.composite
def hand_line(draw) -> bytes:
    """A flat object written by hand: raw number texts, repeated keys, odd spacing."""
    ws = st.sampled_from(["", " ", "\t", "\r", "  "])
    pairs = []
    for _ in range(draw(st.integers(0, 5))):
        key = draw(st.sampled_from(KEYS))
        value = draw(st.sampled_from(NUMBER_TEXTS) | st.sampled_from(
            ['"a"', '"b"', '""', "true", "false", "null", '"2001-01-01T00:01:00"', '"é"'])
            | st.sampled_from(ISO).map(json.dumps))
        pairs.append(f'"{key}"{draw(ws)}:{draw(ws)}{value}')
    return f"{draw(ws)}{{{draw(ws)}{','.join(pairs)}{draw(ws)}}}{draw(ws)}".encode()


@st.composite
def line(draw) -> bytes:
    """A good or bad line, or one byte of a good one changed."""
    kind = draw(st.sampled_from(["json", "json", "hand", "hand", "bad", "blank", "mutant"]))
    if kind == "json":
        return draw(json_line())
    if kind == "hand":
        return draw(hand_line())
    if kind == "bad":
        return draw(st.sampled_from(BAD_LINES))
    if kind == "blank":
        return draw(st.sampled_from([b"", b" ", b"\t\r", b"\x0b\x0c "]))
    good = draw(json_line() | hand_line())
    i = draw(st.integers(0, len(good)))
    return good[:i] + bytes([draw(st.integers(0, 255))]) + good[i + 1:]


def read(path, spec, compiled: bool, **kw) -> tuple:
    """What read_events gives: the batches, the bad events, the error it ends with."""
    saved = rows._compiled
    if not compiled:
        rows._compiled = None
    batches, bad, error = [], [], None
    try:
        for batch in read_events(path, spec, bad_events=bad, **kw):
            batches.append(batch)
    except EventError as e:
        error = str(e)
    finally:
        rows._compiled = saved
    return [shown(b) for b in batches], bad, error


def shown(batch: EventBatch) -> tuple:
    """Everything a batch holds, its columns' dtypes and values' types included."""
    columns = [(k, str(c.dtype), [(type(v).__name__, _same_nan(v)) for v in c.tolist()])
               for k, c in batch.columns.items()]
    return (batch.type_codes.dtype.str, batch.type_codes.tolist(), batch.type_names,
            batch.tags.dtype.str, [_same_nan(t) for t in batch.tags.tolist()],
            None if batch.lines is None else (batch.lines.dtype.str, batch.lines.tolist()),
            columns, batch.position, batch.source, batch.tag_is_time, batch.tag_field)


def _same_nan(v):
    return "nan" if isinstance(v, float) and v != v else v


def chunks(path, spec, compiled: bool, batch_size: int) -> list:
    saved = rows._compiled
    if not compiled:
        rows._compiled = None
    try:
        return [(shown(c.events), c.rows.tolist(), c.bad)
                for c in reading.read_chunks(path, spec, batch_size=batch_size)]
    finally:
        rows._compiled = saved


needs_compiled = pytest.mark.skipif(rows._compiled is None, reason="the reader is not built")


def test_compiled_reader_is_built_where_ci_requires_it():
    if os.environ.get("ACEP_REQUIRE_COMPILED"):
        assert rows._compiled is not None


@needs_compiled
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.data_too_large])
@given(st.lists(line(), max_size=12), st.booleans(), st.sampled_from(SPECS),
       st.sampled_from([1, 2, 5, 1000]), st.sampled_from([1, 7, 64, 1 << 20]))
def test_compiled_reader_reads_as_the_python_one(tmp_path_factory, lines, newline_at_end,
                                                spec, batch_size, block):
    path = tmp_path_factory.mktemp("jsonl") / "events.jsonl"
    path.write_bytes(b"\n".join(lines) + (b"\n" if newline_at_end and lines else b""))
    saved = rows._BLOCK
    rows._BLOCK = block
    try:
        for mode in ("error", "skip"):
            kw = {"batch_size": batch_size, "on_bad_event": mode}
            assert read(path, spec, True, **kw) == read(path, spec, False, **kw)
        assert chunks(path, spec, True, batch_size) == chunks(path, spec, False, batch_size)
    finally:
        rows._BLOCK = saved


@needs_compiled
@settings(max_examples=200, deadline=None)
@given(st.lists(st.dictionaries(st.sampled_from(KEYS), values(), max_size=5), max_size=8))
def test_rows_into_columns_as_the_python_code_does(records):
    """EventBatch.from_events (the agent's batches) converts values as before."""
    def build(compiled: bool):
        saved = rows._compiled
        if not compiled:
            rows._compiled = None
        try:
            return shown(EventBatch.from_events(records, 3, "agent"))
        except EventError as e:
            return str(e)
        finally:
            rows._compiled = saved

    assert build(True) == build(False)


def test_flights_lines_read_as_numbers_texts_and_timestamps(tmp_path):
    path = tmp_path / "flights.jsonl"
    path.write_text('{"date": "2001-01-01T00:01:00", "delay": 33, "distance": 2176, '
                    '"origin": "LAS", "destination": "PHL"}\n'
                    '{"date": "2001-01-01T00:02:00", "delay": -3, "distance": 215.5, '
                    '"origin": "ATL", "destination": "SAV"}\n')
    batch = next(read_events(path, PRESETS["flights"]))
    assert batch.types().tolist() == ["late", "early"]
    assert batch.tags.tolist() == [978307260.0, 978307320.0] and batch.tag_is_time
    assert batch.columns["distance"].tolist() == [2176.0, 215.5]
    assert batch.columns["origin"].dtype == object
    assert batch.columns["origin"].tolist() == ["LAS", "ATL"]


@pytest.mark.parametrize("compiled", [True, False])
def test_a_bad_line_is_named_by_file_line_and_field(tmp_path, compiled):
    if compiled and rows._compiled is None:
        pytest.skip("the reader is not built")
    path = tmp_path / "ev.jsonl"
    path.write_bytes(b'{"type": "a", "t": 1, "id": 9007199254740993}\n\n'
                     b'{"type": "b", "t": "noon"}\n{"type": "\xff", "t": 3}\n')
    batches, bad, error = read(path, None, compiled, on_bad_event="skip")
    assert [e[1] for e in bad] == [3, 4]
    assert bad[0][2] == (f"{path}, line 3, field 't': tag is not a number or ISO 8601 "
                         "timestamp ('noon')")
    assert bad[1][2].startswith(f"{path}, line 4: line is not valid JSON ('utf-8' codec")
    assert batches[0][6] == [("id", "object", [("int", 9007199254740993)])]
    assert read(path, None, compiled)[2] == bad[0][2]


@needs_compiled
def test_many_keys_and_a_key_not_read(tmp_path):
    """A line of more keys than the compiled parser holds, and keys the spec leaves out."""
    wide = {"type": "a", "t": 1, **{f"k{i}": i for i in range(80)}}
    path = tmp_path / "wide.jsonl"
    path.write_text(json.dumps(wide) + "\n" + json.dumps({**wide, "t": 2, "k79": "z"}) + "\n")
    for spec in (None, EventSpec(attributes=("k0", "k79"))):
        assert read(path, spec, True) == read(path, spec, False)
    assert np.array_equal(next(read_events(path)).columns["k3"], [3.0, 3.0])
