"""A device repairs what it can of its own outbox: a damaged batch is rebuilt from the
events file when its lines are still there (same batch id), else a dead letter naming what
was lost; an oversized batch is cut and split so that one huge match never takes the others
with it; the collector's /metrics shows the damaged and rebuilt counts per device. Real
agent, real collector (``python -m edge.collector``) on loopback, real SQLite outbox."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.collector import device_series, query, serving
from support.e2e import PATTERN, agent_doc, direct, flip_a_bit, run_once, stream, write_events

from edge.agent.outbox import Outbox
from edge.wire import Limits, decode_batch, split_body


def test_metrics_show_a_devices_damaged_batches(tmp_path: Path):
    write_events(tmp_path / "events.jsonl", stream(1500, seed=7))
    put = run_once(agent_doc(tmp_path))
    assert put["outbox_pending"] >= 3
    flip_a_bit(tmp_path / "outbox.db")
    (tmp_path / "events.jsonl").unlink()  # nothing to rebuild it from
    (tmp_path / "events.jsonl").write_text("")
    with serving(tmp_path) as c:
        final = run_once(agent_doc(tmp_path, c.url, c.token))
        series = device_series(c)
    assert final["outbox_damaged"] == 1 and final["outbox_rebuilt"] == 0
    assert series["acep_device_outbox_damaged_total"] == 1
    assert series["acep_device_outbox_rebuilt_total"] == 0
    with Outbox(tmp_path / "outbox.db") as box:
        assert len(box.dead_letters()) == 1


LIMIT = 120_000  # the collector's --max-body in these tests: an ordinary batch is far below


def with_one_huge_event(n: int, seed: int) -> tuple[list[dict], int, tuple]:
    """A stream whose one event (in the window of exactly one match, as a followed-file
    agent uploads them) has an attribute of 3 * LIMIT bytes: its index and that match."""
    events = stream(n, seed)
    found = direct(events)
    window = PATTERN["window"]
    for i, e in enumerate(events):
        if e["type"] == "a":
            continue
        covering = [m for m in found if m[0] == e["id"] and m[1] - window <= e["t"] <= m[1]]
        if len(covering) == 1 and not any(i in m[3] for m in found if m is not covering[0]):
            events[i] = {**e, "blob": "x" * (3 * LIMIT)}
            return events, i, covering[0]
    raise AssertionError("no event in the window of exactly one match")


@pytest.mark.parametrize("agent_limit", [LIMIT, 16 << 20], ids=["cut-when-put", "split-on-413"])
def test_one_oversized_match_never_takes_the_others_with_it(tmp_path: Path, agent_limit):
    """Cut when put (collector.max_body is the collector's limit) or split after a 413 (the
    agent thinks the limit is 16 MiB): every ordinary match is stored, the one whose window
    holds the huge event is the one dead letter, its reason saying its size and the limit.
    Before, the whole batch of the huge event was a dead letter."""
    events, _, huge = with_one_huge_event(400, seed=3)
    write_events(tmp_path / "events.jsonl", events)
    with serving(tmp_path, "--max-body", str(LIMIT)) as c:
        doc = agent_doc(tmp_path, c.url, c.token)
        doc["source"]["follow"] = True  # --once: no flush at the end, as direct() matches
        doc["collector"]["max_body"] = agent_limit
        final = run_once(doc)
        stored = c.matches()
    assert sorted(stored, key=repr) == sorted([m for m in direct(events) if m != huge],
                                              key=repr)
    assert final["outbox_dead"] == 1 and final["outbox_pending"] == 0
    with Outbox(tmp_path / "outbox.db") as box:
        (dead,) = box.dead_letters()
        body = box.dead_body(dead.batch_id)
    assert len(decode_batch(body, Limits(max_bytes=len(body), max_str_len=len(body)))) == 1
    assert f"its body of {len(body)} bytes" in dead.reason and f"limit of {LIMIT}" in dead.reason
    assert (final["batches_split"] >= 1) == (agent_limit > LIMIT)


def test_a_damaged_batch_is_rebuilt_from_its_events_under_the_same_id(tmp_path: Path):
    """A bit flipped in a queued body: the agent reads its lines again, makes the batch
    again (the same CRC-32 as when it was put) and sends it under the same id. The
    collector ends with exactly the matches of an undamaged run. Before, that batch was a
    dead letter and its matches were lost."""
    events = stream(1500, seed=7)
    write_events(tmp_path / "events.jsonl", events)
    doc = agent_doc(tmp_path)
    doc["source"]["follow"] = True  # --once: no flush at the end, as direct() matches
    put = run_once(doc)
    assert put["outbox_pending"] >= 3
    bid, body = flip_a_bit(tmp_path / "outbox.db")
    with serving(tmp_path) as c:
        doc = agent_doc(tmp_path, c.url, c.token)
        doc["source"]["follow"] = True
        final = run_once(doc)
        stored = c.matches()
        ids = {b for (b,) in query(c.db, "SELECT batch_id FROM batches")}
        series = device_series(c)
    assert stored == direct(events)
    assert bid in ids and len(ids) == put["outbox_pending"]
    assert final["outbox_damaged"] == final["outbox_rebuilt"] == 1
    assert final["outbox_dead"] == final["outbox_pending"] == 0
    assert series["acep_device_outbox_damaged_total"] == 1
    assert series["acep_device_outbox_rebuilt_total"] == 1


def test_a_damaged_batch_whose_events_are_gone_is_a_dead_letter_naming_them(tmp_path):
    """The events file removed (or its lines changed): nothing sent for that batch, a
    dead letter whose reason names the file and bytes that were lost."""
    write_events(tmp_path / "events.jsonl", stream(1500, seed=7))
    put = run_once(agent_doc(tmp_path))
    bid, _ = flip_a_bit(tmp_path / "outbox.db")
    (tmp_path / "events.jsonl").unlink()
    with serving(tmp_path) as c:
        final = run_after(tmp_path, c)
        ids = {b for (b,) in query(c.db, "SELECT batch_id FROM batches")}
    assert bid not in ids and len(ids) == put["outbox_pending"] - 1
    assert final["outbox_damaged"] == 1 and final["outbox_rebuilt"] == 0
    with Outbox(tmp_path / "outbox.db") as box:
        (dead,) = box.dead_letters()
    assert dead.batch_id == bid
    assert "not rebuilt" in dead.reason and "the file is gone" in dead.reason
    assert str(tmp_path / "events.jsonl") in dead.reason


def test_a_damaged_batch_whose_lines_changed_is_not_rebuilt(tmp_path):
    events = stream(1500, seed=7)
    write_events(tmp_path / "events.jsonl", events)
    put = run_once(agent_doc(tmp_path))
    bid, _ = flip_a_bit(tmp_path / "outbox.db")
    # in place, past its first KiB (else it is another file to the agent): same sizes
    changed = events[:50] + [{**e, "x": (e["x"] + 1) % 10} for e in events[50:]]
    with open(tmp_path / "events.jsonl", "r+b") as fh:
        fh.write("".join(json.dumps(e) + "\n" for e in changed).encode())
    with serving(tmp_path) as c:
        final = run_after(tmp_path, c)
        ids = {b for (b,) in query(c.db, "SELECT batch_id FROM batches")}
    assert bid not in ids and len(ids) == put["outbox_pending"] - 1
    assert final["outbox_rebuilt"] == 0
    with Outbox(tmp_path / "outbox.db") as box:
        (dead,) = box.dead_letters()
    assert "the lines changed" in dead.reason


def run_after(tmp_path: Path, c) -> dict:
    """The agent run again with the collector, its events file as it is now (none: an
    empty one, so that the config is valid)."""
    path = tmp_path / "events.jsonl"
    if not path.exists():
        path.write_text("")
    return run_once(agent_doc(tmp_path, c.url, c.token))


def test_a_damaged_batch_is_rebuilt_from_its_file_renamed_by_rotation(tmp_path):
    """logrotate renamed the events file (events.jsonl.1) and a new one was started: the
    lines are found by the file's inode and fingerprint, and the batch is rebuilt."""
    events = stream(1500, seed=7)
    write_events(tmp_path / "events.jsonl", events)
    put = run_once(agent_doc(tmp_path))
    bid, _ = flip_a_bit(tmp_path / "outbox.db")
    (tmp_path / "events.jsonl").rename(tmp_path / "events.jsonl.1")
    with serving(tmp_path) as c:
        final = run_after(tmp_path, c)
        ids = {b for (b,) in query(c.db, "SELECT batch_id FROM batches")}
    assert bid in ids and len(ids) == put["outbox_pending"]
    assert final["outbox_rebuilt"] == 1 and final["outbox_dead"] == 0


