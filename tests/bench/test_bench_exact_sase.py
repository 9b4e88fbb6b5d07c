"""SASE side by side in bench/exact: its files, the deviation classifier and the CLI's checks.

CI has no SASE jar: the test that runs the real one needs ``ACEP_SASE_JAR`` (the path of
SASE's build/sase.jar) and is skipped without it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from acep.events import Event
from bench.exact import sase
from bench.exact.core import three_types
from bench.exact.stock import stock_ticker

ROOT = Path(__file__).resolve().parents[2]


# --------------------------------------------------------------------------- files


def test_events_file_reads_back_what_was_written(tmp_path):
    events = stock_ticker(500, 10, 0.7, 2008)
    path = tmp_path / "events.txt"
    sase.write_events(events, path)
    lines = path.read_text().splitlines()
    assert lines[0] == sase.EVENTS_HEADER and len(lines) == 501
    first = events[0].attrs
    assert lines[1] == f"0 0 Stock {first['symbol']} {first['price']} {first['volume']}"
    assert sase.read_events(path) == events


def test_events_file_writes_a_missing_attribute_as_zero(tmp_path):
    events = three_types(50)
    sase.write_events(events, tmp_path / "events.txt")
    back = sase.read_events(tmp_path / "events.txt")
    assert [e.type for e in back] == [e.type for e in events]
    assert [e.attrs["price"] for e in back] == [e.attrs["price"] for e in events]
    assert {e.attrs["symbol"] for e in back} == {e.attrs["volume"] for e in back} == {0}


@pytest.mark.parametrize("event, field", [
    (Event("Stock", 1.5, {"price": 1}), "tag 1.5"),
    (Event("Stock", 1.0, {"price": 2 ** 40}), "price"),
    (Event("Stock", 1.0, {"volume": "12"}), "volume"),
    (Event("two words", 1.0, {}), "type"),
])
def test_events_file_refuses_what_the_jar_cannot_hold(tmp_path, event, field):
    good = Event("Stock", 0.0, {"price": 1})
    with pytest.raises(ValueError, match=f"event 1: {field}"):
        sase.write_events([good, event], tmp_path / "events.txt")


def test_nfa_files_read_back_for_every_query():
    for q in sase.QUERIES:
        assert sase.parse_nfa(sase.nfa_text(q.nfa)) == q.nfa


def test_nfa_file_is_in_the_jars_format():
    q1 = next(q for q in sase.QUERIES if q.name == "Q1")
    assert sase.nfa_text(q1.nfa).splitlines() == [
        "SelectionStrategy = partition-contiguity | TimeWindow = 500 | "
        "partitionAttribute = symbol",
        "State=1 & type = kleeneClosure & eventtype = Stock | edgetype = begin | "
        "edgetype = take & price > $previous.price | edgetype = proceed",
        "State=2 & type = normal & eventtype = Stock | edgetype = begin & "
        "price < $previous.price",
        "end"]


def test_queries_say_the_same_as_their_nfa():
    for q in sase.QUERIES:
        strategy = q.nfa.strategy.replace("-", "_")
        assert strategy in q.text and f"WITHIN {q.nfa.window}" in q.text
        assert f"[{q.nfa.partition}]" in q.text
        assert q.quick < q.events


# --------------------------------------------------------------------------- classifier


def nfa(strategy: str, window: int = 10, kleene: bool = True) -> sase.Nfa:
    return sase.Nfa(strategy, window, "symbol",
                    (sase.State(kleene, "Stock"), sase.State(False, "Stock")))


TIMES = [float(t) for t in range(40)]


def test_identical_sets_have_no_difference():
    found = [(0, 1, 2), (3, 5)]
    c = sase.classify(found, found, TIMES, nfa("skip-till-next-match"))
    assert c["identical"] == 2 and c["ours_only"] == c["sase_only"] == c["unexplained"] == 0
    assert set(c["deviations"].values()) == {0}


def test_a_closing_event_outside_the_window_is_a_known_deviation():
    # W = 10: (0, 3, 12) closes 12 after its start, its other events fit; (0, 11, 12) does
    # not fit without its closing event either
    c = sase.classify([(1, 2)], [(1, 2), (0, 3, 12), (0, 11, 12)], TIMES,
                      nfa("skip-till-any-match"))
    assert c["identical"] == 1 and c["sase_only"] == 2
    assert c["deviations"]["kleene_close_outside_window"] == 1
    assert c["unexplained"] == 1
    assert c["unexplained_examples"] == [{"only": "sase", "match": [0, 11, 12]}]


def test_matches_closing_after_sases_first_close_are_a_known_deviation():
    # SASE closed 0 1 2 at 5 and stopped; ours also closes at 7, and goes on to close at 8;
    # 3 4 9 has nothing in SASE's set that starts the same way
    ours = [(0, 1, 2, 5), (0, 1, 2, 7), (0, 1, 2, 6, 8), (3, 4, 9)]
    c = sase.classify(ours, [(0, 1, 2, 5)], TIMES, nfa("skip-till-next-match"))
    assert c["identical"] == 1 and c["ours_only"] == 3
    assert c["deviations"]["first_close_ends_run"] == 2
    assert c["unexplained_examples"] == [{"only": "ours", "match": [3, 4, 9]}]


def test_a_later_close_is_not_explained_by_a_later_sase_match():
    # SASE's 0 1 9 closes after ours 0 1 5: no SASE run stopped before 5
    c = sase.classify([(0, 1, 5)], [(0, 1, 9)], TIMES, nfa("skip-till-next-match"))
    assert c["unexplained"] == 2


def test_take_proceed_forks_either_way_under_contiguity():
    # event 2 both extends and closes: SASE closed (0 1 2) and missed (0 1 2 3 4); event 7
    # too: SASE took it and missed (5 6 7)
    sase_found = [(0, 1, 2), (5, 6, 7, 8)]
    ours = [(0, 1, 2), (0, 1, 2, 3, 4), (5, 6, 7), (5, 6, 7, 8)]
    c = sase.classify(ours, sase_found, TIMES, nfa("partition-contiguity"))
    assert c["identical"] == 2 and c["ours_only"] == 2
    assert c["deviations"] == {"take_proceed_fork": 2, "kleene_close_outside_window": 0,
                               "first_close_ends_run": 0}
    assert c["unexplained"] == 0


def test_without_a_kleene_component_every_difference_is_unexplained():
    c = sase.classify([(0, 1, 2), (0, 1, 5)], [(0, 1, 2), (0, 3, 12)], TIMES,
                      nfa("skip-till-next-match", kleene=False))
    assert c["identical"] == 1 and c["unexplained"] == 2
    assert set(c["deviations"].values()) == {0}


def test_sase_duplicates_are_counted():
    c = sase.classify([(0, 1)], [(0, 1), (0, 1)], TIMES, nfa("skip-till-any-match"))
    assert c["identical"] == 1 and c["sase_duplicates"] == 1


# --------------------------------------------------------------------------- command line


def run_bench(tmp_path: Path, jar: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bench.exact", "--quick", "--sase-jar",
                           str(jar), "--out", str(tmp_path / "out")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


def fake_jar(path: Path, entry: str = sase.ENGINE_CLASS) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(entry, b"not a class")
    return path


@pytest.mark.parametrize("make, message", [
    (lambda d: d / "absent.jar", "absent.jar: no such file"),
    (lambda d: (d / "text.jar").write_text("hello") and d / "text.jar",
     "text.jar: not a jar (zip) file"),
    (lambda d: fake_jar(d / "other.jar", "Other.class"),
     f"other.jar: has no {sase.ENGINE_CLASS}, not the SASE jar"),
])
def test_a_bad_jar_is_one_clear_error(tmp_path, make, message):
    done = run_bench(tmp_path, make(tmp_path))
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1].startswith("error: --sase-jar ")
    assert message in done.stderr
    assert not (tmp_path / "out" / "exact.json").exists()


def test_no_javac_is_one_clear_error(tmp_path):
    empty = tmp_path / "bin"
    empty.mkdir()
    done = run_bench(tmp_path, fake_jar(tmp_path / "sase.jar"),
                     env={**os.environ, "PATH": str(empty)})
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == (
        "error: javac not found on the PATH: the SASE side by side needs a JDK (javac and "
        "java)")


@pytest.mark.skipif(shutil.which("javac") is None, reason="no javac")
def test_a_jar_the_driver_cannot_compile_against_is_one_clear_error(tmp_path):
    done = run_bench(tmp_path, fake_jar(tmp_path / "sase.jar"))
    assert done.returncode == 2
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("error: javac could not compile Driver.java against ")


# --------------------------------------------------------------------------- the real jar


@pytest.mark.skipif(not os.environ.get("ACEP_SASE_JAR"),
                    reason="ACEP_SASE_JAR (SASE's build/sase.jar) is not set")
def test_the_real_jar_side_by_side():
    section = sase.measure(Path(os.environ["ACEP_SASE_JAR"]), quick=True, runs=1)
    assert section["measured"] and len(section["rows"]) == len(sase.QUERIES)
    for row in section["rows"]:
        c = row["comparison"]
        assert c["unexplained"] == 0, c["unexplained_examples"]
        assert c["sase"] == row["sase"]["matches"] and c["ours"] == row["ours"]["matches"]
        assert row["sase"]["events_per_s"] > 0 and row["ours"]["core"] == "compiled"
    q1, q2 = section["rows"][:2]
    assert q1["comparison"]["ours_only"] == q1["comparison"]["sase_only"] == 0
    assert q2["comparison"]["ours_only"] == q2["comparison"]["sase_only"] == 0


@pytest.mark.skipif(not os.environ.get("ACEP_SASE_JAR"),
                    reason="ACEP_SASE_JAR (SASE's build/sase.jar) is not set")
def test_the_real_jar_misses_take_proceed_forks(tmp_path):
    """SASE's own Q1 (examples/Q1: a rise, then volume < 150): some events both extend the
    Kleene part and close, and the jar keeps only one of the two matches."""
    text = ("PATTERN SEQ(Stock+ a[], Stock b) WHERE partition_contiguity(a[], b) { [symbol] "
            "and a[1].price % 500 == 0 and a[i].price > a[i-1].price and b.volume < 150 } "
            "WITHIN 1000")
    nfa = sase.Nfa("partition-contiguity", 1000, "symbol",
                   (sase.State(True, "Stock", "price % 500 == 0", sase.RISE),
                    sase.State(False, "Stock", "volume < 150")))
    jar, events = Path(os.environ["ACEP_SASE_JAR"]), stock_ticker(40_000, 2, 0.7, 2008)
    sase.compile_driver(jar, tmp_path)
    sase.write_events(events, tmp_path / "events.txt")
    (tmp_path / "query.nfa").write_text(sase.nfa_text(nfa))
    sase.run_driver(jar, tmp_path, 0, 1)
    _, ours = sase.run_ours(text, events, 1)
    c = sase.classify(ours, sase.read_matches(tmp_path / "matches.txt"),
                      [e.t for e in events], nfa)
    assert c["deviations"]["take_proceed_fork"] > 0 and c["unexplained"] == 0
    assert c["sase_only"] == 0
