"""`acep demo`, the README's main command: the whole loop in real processes, as a user runs it.

A collector on loopback, the Spark trainer, an agent under a budget, and the report. The
checks: the report's figures agree with what the collector stored; the sketch the agent
downloaded is the one a single process trains on the same days; the trained history beats
the agent's default policy at the same budget; every stored match is a true match.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.cli import run_acep
from support.procs import alive, descendants

pytest.importorskip("pyspark", reason="the demo needs PySpark (pip install 'acep[demo]')")
pytest.importorskip("aiohttp", reason="the demo's collector needs aiohttp")

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [
    str(ROOT), os.environ.get("PYTHONPATH")]))}


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """One real run, as a user types it: a relative --workdir with a space, in a directory
    that holds another file (the agent runs inside the work directory)."""
    home = tmp_path_factory.mktemp("home")
    (home / "demo run").mkdir()
    (home / "demo run" / "notes.txt").write_text("mine")
    done = run_acep("demo", "--workdir", "demo run", timeout=900, cwd=home)
    work = home / "demo run"
    assert done.returncode == 0, done.stderr[-3000:]
    return work, done.stdout, json.loads((work / "report.json").read_text())


def test_demo_prints_the_report_and_keeps_its_files(demo):
    work, out, report = demo
    assert "bundle recall vs the unconstrained run" in out and str(work) in out
    for name in ("collector.db", "report.png", "downloaded.sketch", "learned.sketch",
                 "agent-metrics.jsonl"):
        assert (work / name).is_file(), name
    assert list((work / "archive").rglob("*.parquet"))
    assert report["train_events"] + report["test_events"] == report["events"] == 113_493
    assert out.startswith("acep demo: the loop on 113,493 flights (Jan 1-7, 2001)\n")
    assert (work / "notes.txt").read_text() == "mine" and (work / ".acep-demo").is_file()


def test_the_collector_holds_every_match_the_agent_uploaded(demo):
    _, _, report = demo
    agent, stored = report["agent"], report["collector"]
    assert agent["events_in"] == report["test_events"] and agent["policy"] == "history"
    assert stored["matches"] == agent["matches"] > 1000
    assert stored["exact"] + stored["not_exact"] <= stored["matches"]
    assert stored["exact"] > 0 and stored["not_exact"] > 0


def test_the_downloaded_sketch_is_what_one_process_trains_and_fits(demo):
    from acep.events import PRESETS, read_all
    from history import Sketch, build_history, fit_budgets
    from trainer.demo import FIT_RATIOS, LOOP, Options, default_data, split

    work, _, report = demo
    train_part, _ = split(read_all(default_data(), PRESETS["flights"]), 4.0)
    graph = build_history(LOOP["pattern"], train_part, LOOP["window"], LOOP["k"],
                          where=LOOP["where"], partition="origin").canonical()
    sketch, fit = fit_budgets(Sketch.from_graph(graph), train_part, FIT_RATIOS,
                              partition="origin", burst=Options(work, work).burst)
    key = (work / "fleet.key").read_bytes().strip()
    assert (work / "downloaded.sketch").read_bytes() == sketch.to_bytes(key)
    assert report["train"]["fit"]["ratios"].keys() == {str(r) for r in FIT_RATIOS}
    assert report["train"]["fit"]["bundles"] == fit["bundles"]


def test_a_second_run_in_the_same_workdir_starts_afresh(tmp_path):
    """Only the demo's own files go: a stale outbox would make the agent skip the stream."""
    from trainer.demo import RUN_FILES, _clear_previous_run

    for name in RUN_FILES[1:]:
        (tmp_path / name).write_text("old")
    (tmp_path / "archive").unlink()
    (tmp_path / "archive" / "device=x").mkdir(parents=True)
    (tmp_path / "collector.db-wal").write_text("old")
    (tmp_path / "notes.txt").write_text("mine")
    _clear_previous_run(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]


def test_the_trained_history_beats_the_default_policy(demo):
    _, _, report = demo
    history, oldest = report["history_rl"], report["oldest_first"]
    assert history["precision"] == 1.0  # shedding loses matches, never invents one
    assert history["bundle_recall"] > oldest["bundle_recall"] + 0.2
    assert history["bundles"] == oldest["bundles"] > 500


# --------------------------------------------------------------------------- refused at once


def acep_demo(*args, **kw):
    """``acep demo ARGS`` run from the checkout's root (``kw``: more of :func:`run_acep`)."""
    return run_acep("demo", *args, cwd=ROOT, **kw)


def refused(done, *needles):
    """One line on stderr with each needle, nothing on stdout, exit 2."""
    assert (done.returncode, done.stdout) == (2, ""), done.stderr[-2000:]
    assert len(done.stderr.splitlines()) == 1, done.stderr[-2000:]
    for needle in needles:
        assert needle in done.stderr, done.stderr
    return done.stderr


