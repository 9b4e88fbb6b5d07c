"""The JSON Lines readers decode with orjson when it is installed and with the standard
library when not: both paths must accept the same lines, read the same values and give the
same errors (file, line, field, reason), in ``read_events`` and in the agent's reader."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from acep import _jsonread
from acep._bounds import MAX_DEPTH
from acep.events import EventError, read_events
from edge.agent.sources import parse_line, parse_lines

orjson = pytest.importorskip("orjson")  # the test extra installs it: CI runs both paths


def _both(fn):
    """fn() with orjson and with the standard library alone (as on a device without
    orjson): (value or error text) each."""
    out = []
    try:
        for module in (orjson, None):
            _jsonread._orjson = module
            try:
                out.append(("ok", repr(fn())))
            except (ValueError, EventError) as exc:
                out.append((type(exc).__name__, str(exc)))
    finally:
        _jsonread._orjson = orjson
    return out


scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(-2**65, 2**65),
    st.sampled_from([2**63, -2**63 - 1, 2**64, 2**64 - 1, -2**63, 10**30]),
    st.floats(), st.sampled_from([1e19, -1e19, 9.3e18, 5e-324, 1.7976931348623157e308]),
    st.text(), st.text(st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), max_size=2))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(st.text(max_size=4), inner, max_size=4), max_leaves=12)


def _dumps(value, ascii_only: bool) -> bytes:
    text = json.dumps(value, ensure_ascii=ascii_only)
    return text.encode("utf-8", "surrogatepass")


@st.composite
def lines(draw) -> bytes:
    """Good lines (any JSON value, NaN, big ints, lone surrogates, duplicate keys, a BOM) and
    bad ones (cut, spliced, stray bytes)."""
    raw = _dumps(draw(values), draw(st.booleans()))
    how = draw(st.sampled_from(["good", "dup", "bom", "cut", "insert", "bytes"]))
    if how == "dup" and raw.startswith(b"{") and raw != b"{}":
        raw = raw[:-1] + b", " + raw[1:]  # every key twice: the last value wins
    elif how == "bom":
        raw = b"\xef\xbb\xbf" + raw
    elif how == "cut":
        raw = raw[:draw(st.integers(0, len(raw)))]
    elif how == "insert":
        at = draw(st.integers(0, len(raw)))
        raw = raw[:at] + draw(st.binary(min_size=1, max_size=3)) + raw[at:]
    elif how == "bytes":
        raw = draw(st.binary(max_size=12))
    return raw


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=lines())
def test_orjson_and_json_read_the_same_values_and_errors(raw):
    fast, plain = _both(lambda: _jsonread.loads(raw))
    assert fast == plain
    text = raw.decode("utf-8", "surrogateescape")  # a str text too (parse_line takes one)
    fast, plain = _both(lambda: _jsonread.loads(text))
    assert fast == plain


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=st.lists(st.one_of(lines(), st.builds(
    lambda t, v: json.dumps({"type": t, "t": v}).encode(), st.sampled_from("ab"),
    st.one_of(st.integers(0, 9), st.floats(), st.just(2**64)))), min_size=1, max_size=8))
def test_read_events_gives_the_same_events_and_errors_on_both_paths(rows, tmp_path_factory):
    path = tmp_path_factory.mktemp("lines") / "events.jsonl"
    path.write_bytes(b"\n".join(r.replace(b"\n", b" ") for r in rows) + b"\n")

    def read(on_bad_event):
        skipped: list = []
        batches = list(read_events(path, on_bad_event=on_bad_event,
                                   bad_events=skipped if on_bad_event == "skip" else None))
        return [(e.type, e.t, sorted(e.attrs.items(), key=repr)) for b in batches
                for e in b.to_events()], skipped

    for mode in ("error", "skip"):
        fast, plain = _both(lambda m=mode: read(m))
        assert fast == plain


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=st.lists(lines(), min_size=1, max_size=6))
def test_the_agents_reader_gives_the_same_events_on_both_paths(rows):
    rows = [r.replace(b"\n", b" ") + b"\n" for r in rows]
    fast, plain = _both(lambda: parse_lines(rows))
    assert fast == plain
    for r in rows:
        fast, plain = _both(lambda r=r: parse_line(r))
        assert fast == plain


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 254, 255, 300, 5000])
def test_the_depth_bound_is_checked_before_orjson_on_both_paths(depth, tmp_path):
    """orjson has a depth limit of its own (254): the reader's 64 levels come first, with
    the same message on both paths, and the agent refuses the line too."""
    deep = b'{"type": "a", "t": 1, "x": ' + b"[" * (depth - 1) + b"]" * (depth - 1) + b"}"
    path = tmp_path / "deep.jsonl"
    path.write_bytes(b'{"type": "a", "t": 0}\n' + deep + b"\n")
    fast, plain = _both(lambda: list(read_events(path)))
    assert fast == plain
    assert fast[0] == "EventError" and f"limit of {MAX_DEPTH} levels" in fast[1]
    assert "line 2" in fast[1]
    assert _both(lambda: parse_lines([deep])) == [("ok", "[None]")] * 2


def test_what_orjson_reads_differently_is_read_as_json_reads_it():
    """NaN and Infinity, integers beyond 64 bits (an id stays exact), numbers beyond a
    double, lone surrogates and a byte order mark: json's values."""
    raw = (b'\xef\xbb\xbf{"a": NaN, "b": -Infinity, "id": 18446744073709551617, '
           b'"n": -9223372036854775809, "big": 1e400, "s": "\\ud800", "a": 2}')
    value = _jsonread.loads(raw)
    assert value["id"] == 18446744073709551617 and type(value["id"]) is int
    assert value["n"] == -9223372036854775809 and value["big"] == math.inf
    assert value["b"] == -math.inf and value["s"] == "\ud800" and value["a"] == 2
    assert list(value) == ["a", "b", "id", "n", "big", "s"]
    assert _jsonread.loads(b'{"id": 18446744073709551617}') == {"id": 18446744073709551617}
    assert type(_jsonread.loads(b"[1e19]")[0]) is float
    assert np.isnan(_jsonread.loads(b"NaN"))


