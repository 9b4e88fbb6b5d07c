"""What every benchmark shares (bench/common.py): the tables' command line; option checks."""

from __future__ import annotations

import importlib

import pytest

TABLES = ["engine", "exact", "shedding", "trainer"]


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
