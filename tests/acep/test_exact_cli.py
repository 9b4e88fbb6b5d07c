"""`acep exact` as a user runs it (a real process on the files of examples/), and the public
API of the exact engine (acep.nfab.Engine / match): output modes and their invariant.

The expected matches are those of docs/EXACT.md 4.4 (Queries 1 and 2) and 4.5 (Query 3, R1-R3),
written as 0-based positions: e_k is position k - 1.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from support.cli import run_acep

from acep.events import Event, EventError, EventSpec, read_all
from acep.nfab import ENGINES, Engine, ExactMatch, MatchGroup, QueryError, group_by_end, match

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
Q1, Q2, Q3 = (EXAMPLES / f"{name}.sase" for name in
              ("query1_shoplifting", "query2_contamination", "query3_stock"))
E1, E2, E3 = (q.with_suffix(".jsonl") for q in (Q1, Q2, Q3))
SPEC2 = EXAMPLES / "query2_contamination.spec.json"


def _lines(r) -> list[dict]:
    return [json.loads(x) for x in r.stdout.splitlines()]


def _ids(line: dict) -> tuple:
    """A printed match as the identity tuple (positions per component, EXACT.md 3.7)."""
    return tuple(tuple(p) if isinstance(p, list) else (p,) for p in line["positions"].values())


def e(*k):
    """Paper names e_k (1-based) as 0-based positions."""
    return tuple(x - 1 for x in k)


# EXACT.md 4.4 / 4.5, in canonical order (last position, then identity)
EXPECTED = {
    "query1": [(e(1), e(6)), (e(4), e(6)), (e(11), e(12))],
    "query2": [(e(1), e(2)), (e(1), e(3)), (e(1), e(2, 4)), (e(1), e(3, 5)),
               (e(1), e(2, 4, 7)), (e(1), e(3, 5, 7))],
    "query3": [(e(1, 2, 3, 4, 5), e(6)), (e(3, 4), e(6)), (e(1, 2, 3, 4, 5, 6, 7), e(8))],
}
RUNS = {
    "query1": (Q1, E1, ()),
    "query2": (Q2, E2, ("--spec", SPEC2)),
    "query3": (Q3, E3, ()),
}


# --------------------------------------------------------------------------- the examples

@pytest.mark.parametrize("name", sorted(RUNS))
def test_examples_print_the_figure1_matches_of_exact_md(name):
    query, events, extra = RUNS[name]
    r = run_acep("exact", query, events, *extra)
    assert r.returncode == 0, r.stderr
    lines = _lines(r)
    assert [_ids(x) for x in lines] == EXPECTED[name]
    n_events = len(events.read_text().splitlines())
    matches = f"{len(lines)} match{'' if len(lines) == 1 else 'es'}"
    assert f"{n_events} events, {matches}" in r.stderr
    assert re.search(r", \d+ (runs? created|main runs?), ", r.stderr) and " s (" in r.stderr
    assert "Traceback" not in r.stderr


def test_verbose_line_names_variables_and_shows_timestamps_as_iso_text():
    lines = _lines(run_acep("exact", Q3, E3))
    assert lines[1] == {  # R2 = [e3 e4] e6, t(e_k) = k minutes
        "start": "2008-06-10T00:03:00", "end": "2008-06-10T00:06:00", "partition": "IBM",
        "events": {"a": ["2008-06-10T00:03:00", "2008-06-10T00:04:00"],
                   "b": "2008-06-10T00:06:00"},
        "positions": {"a": [2, 3], "b": 5}, "values": None}
    q1 = _lines(run_acep("exact", Q1, E1))
    assert q1[0]["events"] == {"a": "2008-06-10T00:00:00", "c": "2008-06-10T05:00:00"}
    assert q1[0]["positions"] == {"a": 0, "c": 5} and q1[0]["partition"] is None


def test_numeric_tags_partition_and_return_values(tmp_path):
    query = tmp_path / "dwell.sase"
    query.write_text("PATTERN SEQ(Shelf a, ~Register b, Exit c)\n"
                     "WHERE skip_till_any_match([tag_id]) AND c.t - a.t > 1\n"
                     "WITHIN 10\nRETURN a.tag_id, c.t - a.t AS dwell\n")
    events = tmp_path / "e.jsonl"
    events.write_text("".join(json.dumps(x) + "\n" for x in [
        {"type": "Shelf", "t": 0, "tag_id": 7}, {"type": "Exit", "t": 1, "tag_id": 7},
        {"type": "Exit", "t": 2.5, "tag_id": 7}]))
    r = run_acep("exact", query, events)
    assert r.returncode == 0, r.stderr
    assert _lines(r) == [{"start": 0, "end": 2.5, "partition": 7, "events": {"a": 0, "c": 2.5},
                          "positions": {"a": 0, "c": 2}, "values": {"a.tag_id": 7,
                                                                     "dwell": 2.5}}]


@pytest.mark.parametrize("name", sorted(RUNS))
def test_compact_lines_expand_to_the_verbose_lines(name):
    query, events, extra = RUNS[name]
    verbose = _lines(run_acep("exact", query, events, *extra))
    r = run_acep("exact", query, events, *extra, "--output", "compact", "--engine", "runs")
    assert r.returncode == 0, r.stderr
    records = _lines(r)
    assert [m for rec in records for m in rec["matches"]] == verbose
    for rec in records:
        assert rec["count"] == len(rec["matches"]) >= 1
        assert {m["end"] for m in rec["matches"]} == {rec["end"]}
        assert {_ids(m)[-1][-1] for m in rec["matches"]} == {rec["end_position"]}
    ends = [rec["end_position"] for rec in records]
    assert ends == sorted(set(ends))
    assert f"{len(records)} records" in r.stderr


def test_collapsed_records_of_the_postponing_engine_count_the_verbose_matches():
    verbose = _lines(run_acep("exact", Q2, E2, "--spec", SPEC2))
    r = run_acep("exact", Q2, E2, "--spec", SPEC2, "--output", "compact")
    assert r.returncode == 0 and "postpone engine" in r.stderr, r.stderr
    records = _lines(r)
    assert sum(rec["count"] for rec in records) == len(verbose)
    for rec in records:  # every match of the record lies within its candidates
        ends = [m for m in verbose if _ids(m)[-1][-1] == rec["end_position"]
                and _ids(m)[0][0] == rec["start_position"]]
        assert len(ends) == rec["count"]
        for m in ends:
            assert set(m["positions"]["b"]) <= set(rec["candidates"]["b"])


def test_query3_compact_groups_r1_and_r2_at_e6():
    records = _lines(run_acep("exact", Q3, E3, "--output", "compact"))
    assert [(r["end_position"], r["count"]) for r in records] == [(5, 2), (7, 1)]


# --------------------------------------------------------------------------- the API

def _events(name: str) -> list[Event]:
    _, path, extra = RUNS[name]
    spec = EventSpec.load(str(extra[1])) if extra else None
    return read_all(path, spec).to_events()


def _text(name: str, strategy: str) -> str:
    text = RUNS[name][0].read_text()
    for s in ("skip_till_next_match", "skip_till_any_match"):
        text = text.replace(s, strategy)
    return text


# EXACT.md 4.4: the same queries under the other strategies (match counts)
STRATEGY_CASES = [
    ("query1", "skip_till_next_match", 3), ("query1", "skip_till_any_match", 5),
    ("query1", "strict_contiguity", 1),
    ("query2", "skip_till_any_match", 6), ("query2", "skip_till_next_match", 3),
    ("query2", "strict_contiguity", 1),
    ("query3", "skip_till_next_match", 3), ("query3", "skip_till_any_match", 68),
    ("query3", "strict_contiguity", 2), ("query3", "partition_contiguity", 2),
]


@pytest.mark.parametrize("name, strategy, count", STRATEGY_CASES)
def test_compact_expands_to_verbose_and_no_match_is_in_two_records(name, strategy, count):
    text, events = _text(name, strategy), _events(name)
    verbose = Engine(text, engine="runs").run(events)
    compact = Engine(text, output="compact", engine="runs").run(events)
    assert len(verbose) == count
    assert all(isinstance(m, ExactMatch) for m in verbose)
    assert all(isinstance(g, MatchGroup) for g in compact)
    expanded = [m for g in compact for m in g.expand()]
    assert expanded == verbose  # the union, and in canonical order too
    assert len({m.positions for m in expanded}) == len(expanded)  # no match in two records
    assert sum(g.count() for g in compact) == len(verbose)
    for g in compact:
        assert g.count() >= 1
        assert {m.positions[-1][-1] for m in g.expand()} == {g.end_position}
        assert {m.end for m in g.expand()} == {g.end}
    assert [g.end_position for g in compact] == sorted({g.end_position for g in compact})
    assert compact == group_by_end(verbose)
    assert Engine(text).run(events) == verbose  # the default engine agrees
    if strategy == "skip_till_any_match":
        collapsed = Engine(text, output="compact", engine="postpone").run(events)
        assert sorted((m for r in collapsed for m in r.expand()),
                      key=lambda m: (m.positions[-1][-1], m.positions)) == verbose
        assert sum(r.count() for r in collapsed) == count


def test_canonical_order_and_paper_expectations_through_the_api():
    for name in RUNS:
        found = match(RUNS[name][0].read_text(), _events(name))
        assert [m.positions for m in found] == EXPECTED[name]
    r1 = match(Q3.read_text(), _events("query3"))[0]
    assert r1.end - r1.start == 300 and r1.partition == ("IBM",)  # e1..e6, k minutes


def test_engine_accepts_a_parsed_query_an_event_batch_and_adds_up_stats():
    from acep.nfab import load_query

    batch = read_all(E3)
    eng = Engine(load_query(Q3), engine="runs")
    assert eng.run(batch) == eng.run(batch.to_events()) == match(Q3.read_text(), batch)
    assert eng.stats == {"events": 16, "runs_created": 10, "main_runs": 0, "matches": 6,
                         "records": 0}
    assert eng.output == "verbose" and eng.engine in ENGINES
    shared = Engine(load_query(Q3))  # auto: the shared-buffer engine for next-match
    assert shared.engine == "shared"
    assert shared.run(batch) == shared.run(batch.to_events()) == eng.run(batch)
    s = shared.stats
    assert (s["events"], s["runs_created"], s["matches"]) == (16, 10, 6)
    assert s["runs_merged"] == 0 and s["events_visited"] == 16 and s["max_live_runs"] >= 1


def test_engine_refuses_unknown_output_engine_and_query_type():
    text = Q1.read_text()
    with pytest.raises(ValueError, match="needs skip_till_any_match"):
        Engine(text, engine="postpone")  # Query 1 is skip_till_next_match
    with pytest.raises(ValueError, match="output"):
        Engine(text, output="x")
    with pytest.raises(ValueError, match="output"):
        match(text, [], output="collapsed")
    with pytest.raises(ValueError, match="engine"):
        Engine(text, engine="no-such-engine")
    with pytest.raises(TypeError):
        Engine(42)
    with pytest.raises(TypeError, match="event 0"):
        Engine(text).run([{"type": "Shelf", "t": 0}])
    with pytest.raises(QueryError, match="WHERE"):
        Engine("PATTERN SEQ(A a, B b) WHERE a.x = = b.x")


def test_engine_bad_event_names_position_and_field():
    events = [Event("Shelf", 0, {"tag_id": 1}), Event("Exit", 1, {})]
    with pytest.raises(EventError) as info:
        match(Q1.read_text(), events)
    assert info.value.position == 1 and info.value.field == "tag_id"


def test_empty_input_has_no_matches():
    assert match(Q1.read_text(), []) == [] == Engine(Q1.read_text(), "compact").run([])


# --------------------------------------------------------------------------- errors

def test_bad_query_file_names_file_clause_line_and_position(tmp_path):
    bad = tmp_path / "bad.sase"
    bad.write_text("PATTERN SEQ(Shelf a, Exit c)\nWHERE skip_till_next_match(a, c) {\n"
                   "  a.tag_id = = c.tag_id }\nWITHIN 12 hours\n")
    r = run_acep("exact", bad, E1)
    assert r.returncode == 2 and r.stdout == "" and "Traceback" not in r.stderr
    assert "bad.sase" in r.stderr and "WHERE:" in r.stderr
    assert "line 3" in r.stderr and "position 77" in r.stderr and "^" in r.stderr


# (query text, the caret's line as shown, a fragment of the message)
BAD_QUERIES = [
    ("PATTERN SEQ(Stock a, Stock b) WITHIN 1e400\n",
     "  PATTERN SEQ(Stock a, Stock b) WITHIN 1e400", "WITHIN: 1e400 is too large a window"),
    ("PATTERN SEQ(Stock a, Stock b)\nWHERE skip_till_nxt_match(a, b) { b.price > a.price }\n",
     "  WHERE skip_till_nxt_match(a, b) { b.price > a.price }",
     "WHERE: unknown strategy 'skip_till_nxt_match' (known: strict_contiguity, "
     "partition_contiguity, skip_till_next_match, skip_till_any_match)"),
    ("PATTERN SEQ(Stock a, Stock b)\nWHERE b.price >\n\n",  # the caret after the last word
     "  WHERE b.price >", "line 2, column 16 (position 45): WHERE: expected a value, found end"),
]


@pytest.mark.parametrize("text, shown, fragment", BAD_QUERIES)
def test_bad_query_exits_2_with_the_position_and_no_traceback(tmp_path, text, shown, fragment):
    bad = tmp_path / "bad.sase"
    bad.write_text(text)
    r = run_acep("exact", bad, E3)
    assert r.returncode == 2 and r.stdout == "" and "Traceback" not in r.stderr, r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == 3 and fragment in lines[0] and lines[1] == shown, r.stderr
    column = int(lines[0].split("column ")[1].split(" ")[0])
    assert lines[2] == " " * (column + 1) + "^"


def test_a_query_file_with_a_byte_order_mark_reads_as_without(tmp_path):
    query = tmp_path / "bom.sase"  # Windows Notepad's "UTF-8": a BOM and CRLF line ends
    query.write_bytes(b"\xef\xbb\xbf" + Q3.read_bytes().replace(b"\n", b"\r\n"))
    r = run_acep("exact", query, E3)
    assert r.returncode == 0, r.stderr
    assert [_ids(x) for x in _lines(r)] == EXPECTED["query3"]


def test_query_rule_violation_is_a_query_error(tmp_path):
    bad = tmp_path / "rule.sase"
    bad.write_text("PATTERN SEQ(Shelf a, Exit c)\n"
                   "WHERE partition_contiguity(a, c) { a.tag_id = c.tag_id }\n")
    r = run_acep("exact", bad, E1)
    assert r.returncode == 2 and "WHERE" in r.stderr and "Traceback" not in r.stderr


def _copy_with(tmp_path, lines: list[str], name="events.jsonl"):
    path = tmp_path / name
    path.write_text("".join(x + "\n" for x in lines))
    return path


def test_tag_going_back_names_file_line_and_field(tmp_path):
    lines = E1.read_text().splitlines()
    lines.insert(4, json.dumps({"type": "Exit", "t": "2008-06-10T01:00:00", "tag_id": 1}))
    r = run_acep("exact", Q1, _copy_with(tmp_path, lines, "back.jsonl"))
    assert r.returncode == 1 and r.stdout == "" and "Traceback" not in r.stderr
    assert "back.jsonl, line 5, field 't'" in r.stderr
    assert "2008-06-10T01:00:00 goes back" in r.stderr


@pytest.mark.parametrize("query, events, kind", [(Q3, E3, "unreadable"), (Q1, E1, "back")])
def test_matches_before_a_bad_event_are_printed_first(tmp_path, query, events, kind):
    """At a bad event on line k the matches of the first k - 1 events are printed (oracle:
    the engine on that prefix through the API), then the error names line k."""
    lines = events.read_text().splitlines()
    accepted = read_all(events)
    for k in range(2, len(lines) + 1):
        bad = list(lines)
        if kind == "unreadable":
            bad[k - 1] = "{not json"
        else:
            bad[k - 1] = json.dumps({**json.loads(lines[k - 1]), "t": "2008-06-09T00:00:00"})
        r = run_acep("exact", query, _copy_with(tmp_path, bad))
        assert r.returncode == 1 and f"events.jsonl, line {k}" in r.stderr, r.stderr
        expected = Engine(query.read_text()).run(accepted.slice(0, k - 1))
        assert [_ids(x) for x in _lines(r)] == [m.positions for m in expected]


def test_missing_attribute_names_file_line_and_field(tmp_path):
    lines = E1.read_text().splitlines()
    lines[5] = json.dumps({"type": "Exit", "t": "2008-06-10T05:00:00"})
    r = run_acep("exact", Q1, _copy_with(tmp_path, lines))
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "events.jsonl, line 6, field 'tag_id'" in r.stderr and "Exit" in r.stderr


def test_a_text_value_in_a_column_does_not_turn_its_numbers_into_text(tmp_path):
    query = tmp_path / "cmp.sase"
    query.write_text("PATTERN SEQ(Stock a, Stock b) WHERE b.price > a.price WITHIN 1 hour\n")
    lines = [json.dumps({"type": "Stock", "t": 1, "price": 100}),
             json.dumps({"type": "Stock", "t": 2, "price": 99})]
    for extra in ([], [json.dumps({"type": "Other", "t": 3, "price": "n/a"})]):
        r = run_acep("exact", query, _copy_with(tmp_path, lines + extra))
        assert r.returncode == 0 and r.stdout == "", r.stderr  # 99 > 100 is false


def test_csv_numbers_stay_numbers_in_a_column_that_also_holds_text(tmp_path):
    """pyarrow reads a CSV column with a text value among its first rows as text; its
    numbers must still compare as numbers (as text, "99" > "100")."""
    query = tmp_path / "cmp.sase"
    query.write_text("PATTERN SEQ(Stock a, Stock b) WHERE b.price > a.price WITHIN 1 hour\n")
    events = tmp_path / "e.csv"
    events.write_text("type,t,price\nStock,1,100\nStock,2,99\nOther,3,abc\n"
                      "Stock,4,12345678901234567\n")
    r = run_acep("exact", query, events)
    assert r.returncode == 0, r.stderr
    assert [_ids(m) for m in _lines(r)] == [((0,), (3,)), ((1,), (3,))]


def test_csv_text_where_a_number_is_needed_names_its_own_line(tmp_path):
    query = tmp_path / "sum.sase"
    query.write_text("PATTERN SEQ(A a, B b) WHERE b.x > a.x + 0 WITHIN 10\n")
    events = tmp_path / "e.csv"
    events.write_text("type,t,x\nA,1,1\nB,2,2.5\nB,3,zz\nB,4,5\n")
    r = run_acep("exact", query, events)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert r.stderr.splitlines() == [f"acep: error: {events}, line 4, field 'x': attribute 'x' "
                                     "of a B event is not a number ('zz'), and the query "
                                     "computes with it"]
    assert _lines(r) == [{"start": 1, "end": 2, "partition": None, "events": {"a": 1, "b": 2},
                          "positions": {"a": 0, "b": 1}, "values": None}]


@pytest.mark.parametrize("engine", ["runs", "shared", "postpone"])
@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_64_bit_ids_are_never_one_partition_by_rounding(tmp_path, engine, fmt):
    """Two ids beyond 2**53 that a float64 rounds to one value (snowflake-style ids) stay
    two partitions and two values: no match spans them, each id matches alone."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    big = 12345678901234567  # float(big) == float(big + 1)
    rows = [{"type": "A", "t": 1, "id": big}, {"type": "B", "t": 2, "id": big + 1},
            {"type": "A", "t": 3, "id": big + 1}, {"type": "B", "t": 4, "id": big + 1}]
    events = tmp_path / f"ids.{fmt}"
    if fmt == "parquet":
        pq.write_table(pa.Table.from_pylist(rows), events)
    else:
        events.write_text("".join(json.dumps(r) + "\n" for r in rows))
    query = tmp_path / "ids.sase"
    query.write_text("PATTERN SEQ(A a, B b) WHERE [id] AND b.id = a.id WITHIN 10\n")
    r = run_acep("exact", "--engine", engine, query, events)
    assert r.returncode == 0, r.stderr
    found = _lines(r)  # rounded, the ids matched (1, 2) and (1, 4) too
    assert [(m["events"]["a"], m["events"]["b"], m["partition"]) for m in found] == [
        (3, 4, big + 1)]


