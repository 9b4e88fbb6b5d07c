"""`acep match` and `acep sample` as a user runs them: a real process on real files."""

import json
import re
import select
import subprocess
import sys
from pathlib import Path

import pytest
from support.cli import FIXTURE, run_acep


def _write_jsonl(path, events):
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    return path


EXAMPLE_2 = [{"type": tok[0], "t": int(tok[1:])}
             for tok in "a1 e2 e3 b4 c5 e6 a7 e8 e9 c10 d11 a12 e13 b14 d15".split()]


def test_match_prints_one_json_line_per_match_point_and_a_summary(tmp_path):
    events = _write_jsonl(tmp_path / "ex2.jsonl", EXAMPLE_2)
    r = run_acep("match", "--pattern", "a (b|c) d b", "--window", "5", "-k", "2", events)
    assert r.returncode == 0, r.stderr
    lines = [json.loads(x) for x in r.stdout.splitlines()]
    assert {"partition", "start", "point", "errors", "events"} <= set(lines[0])
    by_point = {x["point"]: x for x in lines}
    assert by_point[14] == {"partition": None, "start": 10, "point": 14, "errors": 1,
                            "events": [10, 11, 14], "positions": [9, 10, 13]}
    assert "15 events" in r.stderr and f"{len(lines)} matches" in r.stderr


def test_the_summary_says_one_match_not_one_matches(tmp_path):
    events = _write_jsonl(tmp_path / "one.jsonl", [{"type": "a", "t": 1}, {"type": "b", "t": 2},
                                                   {"type": "b", "t": 3, "g": None}])
    r = run_acep("match", "-p", "a b", "-w", "1", "-k", "0", events)
    assert r.returncode == 0 and r.stderr.startswith(
        "acep: 3 events, 1 match in 1 partition, "), r.stderr
    exact = tmp_path / "q.sase"
    exact.write_text("PATTERN SEQ(a x, b y) WHERE skip_till_next_match(x, y) { } WITHIN 1\n")
    r = run_acep("exact", exact, events)
    assert r.returncode == 0 and r.stderr.startswith(
        "acep: 3 events, 1 match, 1 run created, "), r.stderr


def _summary(stderr: str) -> str:
    return next(line for line in stderr.splitlines() if line.startswith("acep: ") and
                "events/s" in line)


def test_the_summary_groups_every_count_and_names_bad_events_only_when_skipping():
    """The match nodes were printed as 3729 beside 2,000 events, and "0 bad events skipped"
    was said under --on-bad-event error, where no event is ever skipped."""
    argv = ["match", "-p", "ontime late late+ verylate", "-w", "2h", "-k", "1", "--spec",
            "flights", FIXTURE]
    r = run_acep(*argv)
    assert r.returncode == 0, r.stderr
    line = _summary(r.stderr)
    assert "match nodes: 3,729 created, 3,369 merged" in line, line
    assert not re.search(r"\d{4}", line) and "bad event" not in line, line
    assert line.endswith("live at peak"), line
    r = run_acep(*argv, "--on-bad-event", "skip")
    assert r.returncode == 0, r.stderr
    line = _summary(r.stderr)
    assert not re.search(r"\d{4}", line) and line.endswith("; 0 bad events skipped"), line


def test_bundles_flag(tmp_path):
    events = _write_jsonl(tmp_path / "ex2.jsonl", EXAMPLE_2)
    r = run_acep("match", "-p", "a (b|c) d b", "-w", "3", "-k", "2", "--bundles", events)
    assert r.returncode == 0, r.stderr
    assert [json.loads(x) for x in r.stdout.splitlines()] == [
        {"partition": None, "first": 4, "last": 4, "points": 1},
        {"partition": None, "first": 10, "last": 15, "points": 4}]


