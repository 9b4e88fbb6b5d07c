"""The engine benchmark in quick mode (synthetic data only: no network, no shared files), and
the flights data every benchmark reads (bench.data)."""

from __future__ import annotations

import importlib
import io
import json
import tarfile
from pathlib import Path

import numpy as np
import pytest
from support.bench_runs import PNG_MAGIC, run_quick, tiny_flights

import acep
from bench import data

needs_compiled = pytest.mark.skipif(acep.backend() != "compiled",
                                    reason="the engine benchmark times the compiled kernel")


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory) -> Path:
    """Run ``python -m bench.engine --quick`` once; return its output directory."""
    out = tmp_path_factory.mktemp("engine")
    run_quick("engine", out, timeout=600)
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
    given = tiny_flights(tmp_path / "given.parquet")
    from_env = tiny_flights(tmp_path / "env.parquet")
    monkeypatch.setenv(data.FLIGHTS_ENV, str(from_env))
    assert data.flights_path(given) == given
    assert data.flights_path() == from_env


def test_flights_path_names_a_missing_file(tmp_path):
    with pytest.raises(data.DataError, match="does not exist"):
        data.flights_path(tmp_path / "nowhere.parquet")


FLIGHTS_BENCHMARKS = ["engine", "shedding", "trainer", "archive", "edge", "herd"]


@pytest.mark.parametrize("name", FLIGHTS_BENCHMARKS)
@pytest.mark.parametrize("quick", [False, True])
def test_every_benchmark_refuses_a_missing_data_file_in_one_line(name, quick, tmp_path, capsys):
    main = importlib.import_module(f"bench.{name}.run").main
    missing = tmp_path / "nowhere.parquet"
    quick_flag = ["--quick"] if quick else []
    assert main([*quick_flag, "--data", str(missing), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert f"error: flights data {missing} does not exist" in err and "Traceback" not in err
    assert not (tmp_path / "out" / f"{name}.json").exists()


@pytest.mark.parametrize("name", FLIGHTS_BENCHMARKS)
@pytest.mark.parametrize("damage", ["truncated", "no origin"])
def test_every_benchmark_refuses_unreadable_flights_in_one_line_before_any_work(
        name, damage, tmp_path, capsys):
    flights = tmp_path / "flights.parquet"
    if damage == "truncated":
        whole = tiny_flights(tmp_path / "whole.parquet").read_bytes()
        flights.write_bytes(whole[:len(whole) // 2])
        expected = f"error: {flights}: not a readable Parquet file (Parquet magic bytes"
    else:
        tiny_flights(flights, drop="origin")
        expected = f"error: {flights}: no column origin (it has date, delay, distance, dest"
    main = importlib.import_module(f"bench.{name}.run").main
    assert main(["--quick", "--data", str(flights), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert expected in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out" / f"{name}.json").exists()


def test_flights_past_the_footer_are_read_or_refused_with_the_file_named(tmp_path):
    flights = tiny_flights(tmp_path / "flights.parquet")
    assert len(data.read_flights(flights)) == 3000
    assert data.read_flights_table(flights).num_rows == 3000
    body = bytearray(flights.read_bytes())
    body[4:400] = b"\0" * 396  # the first column's pages, the footer intact
    flights.write_bytes(bytes(body))
    assert data.check_flights(flights) == flights
    with pytest.raises(data.DataError, match=f"^{flights}"):
        data.read_flights(flights)
    with pytest.raises(data.DataError, match=f"^{flights}: cannot be read"):
        data.read_flights_table(flights)


def test_without_npm_the_error_says_to_pass_data(tmp_path, monkeypatch):
    monkeypatch.setattr(data.shutil, "which", lambda name: None)
    with pytest.raises(data.DataError, match="--data PATH"):
        data.fetch_flights(tmp_path / "flights.parquet")


NPM_REFUSED = """npm error code ECONNREFUSED
npm error syscall connect
npm error errno ECONNREFUSED
npm error FetchError: request to http://127.0.0.1:9/vega-datasets failed, reason: connect \
ECONNREFUSED 127.0.0.1:9
npm error     at ClientRequest.<anonymous> (/usr/lib/node_modules/npm/index.js:130:14)
npm error   code: 'ECONNREFUSED',
npm error }
npm error
npm error If you are behind a proxy, please make sure that the 'proxy' config is set properly.
npm error A complete log of this run can be found in: /root/.npm/_logs/debug-0.log
"""  # what npm 11 says (npm_config_registry=http://127.0.0.1:9/ npm pack ...)


@pytest.mark.parametrize("stderr, reason", [
    (NPM_REFUSED, "(ECONNREFUSED: FetchError: request to http://127.0.0.1:9/vega-datasets "
                  "failed, reason: connect ECONNREFUSED 127.0.0.1:9)"),
    ("npm ERR! code E404\nnpm ERR! 404 Not Found - GET https://registry.npmjs.org/x\n",
     "(E404: 404 Not Found - GET https://registry.npmjs.org/x)"),
    ("", "(exit status 1, nothing on stderr)")])
def test_a_failed_npm_pack_says_why(stderr, reason, tmp_path, monkeypatch):
    npm = tmp_path / "npm"
    (tmp_path / "stderr.txt").write_text(stderr)
    npm.write_text(f"#!/bin/sh\ncase \" $* \" in *\" --silent \"*) exit 1;; esac\n"  # as npm
                   f"cat {tmp_path / 'stderr.txt'} >&2\nexit 1\n")
    npm.chmod(0o755)
    monkeypatch.setattr(data.shutil, "which", lambda name: str(npm))
    with pytest.raises(data.DataError) as refused:
        data.fetch_flights(tmp_path / "cache" / "flights.parquet")
    assert str(refused.value) == (f"`npm pack {data.FLIGHTS_PACKAGE}` failed {reason}; pass "
                                  "--data PATH to a local copy of flights-3m.parquet")


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


def test_the_cli_benchmark_times_every_run_and_draws_them(tmp_path):
    from bench.engine import cli

    flights = tiny_flights(tmp_path / "flights.parquet")
    assert cli.main(["--data", str(flights), "--out", str(tmp_path), "--repeats", "1"]) == 0
    result = json.loads((tmp_path / "cli.json").read_text())
    assert set(result["runs"]) == {"read_in_process", "read_in_process_first", "start_process",
                                   "read_process", "match_in_process", "match", "match_bundles"}
    assert all(r["cpu_s"] > 0 and len(r["cpu_runs"]) == 1 for r in result["runs"].values())
    match = result["runs"]["match"]["cpu_s"]
    assert result["match_over"]["read_process"] == match / result["runs"]["read_process"]["cpu_s"]
    assert (tmp_path / "cli.png").read_bytes()[:8] == PNG_MAGIC