def test_split_ids_are_the_same_on_a_retry_and_keep_every_match(tmp_path):
    """A crash between the 413 and the outbox's split transaction: the split made again
    gives the same ids and bodies (the collector's dedup holds); the halves hold the
    batch's matches, each with the events of its window, as it was."""
    write_events(tmp_path / "events.jsonl", stream(600, seed=5))
    run_once(agent_doc(tmp_path))
    with Outbox(tmp_path / "outbox.db") as box:
        due = box.next_due()
        first, again = split_body(due.body), split_body(due.body)
        assert first == again and len({bid for bid, _, _ in first}) == 2
        assert box.split(due.batch_id, [(b, body, None) for b, body, _ in first])
        assert not box.split(due.batch_id, [(b, body, None) for b, body, _ in first])
        assert box.status(due.batch_id) == "split"
        assert all(box.status(bid) == "pending" for bid, _, _ in first)
    whole = decode_batch(due.body)
    halves = [decode_batch(body) for _, body, _ in first]
    assert [h.batch_id for h in halves] == [bid for bid, _, _ in first]
    assert all(h.seq >= 1 << 62 and h.created_at == whole.created_at for h in halves)
    assert sum(len(h) for h in halves) == len(whole)
    rows = [(p, float(x), tuple(whole.trajectory[whole.trajectory_ptr[i]:
                                                  whole.trajectory_ptr[i + 1]]))
            for i, (p, x) in enumerate(zip(whole.partition, whole.point))]
    got = [(p, float(x), tuple(h.trajectory[h.trajectory_ptr[i]:h.trajectory_ptr[i + 1]]))
           for h in halves for i, (p, x) in enumerate(zip(h.partition, h.point))]
    assert got == rows
    window, ids = PATTERN["window"], whole.columns["id"].tolist()
    for h in halves:  # each half's events: those of its own matches' windows, as sent
        want = {int(pos) for pos, tag, key in zip(whole.event_position, whole.event_tag, ids)
                if any(key == p and x - window <= tag <= x
                       for p, x in zip(h.partition, h.point))}
        assert set(h.event_position.tolist()) == want | set(h.trajectory.tolist())
        assert len(want) < len(whole.event_position)