def test_flights_parquet_with_spec_partition_and_predicate():
    r = run_acep("match", "-p", "late late verylate", "-w", "1h", "-k", "1", "--spec", "flights",
                 "--partition", "origin", "--where", "verylate.delay > late.delay", FIXTURE)
    assert r.returncode == 0, r.stderr
    lines = [json.loads(x) for x in r.stdout.splitlines()]
    assert lines, "the flights fixture has matches"
    for m in lines:
        assert m["start"] <= m["point"] and m["errors"] <= 1
        assert m["point"].startswith("2001-01-01T") and len(m["events"]) >= 2
    r = run_acep("match", "-p", "late late verylate", "-w", "1h", "-k", "1", "--spec", "flights",
                 "--partition", "origin", "--bundles", FIXTURE)
    bundles = [json.loads(x) for x in r.stdout.splitlines()]
    assert bundles and all(b["first"] <= b["last"] and b["points"] >= 1 for b in bundles)


def test_malformed_pattern_is_an_error_with_a_caret(tmp_path):
    events = _write_jsonl(tmp_path / "e.jsonl", EXAMPLE_2)
    r = run_acep("match", "-p", "a (b | c", "-w", "5", events)
    assert r.returncode == 2
    assert "position 8" in r.stderr and "^" in r.stderr and "Traceback" not in r.stderr


def test_bad_event_names_file_line_and_field_after_printing_earlier_matches(tmp_path):
    events = EXAMPLE_2[:4] + [{"type": "b", "t": 2}] + EXAMPLE_2[4:]
    path = _write_jsonl(tmp_path / "bad.jsonl", events)
    r = run_acep("match", "-p", "a b", "-w", "5", path)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "bad.jsonl" in r.stderr and "line 5" in r.stderr and "'t'" in r.stderr
    assert [json.loads(x)["point"] for x in r.stdout.splitlines()] == [4]
    r = run_acep("match", "-p", "a b", "-w", "5", "--on-bad-event", "skip", path)
    assert r.returncode == 0 and "1 bad event skipped" in r.stderr


def test_a_tag_going_back_is_named_by_its_column_and_a_timestamp_as_text(tmp_path):
    """The engines call the tag 't'; the message names the input's own column (the spec's
    tag) and prints a timestamp as the matches do, for acep match and acep exact."""
    (tmp_path / "spec.json").write_text('{"type": "kind", "tag": "when"}')
    path = _write_jsonl(tmp_path / "back.jsonl", [{"kind": "a", "when": "2001-02-01T06:00:00Z"},
                                                  {"kind": "b", "when": "2001-02-01T05:30:00Z"}])
    (tmp_path / "q.sase").write_text("PATTERN SEQ(a x, b y) WITHIN 5 hours")
    for args in (["match", "-p", "a b", "-w", "5h"], ["exact", tmp_path / "q.sase"]):
        r = run_acep(*args, "--spec", tmp_path / "spec.json", path)
        assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
        assert f"{path}, line 2, field 'when': tag 2001-02-01T05:30:00 goes back in time" \
            in r.stderr, r.stderr


