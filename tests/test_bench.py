"""The engine benchmark in quick mode (synthetic data only: no network, no shared files)."""

from __future__ import annotations

import importlib
import io
import json
import tarfile
from pathlib import Path

import numpy as np
import pytest
from bench_runs import PNG_MAGIC, run_quick

import acep
from bench import data

needs_compiled = pytest.mark.skipif(acep.backend() != "compiled",
                                    reason="the engine benchmark times the compiled kernel")


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory) -> Path:
    """Run ``python -m bench.engine --quick`` once; return its output directory."""
    out = tmp_path_factory.mktemp("engine")
    run_quick("engine", out, timeout=120)
    return out


@pytest.fixture(scope="module")
def results(quick_run) -> dict:
    return json.loads((quick_run / "engine.json").read_text())


@needs_compiled
def test_json_has_every_section(results):
    expected = {"command", "machine", "settings", "streams", "patterns", "ks", "windows",
                "targets", "headline", "throughput", "comparison", "live_nodes",
                "bytes_per_node"}
    assert expected <= set(results)
    assert set(results["streams"]) == {"synthetic"}  # quick mode without --data
    assert results["settings"]["quick"] is True
    assert results["machine"]["acep_backend"] == "compiled"
    assert {"cpu_count", "python", "date"} <= set(results["machine"])


@needs_compiled
def test_throughput_grid_is_complete_and_positive(results):
    rows = results["throughput"]
    assert len(rows) == 4 * 4 * 3  # pattern lengths x k x windows
    assert {r["letters"] for r in rows} == {3, 5, 7, 10}
    assert {r["k"] for r in rows} == {0, 1, 2, 3}
    assert {r["window"] for r in rows} == {10, 100, 1000}
    assert all(r["events"] > 0 and r["events_per_s"] > 0 for r in rows)
    assert results["headline"]["events_per_s"] > 0


@needs_compiled
def test_compiled_engine_beats_the_reference(results):
    assert results["comparison"]
    for c in results["comparison"]:
        rates = c["events_per_s"]
        assert set(rates) == {"reference", "python_merge_off", "python_merge_on",
                              "compiled_merge_off", "compiled_merge_on"}
        assert all(rate > 0 for rate in rates.values())
        assert rates["compiled_merge_off"] > rates["reference"]
        assert rates["compiled_merge_on"] > rates["reference"]


@needs_compiled
def test_merging_keeps_fewer_live_nodes(results):
    compared = [c for c in results["live_nodes"] if "merge_off" in c]
    assert compared
    for c in compared:
        on, off = c["merge_on"], c["merge_off"]
        assert 0 < on["live_mean"] <= off["live_mean"]
        assert on["live_max"] <= off["live_max"]
        assert off["merged_per_event"] == 0
        assert on["peak_live_bytes"] == on["peak_live"] * on["bytes_per_node"]
    assert results["bytes_per_node"] > 0


@needs_compiled
def test_targets_are_evaluated(results):
    targets = results["targets"]
    assert len(targets) == 3
    for t in targets:
        assert t["value"] > 0 and isinstance(t["pass"], bool)


@needs_compiled
def test_png_is_written(quick_run):
    png = (quick_run / "engine.png").read_bytes()
    assert png.startswith(PNG_MAGIC) and len(png) > 10_000


# --------------------------------------------------------------------------- bench.data


def test_synthetic_uniform_counts_events():
    batch = data.synthetic_uniform(1000, seed=3)
    assert len(batch) == 1000
    assert np.array_equal(batch.tags, np.arange(1000))
    assert batch.type_names == ["a", "b", "c", "d"]
    assert set(np.unique(batch.type_codes)) == {0, 1, 2, 3}
    assert np.array_equal(batch.type_codes, data.synthetic_uniform(1000, seed=3).type_codes)


def test_flights_path_prefers_the_given_path(tmp_path, monkeypatch):
    given, from_env = tmp_path / "given.parquet", tmp_path / "env.parquet"
    given.touch()
    from_env.touch()
    monkeypatch.setenv(data.FLIGHTS_ENV, str(from_env))
    assert data.flights_path(given) == given
    assert data.flights_path() == from_env


def test_flights_path_names_a_missing_file(tmp_path):
    with pytest.raises(data.DataError, match="does not exist"):
        data.flights_path(tmp_path / "nowhere.parquet")


@pytest.mark.parametrize("name", ["engine", "shedding", "trainer", "archive", "edge", "herd"])
def test_every_benchmark_refuses_a_missing_data_file_in_one_line(name, tmp_path, capsys):
    main = importlib.import_module(f"bench.{name}.run").main
    missing = tmp_path / "nowhere.parquet"
    assert main(["--data", str(missing), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert f"error: flights data {missing} does not exist" in err and "Traceback" not in err
    assert not (tmp_path / "out" / f"{name}.json").exists()


def test_without_npm_the_error_says_to_pass_data(tmp_path, monkeypatch):
    monkeypatch.setattr(data.shutil, "which", lambda name: None)
    with pytest.raises(data.DataError, match="--data PATH"):
        data.fetch_flights(tmp_path / "flights.parquet")


def test_only_the_parquet_member_is_extracted(tmp_path):
    tarball = tmp_path / "package.tgz"
    with tarfile.open(tarball, "w:gz") as tar:
        for name, body in ((data.FLIGHTS_MEMBER, b"PAR1 flights"), ("../escape.txt", b"no")):
            info = tarfile.TarInfo(name)
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    dest = tmp_path / "out" / "flights.parquet"
    dest.parent.mkdir()
    data._extract_member(tarball, data.FLIGHTS_MEMBER, dest)
    assert dest.read_bytes() == b"PAR1 flights"
    assert sorted(p.name for p in dest.parent.iterdir()) == ["flights.parquet"]
    assert not (tmp_path / "escape.txt").exists()
    with pytest.raises(data.DataError, match="has no"):
        data._extract_member(tarball, "package/data/other.parquet", dest)