@pytest.fixture(scope="module")
def flights(tmp_path_factory):
    """Variants of the embedded week as --data: (directory, {name: path})."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq

    from trainer.demo import default_data

    d = tmp_path_factory.mktemp("flights")
    week = pq.read_table(default_data())
    stamps = week.column("date").to_numpy()
    day = week.slice(0, int(np.searchsorted(stamps, np.datetime64("2001-01-02"))))
    pq.write_table(day, d / "one-day.parquet")
    pcsv.write_csv(day, d / "one-day.csv")
    pq.write_table(week.slice(0, 0), d / "empty.parquet")
    pq.write_table(pa.table({"x": [1, 2, 3]}), d / "no-flights.parquet")
    order = np.arange(len(day))
    order[[10, 5000]] = order[[5000, 10]]
    pq.write_table(day.take(order), d / "unsorted.parquet")
    return d, {p.name: p for p in d.iterdir()}


@pytest.mark.parametrize("args, needle", [
    (["--budget", "0"], "argument --budget: the share must be a number in (0, 1], got '0'"),
    (["--budget", "1.5"], "argument --budget: the share must be a number in (0, 1]"),
    (["--budget", "-0.1"], "argument --budget: the share must be a number in (0, 1]"),
    (["--budget", "nan"], "argument --budget: the share must be a number in (0, 1]"),
    (["--train-days", "0"], "argument --train-days: the days must be a number > 0, got '0'"),
    (["--train-days", "inf"], "argument --train-days: the days must be a number > 0"),
    (["--cores", "0"], "argument --cores: the cores must be >= 1, got 0"),
])
def test_a_bad_option_is_refused_by_its_name(tmp_path, args, needle):
    done = acep_demo("--workdir", tmp_path / "w", *args)
    assert (done.returncode, done.stdout) == (2, "") and needle in done.stderr
    assert not (tmp_path / "w").exists()


def test_more_cores_than_the_machine_has_are_refused(tmp_path):
    from trainer.spark import machine_cores

    n = machine_cores()
    refused(acep_demo("--workdir", tmp_path / "w", "--cores", n + 1),
            f"acep demo: --cores {n + 1}: this machine has {n}")
    assert not (tmp_path / "w").exists()


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no CPU affinity here")
def test_cores_are_those_the_process_may_run_on(tmp_path):
    """In a container or under taskset, the machine's other cores are not the demo's: a
    local Spark session given them would run more Python workers than there are cores."""
    one = {min(os.sched_getaffinity(0))}
    done = acep_demo("--workdir", tmp_path / "w", "--cores", "2",
                     preexec_fn=lambda: os.sched_setaffinity(0, one))
    refused(done, "acep demo: --cores 2: this machine has 1")


@pytest.mark.parametrize("name, args, needle", [
    ("missing.parquet", [], "--data: {d}/missing.parquet: no such file"),
    (".", [], "--data: {d}: a directory, not a file of events"),
    ("one-day.csv", [], "--data {d}/one-day.csv: the demo takes a Parquet file of flights"),
    ("no-flights.parquet", [], "field 'date': no such column (columns: x)"),
    ("empty.parquet", [], "--data {d}/empty.parquet: no flights in it"),
    ("unsorted.parquet", [], "the flights are not in time order (flight 12 departs at "),
    ("one-day.parquet", [], "--train-days 4 leaves no flights for the agent: the data spans "
                            "0.9986 days (Jan 1, 2001); give fewer"),
    ("one-day.parquet", ["--train-days", "0.001"],
     "--train-days 0.001: the first 0.001 days hold no match of the pattern"),
])
def test_data_the_demo_cannot_use_is_refused_before_anything_starts(tmp_path, flights, name,
                                                                    args, needle):
    d, _ = flights
    done = acep_demo("--workdir", tmp_path / "w", "--data", d / name, *args)
    refused(done, "acep demo: ", needle.format(d=d))
    assert not (tmp_path / "w").exists()  # no directory made, no collector, no Spark


def test_a_split_or_budget_that_leaves_nothing_to_score_is_refused(tmp_path):
    refused(acep_demo("--workdir", tmp_path, "--train-days", "1000"),
            "--train-days 1000 leaves no flights for the agent: the data spans 6.999 days "
            "(Jan 1-7, 2001)")
    refused(acep_demo("--workdir", tmp_path, "--budget", "1e-9"),
            "--budget 1e-09: 2.87e-09 operations per event", "give --budget 0.00035 or more")
    assert list(tmp_path.iterdir()) == []


def test_a_workdir_that_cannot_be_one_is_refused(tmp_path):
    (tmp_path / "file").write_text("x")
    refused(acep_demo("--workdir", tmp_path / "file"), f"--workdir {tmp_path}/file: not a "
                                                       "directory")
    refused(acep_demo("--workdir", tmp_path / "file" / "sub"),
            f"--workdir {tmp_path}/file/sub: not a directory ({tmp_path}/file is a file)")
    refused(acep_demo("--workdir", "/proc/acep-demo"), "--workdir /proc/acep-demo: cannot "
                                                        "write in /proc")


def test_a_directory_with_files_of_another_run_is_never_cleared(tmp_path):
    """The README walkthrough's `demo` directory holds a real collector's database and
    archive: the demo would have deleted them."""
    (tmp_path / "collector.db").write_bytes(b"a collector's matches")
    (tmp_path / "archive" / "date=2001-01-01").mkdir(parents=True)
    refused(acep_demo("--workdir", tmp_path),
            f"--workdir {tmp_path} holds collector.db, archive, which the demo would "
            "replace, and no .acep-demo file")
    assert (tmp_path / "collector.db").read_bytes() == b"a collector's matches"
    assert (tmp_path / "archive" / "date=2001-01-01").is_dir()


def test_a_relative_workdir_is_taken_in_the_current_directory(tmp_path, monkeypatch):
    from trainer.demo import MARK, check_workdir, claim_workdir

    monkeypatch.chdir(tmp_path)
    work = claim_workdir(check_workdir(Path("a b") / "w"))
    assert work == tmp_path / "a b" / "w" and (work / MARK).is_file()
    (work / "collector.db").write_text("old")  # a demo run's: marked
    assert check_workdir(Path("a b/w")) == work


def test_java_home_without_java_is_refused_before_anything_starts(tmp_path):
    done = acep_demo("--workdir", tmp_path / "w", env={"JAVA_HOME": str(tmp_path)})
    refused(done, f"acep demo: JAVA_HOME is {tmp_path}, which has no bin/java")
    assert not (tmp_path / "w").exists()


def test_the_report_names_the_days_and_the_budget_as_given():
    import numpy as np

    from acep.events import EventBatch
    from trainer.demo import _dates, _percent

    def days(*stamps):
        tags = np.array(stamps, dtype="datetime64[s]").astype(np.int64).astype(float)
        return _dates(EventBatch.from_events([{"type": "a", "t": t} for t in tags]))

    assert days("2001-01-01T00:01", "2001-01-07T23:59") == "Jan 1-7, 2001"
    assert days("2001-01-01T00:01", "2001-01-01T23:59") == "Jan 1, 2001"
    assert days("2001-01-30T00:01", "2001-02-02T00:00") == "Jan 30 - Feb 2, 2001"
    assert days("2000-12-31T00:01", "2001-01-02T00:00") == "Dec 31, 2000 - Jan 2, 2001"
    assert [_percent(b) for b in (0.1, 0.025, 1.0)] == ["10%", "2.5%", "100%"]


def test_an_agent_that_fails_is_one_line_naming_its_log(tmp_path):
    from trainer.demo import agent_config, run_agent

    (tmp_path / "device.token").write_text("a token\n")
    config = agent_config(tmp_path, "http://127.0.0.1:9", 1e-9, 1024.0)
    with pytest.raises(RuntimeError) as caught:
        run_agent(tmp_path, config)
    message = str(caught.value)
    assert message.startswith("the agent exited with code 2: acep agent: config error: ")
    assert "budget.burst" in message and message.endswith(f"(see {tmp_path / 'agent.log'})")
    assert "\n" not in message


# --------------------------------------------------------------------------- stopped


def _stop_when(work: Path, line: str, signum: int, group: bool):
    """Run the demo until stderr shows ``line``, then send ``signum`` to it (to its process
    group with ``group``: a terminal's Ctrl-C); (exit code, stderr, its processes then)."""
    proc = subprocess.Popen([sys.executable, "-m", "acep.cli", "demo", "--workdir", str(work)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            env=ENV, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    lines = []
    try:
        for text in proc.stderr:
            lines.append(text)
            if line in text:
                break
        time.sleep(1)
        children = descendants(proc.pid)
        (os.killpg if group else os.kill)(proc.pid, signum)
        _, rest = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    deadline = time.time() + 20
    while time.time() < deadline and any(map(alive, children)):
        time.sleep(0.2)
    return proc.returncode, "".join(lines) + rest, children


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs /proc")
def test_ctrl_c_during_training_is_one_line_and_stops_every_process(tmp_path):
    from trainer.demo import check_workdir

    code, err, children = _stop_when(tmp_path, "reading:", signal.SIGINT, group=True)
    assert code == 130 and err.endswith("\nacep demo: interrupted\n"), err[-3000:]
    assert "Traceback" not in err and "ERROR" not in err
    assert len(children) >= 2  # the collector and Spark's JVM
    assert not [p for p in children if alive(p)]
    assert check_workdir(tmp_path) == tmp_path  # the next run may use it


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs /proc")
def test_sigterm_stops_the_collector_it_started(tmp_path):
    """SIGTERM's default action ended the demo at once: its collector ran on, orphaned."""
    code, err, children = _stop_when(tmp_path, "collector listening", signal.SIGTERM,
                                     group=False)
    assert code == 143 and err.endswith("\nacep demo: terminated\n"), err[-3000:]
    assert children and not [p for p in children if alive(p)]