def test_a_corrupt_parquet_page_is_one_line_naming_the_file_after_the_matches_before_it(
        tmp_path):
    """The footer reads, a later page does not: the matches of the pages before it are
    printed, then one line naming the file (pyarrow's two lines named none)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    n = 4000
    rows = {"type": ["a", "b"] * (n // 2), "t": [float(i) for i in range(n)]}
    path = tmp_path / "ev.parquet"
    pq.write_table(pa.table(rows), path, row_group_size=n // 2)
    last = pq.read_metadata(path).row_group(1).column(1)
    data = bytearray(path.read_bytes())
    for i in range(last.data_page_offset, last.data_page_offset + 64):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))
    (tmp_path / "q.sase").write_text("PATTERN SEQ(a x, b y) WITHIN 1")
    for args in (["match", "-p", "a b", "-w", "1"], ["exact", tmp_path / "q.sase"]):
        r = run_acep(*args, path)
        assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
        assert r.stderr.startswith(f"acep: error: {path}: unreadable Parquet data (")
        assert len(r.stderr.splitlines()) == 1, r.stderr
    r = run_acep("match", "-p", "a b", "-w", "1", "--batch-size", "2000", path)
    assert len(r.stdout.splitlines()) == n // 4  # the first row group's matches


def test_skip_mode_also_skips_unreadable_lines(tmp_path):
    path = tmp_path / "mixed.jsonl"
    path.write_text('{"type": "a", "t": 1}\nnot json\n{"type": "b"}\n{"type": "b", "t": 2}\n')
    r = run_acep("match", "-p", "a b", "-w", "5", path)
    assert r.returncode == 1 and "line 2" in r.stderr
    r = run_acep("match", "-p", "a b", "-w", "5", "--on-bad-event", "skip", path)
    assert r.returncode == 0, r.stderr
    assert [json.loads(x)["point"] for x in r.stdout.splitlines()] == [2]
    assert "2 bad events skipped" in r.stderr


def test_unreadable_input_is_a_clear_error(tmp_path):
    r = run_acep("match", "-p", "a b", "-w", "5", tmp_path / "missing.jsonl")
    assert r.returncode == 2 and "missing.jsonl" in r.stderr and "Traceback" not in r.stderr
    r = run_acep("match", "-p", "a b", "-w", "five", tmp_path / "missing.jsonl")
    assert r.returncode == 2 and "bad window" in r.stderr


def test_stdin_and_warning_for_types_never_seen(tmp_path):
    r = run_acep("match", "-p", "ab", "-w", "5", "-", stdin="".join(
        json.dumps(e) + "\n" for e in EXAMPLE_2))
    assert r.returncode == 0 and r.stdout == ""
    assert "never occur" in r.stderr and "'a b c', not 'abc'" in r.stderr


def test_a_live_pipe_shows_each_match_while_stdin_stays_open():
    """`tail -f events.jsonl | acep match ... -`: a match is printed once stdin goes quiet,
    not when 65,536 events have come or the pipe closes (a match point is final once a
    later event has come: the last one waits for the next event or the end); the batches
    it cut give the matches and positions of the whole input read at once."""
    lines = [json.dumps({"type": t, "t": i}) + "\n" for i, t in enumerate("abab")]
    proc = subprocess.Popen([sys.executable, "-m", "acep.cli", "match", "-p", "a b", "-w", "1",
                             "-"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    try:
        proc.stdin.write("".join(lines).encode())
        proc.stdin.flush()
        assert select.select([proc.stdout], [], [], 30)[0], "nothing while stdin is open"
        seen = [json.loads(proc.stdout.readline())]
        proc.stdin.close()
        assert proc.wait(timeout=60) == 0
        seen += [json.loads(line) for line in proc.stdout.read().splitlines()]
    finally:
        proc.kill()
    whole = run_acep("match", "-p", "a b", "-w", "1", "-", stdin="".join(lines))
    assert seen == [json.loads(line) for line in whole.stdout.splitlines()]
    assert [m["positions"] for m in seen] == [[0, 1], [2, 3]]


def test_a_reader_that_stops_early_is_not_an_error(tmp_path):
    """`acep match ... | head -1`: the matches the reader took are whole lines, and the
    command stops quietly (exit 141, 128 + SIGPIPE, as a shell pipeline expects)."""
    events = tmp_path / "many.jsonl"
    events.write_text("".join(f'{{"type": "{"ab"[i % 2]}", "t": {i}}}\n' for i in range(20000)))
    proc = subprocess.Popen([sys.executable, "-m", "acep.cli", "match", "-p", "a b", "-w", "1",
                             str(events)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = json.loads(proc.stdout.readline())
    proc.stdout.close()
    assert proc.wait(timeout=60) == 141
    assert first["events"] == [0, 1] and proc.stderr.read() == b""


@pytest.mark.parametrize("window, seconds", [("90s", 90), ("15min", 900), ("2h", 7200),
                                             ("1d", 86400), ("10", 10), ("2.5", 2.5),
                                             ("500ms", 0.5), ("1500 milliseconds", 1.5)])
def test_window_units(window, seconds):
    from acep.arguments import parse_window

    assert parse_window(window) == seconds


def test_a_duration_on_numeric_tags_is_warned_about(tmp_path):
    """`-w 2h` on tags that are numbers means 7200 tag units: said once, matching goes on;
    a plain number or a duration on timestamps says nothing."""
    events = tmp_path / "n.jsonl"
    _write_jsonl(events, [{"type": "a", "t": 1}, {"type": "b", "t": 2}])
    warned = run_acep("match", "-p", "a b", "-w", "2h", events)
    assert warned.returncode == 0 and warned.stdout.count("\n") == 1
    assert warned.stderr.count("warning: the window '2h' is a duration") == 1
    assert "7200 tag units" in warned.stderr
    for args in (("-w", "5", events), ("-w", "2h", "--spec", "flights", FIXTURE)):
        quiet = run_acep("match", "-p", "late verylate" if FIXTURE in args else "a b", *args)
        assert quiet.returncode == 0 and "is a duration" not in quiet.stderr


def test_sample_runs_on_the_embedded_sample():
    r = run_acep("sample", "--limit", "3")
    assert r.returncode == 0, r.stderr
    rows = [json.loads(x) for x in r.stdout.splitlines() if not x.startswith("#")]
    assert len(rows) == 3 and all(m["errors"] <= 1 for m in rows)
    header, last = r.stdout.splitlines()[1], r.stdout.splitlines()[-1]
    assert "; 20,000 flights of January 2001" in header, header  # counts grouped as in match
    assert re.fullmatch(r"# [\d,]+ match points \([\d,]+ exact, [\d,]+ missing one event\) "
                        r"in [\d,]+ bundles; \w+ kernel, [\d,]+ match nodes created", last), last
    assert not re.search(r"\d{4}", last) and "2,029,097 match nodes" in last, last


def test_ctrl_c_is_one_line_and_exit_130():
    """`acep sample` on the pure-Python kernel takes minutes: Ctrl-C ended it silently."""
    import os
    import signal
    import time

    proc = subprocess.Popen([sys.executable, "-m", "acep.cli", "sample"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "ACEP_KERNEL": "python"},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    time.sleep(2)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert (proc.returncode, out, err) == (130, "", "acep sample: interrupted\n")


@pytest.mark.parametrize("args, option", [
    (["sample", "--limit", "-1"], "--limit: the matches to print must be >= 0, got -1"),
    (["match", "e.jsonl", "-p", "a b", "-w", "5", "-k", "-1"], "-k: the letters that may "
                                                               "be missing must be >= 0"),
    (["match", "e.jsonl", "-p", "a b", "-w", "5", "-k", "65"], "-k: the letters that may "
                                                               "be missing must be <= 64"),
    (["match", "e.jsonl", "-p", "a b", "-w", "5", "--batch-size", "0"], "--batch-size: "),
    (["history", "inspect", "h.history", "--top", "-2"], "--top: "),
    (["demo", "--cores", "0"], "--cores: the cores must be >= 1, got 0"),
    (["sample", "--limit", "ten"], "--limit: 'ten' is not a whole number of matches"),
])
def test_a_negative_count_or_size_is_refused_naming_the_option(args, option):
    r = run_acep(*args)
    assert (r.returncode, r.stdout) == (2, "")
    assert f"error: argument {option}" in r.stderr


def _history_build(tmp_path, *extra):
    """`acep history build` of the fixture with a signed sketch: (result, history, sketch,
    key file)."""
    key = tmp_path / "fleet.key"
    key.write_bytes(b"a signing key")
    out, sketch = tmp_path / "h.history", tmp_path / "h.sketch"
    r = run_acep("history", "build", FIXTURE, "--spec", "flights", "-p", "late verylate late",
                 "-w", "1h", "-k", "1", "--partition", "origin", "-o", out, "--sketch", sketch,
                 "--key-file", key, *extra)
    assert r.returncode == 0, r.stderr
    return r, out, sketch, key


def test_history_build_then_inspect_a_trained_history(tmp_path):
    """`acep history build` learns what a direct build_history learns; inspect reads it."""
    from acep.events import EventSpec, read_events
    from history.build import build_history
    from history.graph import HistoryGraph
    from history.sketch import Sketch

    r, out, sketch, key = _history_build(tmp_path)
    saved = HistoryGraph.load(out)
    batches = list(read_events(FIXTURE, EventSpec.load("flights")))
    direct = build_history("late verylate late", batches, 3600.0, 1, partition="origin")
    assert saved.n_bundles == direct.n_bundles > 0
    assert (saved.visits == direct.visits).all() and (saved.successes == direct.successes).all()
    assert Sketch.load(sketch, b"a signing key").nbytes > 0
    shown = run_acep("history", "inspect", out, "--top", "3")
    assert shown.returncode == 0 and f"bundles: {direct.n_bundles}" in shown.stdout
    refused = run_acep("history", "build", FIXTURE, "-p", "a b", "-w", "3", "-o", out,
                       "--sketch", sketch)
    assert refused.returncode != 0 and "--key-file" in refused.stderr


def test_an_empty_key_file_is_named_by_every_command_that_reads_one(tmp_path):
    """A key file holding only whitespace is refused before anything is signed or verified,
    and the message names the file (not an HMAC error from inside the sketch code)."""
    _, out, sketch, _ = _history_build(tmp_path)
    empty = tmp_path / "empty.key"
    empty.write_bytes(b" \n")
    runs = [("history", "inspect", sketch, "--key-file", empty),
            ("history", "evaluate", sketch, FIXTURE, "--spec", "flights", "--key-file", empty),
            ("history", "build", FIXTURE, "--spec", "flights", "-p", "late verylate", "-w",
                 "1h", "-o", tmp_path / "x.history", "--sketch", tmp_path / "x.sketch",
                 "--key-file", empty)]
    for args in runs:
        r = run_acep(*args)
        assert r.returncode == 2, (args, r.stderr)
        assert f"{empty}: the signing key file is empty" in r.stderr, r.stderr
        assert "Traceback" not in r.stderr
    assert not (tmp_path / "x.history").exists() and not (tmp_path / "x.sketch").exists()
    missing = tmp_path / "missing.key"
    r = run_acep("history", "inspect", sketch, "--key-file", missing)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert f"{missing}: cannot read the signing key file (No such file or directory)" in r.stderr


def test_history_build_search_ships_the_searched_tables_and_says_what_it_moved(tmp_path):
    """`--search K` ships what `fit_budgets(..., search=K)` makes; each budget's line says how
    many of the K cells the search moved, or that there was nothing to search."""
    from acep.events import EventBatch, EventSpec, read_events
    from history.fit import fit_budgets
    from history.graph import HistoryGraph
    from history.sketch import Sketch

    ratios = [0.1, 0.3, 0.5]
    r, out, sketch, _ = _history_build(tmp_path, "--fit", "0.1,0.3,0.5", "--burst", "32",
                                       "--search", "6")
    events = EventBatch.concat(list(read_events(FIXTURE, EventSpec.load("flights"))))
    direct, report = fit_budgets(Sketch.from_graph(HistoryGraph.load(out)), events, ratios,
                                 partition="origin", burst=32, search=6)
    assert (Sketch.load(sketch, b"a signing key").fitted == direct.fitted).all()
    assert sum(row["searched"]["changed"] for row in report["ratios"].values()) > 0
    for ratio in ratios:
        row = report["ratios"][ratio]
        if row["bundle_recall"][row["chosen"]] >= 1.0:
            assert f"budget {ratio:g} x" in r.stderr and "nothing to search" in r.stderr
        else:
            moved = row["searched"]
            assert (f"the search moved {moved['changed']} of {moved['cells']} cells of the "
                    f"{moved['from']} table: {100 * moved['bundle_recall']:.1f}%") in r.stderr


def test_history_build_fits_the_sketch_to_budgets(tmp_path):
    """`--fit` ships the tables `history.fit` chooses on the same events; inspect shows them."""
    from acep.events import EventSpec, read_events
    from history.fit import fit_budgets
    from history.sketch import Sketch

    r, out, sketch, key = _history_build(tmp_path, "--fit", "0.1,0.5", "--burst", "32")
    assert r.stderr.count("reserves (training bundle recall history") == 2
    shipped = Sketch.load(sketch, b"a signing key")
    assert shipped.fitted_ratios.tolist() == [0.1, 0.5]
    from acep.events import EventBatch
    from history.graph import HistoryGraph

    batches = list(read_events(FIXTURE, EventSpec.load("flights")))
    plain = Sketch.from_graph(HistoryGraph.load(out))
    direct, _ = fit_budgets(plain, EventBatch.concat(batches), [0.1, 0.5], partition="origin",
                            burst=32)
    assert (direct.fitted == shipped.fitted).all()
    assert (direct.fitted_slack == shipped.fitted_slack).all()
    assert shipped.ops_per_event == pytest.approx(direct.ops_per_event)
    shown = run_acep("history", "inspect", sketch, "--key-file", key)
    slacks = ", ".join(f"{v:g}" for v in shipped.fitted_slack)
    assert shown.returncode == 0 and "reserves fitted to budgets of 0.1, 0.5" in shown.stdout
    assert f"cover slack {slacks} windows" in shown.stdout
    for bad in ("x", "0", "-1,0.5"):
        refused = run_acep("history", "build", FIXTURE, "-p", "a b", "-w", "3", "-o", out,
                           "--sketch", sketch, "--key-file", key, "--fit", bad)
        assert refused.returncode != 0 and "--fit" in refused.stderr
    refused = run_acep("history", "build", FIXTURE, "-p", "a b", "-w", "3", "-o", out,
                       "--fit", "0.5")
    assert refused.returncode != 0 and "needs --sketch" in refused.stderr
    refused = run_acep("history", "build", FIXTURE, "-p", "a b", "-w", "3", "-o", out,
                       "--sketch", sketch, "--key-file", key, "--search", "4")
    assert refused.returncode != 0 and "it needs --fit" in refused.stderr
    refused = run_acep("history", "build", FIXTURE, "-p", "a b", "-w", "3", "-o", out,
                       "--sketch", sketch, "--key-file", key, "--fit", "0.5", "--search", "-2")
    assert refused.returncode != 0 and "cells to search must be >= 0" in refused.stderr


def test_serve_on_a_device_install_says_which_extra_to_install():
    """`acep serve` where aiohttp is missing (a device install): one line naming the extra,
    exit 2, no traceback."""
    code = ("import sys\n"
            "class NoAiohttp:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name.split('.')[0] == 'aiohttp':\n"
            "            raise ModuleNotFoundError(\"No module named 'aiohttp'\", name='aiohttp')\n"
            "sys.meta_path.insert(0, NoAiohttp())\n"
            "from acep.cli import main\n"
            "sys.exit(main(['serve', '--help']))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       cwd=Path(__file__).resolve().parents[2])
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "needs 'aiohttp'" in r.stderr and 'pip install "acep[server]"' in r.stderr


def test_all_trajectories_on_an_input_that_is_not_small_stops_with_an_error(tmp_path):
    """Without merging, trajectories multiply with every event: the command stops with an
    error naming --max-entries instead of taking the machine's memory."""
    events = _write_jsonl(tmp_path / "ab.jsonl",
                          [{"type": "ab"[i % 2], "t": i * 0.01} for i in range(300)])
    r = run_acep("match", "-p", "(a|b){2,} c?", "-w", "5", "-k", "2", "--all-trajectories",
                 "--max-entries", "200000", events)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "above the limit of 200,000 (max_entries)" in r.stderr
    merged = run_acep("match", "-p", "(a|b){2,} c?", "-w", "5", "-k", "2", events)
    assert merged.returncode == 0 and merged.stdout.count("\n") == 300  # one per point


