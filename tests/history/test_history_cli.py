"""``acep history inspect`` on files written here; the device-side imports stay light."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.cli import FIXTURE, run_acep
from support.history import V1_FILE, flip, hand_graph
from support.sketches import key_fingerprint, old_writer

from acep.cli import main
from history.sketch import Sketch

ROOT = Path(__file__).resolve().parents[2]


def test_inspect_prints_size_top_vectors_and_writes_a_plot(tmp_path, capsys):
    g = hand_graph(partition_keys=["ATL", "BOS"], partition_by="origin")
    path = tmp_path / "h.acephist"
    size = g.save(path)
    png = tmp_path / "h.png"
    assert main(["history", "inspect", str(path), "--top", "2", "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert "cells: 24 (3 visited, 2 with a non-empty match map)" in out
    assert "3 automaton states, partitioned by origin" in out
    assert "bundles: 3 in 2 partitions" in out
    assert "edges: 3 cell->cell, 4 cell->bundle" in out
    assert f"{size:,} on disk" in out and f"{Sketch.from_graph(g).nbytes:,} as a signed" in out
    assert "nodes: 6 visits, 4 successes (66.7%)" in out
    by_visits = out.split("top 2 vectors by visits:")[1].split("top 2")[0].splitlines()
    assert by_visits[2].split()[:3] == ["9", "1", "0"] and by_visits[3].split()[0] == "5"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("name, written", [("h.svg", "h.svg"), ("h", "h.png")])
def test_inspect_says_the_plot_file_it_wrote(tmp_path, capsys, name, written):
    path = tmp_path / "h.acephist"
    hand_graph().save(path)
    assert main(["history", "inspect", str(path), "--plot", str(tmp_path / name)]) == 0
    assert capsys.readouterr().out.endswith(f"plot: {tmp_path / written}\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["h.acephist", written])


def test_a_plot_type_matplotlib_does_not_write_is_refused_before_the_history_is_read(
        tmp_path, capsys):
    path = tmp_path / "h.acephist"
    path.write_bytes(b"not a history: it is never read")
    assert main(["history", "inspect", str(path), "--plot", str(tmp_path / "h.parquet")]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "\n" not in err.strip(), err
    assert err.startswith(f"acep history inspect: --plot {tmp_path / 'h.parquet'}: matplotlib "
                          "does not write .parquet files (it writes ") and ".png" in err, err
    assert not (tmp_path / "h.parquet").exists()


def test_inspect_a_sketch_needs_its_key(tmp_path, capsys):
    path, key = tmp_path / "s.sketch", tmp_path / "key"
    Sketch.from_graph(hand_graph(), hashes=4).save(path, b"k3y")
    assert main(["history", "inspect", str(path)]) == 2
    assert "is a signed sketch, not a history graph: pass --key-file" in capsys.readouterr().err
    key.write_bytes(b"k3y\n")
    assert main(["history", "inspect", str(path), "--key-file", str(key)]) == 0
    out = capsys.readouterr().out
    assert "cells: 24, 2 with a match map" in out and "window = 10, one partition" in out
    assert f"\nsigned with key {key_fingerprint(b'k3y')} (verified with --key-file)\n" in out
    key.write_bytes(b"other")
    done = run_acep("history", "inspect", str(path), "--key-file", str(key))
    assert (done.returncode, done.stdout) == (2, ""), done.stderr
    assert done.stderr == (f"acep history inspect: {path}: signature check failed: the sketch "
                           f"was signed with another key, {key_fingerprint(b'k3y')}; this key is "
                           f"{key_fingerprint(b'other')} (--key-file)\n")


def test_inspect_says_a_sketch_predates_key_fingerprints(tmp_path, capsys):
    """A sketch written before sketches recorded their key's fingerprint: its key is the one
    that verified it, and the file records none (a wrong key could not be named)."""
    path, key = tmp_path / "old.sketch", tmp_path / "key"
    path.write_bytes(old_writer(Sketch.from_graph(hand_graph(), hashes=4), b"k3y"))
    key.write_bytes(b"k3y\n")
    assert main(["history", "inspect", str(path), "--key-file", str(key)]) == 0
    out = capsys.readouterr().out
    assert (f"\nsigned with key {key_fingerprint(b'k3y')} (verified with --key-file; the sketch "
            "records no key fingerprint: written before acep recorded them, re-sign it to "
            "record one)\n") in out, out


def test_inspect_refuses_other_and_corrupt_files(tmp_path, capsys):
    other = tmp_path / "events.jsonl"
    other.write_text('{"type": "a", "t": 1}\n')
    assert main(["history", "inspect", str(other)]) == 2
    assert "neither a history graph nor a sketch (no 'format' field" in capsys.readouterr().err
    (tmp_path / "empty.history").write_bytes(b"")
    assert main(["history", "inspect", str(tmp_path / "empty.history")]) == 2
    assert "empty.history is neither a history graph nor a sketch (an empty file)" in \
        capsys.readouterr().err
    path = tmp_path / "h.acephist"
    data = hand_graph().to_bytes()
    path.write_bytes(data[: len(data) - 10])
    assert main(["history", "inspect", str(path)]) == 2
    assert "not valid msgpack" in capsys.readouterr().err
    assert main(["history", "inspect", str(tmp_path / "missing")]) == 2


def test_inspect_a_damaged_history_says_so_in_one_line(tmp_path):
    """One bit of a count flipped on disk: the user's process exits 2 (a file it cannot
    use) with one line naming the file (version 1 printed the wrong count)."""
    g = hand_graph()
    path = tmp_path / "h.acephist"
    g.save(path)
    data = path.read_bytes()
    path.write_bytes(flip(data, data.index(g.visits.tobytes()) + 8 * 9, 0x01))
    done = run_acep("history", "inspect", path)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.startswith(f"acep history inspect: {path}: checksum mismatch: the file is "
                                  "damaged (expected ") and done.stderr.count("\n") == 1


def test_build_refuses_outputs_it_must_not_write_before_reading(tmp_path, capsys,
                                                                monkeypatch):
    monkeypatch.chdir(tmp_path)
    events = b'{"type": "a", "t": 1}\n{"type": "b", "t": 2}\n'
    (tmp_path / "e.jsonl").write_bytes(events)
    (tmp_path / "k").write_bytes(b"key")
    build = ["history", "build", "e.jsonl", "-p", "a b", "-w", "3"]
    for argv, message in [(["-o", "e.jsonl"], "-o e.jsonl: would replace the input e.jsonl"),
                          (["-o", "h", "--sketch", "h", "--key-file", "k"],
                           "-o h: overlaps --sketch h"),
                          (["-o", "h", "--sketch", "k", "--key-file", "k"],
                           "--sketch k: would replace the input k"),
                          (["-o", "no/h"], "-o no/h: no such directory"),
                          (["-o", "."], "-o .: a directory")]:
        assert main([*build, *argv]) == 2
        assert message in capsys.readouterr().err
    assert (tmp_path / "e.jsonl").read_bytes() == events and not (tmp_path / "h").exists()
    assert (tmp_path / "k").read_bytes() == b"key"


@pytest.mark.parametrize("argv, message", [
    (["build", "e.jsonl", "-p", "a b", "-w", "3", "-o", "h", "--bins", "1000000"],
     "argument --bins: the bins must be <= 64, got 1000000"),
    (["build", "e.jsonl", "-p", "a b", "-w", "3", "-o", "h", "--sketch", "s", "--key-file",
      "k", "--fit", "0.1", "--burst", "0"], "argument --burst: the bucket depth must be"),
    (["inspect", "h", "--top", "-3"],
     "argument --top: the match vectors to list must be >= 0, got -3"),
])
def test_numeric_options_out_of_range_are_refused_by_the_parser(capsys, argv, message):
    with pytest.raises(SystemExit) as exc:
        main(["history", *argv])
    assert exc.value.code == 2 and message in capsys.readouterr().err


def test_build_refuses_a_file_without_events(tmp_path, capsys):
    (tmp_path / "e.jsonl").write_text("")
    assert main(["history", "build", str(tmp_path / "e.jsonl"), "-p", "a b", "-w", "3",
                 "-o", str(tmp_path / "h")]) == 2
    assert "e.jsonl: no events to build a history from" in capsys.readouterr().err
    assert not (tmp_path / "h").exists()


def test_build_names_a_corrupt_file(tmp_path, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq
    from support.damaged import corrupt_parquet

    path = tmp_path / "e.parquet"
    pq.write_table(pa.Table.from_pylist([{"type": "ab"[i % 2], "t": i} for i in range(20)]),
                   path)
    corrupt_parquet(path)
    assert main(["history", "build", str(path), "-p", "a b", "-w", "3",
                 "-o", str(tmp_path / "h")]) == 1
    err = capsys.readouterr().err
    assert f"{path}: unreadable Parquet data (Couldn't deserialize thrift" in err and "\n" not in \
        err.strip() and not (tmp_path / "h").exists()


def test_console_script_and_light_device_imports(tmp_path):
    path = tmp_path / "h.acephist"
    hand_graph().save(path)
    done = run_acep("history", "inspect", path, check=True)
    assert "bundles: 3" in done.stdout
    probe = ("import sys, history.sketch, history.policies; "
             "print(sorted(m for m in ('matplotlib', 'sklearn', 'pyarrow', 'scipy') "
             "if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == "[]"


BUILD = ["history", "build", "feb.parquet", "-p", "late verylate late", "-w", "1h", "-k", "1",
         "--spec", "flights", "--partition", "origin"]
EVALUATE = ["history", "evaluate", "jan.sketch", "feb.parquet", "--key-file", "fleet.key",
            "--spec", "flights", "--policies", "random,history"]


@pytest.fixture
def built(tmp_path, monkeypatch, capsys):
    """jan.history and its sketch (fitted at 0.1) of the 2,000 flights, here as feb.parquet."""
    monkeypatch.chdir(tmp_path)
    shutil.copy(FIXTURE, "feb.parquet")
    Path("fleet.key").write_bytes(b"a signing key\n")
    assert main([*BUILD, "-o", "jan.history", "--sketch", "jan.sketch", "--key-file",
                 "fleet.key", "--fit", "0.1", "--burst", "32"]) == 0
    capsys.readouterr()
    return tmp_path


def test_inspect_reads_a_version_1_history(built, capsys):
    """The history of the 2,000 flights as the version 1 writer saved it: the same graph."""
    from history.graph import HistoryGraph

    assert main(["history", "inspect", str(V1_FILE), "--top", "1"]) == 0
    out = capsys.readouterr().out
    assert "nodes: 694 visits, 548 successes (79.0%)" in out
    assert "10,848 on disk" in out
    assert HistoryGraph.load(V1_FILE).to_bytes() == Path("jan.history").read_bytes()


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir()}


# each command with every input it reads as the target of its output option
OVERWRITES = [(argv, option, target) for argv, option, inputs in [
    ([*EVALUATE, "--history", "jan.history", "--json"], "--json",
     ["fleet.key", "jan.sketch", "feb.parquet", "jan.history"]),
    (["history", "inspect", "jan.history", "--key-file", "fleet.key", "--plot"], "--plot",
     ["fleet.key", "jan.history"]),
    ([*BUILD, "--sketch", "new.sketch", "--key-file", "fleet.key", "-o"], "-o",
     ["fleet.key", "feb.parquet"]),
] for target in inputs]


@pytest.mark.parametrize("argv, option, target", OVERWRITES)
def test_no_output_option_replaces_an_input(built, capsys, argv, option, target):
    before = _files(built)
    assert main([*argv, target]) == 2
    out, err = capsys.readouterr()
    assert f"{option} {target}: would replace the input {target}" in err and out == "", err
    assert _files(built) == before


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs /proc")
@pytest.mark.parametrize("argv, option", [
    ([*EVALUATE, "--json"], "--json"),
    (["history", "inspect", "jan.history", "--plot"], "--plot"),
    ([*BUILD, "-o"], "-o"),
    ([*BUILD, "-o", "h", "--key-file", "fleet.key", "--sketch"], "--sketch"),
])
def test_an_output_where_nothing_can_be_written_is_refused_before_the_work(built, capsys,
                                                                            argv, option):
    """/proc: even root, whom os.access lets write anywhere, cannot make a file there."""
    assert main([*argv, "/proc/x.out"]) == 2
    out, err = capsys.readouterr()
    assert err.startswith(f"acep history {argv[1]}: {option} /proc/x.out: cannot write") \
        and ".tmp" not in err and "\n" not in err.strip() and out == "", err
    assert not Path("h").exists()


def test_a_bucket_that_cannot_hold_one_operation_is_refused_naming_the_burst(built, capsys):
    """0.363 operations per event: 0.02 x 8 events holds 0.058 (nothing could be kept), 0.5
    x 8 holds 1.45; the smallest burst for 0.02 is ceil(1 / 0.00726) = 138 events."""
    assert main([*EVALUATE, "--budgets", "0.5,0.02", "--burst", "8"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "budget 0.02 x 0.363 operations per event" in err, err
    assert "holds 0.0581 operations" in err and "--burst 138" in err and "0.5" not in err
    assert main([*EVALUATE, "--budgets", "0.5,0.02", "--burst", "138"]) == 0
    capsys.readouterr()
    before = _files(built)
    assert main([*BUILD, "-o", "jan.history", "--sketch", "b.sketch", "--key-file",
                 "fleet.key", "--fit", "0.1,0.5", "--burst", "1"]) == 2
    err = capsys.readouterr().err
    assert "budgets 0.1, 0.5 x 0.363 operations per event" in err and "--burst 28" in err
    assert not Path("b.sketch").exists() and _files(built) == before


def test_precision_without_any_match_point_found_is_not_a_number(built, capsys):
    """A budget that keeps too little to finish a match (history at 2%): no point found, no
    precision (it was 100%), in the text and the JSON."""
    assert main([*EVALUATE, "--budgets", "0.02", "--burst", "138", "--json", "e.json"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()[2:]]
    written = json.loads(Path("e.json").read_text())["rows"]
    assert [r["policy"] for r in written] == ["random", "history"]
    assert written[1]["point_recall"] == 0 and written[1]["precision"] is None
    assert written[0]["point_recall"] > 0 and written[0]["precision"] == 1.0
    assert [r[4] for r in rows] == ["100.0%", "n/a"]


def test_a_history_of_another_partition_is_named_with_what_differs(built, capsys):
    assert main([*BUILD, "--partition", "destination", "-o", "dest.history"]) == 0
    capsys.readouterr()
    assert main([*EVALUATE, "--history", "dest.history"]) == 2
    out, err = capsys.readouterr()
    assert err.strip() == ("acep history evaluate: --history dest.history was built for "
                           "another definition than the sketch jan.sketch: partition "
                           "'destination' (the sketch's: 'origin')") and out == ""


@pytest.mark.parametrize("value", ["0", "0.5", "-3", "inf", "nan", "x"])
@pytest.mark.parametrize("command", [
    ["evaluate", "s", "e.jsonl", "--key-file", "k"],
    ["build", "e.jsonl", "-p", "a b", "-w", "3", "-o", "h", "--sketch", "s", "--key-file", "k",
     "--fit", "0.1"],
])
def test_burst_is_one_type_with_one_range_and_message(capsys, command, value):
    with pytest.raises(SystemExit) as exc:
        main(["history", *command, "--burst", value])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and (f"argument --burst: the bucket depth must be a number of "
                                    f"events >= 1, got {value!r}") in err, err


@pytest.mark.parametrize("option, command", [
    ("--budgets", ["evaluate", "s", "e.jsonl", "--key-file", "k"]),
    ("--fit", ["build", "e.jsonl", "-p", "a b", "-w", "3", "-o", "h", "--sketch", "s",
               "--key-file", "k"]),
])
@pytest.mark.parametrize("value, message", [
    ("0.1,,0.2", "'0.1,,0.2' has an empty item"),
    ("0.1,", "'0.1,' has an empty item"),
    ("0.1,x", "'0.1,x' is not a comma-separated list of numbers"),
    ("0", "budget ratios must be in (0, 100], got '0'"),
])
def test_budget_ratios_are_refused_by_the_parser_naming_the_option(capsys, option, command,
                                                                   value, message):
    with pytest.raises(SystemExit) as exc:
        main(["history", *command, option, value])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and f"argument {option}: {message}" in err, err


@pytest.mark.parametrize("pattern, fit, message", [
    ("late verylate late", ["--fit", "0.01", "--burst", "2"],
     "acep history build: budget 0.01 x 0.363 operations per event with a burst of 2 events"),
    ("nosuch other", ["--fit", "0.1"],
     "acep: error: the training stream has no operations to fit a budget to"),
])
def test_a_refused_fit_writes_neither_the_history_nor_the_sketch(built, pattern, fit, message):
    """The history was written before the fit refused the budget: a refused command left
    a new history beside the old sketch (or none)."""
    before = _files(built)
    done = run_acep(*BUILD[:4], pattern, *BUILD[5:], "-o", "jan.history", "--sketch",
                    "jan.sketch", "--key-file", "fleet.key", *fit)
    assert done.returncode in (1, 2) and done.stderr.startswith(message), done.stderr
    assert done.stderr.count("\n") == 1 and done.stdout == ""
    done = run_acep(*BUILD[:4], pattern, *BUILD[5:], "-o", "new.history", "--sketch",
                    "new.sketch", "--key-file", "fleet.key", *fit)
    assert done.returncode in (1, 2) and _files(built) == before, done.stderr


@pytest.mark.parametrize("options, message", [
    (["--sketch", "new.sketch"], "--sketch needs --key-file (sketches are signed)"),
    (["--fit", "0.1"], "--fit fits a sketch: it needs --sketch"),
    (["--sketch", "new.sketch", "--key-file", "fleet.key", "--search", "4"],
     "--search tunes the fitted reserves: it needs --fit"),
])
def test_options_that_do_not_go_together_are_a_usage_error(built, options, message):
    """As ``acep train`` refuses the same options: exit 2 and the command's name (it was
    exit 1, as for a bad file)."""
    before = _files(built)
    done = run_acep(*BUILD, "-o", "new.history", *options)
    assert (done.returncode, done.stdout, done.stderr) == (
        2, "", f"acep history build: {message}\n")
    assert _files(built) == before


def test_a_predicate_over_a_column_the_spec_leaves_out_is_named_before_the_events(built):
    """``acep match`` says so before reading; build read the events and blamed event 11, and
    evaluate the first event of a bound type, for a typo in the options."""
    before = _files(built)
    done = run_acep(*BUILD, "--where", "verylate.delya > late.delay", "-o", "new.history")
    assert (done.returncode, done.stdout, done.stderr) == (
        2, "", "acep history build: --where: 'delya' is not among the event spec's "
               "'attributes' "
               "(delay, distance, origin, destination)\n")
    assert _files(built) == before
    assert run_acep(*BUILD, "--where", "verylate.delay > late.delay", "-o", "d.history",
                    "--sketch", "d.sketch", "--key-file", "fleet.key").returncode == 0
    Path("nodelay.json").write_text(json.dumps({
        "tag": "date", "attributes": ["distance", "origin"],
        "type": {"column": "delay", "bins": [-1e9, 0, 15, 60, 1e9],
                 "labels": ["early", "ontime", "late", "verylate"]}}))
    done = run_acep("history", "evaluate", "d.sketch", "feb.parquet", "--key-file", "fleet.key",
                    "--spec", "nodelay.json", "--json", "e.json")
    assert (done.returncode, done.stdout, done.stderr) == (
        2, "", "acep history evaluate: the sketch's predicates: 'delay' is not among the "
               "event spec's 'attributes' (distance, origin)\n")
    assert not Path("e.json").exists()


def test_build_names_a_bad_pattern_before_it_reads_the_events(built):
    """A malformed pattern was found only after the whole file was read: here the file is
    damaged, and the pattern is what the user hears about first."""
    from support.damaged import corrupt_parquet

    corrupt_parquet(Path("feb.parquet"))
    done = run_acep(*BUILD[:4], "late (verylate", *BUILD[5:], "-o", "new.history")
    assert done.returncode == 2 and done.stderr.startswith(
        "acep: pattern error at position 14: expected ')'"), done.stderr
    assert not Path("new.history").exists()


def test_evaluate_names_an_events_file_without_events(built):
    Path("empty.jsonl").write_text("")
    done = run_acep(*EVALUATE[:3], "empty.jsonl", *EVALUATE[4:], "--json", "e.json")
    assert (done.returncode, done.stdout, done.stderr) == (
        2, "", "acep history evaluate: empty.jsonl: no events to evaluate the sketch on\n")
    assert not Path("e.json").exists()


@pytest.mark.skipif(shutil.which("xelatex") is not None, reason="xelatex is installed")
def test_a_plot_type_that_needs_tex_is_refused_without_it(built):
    """matplotlib lists .pgf as a type it writes, but its savefig runs xelatex: without it, a
    traceback of 90 lines after the history was read."""
    done = run_acep("history", "inspect", "jan.history", "--plot", "h.pgf")
    assert (done.returncode, done.stdout, done.stderr) == (
        2, "", "acep history inspect: --plot h.pgf: matplotlib writes .pgf files with xelatex, "
               "which is not installed (write .png, .svg or .pdf)\n")
    assert not Path("h.pgf").exists()


@pytest.mark.parametrize("command", [
    BUILD[:4] + ["a b", "-o", "new.history"], ["match", "feb.parquet", "-p", "a b"]])
@pytest.mark.parametrize("unit", ["", "h"])
def test_a_window_too_large_for_a_float_is_refused_by_the_parser(built, command, unit):
    """400 digits: an OverflowError's traceback (exit 1) from the window's conversion."""
    done = run_acep(*command, "-w", "9" * 400 + unit)
    assert done.returncode == 2 and done.stderr.splitlines()[-1] == (
        f"acep {' '.join(command[:2 if command[0] == 'history' else 1])}: error: argument "
        "--window/-w: bad window 999999999999... (400 digits): too large a window (at most "
        "1.8e+308 seconds)"), \
        done.stderr
    assert "Traceback" not in done.stderr and not Path("new.history").exists()


@pytest.mark.parametrize("command", ["build", "inspect", "evaluate"])
def test_help_gives_every_default(command):
    """Each option that has a default says it in --help (--top, -k, --partition and --spec
    did not)."""
    import argparse

    from acep.cli import _parser

    def sub(parser, name):
        choices = next(a for a in parser._actions
                       if isinstance(a, argparse._SubParsersAction)).choices
        return choices[name]

    parser = sub(sub(_parser(), "history"), command)
    shown = " ".join(run_acep("history", command, "--help").stdout.split())
    for action in parser._actions:
        has_default = action.default not in (None, False, [], argparse.SUPPRESS) and \
            not action.required
        if action.option_strings and (has_default or action.dest in ("partition", "spec")):
            assert "default" in action.help, action.option_strings
            assert " ".join((action.help % vars(action)).split()) in shown


@pytest.mark.parametrize("argv, said", [
    ([*EVALUATE[:2], "jan.history", *EVALUATE[3:]],
     "jan.history is a history graph, not a signed sketch (acep history build --sketch "
     "writes one)"),
    ([*EVALUATE[:2], "feb.parquet", *EVALUATE[3:]],
     "feb.parquet is neither a history graph nor a sketch (no 'format' field acep-history "
     "or acep-sketch)"),
    ([*EVALUATE[:2], "gone.sketch", *EVALUATE[3:]], "gone.sketch: no such file"),
    ([*EVALUATE[:2], "folder", *EVALUATE[3:]], "folder: a directory, not a signed sketch file"),
    ([*EVALUATE, "--history", "jan.sketch"],
     "--history jan.sketch is a signed sketch, not a history graph (acep history build -o "
     "writes one)"),
    ([*EVALUATE, "--history", "feb.parquet"],
     "--history feb.parquet is neither a history graph nor a sketch (no 'format' field "
     "acep-history or acep-sketch)"),
    ([*EVALUATE, "--history", "gone.history"], "--history gone.history: no such file"),
    (["history", "inspect", "gone.history"], "gone.history: no such file"),
    (["history", "inspect", "folder"], "folder: a directory, not a history or sketch file"),
])
def test_a_file_of_another_kind_is_named_for_what_it_is(built, argv, said):
    """It was msgpack's 'ExtraData: unpack(b) received extra data', a format field's
    'acep-history', expected 'acep-sketch', or Python's '[Errno 2] No such file ...'."""
    Path("folder").mkdir()
    done = run_acep(*argv, "--json" if argv[1] == "evaluate" else "--plot", "out.png")
    command = " ".join(argv[:2])
    assert (done.returncode, done.stdout, done.stderr) == (2, "", f"acep {command}: {said}\n")
    assert not Path("out.png").exists()


