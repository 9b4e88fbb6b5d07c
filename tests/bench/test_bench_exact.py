"""The exact-engine benchmark in quick mode, and its stock-ticker generator."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
from support.bench_runs import PNG_MAGIC, run_quick

from acep.nfab.query import parse_query
from bench.exact import run
from bench.exact.stock import stock_ticker

needs_postpone = pytest.mark.skipif(run.match_postponed is None,
                                    reason="the postponing engine is not built yet")


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory) -> Path:
    """Run ``python -m bench.exact --quick`` once; return its output directory."""
    out = tmp_path_factory.mktemp("exact")
    done = run_quick("exact", out, timeout=600, offline=False)
    (out / "stdout.txt").write_text(done.stdout)
    return out


@pytest.fixture(scope="module")
def results(quick_run) -> dict:
    return json.loads((quick_run / "exact.json").read_text())


def test_json_has_every_section(results):
    expected = {"benchmark", "command", "machine", "settings", "shared_engine", "systems",
                "stream", "template", "predicates", "strategies", "windows", "targets",
                "side_by_side", "partitions", "sweep", "sase"}
    assert expected <= set(results)
    assert results["command"].startswith("python -m bench.exact --quick")
    assert results["settings"]["quick"] is True
    assert results["settings"]["wall_seconds"] > 0
    assert {"cpu_count", "python", "date"} <= set(results["machine"])
    assert set(results["predicates"]) == {"p1", "p2", "p3_min", "p3_max", "p3_avg"}
    assert results["strategies"] == ["partition_contiguity", "skip_till_next_match",
                                     "skip_till_any_match"]
    assert results["shared_engine"]["available"] == (run.match_postponed is not None)
    stream = results["stream"]
    assert stream["symbols"] == 2 and stream["p"] == 0.7
    assert 0 < stream["start_share"] < 0.05 and 0.1 < stream["b_share"] < 0.2


def _check_row(row: dict) -> None:
    assert row["status"] in ("ok", "timed out")
    assert row["seconds"] > 0 and row["events"] > 0
    if row["status"] == "ok":
        assert row["events_done"] == row["events"] and row["events_per_s"] > 0
    else:
        assert row["events_per_s"] is None
        assert 0 <= row["events_done"] < row["events"]
        assert row["events_per_s_before_timeout"] >= 0
    for key in ("runs_created", "main_runs", "candidates"):
        if key in row:
            assert row[key] >= 0


def test_sweep_is_complete_and_sane(results):
    rows = results["sweep"]
    assert len(rows) == 3 * 5 * len(results["windows"])
    assert results["windows"] == [100, 500]
    for r in rows:
        assert r["within"] == r["symbols"] * r["window"]
        assert f"WITHIN {r['within']}" in r["query"] and r["strategy"] in r["query"]
        assert "runs" in r["systems"]
        for system in r["systems"].values():
            _check_row(system)
        naive = r["systems"]["runs"]
        if naive["status"] == "ok" and r["strategy"] != "skip_till_any_match":
            assert naive["matches"] >= 0 and naive["runs_created"] >= naive["matches"]
    # the linear strategies finish the small stream; the naive any-match p1 blows up
    small = [r for r in rows if r["window"] == 100 and r["strategy"] != "skip_till_any_match"]
    assert all(r["systems"]["runs"]["status"] == "ok" for r in small)
    exploded = [r for r in rows if r["strategy"] == "skip_till_any_match"
                and r["predicate"] == "p1" and r["window"] == 500]
    assert exploded[0]["systems"]["runs"]["status"] == "timed out"


@needs_postpone
def test_postponing_compact_finishes_the_any_match_sweep(results):
    rows = [r for r in results["sweep"] if r["strategy"] == "skip_till_any_match"]
    for r in rows:
        compact = r["systems"]["postpone_compact"]
        assert compact["status"] == "ok" and compact["records"] >= 0
        assert compact["main_runs"] > 0


def test_shared_engine_measured_beside_the_naive_baseline(results):
    """Partition contiguity and next-match: the shared-buffer engine beside the run engine,
    with the same matches wherever both finished."""
    for r in results["sweep"]:
        if r["strategy"] == "skip_till_any_match":
            continue
        naive, shared = r["systems"]["runs"], r["systems"]["shared"]
        if naive["status"] == shared["status"] == "ok":
            assert shared["matches"] == naive["matches"]
            assert shared["match_length_mean"] == naive["match_length_mean"]
    rows = [r for r in results["partitions"]["rows"]
            if r["strategy"] == "skip_till_next_match"]
    assert {r["system"] for r in rows} == {"shared_compact", "runs_compact"}
    for p in results["predicates"]:
        mine = {r["system"]: r for r in rows if r["predicate"] == p}
        assert mine["shared_compact"]["matches"] == mine["runs_compact"]["matches"]
        assert mine["shared_compact"]["records"] == mine["runs_compact"]["records"]
    target = next(t for t in results["targets"] if t["name"].startswith("skip_till_next"))
    assert "shared-buffer engine" in target["meaning"]


def test_side_by_side_uses_one_prefix(results):
    sides = results["side_by_side"]
    assert [s["predicate"] for s in sides] == list(results["predicates"])
    for s in sides:
        assert s["strategy"] == "skip_till_any_match" and s["window"] == 500
        assert 0 < s["events"] <= s["stream_events"]
        naive = s["systems"]["runs"]
        assert naive["status"] == "ok" and naive["events"] == s["events"]
        assert s["speedup_vs_naive"]["runs"] == pytest.approx(1.0)
        for system in s["systems"].values():
            _check_row(system)
            assert system["events"] == s["events"]
        assert s["same_matches"] is not False


@needs_postpone
def test_postponing_beats_the_naive_baseline_compact(results):
    for s in results["side_by_side"]:
        assert s["speedup_vs_naive"]["postpone_compact"] > 1
        assert s["systems"]["postpone_verbose"]["matches"] == s["systems"]["runs"]["matches"]


def test_partitions_and_targets(results):
    parts = results["partitions"]
    assert parts["symbols"] == 10 and parts["window"] == 100
    assert parts["stream"]["symbols"] == 10
    by_strategy = defaultdict(set)
    for r in parts["rows"]:
        _check_row(r)
        assert r["within"] == 1000
        by_strategy[r["strategy"]].add(r["predicate"])
    assert by_strategy["skip_till_next_match"] == set(results["predicates"])
    assert by_strategy["skip_till_any_match"] == set(results["predicates"])
    targets = results["targets"]
    assert len(targets) == 4
    for t in targets:
        assert isinstance(t["pass"], bool) and t["threshold"] > 0
        assert t["value"] is None or t["value"] > 0
        assert t["pass"] == (t["value"] is not None and t["value"] >= t["threshold"])


def test_without_a_jar_sase_is_not_measured_and_it_says_so(results, quick_run):
    assert results["sase"] == {"measured": False, "why": "no --sase-jar given"}
    out = (quick_run / "stdout.txt").read_text().splitlines()
    assert "SASE side by side: not measured (no --sase-jar given)" in out


def test_png_is_written(quick_run):
    png = (quick_run / "exact.png").read_bytes()
    assert png.startswith(PNG_MAGIC) and len(png) > 10_000


def test_tables_render(results):
    from bench.exact.table import markdown

    text = markdown(results)
    assert "### Targets" in text and "Side by side" in text and "partitions" in text
    assert "(not measured in this run: no --sase-jar given)" in text


# --------------------------------------------------------------------------- the generator


def test_stock_ticker_follows_the_paper():
    events = stock_ticker(20_000, symbols=3, p=0.7, seed=5)
    assert len(events) == 20_000
    assert [e.t for e in events[:5]] == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert {e.type for e in events} == {"Stock"}
    assert {e.attrs["symbol"] for e in events} == {1, 2, 3}
    prices = np.array([e.attrs["price"] for e in events])
    volumes = np.array([e.attrs["volume"] for e in events])
    assert prices.min() >= 1 and prices.max() <= 1000
    assert volumes.min() >= 1 and volumes.max() <= 1000
    steps = []
    for s in (1, 2, 3):
        mine = np.array([e.attrs["price"] for e in events if e.attrs["symbol"] == s])
        step = (np.diff(mine) + 1) % 1000 - 1  # wrap-around steps of +1, -1 or 0
        assert set(np.unique(step)) <= {-1, 0, 1}
        steps.append(step)
    steps = np.concatenate(steps)
    assert np.mean(steps == 1) == pytest.approx(0.7, abs=0.02)
    assert np.mean(steps == -1) == pytest.approx(0.15, abs=0.02)
    assert events == stock_ticker(20_000, symbols=3, p=0.7, seed=5)
    assert events != stock_ticker(20_000, symbols=3, p=0.7, seed=6)


def test_the_template_parses_for_every_predicate_and_strategy():
    for strategy in run.STRATEGIES:
        for predicate in run.PREDICATES:
            config = run.Config(strategy, predicate, 500)
            assert config.within == 1000
            query = parse_query(config.text)
            assert query.strategy.value == strategy and query.window == 1000


def test_a_budget_stops_the_naive_baseline_where_it_got_to():
    events = stock_ticker(5_000, seed=run.SEED)
    query = run.Config(run.ANY, "p1", 500).query()
    row = run.measure("runs", query, events, budget=0.05)
    assert row["status"] == "timed out"
    assert 0 < row["events_done"] < len(events)
    assert row["runs_created"] > 0


def test_compiled_core_rows_beside_shared(results):
    """The compiled core and shared.py on the same events: same matches, both rates."""
    section = results["compiled_core"]
    assert section["core"] in ("compiled", "shared")
    assert [r["query"] for r in section["rows"]] == ["Q1", "Q2", "next-match, 10 symbols"]
    for row in section["rows"]:
        assert row["same_matches"] is True
        assert row["shared"]["ran"] == "shared"
        assert row["core"]["ran"] == section["core"]
        assert row["shared"]["events_per_s"] > 0 and row["core"]["events_per_s"] > 0
