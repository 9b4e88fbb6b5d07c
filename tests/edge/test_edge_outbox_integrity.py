"""The outbox checks itself: each batch body has a CRC-32 stored beside it, a damaged body is
never sent (it moves to the dead letters, named, with what is lost), and ``acep agent
--check`` fails naming it. A lost outbox does not upload its matches twice: the progress has
a copy beside the outbox. Real agent, real collector (``python -m edge.collector``) on
loopback."""

from __future__ import annotations

import json
import logging
import sqlite3

from support.collector import DEVICE, query, serving
from support.e2e import (
    agent_doc,
    direct,
    flip_a_bit,
    run_once,
    stream,
    write_events,
    write_toml,
)

from edge.agent.outbox import Outbox
from edge.agent.preflight import check


def test_a_flipped_bit_in_a_queued_body_is_never_uploaded_and_is_named(tmp_path, caplog):
    write_events(tmp_path / "events.jsonl", stream(1500, seed=7))
    put = run_once(agent_doc(tmp_path))  # no collector yet: every batch stays pending
    assert put["outbox_pending"] >= 3
    bid, _ = flip_a_bit(tmp_path / "outbox.db")
    # its lines gone, it cannot be rebuilt (test_edge_outbox_repair.py: when they are there)
    (tmp_path / "events.jsonl").write_text("")
    caplog.set_level(logging.ERROR, logger="edge")
    with serving(tmp_path) as c:
        final = run_once(agent_doc(tmp_path, c.url, c.token))
        stored = {b for (b,) in query(c.db, "SELECT batch_id FROM batches")}
    assert bid not in stored
    assert len(stored) == put["outbox_pending"] - 1
    assert final["batches_damaged"] == 1 and final["outbox_dead"] == 1
    with Outbox(tmp_path / "outbox.db") as box:
        (dead,) = box.dead_letters()
    assert dead.batch_id == bid and dead.reason.startswith("damaged in the outbox")
    assert "matches of the events at positions" in dead.reason
    assert any(bid in r.getMessage() and "damaged" in r.getMessage() for r in caplog.records)


def test_agent_check_names_the_damaged_batch_and_whether_it_can_be_rebuilt(tmp_path, capsys):
    """A WARN while the events it was made from are there (the agent rebuilds it), a FAIL
    saying why once they are gone."""
    write_events(tmp_path / "events.jsonl", stream(1500, seed=7))
    run_once(agent_doc(tmp_path))
    toml = write_toml(tmp_path / "agent.toml", agent_doc(tmp_path))
    assert check(str(toml)) == 0
    capsys.readouterr()
    bid, _ = flip_a_bit(tmp_path / "outbox.db")
    assert check(str(toml)) == 0
    line = [x for x in capsys.readouterr().out.splitlines() if x.startswith("WARN outbox")]
    assert len(line) == 1 and bid in line[0] and "damaged" in line[0]
    assert "rebuildable" in line[0] and "rebuilds them" in line[0]
    (tmp_path / "events.jsonl").write_text("")  # another file: the lines are gone
    assert check(str(toml)) == 1
    line = [x for x in capsys.readouterr().out.splitlines() if x.startswith("FAIL outbox")]
    assert len(line) == 1 and bid in line[0] and "not rebuildable" in line[0]
    assert "the file is gone" in line[0]


def test_an_older_outbox_gets_checksums_when_opened(tmp_path):
    path = tmp_path / "outbox.db"
    with Outbox(path) as box:
        box.put(b"body-1", "d/1")
    db = sqlite3.connect(path)
    db.execute("ALTER TABLE pending DROP COLUMN crc")
    db.commit()
    db.close()
    with Outbox(path) as box:
        assert box.damaged() == []
        assert box.next_due().body == b"body-1"


def test_agent_check_runs_sqlites_quick_check_and_names_the_file(tmp_path, capsys):
    """Damaged pages that reading the summary does not touch (the acknowledged ids)."""
    path = tmp_path / "outbox.db"
    with Outbox(path) as box:
        for i in range(8):
            box.put(bytes(3000), f"{DEVICE}/{i}")
        for i in range(4):
            box.ack(f"{DEVICE}/{i}")
    db = sqlite3.connect(path)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    (root,) = db.execute("SELECT rootpage FROM sqlite_master WHERE name = 'done'").fetchone()
    db.close()
    data = bytearray(path.read_bytes())
    data[(root - 1) * 4096 + 8:(root - 1) * 4096 + 10] = b"\xff\xff"  # a cell pointer
    path.write_bytes(bytes(data))
    toml = tmp_path / "agent.toml"
    toml.write_text(f'[device]\nid = "{DEVICE}"\n[pattern]\nid = "abc"\ntext = "a b c"\n'
                    f'window = 5.0\n[source]\nkind = "stdin"\n[outbox]\npath = "{path}"\n')
    assert check(str(toml)) == 1
    line = [x for x in capsys.readouterr().out.splitlines() if x.startswith("FAIL outbox")]
    assert len(line) == 1 and "quick_check" in line[0] and str(path) in line[0]


def test_a_lost_outbox_uploads_no_match_twice_and_says_so(tmp_path, caplog):
    """A followed file: matched, uploaded, the outbox deleted, more events appended. The
    collector ends with the matches of one uninterrupted run, none twice."""
    events = stream(2000, seed=11)
    write_events(tmp_path / "events.jsonl", events[:1200])
    caplog.set_level(logging.WARNING, logger="edge")
    with serving(tmp_path) as c:
        doc = agent_doc(tmp_path, c.url, c.token)
        doc["source"]["follow"] = True  # --once: what the file holds now, no flush at its end
        first = run_once(doc)
        assert first["batches_sent"] == first["batches_put"] > 0
        copy = json.loads((tmp_path / "outbox.db.progress").read_text())
        assert copy["consumed"] == first["consumed"] == 1200  # the last chunks' too
        for name in ("outbox.db", "outbox.db-wal", "outbox.db-shm"):
            (tmp_path / name).unlink(missing_ok=True)
        with open(tmp_path / "events.jsonl", "a") as fh:
            fh.write("".join(json.dumps(e) + "\n" for e in events[1200:]))
        caplog.clear()
        second = run_once(doc)
        assert second["batches_sent"] == second["batches_put"] > 0
        stored = c.matches()
    assert len(stored) == len(set(stored))
    assert stored == direct(events)
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(str(tmp_path / "outbox.db") in m and str(tmp_path / "events.jsonl") in m
               and "resumes there" in m for m in said), said


def test_agent_check_warns_when_the_outbox_is_behind_its_copy(tmp_path, capsys):
    write_events(tmp_path / "events.jsonl", stream(600, seed=5))
    doc = agent_doc(tmp_path)
    run_once(doc)
    toml = write_toml(tmp_path / "agent.toml", doc)
    (tmp_path / "outbox.db").unlink()
    assert check(str(toml)) == 0
    line = [x for x in capsys.readouterr().out.splitlines() if x.startswith("WARN outbox")]
    assert len(line) == 1 and "outbox.db.progress says 600" in line[0]
    assert str(tmp_path / "events.jsonl") in line[0]