@pytest.mark.parametrize("engine", ["shared", "runs"])
@pytest.mark.parametrize("volume", [5, 2000])  # as b, or beginning a run as a[1]
def test_text_where_the_query_computes_with_a_number_names_file_line_and_field(
        tmp_path, engine, volume):
    lines = E3.read_text().splitlines()
    lines.append(json.dumps({"type": "Stock", "t": "2008-06-10T00:09:00", "symbol": "IBM",
                             "price": "abc", "volume": volume}))
    r = run_acep("exact", Q3, _copy_with(tmp_path, lines), "--engine", engine)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert f"events.jsonl, line {len(lines)}, field 'price'" in r.stderr
    assert "not a number ('abc')" in r.stderr
    expected = Engine(Q3.read_text(), engine=engine).run(read_all(E3))
    assert [_ids(x) for x in _lines(r)] == [m.positions for m in expected]


def test_text_in_an_attribute_only_compared_follows_exact_md_3_2():
    rows = [Event("S", 1, {"p": 100}), Event("S", 2, {"p": "abc"}), Event("S", 3, {"p": 101})]
    found = match("PATTERN SEQ(S a, S b) WHERE b.p > a.p WITHIN 10", rows)
    assert [m.positions for m in found] == [((0,), (2,))]  # number vs text: ordering false