def test_a_killed_inspect_leaves_no_half_plot(built):
    """matplotlib opens the plot's file before it draws into it: a run killed as soon as the
    file showed left it empty. Now it shows whole or not at all."""
    plot = Path("h.svg")
    for _ in range(3):
        plot.unlink(missing_ok=True)
        run = subprocess.Popen([sys.executable, "-m", "acep.cli", "history", "inspect",
                                "jan.history", "--plot", str(plot)],
                               env={**os.environ, "PYTHONPATH": str(ROOT)},
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        while not plot.exists() and run.poll() is None:
            time.sleep(0.0005)
        run.send_signal(signal.SIGKILL)
        run.wait()
        assert plot.read_bytes().rstrip().endswith(b"</svg>")
    assert sorted(p.name for p in built.iterdir() if p.name.startswith(".")) == []


def test_the_build_summary_says_one_bundle_not_one_bundles(tmp_path):
    (tmp_path / "ev.jsonl").write_text('{"type": "a", "t": 1}\n{"type": "b", "t": 2}\n')
    done = run_acep("history", "build", str(tmp_path / "ev.jsonl"), "-p", "a b", "-w", "3", "-o",
                    str(tmp_path / "h.history"))
    assert done.returncode == 0 and ", 1 bundle, " in done.stderr, done.stderr


def test_the_build_summary_names_the_key_that_signed_the_sketch(tmp_path):
    """As inspect, --check and the collector's PUT answer do: an operator matches it with
    the fingerprint the devices report."""
    (tmp_path / "ev.jsonl").write_text('{"type": "a", "t": 1}\n{"type": "b", "t": 2}\n')
    (tmp_path / "fleet.key").write_bytes(b"a signing key\n")
    sketch, key = tmp_path / "s.sketch", str(tmp_path / "fleet.key")
    done = run_acep("history", "build", str(tmp_path / "ev.jsonl"), "-p", "a b", "-w", "3", "-o",
                    str(tmp_path / "h.history"), "--sketch", str(sketch), "--key-file", key)
    fingerprint = key_fingerprint(b"a signing key")
    assert done.returncode == 0 and done.stderr.splitlines()[-1] == (
        f"acep: sketch signed with key {fingerprint}, {sketch.stat().st_size:,} bytes -> "
        f"{sketch}"), done.stderr
    shown = run_acep("history", "inspect", str(sketch), "--key-file", key)
    assert f"\nsigned with key {fingerprint} (verified with --key-file)\n" in shown.stdout


def test_a_sketch_over_a_mebibyte_is_built_with_a_warning_and_read_back(built):
    """16,905 cells (k = 4, 64 bins): build wrote the 1.2 MB sketch, and then inspect and
    evaluate refused it as 'sketch is 1048577 bytes, above the limit' (the bytes read, not
    the file's): a file the user named is read whatever its size, its MAC checked first."""
    done = run_acep(*BUILD[:4], "ontime late verylate late ontime late", "-w", "6h", "-k", "4",
                    "--spec", "flights", "--bins", "64", "-o", "big.history", "--sketch",
                    "big.sketch", "--key-file", "fleet.key")
    size = Path("big.sketch").stat().st_size
    assert done.returncode == 0 and size > 1 << 20
    assert "acep: history of 2,000 events: 16,905 cells, " in done.stderr, done.stderr
    assert done.stderr.splitlines()[-1] == (
        f"acep: warning: the sketch ({size:,} bytes, 16,905 cells) is above the 1,048,576 "
        "bytes an agent takes by default: raise sketch.max_bytes in its config, or give "
        "fewer --bins or a smaller -k")
    shown = run_acep("history", "inspect", "big.sketch", "--key-file", "fleet.key")
    assert shown.returncode == 0 and f"bytes: {size:,}" in shown.stdout, shown.stderr
    done = run_acep(*EVALUATE[:2], "big.sketch", *EVALUATE[3:], "--budgets", "0.5")
    assert done.returncode == 0 and "50%  random" in done.stdout, done.stderr
    with pytest.raises(ValueError, match=f"big.sketch: sketch is {size:,} bytes, above the "
                                         "limit of 1,048,576 bytes"):
        Sketch.load("big.sketch", b"a signing key")


@pytest.mark.parametrize("argv, option", [
    ([*BUILD, "-o"], "--output/-o"),
    ([*BUILD, "-o", "new.history", "--key-file", "fleet.key", "--sketch"], "--sketch"),
    ([*EVALUATE, "--json"], "--json"),
    (["history", "inspect", "jan.history", "--plot"], "--plot"),
])
def test_an_empty_output_path_is_refused(built, argv, option):
    """``-o "$OUT"`` with OUT unset: -o failed after the work on a rename to '', --sketch
    said '-o new.history: overlaps --sketch ', and --json and --plot wrote nothing, exit 0.
    Refused as every empty path is, when the options are read (acep.arguments)."""
    before = _files(built)
    done = run_acep(*argv, "")
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.splitlines()[-1] == (f"acep history {argv[1]}: error: argument {option}: "
                                            "an empty path (an unset shell variable?)")
    assert _files(built) == before
