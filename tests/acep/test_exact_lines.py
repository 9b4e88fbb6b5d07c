"""``acep exact``'s verbose lines in bulk (acep/cli/_exact_lines.py) against the per-match
path (a dict and ``json.dumps`` per match): the same bytes, on random queries and streams
written to real files and run through the real CLI entry."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from support.exact_cases import cases

from acep.cli import main
from acep.cli._exact_lines import _key_texts, verbose_lines
from acep.cli.exact import (
    _exact_engine,
    _ExactPrinter,
    _read_accepted,
    _run_exact_until_bad,
)
from acep.events import EventError, read_all
from acep.nfab import Engine, load_query
from acep.nfab.ast import Strategy
from acep.nfab.core import CoreMatches
from acep.nfab.query.printing import format_query

SETTINGS = settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)
BASE = 1_780_000_000.0  # 2026-05-28: time tags as ISO text, fractional seconds kept


def _write(tmp_path, query, events, time_tags: bool):
    q, e = tmp_path / "q.sase", tmp_path / "e.jsonl"
    q.write_text(format_query(query) + "\n")
    with e.open("w") as out:
        for ev in events:
            t = ev.t
            if time_tags:
                t = datetime.fromtimestamp(BASE + t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")
            out.write(json.dumps({"type": ev.type, "t": t, **ev.attrs}) + "\n")
    return q, e


def _per_match(q, e, engine: str) -> tuple[str, bool]:
    """What the per-match path prints for ``acep exact Q E --engine ENGINE``, and whether
    an error follows."""
    import argparse

    query = load_query(q)
    args = argparse.Namespace(output="verbose", engine=engine, max_entries=1_000_000)
    batch, bad = _read_accepted(str(e), None)
    try:
        _, found, bad = _run_exact_until_bad(_exact_engine(query, args), batch, bad)
    except EventError:
        return "", True
    out = _ExactPrinter(query, batch)
    return "".join(json.dumps(out.match(m)) + "\n" for m in found), bad is not None


def _cli(capsys, *argv) -> tuple[str, int]:
    capsys.readouterr()
    code = main(["exact", *map(str, argv)])
    return capsys.readouterr().out, code


@SETTINGS
@given(
    case=cases(max_size=20),
    time_tags=st.booleans(),
    engine=st.sampled_from(["auto", "runs", "shared", "postpone"]),
)
def test_cli_lines_are_the_per_match_lines(tmp_path_factory, capsys, case, time_tags, engine):
    query, events = case
    if engine == "postpone" and query.strategy is not Strategy.ANY:
        engine = "auto"
    q, e = _write(tmp_path_factory.mktemp("exact"), query, events, time_tags)
    expected, failed = _per_match(q, e, engine)
    out, code = _cli(capsys, q, e, "--engine", engine)
    event(f"matches: {min(out.count(chr(10)), 3)}, error: {failed}")
    assert out == expected
    assert (code != 0) == failed


@SETTINGS
@given(case=cases(max_size=14, wide=True), time_tags=st.booleans())
def test_cli_prints_the_matches_before_a_bad_event_as_the_per_match_path(
    tmp_path_factory, capsys, case, time_tags
):
    """Bad events: tags going back, a missing attribute, text among numbers."""
    query, events = case
    q, e = _write(tmp_path_factory.mktemp("exact"), query, events, time_tags)
    expected, failed = _per_match(q, e, "auto")
    out, code = _cli(capsys, q, e)
    event(f"matches: {min(out.count(chr(10)), 3)}, error: {failed}")
    assert out == expected
    assert (code != 0) == failed


@SETTINGS
@given(case=cases(max_size=16), time_tags=st.booleans(), chunk=st.integers(1, 5))
def test_core_matches_in_chunks_are_the_per_match_lines(tmp_path_factory, case, time_tags, chunk):
    query, events = case
    q, e = _write(tmp_path_factory.mktemp("exact"), query, events, time_tags)
    batch = read_all(e)
    try:
        found = Engine(load_query(q), engine="shared").run(batch)  # no bound: the core
    except EventError:
        return
    event(type(found).__name__)
    out = _ExactPrinter(load_query(q), batch)
    expected = "".join(json.dumps(out.match(m)) + "\n" for m in found)
    lines = verbose_lines(found, out.components, out.tags, out.is_time, chunk=chunk)
    if lines is None:  # RETURN values
        assert query.returns
        return
    assert "".join(lines) == expected


def test_the_core_output_is_read_as_arrays_without_making_matches(tmp_path):
    q = tmp_path / "q.sase"
    q.write_text("PATTERN SEQ(A a, B+ b[ ], A c)\nWHERE skip_till_any_match([k])\nWITHIN 3\n")
    e = tmp_path / "e.jsonl"
    rows = [{"type": "AB"[i % 3 == 1], "t": i * 0.25, "k": i % 2} for i in range(40)]
    e.write_text("".join(json.dumps(r) + "\n" for r in rows))
    batch = read_all(e)
    found = Engine(load_query(q), engine="shared").run(batch)
    assert isinstance(found, CoreMatches) and len(found) > 20
    out = _ExactPrinter(load_query(q), batch)
    text = "".join(verbose_lines(found, out.components, out.tags, out.is_time, chunk=4))
    assert found._made is None  # no ExactMatch was made
    assert text == "".join(json.dumps(out.match(m)) + "\n" for m in found)


def test_no_match_prints_nothing(tmp_path, capsys):
    q, e = tmp_path / "q.sase", tmp_path / "e.jsonl"
    q.write_text("PATTERN SEQ(A a, B b)\nWHERE skip_till_next_match(a, b) { b.x > a.x }\n")
    e.write_text('{"type": "A", "t": 1, "x": 5}\n{"type": "B", "t": 2, "x": 1}\n')
    assert _cli(capsys, q, e) == ("", 0)


@pytest.mark.parametrize(
    "keys, texts",
    [
        ([(True,), (1,), (1.0,), (True,)], ["true", "1", "1", "true"]),
        (
            [(1.5, "a"), None, (float("nan"),), (2.0, "a")],
            ['[1.5, "a"]', "null", "null", '[2, "a"]'],
        ),
        ([([1],), ([1],)], ["[1]", "[1]"]),  # unhashable: each formatted on its own
    ],
)
def test_partition_keys_are_told_apart_as_json_shows_them(keys, texts):
    assert _key_texts(keys).tolist() == texts