# --------------------------------------------------------------------------- acep outbox


def _stuck_outbox(path):
    """An agent's outbox with a batch refused for good (a dead letter), one failing to be
    delivered and one never tried."""
    from edge.agent.outbox import Outbox
    from edge.agent.outbox_reader import Backoff

    with Outbox(path, backoff=Backoff(seed=3)) as box:
        box.put(b"\x81\xa1a\x01", "pi-1/7", now=1000.0)
        box.put(b"second body", "pi-1/8", now=1100.0)
        box.put(b"third", "pi-1/9", now=1200.0)
        box.reject("pi-1/7", "HTTP 400: field 'format': missing", now=1050.0)
        return box.fail("pi-1/8", "cannot reach the collector: connection refused", now=1150.0)


def test_outbox_shows_what_is_stuck_and_lists_exports_requeues_and_discards(tmp_path):
    from edge.agent.outbox import Outbox

    path = tmp_path / "agent-outbox.db"
    due = _stuck_outbox(path)
    status = run_acep("outbox", path, "status")
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout) == {
        "pending": 2, "pending_bytes": 16,
        "oldest": {"batch_id": "pi-1/8", "created": 1100.0, "attempts": 1,
                   "last_error": "cannot reach the collector: connection refused"},
        "next_due": due, "dead": 1, "dead_bytes": 4}
    same = subprocess.run([sys.executable, "-m", "acep", "outbox", str(path), "status"],
                          capture_output=True, text=True, timeout=60)
    assert (same.returncode, same.stdout, same.stderr) == (0, status.stdout, "")
    listed = run_acep("outbox", path, "list")
    assert [json.loads(x) for x in listed.stdout.splitlines()] == [
        {"batch_id": "pi-1/7", "size": 4, "created": 1000.0, "attempts": 1,
         "reason": "HTTP 400: field 'format': missing", "at": 1050.0}]
    exported = run_acep("outbox", path, "export", tmp_path / "dead")
    assert exported.returncode == 0, exported.stderr
    assert exported.stdout.splitlines() == [str(tmp_path / "dead" / "pi-1_7.msgpack")]
    assert (tmp_path / "dead" / "pi-1_7.msgpack").read_bytes() == b"\x81\xa1a\x01"
    refused = run_acep("outbox", path, "discard")
    assert refused.returncode == 2 and "acep outbox discard: name the ids, or --all" in \
        refused.stderr
    requeued = run_acep("outbox", path, "requeue", "pi-1/7", "pi-1/99")
    assert (requeued.returncode, requeued.stdout) == (1, "requeued 1 dead letters\n")
    assert requeued.stderr == "acep outbox: not dead letters, left alone: pi-1/99 (unknown)\n"
    with Outbox(path) as box:
        assert box.pending_ids() == ["pi-1/8", "pi-1/9", "pi-1/7"] and not box.dead_letters()
        box.reject("pi-1/7", "HTTP 409: another body")
        assert box.dead_body("pi-1/7") == b"\x81\xa1a\x01"  # byte for byte, both ways
    status = json.loads(run_acep("outbox", path, "status").stdout)
    assert (status["pending"], status["dead"], status["oldest"]["batch_id"]) == (2, 1, "pi-1/8")
    discarded = run_acep("outbox", path, "discard", "--all")
    assert (discarded.returncode, discarded.stdout) == (0, "discarded 1 dead letters\n")
    assert run_acep("outbox", path, "list").stdout == ""
    with Outbox(path) as box:
        assert box.status("pi-1/7") == "discarded" and box.pending_ids() == ["pi-1/8", "pi-1/9"]


