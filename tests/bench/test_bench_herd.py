"""The herd benchmark in quick mode: 100 devices with the real agent's uploader send their
backlogs at once to a real collector, with its overload limits off, per device, and both
(with agents that wait for 100 Continue, and with agents that send each body at once)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

from support.bench_runs import PNG_MAGIC, run_quick  # noqa: E402


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("herd")
    run_quick("herd", out, timeout=600)
    return out


@pytest.fixture(scope="module")
def runs(quick_run) -> dict:
    results = json.loads((quick_run / "herd.json").read_text())
    assert results["sizes"]["fleets"] == [100] and results["stream"]["events"] == 20_000
    assert len(results["runs"]) == len(results["medians"]) == 4  # one run each
    return {r["limits"]: r for r in results["runs"]}


def test_every_batch_is_stored_exactly_once_whatever_the_limits(runs):
    assert set(runs) == {"none", "per-device", "both", "both-at-once"}
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
    for name in ("per-device", "both", "both-at-once"):
        assert runs[name]["collector"]["batches_decoded"] == 200, runs[name]
    assert runs["none"]["collector"]["batches_decoded"] >= 200
    assert runs["none"]["collector"]["refused_device_busy"] == 0


def test_only_max_wait_refuses_with_503_and_the_devices_come_back(runs):
    for name in ("both", "both-at-once"):
        assert runs[name]["collector"]["refused_busy"] > 0
        assert runs[name]["answers"]["503"] == runs[name]["collector"]["refused_busy"]
    for name in ("none", "per-device"):
        assert runs[name]["collector"]["refused_busy"] == 0 and "503" not in runs[name]["answers"]


def test_agents_that_wait_for_100_continue_send_no_body_the_collector_refuses(runs):
    """Every body they send is one the collector reads (whole, or cut off when the device
    gave up on it: 499); agents that send at once send each refused one too."""
    for name in ("none", "per-device", "both"):
        r = runs[name]
        cut = r["collector"]["requests"].get("499", 0)
        assert r["expect_continue"] and r["expect_kept"] == 100
        assert r["refusals_with_body"] == 0
        assert r["collector"]["bytes_in_wire"] <= r["body_bytes_sent"] <= \
            r["collector"]["bytes_in_wire"] + cut * r["batch_bytes_range"][1], r
    r = runs["both-at-once"]
    assert not r["expect_continue"] and r["expect_kept"] == 0
    assert r["refusals_with_body"] == r["answers"].get("429", 0) + r["answers"]["503"] > 0


def test_the_agents_gzip_what_they_send_once_the_collector_said_it_takes_gzip(runs):
    for r in runs.values():
        assert r["gzip_taken"] == 100  # every device heard an answer
        # bodies sent after a device's first answer are gzipped (the exact byte counts are
        # checked in test_edge_collector.py)
        assert r["collector"]["bytes_in_wire"] < r["collector"]["bytes_in"], r


def test_png_is_written(quick_run):
    assert (quick_run / "herd.png").read_bytes()[:8] == PNG_MAGIC


def test_a_part_of_the_run_runs_only_the_fleets_and_limits_asked_for(tmp_path):
    run_quick("herd", tmp_path, 600, "--devices", "20", "--limits", "both")
    results = json.loads((tmp_path / "herd.json").read_text())
    assert [(r["devices"], r["limits"]) for r in results["runs"]] == [(20, "both")]
    assert results["sizes"]["limits"] == ["both"] and results["runs"][0]["stored_once"]
    assert results["runs"][0]["collector"]["batches_stored"] == 40
    assert (tmp_path / "herd.png").read_bytes().startswith(PNG_MAGIC)