def test_a_bad_line_names_file_line_and_json_s_reason(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b'{"type": "a", "t": 0}\n{"type": "a", "t": 1,}\n')
    with pytest.raises(EventError) as info:
        list(read_events(path))
    assert str(info.value).startswith(f"{path}, line 2")
    assert "line is not valid JSON (Expecting property name enclosed in double quotes" \
        in str(info.value)


def test_a_device_without_orjson_reads_json_lines(tmp_path):
    """The device needs only numpy and msgpack: with orjson missing, the reader is json's."""
    path = tmp_path / "events.jsonl"
    path.write_text('{"type": "a", "t": 1, "id": 18446744073709551617}\n')
    code = ("import sys; sys.modules['orjson'] = None\n"
            "from acep import _jsonread; from acep.events import read_all\n"
            f"b = read_all({str(path)!r}); assert not _jsonread.fast()\n"
            "print(b.to_events()[0].attrs['id'])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "18446744073709551617"


def test_the_test_extra_runs_the_orjson_path():
    project = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    extras = project["project"]["optional-dependencies"]
    assert [d for d in extras["test"] if d.startswith("orjson")] == extras["fast"]


def test_the_garbage_collector_is_on_while_the_caller_works_and_after_an_error(tmp_path):
    """The reader pauses the cyclic collector while it decodes a chunk, never beyond: the
    caller's own code between batches, and after a bad line, runs with it on."""
    import gc

    path = tmp_path / "events.jsonl"
    path.write_text("".join(f'{{"type": "a", "t": {i}}}\n' for i in range(10)) + "{bad\n")
    seen = []
    with pytest.raises(EventError, match="line 11"):
        for _ in read_events(path, batch_size=3):
            seen.append(gc.isenabled())
    assert seen == [True] * 4 and gc.isenabled()
    gc.disable()  # a program that turned it off keeps it off
    try:
        list(read_events(path, batch_size=3, on_bad_event="skip"))
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_repeated_tag_texts_read_alike_and_repeated_bad_ones_are_each_named(tmp_path):
    """A timestamp's text is parsed once per chunk: events that share it get the same tag,
    and each event with a bad tag text is still reported with its own line."""
    path = tmp_path / "events.jsonl"
    rows = ['{"type": "a", "t": "2001-01-01T00:01:00"}', '{"type": "a", "t": "soon"}',
            '{"type": "a", "t": "2001-01-01T00:01:00"}', '{"type": "a", "t": "soon"}',
            '{"type": "a", "t": "2001-01-01T00:01:00Z"}', '{"type": "a", "t": "60"}']
    path.write_text("\n".join(rows) + "\n")
    bad: list = []
    batch = list(read_events(path, on_bad_event="skip", bad_events=bad))[0]
    assert batch.tags.tolist() == [978307260.0] * 3
    assert [(line, reason) for _, line, reason in bad] == [
        (2, f"{path}, line 2, field 't': tag is not a number or ISO 8601 timestamp ('soon')"),
        (4, f"{path}, line 4, field 't': tag is not a number or ISO 8601 timestamp ('soon')"),
        (6, f"{path}, line 6, field 't': tag '60' does not match the earlier tags, which are "
            "timestamps")]


def test_the_collector_stays_on_while_a_live_stdin_is_waited_for(monkeypatch):
    """A live pipe (``tail -f | acep match -``) may keep the reader waiting for hours: the
    collector is never paused for the wait."""
    import gc
    import io
    import os
    import threading
    import time

    read_end, write_end = os.pipe()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(os.fdopen(read_end, "rb")))
    during_wait = []

    def write():
        os.write(write_end, b'{"type": "a", "t": 1}\n')
        time.sleep(0.6)  # the reader has handed on the first line and waits for more
        during_wait.append(gc.isenabled())
        os.write(write_end, b'{"type": "a", "t": 2}\n')
        os.close(write_end)

    writer = threading.Thread(target=write)
    writer.start()
    tags = [float(t) for b in read_events("-") for t in b.tags]
    writer.join()
    assert tags == [1.0, 2.0] and during_wait == [True]