def test_engine_push_names_the_stream_position_of_a_text_value():
    q = "PATTERN SEQ(S a, S b) WHERE b.p > a.p + 1 WITHIN 10"
    eng = Engine(q, engine="shared")
    assert eng.push([Event("S", 1, {"p": 1}), Event("S", 2, {"p": 5})]) != []
    with pytest.raises(EventError) as info:
        eng.push([Event("S", 3, {"p": 9}), Event("S", 4, {"p": "x"})])
    assert info.value.position == 3 and info.value.field == "p"
    assert [m.positions for m in info.value.matches] == [((0,), (2,)), ((1,), (2,))]


def test_an_attribute_no_event_has_is_named_with_the_attributes_there_are(tmp_path):
    query = tmp_path / "typo.sase"
    query.write_text("PATTERN SEQ(Stock a, Stock b) WHERE b.prce > a.price WITHIN 1 hour\n")
    r = run_acep("exact", query, E3)
    assert r.returncode == 1 and r.stdout == "" and r.stderr.splitlines() == [
        f"acep: error: {E3}, line 1, field 'prce': Stock event lacks attribute 'prce' that "
        "the query reads (no event of the input has it; attributes: price, symbol, volume)"]


def test_missing_attribute_of_an_earlier_component_of_the_same_type(tmp_path):
    lines = E3.read_text().splitlines()
    lines[1] = json.dumps({"type": "Stock", "t": "2008-06-10T00:02:00", "symbol": "IBM",
                           "volume": 990})  # a[i] reads price; b does not
    r = run_acep("exact", Q3, _copy_with(tmp_path, lines))
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "events.jsonl, line 2, field 'price'" in r.stderr