def test_outbox_refuses_a_missing_file_or_one_that_is_not_an_outbox(tmp_path):
    import sqlite3

    r = run_acep("outbox", tmp_path / "no.db", "status")
    assert r.returncode == 2 and "no.db: no such outbox" in r.stderr
    assert not (tmp_path / "no.db").exists()
    other = tmp_path / "collector.db"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE batches (id TEXT)")
    before = other.read_bytes()
    (tmp_path / "agent.toml").write_text("[device]\nid = \"pi-01\"\n")
    for path in (other, tmp_path / "agent.toml"):
        r = run_acep("outbox", path, "list")
        assert r.returncode == 2 and "not an outbox" in r.stderr and "Traceback" not in r.stderr
    assert other.read_bytes() == before and not list(tmp_path.glob("*-wal"))


def test_outbox_help_lists_its_actions_and_a_device_install_runs_it(tmp_path):
    top = run_acep("--help")
    assert top.returncode == 0 and "outbox" in top.stdout
    r = run_acep("outbox", "--help")
    assert r.returncode == 0 and r.stdout.startswith("usage: acep outbox")
    for action in ("status", "list", "export", "requeue", "discard"):
        assert f"\n    {action} " in r.stdout
    _stuck_outbox(tmp_path / "o.db")
    code = ("import sys\n"  # only numpy and msgpack are installed on a device
            "from acep.cli import main\n"
            f"rc = main(['outbox', {str(tmp_path / 'o.db')!r}, 'status'])\n"
            "heavy = {'pyarrow', 'pandas', 'pyspark', 'aiohttp'} & set(sys.modules)\n"
            "print(sorted(heavy), file=sys.stderr)\n"
            "sys.exit(rc)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and json.loads(r.stdout)["pending"] == 2
    assert r.stderr.strip() == "[]"


@pytest.mark.parametrize("where, spec, says", [
    ("c.t > a.t", None, "'t' is the tag (the event spec's 'tag'), not an attribute"),
    ("c.type > 1", None, "'type' is the column the event type is read from"),
    ("c.price > a.price", {"attributes": ["x"]}, "'price' is not among the event spec's"),
])
def test_where_on_the_tag_type_or_an_unlisted_column_says_so(tmp_path, where, spec, says):
    events = _write_jsonl(tmp_path / "ev.jsonl", [{"type": "a", "t": 1, "price": 3, "x": 0},
                                                  {"type": "c", "t": 2, "price": 4, "x": 0}])
    extra = []
    if spec is not None:
        (tmp_path / "spec.json").write_text(json.dumps(spec))
        extra = ["--spec", tmp_path / "spec.json"]
    r = run_acep("match", "-p", "a c", "-w", "5", "--where", where, *extra, events)
    assert r.returncode != 0 and says in r.stderr and "line 1" not in r.stderr, r.stderr


def test_integral_partitions_print_as_integers_whatever_the_batch_size(tmp_path):
    rows = [{"type": "a", "t": 1, "id": 7}, {"type": "b", "t": 2, "id": 7},
            {"type": "c", "t": 3, "id": 7}, {"type": "x", "t": 4, "id": "other"}]
    events = _write_jsonl(tmp_path / "pb.jsonl", rows)
    for size in (1, 2, 3, 4):
        r = run_acep("match", "-p", "a b c", "-w", "5", "--partition", "id", "--batch-size", size,
                     events)
        assert r.returncode == 0, r.stderr
        assert r.stdout.startswith('{"partition": 7, ') and len(r.stdout.splitlines()) == 1


def test_sub_second_timestamps_keep_their_fraction_whole_seconds_print_as_before(tmp_path):
    tags = ["2024-01-01T00:00:00.100", "2024-01-01T00:00:00.900", "2024-01-01T00:00:01.000001",
            "2024-01-01T00:00:02"]
    events = _write_jsonl(tmp_path / "sub.jsonl",
                          [{"type": ty, "t": t} for ty, t in zip("abab", tags)])
    r = run_acep("match", "-p", "a b", "-w", "5s", events)
    assert r.returncode == 0, r.stderr
    assert [x["events"] for x in map(json.loads, r.stdout.splitlines())] == [tags[:2], tags[2:]]
