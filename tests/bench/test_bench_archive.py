"""The archive benchmark in quick mode: the embedded flights sample, the real agent's
batches, the collector's ingest and compaction, the trainer's planning and reads (no Spark
in quick mode; tests/trainer/test_trainer_archive.py trains on a compacted archive)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("pyarrow")
pytest.importorskip("matplotlib")

from support.bench_runs import PNG_MAGIC, run_quick  # noqa: E402


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("archive")
    run_quick("archive", out, timeout=300)
    return out


@pytest.fixture(scope="module")
def results(quick_run) -> dict:
    return json.loads((quick_run / "archive.json").read_text())


def test_compaction_keeps_every_row_in_fewer_files(results):
    sizes, before, after = results["sizes"], results["before"], results["after"]
    assert results["stream"]["events"] == sizes["events"] == 20_000
    assert results["batches"] == before["files"] > 500  # a file per batch
    c = results["compaction"]
    # every folder of the compacted days became one file; the last day is left as it is
    assert c["written"] == sizes["devices"] * (sizes["days"] - 1) and c["leftovers"] == 0
    assert after["files"] == before["files"] - c["merged"] + c["written"]
    assert results["same_rows"] and after["rows"] == before["rows"] > 0
    assert after["tasks"] < before["tasks"] and after["bytes"] < before["bytes"]
    assert results["same_history"] is None and "train_s" not in before  # no Spark here
    for side in (before, after):
        assert side["plan_s"] > 0 and side["read_s"] > 0


def test_png_is_written(quick_run):
    assert (quick_run / "archive.png").read_bytes()[:8] == PNG_MAGIC


def test_a_mirrored_ingest_copies_every_file_byte_for_byte(results):
    m = results["mirror"]
    assert m["same_files"] and m["failures"] == 0
    assert m["files_copied"] == results["batches"] and m["bytes_copied"] > 0
    assert m["ingest_plain_s"] > 0 and m["ingest_mirrored_s"] > 0 and m["catch_up_s"] >= 0
