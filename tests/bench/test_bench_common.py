"""What every benchmark shares (bench/common.py): where the results go, checked before any
measuring; the results written as one set; the tables' command line; option checks."""

from __future__ import annotations

import importlib
import json
import os
from pathlib import Path

import pytest

from bench import common, data
from bench.shedding import run as shedding

BENCHMARKS = ["engine", "exact", "shedding", "trainer", "archive", "edge", "herd"]
TABLES = ["engine", "exact", "shedding", "trainer"]


@pytest.fixture
def results_dir(tmp_path, monkeypatch):
    """Every benchmark's default results/ moved to ``tmp_path/<name>``; the flights a tiny
    file (a full run reads them before it measures, and must not download them here)."""
    from support.bench_runs import tiny_flights

    for name in BENCHMARKS:
        monkeypatch.setattr(importlib.import_module(f"bench.{name}.run"), "RESULTS",
                            tmp_path / name)
    monkeypatch.setenv("ACEP_FLIGHTS", str(tiny_flights(tmp_path / "flights.parquet")))
    return tmp_path


@pytest.mark.parametrize("name", BENCHMARKS)
def test_a_quick_run_goes_to_results_quick_and_a_full_run_to_results(name, results_dir,
                                                                    monkeypatch, capsys):
    run = importlib.import_module(f"bench.{name}.run")
    quick = run.parse_args(["--quick"])
    assert common.ready(quick) and quick.out == results_dir / name / "quick"
    assert quick.out.is_dir()
    full = run.parse_args([])
    if hasattr(full, "data"):  # a full run on other data than the published figures' too
        assert common.ready(full) and full.out == results_dir / name / "quick"
        assert "is not the flights file of the published figures" in capsys.readouterr().err
        monkeypatch.setattr(data, "FLIGHTS_SHA256", data._sha256(os.environ["ACEP_FLIGHTS"]))
        full = run.parse_args([])
    assert common.ready(full) and full.out == results_dir / name
    given = run.parse_args(["--quick", "--out", str(results_dir / "mine")])
    assert common.ready(given) and given.out == results_dir / "mine"


@pytest.mark.parametrize("options", [["--workloads", "sensors"], ["--n-bins", "4"],
                                     ["--defer", "0"], ["--no-fit"], ["--search", "0"]])
def test_a_shedding_run_of_other_figures_goes_to_results_quick(options, results_dir):
    args = shedding.parse_args(options)
    assert shedding.partial(args) and common.ready(args, partial=True)
    assert args.out == results_dir / "shedding" / "quick"
    assert not shedding.partial(shedding.parse_args(["--jobs", "1"]))
    missing = results_dir / "nowhere.parquet"  # main refuses it after choosing the folder
    assert shedding.main([*options, "--data", str(missing)]) == 2
    assert sorted(p.name for p in (results_dir / "shedding").iterdir()) == ["quick"]


def test_a_herd_run_of_part_of_the_fleets_or_limits_goes_to_results_quick(results_dir,
                                                                         monkeypatch):
    from bench.herd import run as herd

    monkeypatch.setattr(data, "FLIGHTS_SHA256", data._sha256(os.environ["ACEP_FLIGHTS"]))
    assert not herd.parse_args([]).partial and herd.scale(herd.parse_args([])) == herd.FULL
    for options in (["--devices", "400"], ["--limits", "both"], ["--repeats", "1"]):
        args = herd.parse_args(options)
        assert common.ready(args) and args.out == results_dir / "herd" / "quick"
    sizes = herd.scale(herd.parse_args(["--devices", "50", "50", "--limits", "both", "none",
                                        "--repeats", "2"]))
    assert (sizes.fleets, sizes.limits, sizes.repeats) == ((50,), ("both", "none"), 2)
    assert list(herd.limits(sizes)) == ["both", "none"]
    assert herd.scale(herd.parse_args(["--quick", "--limits", "both"])).fleets == (100,)


@pytest.mark.parametrize("name", BENCHMARKS)
@pytest.mark.parametrize("out", ["a-file", "a-file/below"])
def test_every_benchmark_refuses_an_unusable_out_before_measuring(name, out, tmp_path, capsys):
    (tmp_path / "a-file").write_text("not a directory")
    main = importlib.import_module(f"bench.{name}.run").main
    assert main(["--quick", "--out", str(tmp_path / out)]) == 2
    err = capsys.readouterr().err
    assert err.lower() == f"error: --out {tmp_path / out}: not a directory\n".lower()
    assert (tmp_path / "a-file").read_text() == "not a directory"


def _plot(results: dict, path: Path) -> None:
    path.write_bytes(b"png of " + results["run"].encode())


def _broken_plot(results: dict, path: Path) -> None:
    raise ZeroDivisionError("integer division or modulo by zero")


def test_results_are_published_as_one_set(tmp_path, capsys):
    common.publish({"run": "old"}, tmp_path, "x", {"x.png": _plot, "y.png": _plot}, "old")
    with pytest.raises(ZeroDivisionError):
        common.publish({"run": "new"}, tmp_path, "x", {"x.png": _plot, "y.png": _broken_plot},
                       "new")
    assert json.loads((tmp_path / "x.json").read_text()) == {"run": "old"}
    assert (tmp_path / "x.png").read_bytes() == (tmp_path / "y.png").read_bytes() == b"png of old"
    common.publish({"run": "new"}, tmp_path, "x", {"x.png": _plot}, "new", drop=("y.png",))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.json", "x.png"]
    assert (tmp_path / "x.png").read_bytes() == b"png of new"
    assert capsys.readouterr().out.splitlines()[-1] == \
        f"wrote {tmp_path / 'x.json'} and {tmp_path / 'x.png'}"


