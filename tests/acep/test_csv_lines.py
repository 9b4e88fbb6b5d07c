"""The line a CSV row's bad event is named by: the physical line (1-based) the row starts on,
as a text editor counts them, whatever blank lines, quoted line breaks, CRLF or a header of
several lines come before it. Two oracles: Python's csv module (which line each row starts
on, from ``reader.line_num``) and pyarrow itself (the rows each line range parses to)."""

from __future__ import annotations

import csv
import io
import re

import pyarrow as pa
import pyarrow.csv as pcsv
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from acep._csvlines import LineTap
from acep.cli import main
from acep.events import EventError, read_all


def row_lines(data: bytes) -> list[int]:
    """The line each data row starts on, by the csv module (blank lines are empty rows)."""
    reader = csv.reader(io.StringIO(data.decode("utf-8-sig"), newline=""))
    starts, before = [], 0
    for row in reader:
        if row:
            starts.append(before + 1)
        before = reader.line_num
    return starts[1:]  # the header's line is not a data row's


def csv_text(rows: list[list[str]], *, end: str = "\n", blanks: list[int] | None = None,
             header: tuple[str, ...] = ("type", "t", "v", "note"), last_end: bool = True,
             bom: bool = False, quote_all: bool = False) -> bytes:
    """A CSV file: ``blanks[i]`` blank lines after row i; a value in quotes when it holds
    a comma, a quote or a line break (or always)."""
    def value(v: str) -> str:
        if quote_all or any(c in v for c in ',"\r\n'):
            return '"' + v.replace('"', '""') + '"'
        return v

    text = ",".join(map(value, header)) + end + "".join(
        ",".join(map(value, row)) + end * (1 + (blanks[i] if blanks else 0))
        for i, row in enumerate(rows))
    if not last_end:
        text = text.rstrip("\r\n")
    return (b"\xef\xbb\xbf" if bom else b"") + text.encode()


# --------------------------------------------------------------------------- examples

ROWS = [["a", "0", "1", "x"], ["b", "1", "2", "two\nlines"], ["a", "2", "3", "y"],
        ["b", "oops", "4", "z"], ["a", "4", "5", "w"]]


@pytest.mark.parametrize("data, line", [
    pytest.param(csv_text(ROWS, blanks=[2, 0, 1, 0, 0]), 9, id="blank lines"),
    pytest.param(csv_text(ROWS), 6, id="a quoted line break"),
    pytest.param(csv_text(ROWS, end="\r\n", blanks=[0, 0, 1, 0, 0]), 7, id="CRLF"),
    pytest.param(csv_text(ROWS, end="\r"), 6, id="lone CR"),
    pytest.param(csv_text(ROWS[:4], last_end=False), 6, id="no last line break"),
    pytest.param(csv_text(ROWS, header=("type", "t", "v", "no\nte")), 7, id="header of 2 lines"),
    pytest.param(csv_text(ROWS, bom=True, blanks=[1, 0, 0, 0, 0]), 7, id="byte order mark"),
])
def test_a_bad_row_is_named_by_the_line_it_starts_on(tmp_path, data, line):
    path = tmp_path / "ev.csv"
    path.write_bytes(data)
    assert row_lines(data)[3] == line  # the oracle agrees with the line written here
    with pytest.raises(EventError) as info:
        read_all(path)
    assert str(info.value).startswith(f"{path}, line {line}, field 't'")
    bad: list = []
    batch = read_all(path, on_bad_event="skip", bad_events=bad)
    assert [line for _, line, _ in bad] == [line]
    lines = row_lines(data)
    assert batch.lines.tolist() == lines[:3] + lines[4:]


def test_match_and_exact_name_the_line_after_blank_lines_and_a_quoted_line_break(tmp_path,
                                                                                 capsys):
    rows = [["a", "0", "1", "x"], ["b", "1", "2", 'a "quoted"\nnote'], ["a", "2", "3", "y"],
            ["b", "3", "oops", "z"], ["b", "x3", "4", "w"]]
    data = csv_text(rows, blanks=[1, 2, 0, 0, 0])
    path, query = tmp_path / "ev.csv", tmp_path / "q.sase"
    path.write_bytes(data)
    query.write_text("PATTERN SEQ(a x, b y)\nWHERE skip_till_next_match(x, y) { y.v > x.v }\n"
                     "WITHIN 5\n")
    v_line, t_line = row_lines(data)[3:5]
    assert (v_line, t_line) == (9, 10)
    argv = ["match", "-p", "a b", "-w", "5", "--where", "b.v > a.v", "--no-progress"]
    assert main([*argv, str(path)]) == 1
    assert f"{path}, line {v_line}, field 'v'" in capsys.readouterr().err
    assert main(["exact", str(query), str(path)]) == 1
    assert f"{path}, line {t_line}, field 't'" in capsys.readouterr().err
    assert main([*argv, "--on-bad-event", "skip", str(path)]) == 0
    assert "2 bad events skipped" in capsys.readouterr().err


