"""What every benchmark shares (bench/common.py): the tables' command line."""

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