def test_unreadable_event_names_file_and_line(tmp_path):
    lines = E3.read_text().splitlines()
    lines[2] = "not json"
    r = run_acep("exact", Q3, _copy_with(tmp_path, lines))
    assert r.returncode == 1 and "line 3" in r.stderr and "Traceback" not in r.stderr


def test_query2_without_its_spec_says_how_to_read_an_attribute_called_type():
    r = run_acep("exact", Q2, E2)  # before any event is read: no event could carry a.type
    assert r.returncode == 2 and r.stdout == "" and "Traceback" not in r.stderr
    assert r.stderr.splitlines() == [
        "acep exact: the query reads a.type, but 'type' is the column the event type is read "
        "from (the event spec's 'type'), not an attribute; a spec with another type column "
        'reads it (--spec with {"type": "<the type column>"})']


def test_an_event_without_a_type_column_says_how_to_read_the_type(tmp_path):
    events = _copy_with(tmp_path, [json.dumps({"kind": "Stock", "t": 1, "price": 1})])
    r = run_acep("exact", Q3, events)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "events.jsonl, line 1, field 'type'" in r.stderr and "--spec" in r.stderr


@pytest.mark.parametrize("spec, message", [
    ({"attributes": ["symbol", "price"]},
     "acep exact: the query reads a.volume, but 'volume' is not among the event spec's "
     "'attributes' (symbol, price)"),
    ({"tag": "volume"}, "acep exact: the query reads a.volume, but 'volume' is the tag (the "
                        "event spec's 'tag'), not an attribute (the query reads the tag as a.t)"),
])
def test_an_attribute_the_spec_never_gives_is_an_error_before_reading(tmp_path, spec, message):
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps(spec))
    r = run_acep("exact", Q3, E3, "--spec", spec_file)  # not a bad event on line 1
    assert r.returncode == 2 and r.stdout == "" and r.stderr.splitlines() == [message]


def test_an_engine_the_strategy_does_not_allow_is_an_option_error(tmp_path):
    events = tmp_path / "missing.jsonl"  # refused before the events are read
    r = run_acep("exact", Q3, events, "--engine", "postpone")
    assert r.returncode == 2 and r.stdout == "" and r.stderr.splitlines() == [
        "acep exact: --engine postpone: the postponing engine needs skip_till_any_match, "
        "not skip_till_next_match (EXACT.md 7)"]


@pytest.mark.parametrize("which", ["query", "events"])
def test_missing_files_are_clear_errors(tmp_path, which):
    missing = tmp_path / f"missing.{'sase' if which == 'query' else 'jsonl'}"
    args = (missing, E1) if which == "query" else (Q1, missing)
    r = run_acep("exact", *args)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert str(missing) in r.stderr


def test_bad_output_choice_is_a_usage_error():
    r = run_acep("exact", Q1, E1, "--output", "x")
    assert r.returncode == 2 and "invalid choice" in r.stderr


def test_stdin_and_warning_for_types_never_seen():
    r = run_acep("exact", Q3, "-", stdin=E1.read_text())
    assert r.returncode == 0 and r.stdout == ""
    assert "never occur" in r.stderr and "'Stock'" in r.stderr