def test_quoted_line_breaks_across_pyarrows_blocks_read_and_keep_their_lines(tmp_path):
    """pyarrow cuts a file into blocks of about 1 MB at line breaks; without
    ``newlines_in_values`` a quoted line break near a cut ended the read ("CSV parser got out
    of sync with chunker")."""
    n = 50_000  # a quoted line break in every row: this file did not read before
    rows = [["ab"[i % 2], str(i), str(i % 7), f"note {i}\nmore"] for i in range(n)]
    rows.append(["a", "oops", "1", "last"])
    data = csv_text(rows, blanks=[int(i % 1000 == 5) for i in range(n + 1)])
    assert len(data) > 1 << 20
    path = tmp_path / "ev.csv"
    path.write_bytes(data)
    lines = row_lines(data)
    with pytest.raises(EventError) as info:
        read_all(path)
    assert info.value.line == lines[n] and info.value.field == "t"
    batch = read_all(path, on_bad_event="skip")
    assert len(batch) == n and batch.lines.tolist() == lines[:n]


def test_a_late_value_read_again_as_text_keeps_exact_lines(tmp_path):
    """After a value that does not fit the inferred type, the file is read again as text
    (acep.events.arrow._csv_as_text): its rows keep the lines they start on."""
    n = 150_000
    rows = [["a", str(i), str(i % 7), "two\nlines" if i % 997 == 0 else str(i)]
            for i in range(n)]
    rows += [["a", str(n), "x", "oops"], ["b", str(n + 1), "3", str(n + 1)]]
    data = csv_text(rows, blanks=[int(i % 4999 == 0) for i in range(n + 2)])
    path = tmp_path / "late.csv"
    path.write_bytes(data)
    batch = read_all(path)
    assert batch.columns["v"].tolist()[-2:] == ["x", 3]
    assert batch.lines.tolist() == row_lines(data)


# --------------------------------------------------------------------------- properties

NOTE = st.lists(st.sampled_from(["x", " ", ",", '"', "\n", "\r\n", "\r", "é"]),
               max_size=6).map("".join)


@st.composite
def csv_files(draw):
    n = draw(st.integers(1, 25))
    rows = [["ab"[i % 2], str(i), str(draw(st.integers(0, 9))), draw(NOTE)] for i in range(n)]
    bad = draw(st.integers(0, n - 1))
    rows[bad][1] = draw(st.sampled_from(["x", "1e", "--3", "", "t,0"]))
    data = csv_text(rows, end=draw(st.sampled_from(["\n", "\r\n"])),
                    blanks=draw(st.lists(st.integers(0, 3), min_size=n, max_size=n)),
                    header=("type", "t", "v", draw(st.sampled_from(["note", "no\nte"]))),
                    last_end=draw(st.booleans()), bom=draw(st.booleans()),
                    quote_all=draw(st.booleans()))
    return data, bad


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=csv_files())
def test_the_error_names_the_line_the_bad_row_starts_on(tmp_path_factory, case):
    data, bad = case
    path = tmp_path_factory.mktemp("csvlines") / "ev.csv"
    path.write_bytes(data)
    lines = row_lines(data)
    with pytest.raises(EventError) as info:
        read_all(path)
    assert (info.value.line, info.value.field, info.value.position) == (lines[bad], "t", bad)
    skipped: list = []
    batch = read_all(path, on_bad_event="skip", bad_events=skipped)
    assert [line for _, line, _ in skipped] == [lines[bad]]
    assert [batch.line_of(i) for i in range(len(batch))] == lines[:bad] + lines[bad + 1:]


TOKENS = ["a", "b", ",", '"', "\r", "\n", "\r\n", '""', '"x"', " "]
STRINGS = pcsv.ConvertOptions(column_types={"h": pa.string(), "i": pa.string()})


def _pyarrow_rows(data: bytes) -> list[dict] | None:
    try:
        return pcsv.open_csv(io.BytesIO(data), convert_options=STRINGS,
                             parse_options=pcsv.ParseOptions(newlines_in_values=True)
                             ).read_all().to_pylist()
    except pa.ArrowInvalid:
        return None  # not a CSV pyarrow reads (a row of the wrong width, ...)


@settings(max_examples=400, deadline=None)
@given(header=st.sampled_from([b"h\n", b"h,i\n", b'"h",i\r\n']),
       body=st.lists(st.sampled_from(TOKENS), max_size=40).map("".join),
       reads=st.lists(st.integers(1, 9), min_size=1, max_size=5))
def test_line_tap_finds_the_rows_pyarrow_reads_in_any_blocks(header, body, reads):
    """Odd quoting too (a quote inside a bare value is text, text may follow a closing
    quote), read in blocks of any size: each row the tap finds parses alone to pyarrow's
    row of that index."""
    data = header + body.encode()
    found = _tap_lines(data, reads)
    assert found == _tap_lines(data, [1 << 20])
    rows = _pyarrow_rows(data)
    if rows is None:
        return
    assert len(found) == len(rows)
    line_starts = [0] + [m.end() for m in re.finditer(rb"\r\n|\r|\n", data)]
    cuts = [line_starts[line - 1] for line in found] + [len(data)]
    for k, row in enumerate(rows):
        assert _pyarrow_rows(header + data[cuts[k]:cuts[k + 1]]) == [row]


def _tap_lines(data: bytes, reads: list[int]) -> list[int]:
    tap, i = LineTap(io.BytesIO(data)), 0
    while tap.read(reads[i % len(reads)]):
        i += 1
    lines = []
    while (part := tap.take(1)) is not None:
        lines += part.tolist()
    return lines
