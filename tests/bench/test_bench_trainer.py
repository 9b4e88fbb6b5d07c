"""The trainer benchmark in quick mode: the JSON has the figures and every Spark graph equals
the single process's (timings are not asserted)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from support.bench_runs import PNG_MAGIC, run_quick  # noqa: E402

from history.fit import CANDIDATES

pytest.importorskip("pyspark", reason="the trainer benchmark needs PySpark")
if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
    pytest.skip("Spark needs Java", allow_module_level=True)



@pytest.fixture(scope="module")
def quick_run(tmp_path_factory) -> Path:
    """Run ``python -m bench.trainer --quick`` once; return its output directory."""
    out = tmp_path_factory.mktemp("trainer")
    proc = run_quick("trainer", out, timeout=900, offline=False, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Spark graph equals the single process" in proc.stdout
    return out


@pytest.fixture(scope="module")
def results(quick_run) -> dict:
    return json.loads((quick_run / "trainer.json").read_text())


def test_json_has_every_section(results):
    expected = {"benchmark", "command", "machine", "settings", "pattern", "stream", "variants",
                "targets", "equality", "table", "ratios", "linearity", "fit", "runs"}
    assert expected <= set(results)
    assert results["command"].startswith("python -m bench.trainer --quick")
    assert results["settings"] == {"quick": True, "repeats": 1,
                                   "wall_seconds": results["settings"]["wall_seconds"]}
    assert results["stream"]["sizes"] == [10_000, 20_000]
    assert set(results["variants"]) == {"single", "spark1", "spark2"}
    assert results["pattern"]["text"] == "ontime late late+ verylate"


def test_every_spark_graph_equals_the_single_process(results):
    eq = results["equality"]
    assert eq["all_equal"] is True
    assert {(c["size"], c["variant"]) for c in eq["checks"]} == {
        (n, v) for n in (10_000, 20_000) for v in ("spark1", "spark2")}
    assert all(c["equal"] and c["graph_bytes"] > 0 for c in eq["checks"])
    shas = {}
    for r in results["runs"]:
        shas.setdefault(r["size"], set()).add(r["graph_sha256"])
    assert all(len(s) == 1 for s in shas.values())


def test_table_has_the_figures(results):
    rows = results["table"]
    assert len(rows) == 6
    for r in rows:
        assert r["events"] == r["size"]
        assert r["seconds"] > 0 and r["events_per_s"] > 0 and r["seconds_per_million"] > 0
        assert r["process_seconds"] >= r["seconds"]
        assert r["sketch_bytes"] > 0
        if r["variant"] == "single":
            assert r["read_seconds"] > 0 and r["build_seconds"] > 0
        else:
            assert 0 < r["session_seconds"] < r["seconds"]
            assert r["seconds_without_session"] == pytest.approx(r["seconds"] -
                                                                 r["session_seconds"])
            assert r["trainer_stats"]["events"] == r["events"]
    for r in results["ratios"]:
        assert r["speedup_2_vs_1_cores"] > 0 and r["spark2_vs_single"] > 0
    for doc in results["linearity"].values():
        assert len(doc["seconds_per_million"]) == 2
        assert {"intercept_seconds", "slope_seconds_per_million", "r2",
                "max_relative_residual"} <= set(doc["fit"])


def test_the_fit_is_timed_both_ways_and_ships_the_same_sketch(results):
    fit = results["fit"]
    assert fit["events"] == 20_000 and fit["sketches_equal"] is True
    assert set(fit["table"]) == {"single-fit", "spark2-fit"}
    ratios = [str(r) for r in fit["ratios"]]
    for row in fit["table"].values():
        assert 0 < row["fit_seconds"] < row["seconds"]
        assert list(row["chosen"]) == ratios
        assert set(row["chosen"].values()) <= set(CANDIDATES)
    assert fit["table"]["single-fit"]["chosen"] == fit["table"]["spark2-fit"]["chosen"]
    plain = {r["sketch_sha256"] for r in results["runs"] if r["size"] == 20_000}
    assert len(plain) == 1 and plain.isdisjoint(r["sketch_sha256"] for r in fit["runs"])


def test_targets_are_evaluated(results):
    targets = results["targets"]
    assert len(targets) == 3
    for t in targets:
        assert isinstance(t["pass"], bool) and t["value"] is not None and t["meaning"]
    assert "5 min" in targets[0]["name"]
    assert targets[0]["pass"] == (targets[0]["value"] <= 300)
    assert targets[2]["pass"] == (targets[2]["value"] > 1)


def test_png_is_written(quick_run):
    png = (quick_run / "trainer.png").read_bytes()
    assert png.startswith(PNG_MAGIC) and len(png) > 10_000
