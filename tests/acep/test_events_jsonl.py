"""The compiled JSON Lines reader (``acep/events/_jsonl.pyx``) against the pure-Python one.

Each test reads the same real file (or rows) twice, once with the compiled reader and once
with ``rows._compiled`` set to None, which is how a machine without the compiled module
reads, and asserts the same batches, bad events and errors."""

from __future__ import annotations

import json
import os
from datetime import datetime

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.jsonl_lines import KEYS, SPECS, line, shown, values

from acep.events import (
    PRESETS,
    EventBatch,
    EventError,
    EventSpec,
    read_events,
    reading,
    rows,
)
from acep.events import values as values_module


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


_STAMPS = st.builds(
    lambda when, digits, sep, tail: when.isoformat(timespec="seconds")
    + (sep + f"{when.microsecond:06d}{when.microsecond % 7}"[:digits] if digits else "") + tail,
    st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31, 23, 59, 59)),
    st.integers(0, 8), st.sampled_from([".", ".", ".", ","]), st.sampled_from(["", "", "Z"]))


@needs_compiled
@settings(max_examples=500, deadline=None)
@given(st.lists(st.one_of(_STAMPS, st.sampled_from(["2023-02-29T00:00:00.5", "x", "1.5",
                                                      "2023-01-01T24:00:00.1"])), max_size=6))
def test_iso_tags_with_fractions_read_to_the_same_float_as_python(texts):
    """The compiled reader parses YYYY-MM-DDTHH:MM:SS with up to six fraction digits in C;
    every tag (or its refusal) is Python's ``datetime.timestamp`` to the bit."""
    got = rows._compiled.tags_from_values(list(texts), values_module._TagKind())
    want = values_module._tags_from_values(list(texts), values_module._TagKind())
    assert got[0].tobytes() == want[0].tobytes() and got[1] == want[1]
