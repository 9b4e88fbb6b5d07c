"""A device repairs what it can of its own outbox: a damaged batch is rebuilt from the
events file when its lines are still there (same batch id), else a dead letter naming what
was lost; an oversized batch is cut and split so that one huge match never takes the others
with it; the collector's /metrics shows the damaged and rebuilt counts per device. Real
agent, real collector (``python -m edge.collector``) on loopback, real SQLite outbox."""

from __future__ import annotations

from pathlib import Path

from test_edge_e2e import device_series, serving, stream
from test_edge_outbox_integrity import agent_doc, flip_a_bit, run, write_events

from edge.outbox import Outbox


def test_metrics_show_a_devices_damaged_batches(tmp_path: Path):
    write_events(tmp_path / "events.jsonl", stream(1500, seed=7))
    put = run(agent_doc(tmp_path))
    assert put["outbox_pending"] >= 3
    flip_a_bit(tmp_path / "outbox.db")
    (tmp_path / "events.jsonl").unlink()  # nothing to rebuild it from
    (tmp_path / "events.jsonl").write_text("")
    with serving(tmp_path) as c:
        final = run(agent_doc(tmp_path, c.url, c.token))
        series = device_series(c)
    assert final["outbox_damaged"] == 1 and final["outbox_rebuilt"] == 0
    assert series["acep_device_outbox_damaged_total"] == 1
    assert series["acep_device_outbox_rebuilt_total"] == 0
    with Outbox(tmp_path / "outbox.db") as box:
        assert len(box.dead_letters()) == 1
