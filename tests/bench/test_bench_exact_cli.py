"""``python -m bench.engine.exact_cli`` on a few events: it runs ``acep exact`` and writes its
figures, and the stages' lines in bulk are those of the per-match path."""

from __future__ import annotations

import json

from bench.engine import exact_cli


def test_exact_cli_bench_writes_its_figures(tmp_path, capsys):
    assert (
        exact_cli.main(
            ["--events", "300", "--repeats", "1", "--out", str(tmp_path), "--output-share"]
        )
        == 0
    )
    (row,) = json.loads((tmp_path / "exact_cli.json").read_text())["rows"]
    assert row["events"] == 300 and row["core"]["cpu_s"] > 0 and row["pure"]["cpu_s"] > 0
    assert row["pure_over_core"] == row["pure"]["cpu_s"] / row["core"]["cpu_s"]
    assert row["stages"]["matches"] > 0 and row["stages"]["bulk_s"] >= 0
    out = capsys.readouterr().out
    assert "300 events, core:" in out and "300 events, pure:" in out
    assert (tmp_path / "exact_cli.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_generated_events_have_fractional_iso_timestamps(tmp_path):
    path = tmp_path / "e.jsonl"
    exact_cli.write_events(path, 5)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(rows) == 5 and all(r["t"][-4] == "." and r["type"] in "AB" for r in rows)
    assert [r["t"] for r in rows] == sorted(r["t"] for r in rows)