@pytest.mark.parametrize("name", TABLES)
def test_every_table_takes_help_and_refuses_a_missing_json_in_one_line(name, tmp_path, capsys):
    main = importlib.import_module(f"bench.{name}.table").main
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0 and f"python -m bench.{name}.table" in capsys.readouterr().out
    missing = tmp_path / "nowhere.json"
    assert main([str(missing)]) == 2
    assert capsys.readouterr().err == f"error: {missing}: No such file or directory\n"
    (tmp_path / f"{name}.json").write_text('{"benchmark": "other"}')
    assert main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {tmp_path / f'{name}.json'}: not the results of "
                          f"python -m bench.{name} (KeyError") and len(err.splitlines()) == 1


@pytest.mark.parametrize("name, options, message", [
    ("shedding", ["--workloads", ","], "no workload named; known: rising-delays"),
    ("shedding", ["--workloads", "sensors,nope"], "unknown workload(s) nope; known:"),
    ("shedding", ["--jobs", "0"], "the worker processes must be >= 1, got 0"),
    ("shedding", ["--jobs", "-1"], "the worker processes must be >= 1, got -1"),
    ("shedding", ["--n-bins", "0"], "the bins must be >= 1, got 0"),
    ("shedding", ["--n-bins", "100000"], "the bins must be <= 64, got 100000"),
    ("shedding", ["--defer", "-1"], "the deferred starts must be >= 0, got -1"),
    ("shedding", ["--search", "-1"], "the cells to search must be >= 0, got -1"),
    ("trainer", ["--repeats", "-1"], "the repeats must be >= 1, got -1"),
    ("trainer", ["--repeats", "0"], "the repeats must be >= 1, got 0"),
    ("herd", ["--devices", "0"], "the devices must be >= 1, got 0"),
    ("herd", ["--devices", "400", "x"], "'x' is not a whole number of devices"),
    ("herd", ["--repeats", "0"], "the repeats must be >= 1, got 0"),
    ("herd", ["--limits", "both", "nope"], "invalid choice: 'nope'"),
])
def test_options_are_checked_when_parsed(name, options, message, capsys):
    run = importlib.import_module(f"bench.{name}.run")
    with pytest.raises(SystemExit) as refused:
        run.parse_args(["--quick", *options])
    assert refused.value.code == 2
    assert message in capsys.readouterr().err


def test_the_trainer_runs_the_repeats_asked_for():
    from bench.trainer import run

    assert run.parse_args(["--repeats", "3"]).repeats == 3
    assert run.parse_args([]).repeats is None  # the default: 2, or 1 with --quick


def test_the_shedding_command_repeats_the_run():
    args = shedding.parse_args(["--jobs", "1", "--data", "flights-3m.parquet"])
    assert shedding.command(args, args.data) == \
        "python -m bench.shedding --data flights-3m.parquet --jobs 1"
    args = shedding.parse_args(["--quick", "--workloads", "sensors,delay-wave", "--search", "4"])
    assert shedding.command(args) == \
        "python -m bench.shedding --quick --workloads sensors,delay-wave --search 4"
    assert shedding.command(shedding.parse_args(["--jobs", str(shedding.JOBS)])) == \
        "python -m bench.shedding"


def test_summaries_say_what_they_measured():
    from bench.archive.run import summary as archive
    from bench.engine.run import summary as engine

    row = {"stream": "synthetic", "letters": 5, "k": 2, "window": 10, "events": 2000,
           "speedup_vs_reference": {"reference": 1.0, "python_merge_off": 0.4237,
                                    "compiled_merge_on": 61.8}}
    assert engine({"targets": [], "comparison": [row]}).endswith(
        "python_merge_off 0.42x, compiled_merge_on 62x")
    side = {"files": 1, "bytes": 1, "tasks": 1, "plan_s": 0.1, "read_s": 0.1}
    quick = {"before": side, "after": side, "same_rows": True, "same_history": None,
             "compaction": {"merged": 2, "written": 1, "seconds": 0.1},
             "mirror": {"ingest_plain_s": 1.0, "ingest_mirrored_s": 1.2, "catch_up_s": 0.1,
                        "files_copied": 3, "same_files": True}}
    assert "same history: not compared (no Spark in --quick)" in archive(quick)
    assert "same history: True" in archive({**quick, "same_history": True})


@pytest.mark.parametrize("argv, said", [([], "the following arguments are required"),
                                        (["no-such.parquet", "2"], "no-such.parquet: no such"),
                                        (["{data}", "0"], "CORES: '0' is not a whole number"),
                                        (["{data}", "two"], "CORES: 'two' is not a whole")])
def test_the_trainer_phases_diagnostic_refuses_bad_arguments_before_spark(tmp_path, argv,
                                                                         said):
    """``python -m bench.trainer.phases FILE CORES`` (bench/trainer/README.md): a missing or
    bad argument is its usage and one line, exit 2, not a traceback."""
    import subprocess
    import sys

    flights = tmp_path / "f.parquet"
    flights.write_bytes(b"PAR1")
    argv = [a.format(data=flights) for a in argv]
    done = subprocess.run([sys.executable, "-m", "bench.trainer.phases", *argv],
                          cwd=Path(__file__).resolve().parents[2], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2 and said in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.splitlines()) == 2
