"""`acep demo`, the README's main command: the whole loop in real processes, as a user runs it.

A collector on loopback, the Spark trainer, an agent under a budget, and the report. The
checks: the report's figures agree with what the collector stored; the sketch the agent
downloaded is the one a single process trains on the same days; the trained history beats
the agent's default policy at the same budget; every stored match is a true match.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytest.importorskip("pyspark", reason="the demo needs PySpark (pip install 'acep[demo]')")
pytest.importorskip("aiohttp", reason="the demo's collector needs aiohttp")


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    work = tmp_path_factory.mktemp("demo")
    done = subprocess.run([sys.executable, "-m", "acep.cli", "demo", "--workdir", str(work)],
                          capture_output=True, text=True, timeout=900)
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
