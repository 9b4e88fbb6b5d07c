"""The context benchmark: one quick run (embedded flights, short sensor streams)."""

from __future__ import annotations

import json

from support.bench_runs import PNG_MAGIC, run_quick

from bench.context import run


def test_quick_run_measures_every_context_set_per_workload(tmp_path):
    done = run_quick("context", tmp_path, 900, "--workloads", "sensors,rare-verylate")
    results = json.loads((tmp_path / "context.json").read_text())
    assert (tmp_path / "context.png").read_bytes()[:8] == PNG_MAGIC
    assert [w["workload"] for w in results["workloads"]] == ["rare-verylate", "sensors"]
    for w in results["workloads"]:
        rows = {r["context"]: r for r in w["rows"]}
        assert list(rows) == ["none", "act", "idle", "act+idle"]
        plain = rows["none"]
        assert plain["leaves"] == 1 and plain["tree"] == []
        for r in w["rows"]:
            # a tree only splits the cells of the same bins
            assert r["cells"] == plain["cells"] * r["leaves"] and r["leaves"] <= run.LEAVES
            assert len(r["tree"]) == (r["leaves"] if r["leaves"] > 1 else 0)
            for key in ("recall", "plain_recall"):
                assert sorted(r[key]) == sorted(str(f) for f in run.FRACTIONS)
                assert all(0.0 <= v <= 1.0 for v in r[key].values())
    assert "| sensors | act+idle |" in done.stdout
    assert results["machine"]["cpu_count"] >= 1 and "--workloads" in results["command"]


def test_unknown_workloads_are_refused(tmp_path):
    done = run_quick("context", tmp_path, 60, "--workloads", "sensors,nope", check=False)
    assert done.returncode == 2 and "--workloads" in done.stderr
    assert not (tmp_path / "context.json").exists()
