"""The herd benchmark in quick mode: 100 devices with the real agent's uploader send their
backlogs at once to a real collector, with its overload limits off, per device, and both."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

from bench_runs import PNG_MAGIC, run_quick  # noqa: E402


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("herd")
    run_quick("herd", out, timeout=600)
    return out


@pytest.fixture(scope="module")
def runs(quick_run) -> dict:
    results = json.loads((quick_run / "herd.json").read_text())
    assert results["sizes"]["fleets"] == [100] and results["stream"]["events"] == 20_000
    assert len(results["runs"]) == len(results["medians"]) == 3  # one run each
    return {r["limits"]: r for r in results["runs"]}


def test_every_batch_is_stored_exactly_once_whatever_the_limits(runs):
    assert set(runs) == {"none", "per-device", "both"}
    for r in runs.values():
        assert r["stored_once"] and r["batches"] == 200
        assert r["collector"]["batches_stored"] == 200
        assert sum(r["answers"].values()) == r["attempts"] >= 200
        assert r["answers"]["200"] == 200  # each device stops sending a batch once acked
        # a copy answered after its device gave up on it is a duplicate nobody heard
        # (and the benchmark's looks at /metrics, one per timeline point)
        assert r["collector"]["requests"]["200"] == \
            200 + r["collector"]["batches_duplicate"] + len(r["timeline"])
        assert r["timeline"][-1]["batches_stored"] <= 200


def test_with_a_limit_per_device_no_batch_is_decoded_twice(runs):
    # a retry while the first copy is queued is refused (429), not re-checked again
    for name in ("per-device", "both"):
        assert runs[name]["collector"]["batches_decoded"] == 200, runs[name]
    assert runs["none"]["collector"]["batches_decoded"] >= 200
    assert runs["none"]["collector"]["refused_device_busy"] == 0


def test_only_max_wait_refuses_with_503_and_the_devices_come_back(runs):
    assert runs["both"]["collector"]["refused_busy"] > 0
    assert runs["both"]["answers"]["503"] == runs["both"]["collector"]["refused_busy"]
    for name in ("none", "per-device"):
        assert runs[name]["collector"]["refused_busy"] == 0 and "503" not in runs[name]["answers"]


def test_png_is_written(quick_run):
    assert (quick_run / "herd.png").read_bytes()[:8] == PNG_MAGIC
