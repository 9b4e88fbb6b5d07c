"""The agent's progress belongs to one stream (source and pattern; a file by its inode and
fingerprint), a followed file rotated by rename is followed to the new file and replayed
from after a restart, and every bad line or event is counted once and logged with its file
and line. Real files, the agent in-process."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import acep
from edge.agent import Agent
from edge.agent.config import parse_config
from edge.agent.outbox import Outbox
from edge.agent.sources import read_lines
from edge.wire import decode_batch

PATTERN = {"id": "abc", "text": "a b c", "window": 5.0, "k": 1, "partition": "id"}


def stream(n: int, seed: int = 1, t0: float = 0.0) -> list[dict]:
    rng = random.Random(seed)
    t, out = t0, []
    for _ in range(n):
        t += rng.random()
        out.append({"type": rng.choice("abc"), "t": round(t, 3), "id": rng.randrange(6)})
    return out


def write(path: Path, events: list[dict | str], mode: str = "w") -> None:
    """JSON Lines of ``events``; a str is written as it is (a bad line)."""
    with open(path, mode) as fh:
        fh.write("".join((e if isinstance(e, str) else json.dumps(e)) + "\n" for e in events))


def rotated_while_stopped(tmp: Path, read: list, unread: list, new: list) -> tuple[Path, int]:
    """A run reads ``read`` and stops; ``unread`` is appended, logrotate renames the file to
    ``.1`` and a new file at the path holds ``new``. The path, and the byte the run stopped
    at in the renamed file."""
    path = tmp / "rot.jsonl"
    write(path, read)
    Agent(parse_config(config(tmp, path, follow=True))).run(once=True)
    stopped_at = os.path.getsize(path)
    write(path, unread, "a")
    os.rename(path, f"{path}.1")
    write(path, new)
    return path, stopped_at


def config(tmp: Path, path: Path, follow: bool = False, **pattern) -> dict:
    return {"device": {"id": "dev-s"}, "pattern": {**PATTERN, **pattern},
            "source": {"kind": "file", "path": str(path), "follow": follow,
                       "batch_events": 50, "batch_seconds": 0.05, "poll_seconds": 0.02},
            "outbox": {"path": str(tmp / "outbox.db")},
            "metrics": {"path": str(tmp / "metrics.jsonl"), "interval": 3600}}


def direct(events: list[dict], flush: bool = True) -> int:
    m = acep.Matcher(PATTERN["text"], PATTERN["window"], PATTERN["k"], partition="id")
    found = m.match(events) if flush else m.match_batch(acep.EventBatch.from_events(events))
    return len(found)


def direct_rows(events: list[dict]) -> list[tuple]:
    """(partition, point, errors, trajectory positions) of an uninterrupted run's matches."""
    m = acep.Matcher(PATTERN["text"], PATTERN["window"], PATTERN["k"], partition="id")
    found = m.match_batch(acep.EventBatch.from_events(events))
    return sorted(((x.partition, x.point, x.errors, tuple(x.events)) for x in found), key=repr)


def outbox_rows(tmp: Path) -> list[tuple]:
    """The same of every match in the outbox (no collector: every batch is pending)."""
    db = sqlite3.connect(tmp / "outbox.db")
    rows = []
    for (body,) in db.execute("SELECT body FROM pending ORDER BY n"):
        b = decode_batch(body)
        for i in range(len(b)):
            traj = b.trajectory[b.trajectory_ptr[i]:b.trajectory_ptr[i + 1]].tolist()
            rows.append((b.partition[i], float(b.point[i]), int(b.errors[i]), tuple(traj)))
    db.close()
    return sorted(rows, key=repr)


@contextlib.contextmanager
def running(agent: Agent) -> Iterator[dict]:
    """The agent's run in a thread, stopped on leaving; yields its final metrics (filled
    once it has stopped)."""
    result: dict = {}
    runner = threading.Thread(target=lambda: result.update(agent.run()))
    runner.start()
    try:
        yield result
    finally:
        agent.stop()
        runner.join(30)


def consumed(agent: Agent, n: int, deadline: float) -> None:
    """Until the agent has consumed ``n`` events (or the deadline passed)."""
    while agent.consumed < n and time.time() < deadline:
        time.sleep(0.02)


# --------------------------------------------------------------------------- progress


def test_another_file_or_pattern_is_read_from_its_start(tmp_path, caplog):
    f1, f2 = tmp_path / "f1.jsonl", tmp_path / "f2.jsonl"
    write(f1, stream(400, seed=1))
    write(f2, stream(300, seed=2))
    first = Agent(parse_config(config(tmp_path, f1))).run()
    assert first["events_in"] == 400 and first["seq"] > 0

    caplog.set_level(logging.INFO, "edge.agent")
    again = Agent(parse_config(config(tmp_path, f1))).run()  # the same stream: done
    assert again["events_in"] == 0 and "nothing to do" in caplog.text

    caplog.clear()
    other = Agent(parse_config(config(tmp_path, f2))).run()
    assert other["events_in"] == 300 and other["events_replayed"] == 0
    assert other["matches"] == direct(stream(300, seed=2))
    assert f"source.path was {f1}" in caplog.text and "reading" in caplog.text
    assert other["consumed"] == 700 and other["seq"] > first["seq"]  # batch ids go on

    caplog.clear()
    changed = Agent(parse_config(config(tmp_path, f2, text="a c"))).run()
    assert changed["events_in"] == 300
    assert "pattern.text was 'a b c'" in caplog.text


def test_followed_once_on_another_file_does_not_reuse_the_offset(tmp_path, caplog):
    f1, f2 = tmp_path / "f1.jsonl", tmp_path / "f2.jsonl"
    write(f1, stream(400, seed=1))
    write(f2, stream(100, seed=2))
    Agent(parse_config(config(tmp_path, f1, follow=True))).run(once=True)
    final = Agent(parse_config(config(tmp_path, f2, follow=True))).run(once=True)
    assert (final["events_in"], final["events_replayed"], final["bad_lines"]) == (100, 0, 0)


def test_a_file_rotated_while_stopped_is_finished_from_its_renamed_file(tmp_path, caplog):
    # the events written before the rotation, after the agent stopped, are read from the
    # renamed file, then the new file: the matches are an uninterrupted run's
    caplog.set_level(logging.INFO, "edge.agent")
    path = tmp_path / "rot.jsonl"
    events = stream(1600, seed=21)
    write(path, [*events[:995], "not json", *events[995:1000]])
    first = Agent(parse_config(config(tmp_path, path, follow=True))).run(once=True)
    assert (first["events_in"], first["bad_lines"]) == (1000, 1)
    offset = os.path.getsize(path)
    write(path, [*events[1000:1100], "still not json", *events[1100:1200]], "a")  # unread
    os.rename(path, tmp_path / "rot.jsonl.1")
    write(path, events[1200:1203])
    final = Agent(parse_config(config(tmp_path, path, follow=True))).run(once=True)
    assert (final["events_in"], final["bad_lines"], final["consumed"]) == (203, 1, 1203)
    assert final["events_replayed"] > 0  # the windows still open, from rot.jsonl.1
    assert f"rotated while the agent was stopped; reading its rest from " \
           f"{tmp_path / 'rot.jsonl.1'} byte {offset} first" in caplog.text
    assert "another file" not in caplog.text and "may be" not in caplog.text
    assert f"{tmp_path / 'rot.jsonl.1'}, line 1102: not a JSON object" in caplog.text
    assert outbox_rows(tmp_path) == direct_rows(events[:1203])
    with Outbox(str(tmp_path / "outbox.db")) as ob:  # the progress: as after a live rotation
        st = ob.load_state()
    assert st["source"]["ino"] == os.stat(path).st_ino and st["file_start"] == 1200
    assert [(f["ino"], f["end"]) for f in st["rotated"]] == \
        [(os.stat(f"{path}.1").st_ino, os.path.getsize(f"{path}.1"))]

    # the next restart goes on in the new file, replaying from the renamed one
    caplog.clear()
    write(path, events[1203:], "a")
    last = Agent(parse_config(config(tmp_path, path, follow=True))).run(once=True)
    assert (last["events_in"], last["bad_lines"], last["consumed"]) == (397, 0, 1600)
    assert "replaying the events of windows still open from" in caplog.text
    rows = outbox_rows(tmp_path)
    assert rows == direct_rows(events)
    assert any(min(t) < 1200 <= max(t) for *_, t in rows)  # old file's tail + new's head


def test_a_stop_while_reading_the_renamed_files_rest_resumes_in_it(tmp_path, caplog):
    # stopped again half-way through the old file's rest: the progress names the renamed
    # file (not the one at the path), so the next restart finds it and goes on in it
    events = stream(1600, seed=25)
    path, _ = rotated_while_stopped(tmp_path, events[:1000], events[1000:1300],
                                    events[1300:1400])
    agent = Agent(parse_config(config(tmp_path, path, follow=True)))
    process = agent._process

    def process_then_stop(chunk, source):
        process(chunk, source)
        if agent.consumed >= 1100:
            agent.stop()
    agent._process = process_then_stop
    agent.run(once=True)
    assert 1100 <= agent.consumed < 1300
    with Outbox(str(tmp_path / "outbox.db")) as ob:
        assert ob.load_state()["source"]["ino"] == os.stat(f"{path}.1").st_ino
    write(path, events[1400:], "a")
    final = Agent(parse_config(config(tmp_path, path, follow=True))).run(once=True)
    assert final["consumed"] == 1600 and "another file" not in caplog.text
    assert outbox_rows(tmp_path) == direct_rows(events)


def test_a_file_rotated_twice_while_stopped_skips_the_file_in_between(tmp_path, caplog):
    # the progress knows its own file only: rot.jsonl.2 is finished, .1 is skipped (named)
    caplog.set_level(logging.INFO, "edge.agent")
    path = tmp_path / "rot.jsonl"
    old, between, new = stream(700, seed=22), stream(50, seed=23, t0=900), \
        stream(300, seed=24, t0=1000)
    write(path, old[:600])
    Agent(parse_config(config(tmp_path, path, follow=True))).run(once=True)
    write(path, old[600:], "a")
    os.rename(path, f"{path}.1")
    write(path, between)
    time.sleep(0.01)  # a later mtime, even on a coarse clock
    os.rename(f"{path}.1", f"{path}.2")
    os.rename(path, f"{path}.1")
    write(path, new)
    final = Agent(parse_config(config(tmp_path, path, follow=True))).run(once=True)
    assert (final["events_in"], final["consumed"]) == (400, 1000)
    assert outbox_rows(tmp_path) == direct_rows(old + new)
    assert f"reading its rest from {path}.2 byte" in caplog.text
    assert "holds rot.jsonl.1, changed after" in caplog.text


def test_a_file_rotated_while_stopped_and_deleted_says_what_may_be_lost(tmp_path, caplog):
    path = tmp_path / "rot.jsonl"
    write(path, stream(400, seed=1))
    Agent(parse_config(config(tmp_path, path, follow=True))).run(once=True)
    offset = os.path.getsize(path)
    write(path, stream(20, seed=2, t0=500), "a")  # never read: lost with the file
    os.rename(path, tmp_path / "rot.jsonl.1")
    write(path, stream(50, seed=3, t0=1000))
    os.unlink(tmp_path / "rot.jsonl.1")  # compressed or deleted
    final = Agent(parse_config(config(tmp_path, path, follow=True))).run(once=True)
    assert (final["events_in"], final["events_replayed"], final["bad_lines"]) == (50, 0, 0)
    assert "is another file now" in caplog.text
    assert f"its unread rest, from byte {offset} to its end, may be lost" in caplog.text


def test_a_file_rewritten_in_place_while_stopped_is_read_from_its_start(tmp_path, caplog):
    # copytruncate with the writer going on past the offset: the inode and the size pass
    path = tmp_path / "ct.jsonl"
    write(path, stream(300, seed=1))
    Agent(parse_config(config(tmp_path, path, follow=True))).run(once=True)
    ino = os.stat(path).st_ino
    write(path, stream(500, seed=7, t0=1000))  # truncated and written again: same inode
    assert os.stat(path).st_ino == ino
    final = Agent(parse_config(config(tmp_path, path, follow=True))).run(once=True)
    assert (final["events_in"], final["events_replayed"], final["bad_lines"]) == (500, 0, 0)
    assert "is another file now" in caplog.text and "first 1024 bytes" in caplog.text


def test_a_file_re_created_while_stopped_is_read_from_its_start(tmp_path, caplog):
    # ext4 and tmpfs hand a deleted file's inode to the next file created, mostly
    path = tmp_path / "re.jsonl"
    write(path, stream(300, seed=1))
    Agent(parse_config(config(tmp_path, path, follow=True))).run(once=True)
    os.unlink(path)
    write(path, stream(500, seed=8, t0=1000))
    final = Agent(parse_config(config(tmp_path, path, follow=True))).run(once=True)
    assert (final["events_in"], final["events_replayed"], final["bad_lines"]) == (500, 0, 0)
    assert "is another file now" in caplog.text


def test_a_followed_file_rewritten_past_the_offset_is_read_from_its_start(tmp_path, caplog):
    # truncated and written past the offset between two polls: the size alone passes
    path = tmp_path / "live.jsonl"
    old, new = stream(300, seed=1), stream(500, seed=12, t0=1000)
    write(path, old)
    agent = Agent(parse_config(config(tmp_path, path, follow=True)))
    with running(agent) as result:
        deadline = time.time() + 30
        consumed(agent, 300, deadline)
        time.sleep(0.1)  # idle, polling
        data = "".join(json.dumps(e) + "\n" for e in new).encode()
        with open(path, "r+b") as fh:  # in place, in one write: never shorter meanwhile
            fh.write(data)
        consumed(agent, 800, deadline)
        time.sleep(0.1)
    assert (result["events_in"], result["bad_lines"]) == (800, 0)
    assert result["matches"] == direct(old + new, flush=False)
    assert "changed in its first" in caplog.text


def test_a_short_file_that_grows_keeps_its_fingerprint(tmp_path, caplog):
    # the fingerprint covers the bytes read (less than 1024 at first) and grows with them
    path = tmp_path / "grow.jsonl"
    events = stream(400, seed=9)
    write(path, events[:3])
    assert os.path.getsize(path) < 1024
    for lo, hi in ((3, 10), (10, 400)):
        Agent(parse_config(config(tmp_path, path, follow=True))).run(once=True)
        with Outbox(str(tmp_path / "outbox.db")) as ob:
            assert ob.load_state()["source"]["fp_bytes"] == os.path.getsize(path)
        write(path, events[lo:hi], "a")
    final = Agent(parse_config(config(tmp_path, path, follow=True))).run(once=True)
    assert final["events_in"] == 390 and final["consumed"] == 400
    assert "another file" not in caplog.text
    with Outbox(str(tmp_path / "outbox.db")) as ob:
        assert ob.load_state()["source"]["fp_bytes"] == 1024
    write(path, stream(300, seed=10, t0=1000))  # rewritten: the 1024 bytes differ
    final = Agent(parse_config(config(tmp_path, path, follow=True))).run(once=True)
    assert final["events_in"] == 300 and "first 1024 bytes" in caplog.text


def test_progress_without_a_fingerprint_is_resumed_and_gets_one(tmp_path, caplog):
    path = tmp_path / "old.jsonl"
    events = stream(400, seed=11)
    write(path, events[:250])
    Agent(parse_config(config(tmp_path, path, follow=True))).run(once=True)
    with Outbox(str(tmp_path / "outbox.db")) as ob:  # as an older agent wrote it
        source = ob.load_state()["source"]
        ob.save_state({"source": {k: source[k] for k in ("kind", "path", "dev", "ino")}})
    write(path, events[250:], "a")
    final = Agent(parse_config(config(tmp_path, path, follow=True))).run(once=True)
    assert final["events_in"] == 150 and "another file" not in caplog.text
    with Outbox(str(tmp_path / "outbox.db")) as ob:
        assert ob.load_state()["source"]["fp_bytes"] == 1024


def test_a_followed_file_rotated_by_rename_is_followed_to_the_new_file(tmp_path, caplog):
    caplog.set_level(logging.INFO, "edge.agent")
    path = tmp_path / "rot.jsonl"
    old, new = stream(1500, seed=4), stream(700, seed=5, t0=2000)
    write(path, old[:1000])
    agent = Agent(parse_config(config(tmp_path, path, follow=True)))
    with running(agent) as result:
        deadline = time.time() + 30
        consumed(agent, 1000, deadline)
        write(path, old[1000:], "a")  # written just before the rename: still read
        os.rename(path, tmp_path / "rot.jsonl.1")
        write(path, new[:300])
        consumed(agent, 1800, deadline)
        write(path, new[300:], "a")
        consumed(agent, 2200, deadline)
    assert result["events_in"] == 2200 and result["bad_lines"] == 0
    assert result["backlog_bytes"] == 0
    assert result["matches"] == direct(old + new, flush=False)  # one stream across files
    assert "was rotated" in caplog.text

    # a restart resumes in the new file (its offsets), not the old one
    write(path, stream(100, seed=6, t0=5000), "a")
    final = Agent(parse_config(config(tmp_path, path, follow=True))).run(once=True)
    assert final["events_in"] == 100 and final["bad_lines"] == 0
    assert final["events_replayed"] <= 700


def follow_rotation(tmp_path: Path, parts: list[list[dict | str]]) -> dict:
    """A followed run over ``parts``, the file renamed away (to ``.1``, shifting the older
    ones, like logrotate) before each next part; stopped once all of it is consumed."""
    path = tmp_path / "rot.jsonl"
    write(path, parts[0])
    agent = Agent(parse_config(config(tmp_path, path, follow=True)))
    with running(agent) as result:
        deadline = time.time() + 30
        done = sum(isinstance(e, dict) for e in parts[0])
        for part in parts[1:]:
            consumed(agent, done, deadline)
            for k in range(len(parts), 0, -1):
                if os.path.exists(f"{path}.{k}"):
                    os.rename(f"{path}.{k}", f"{path}.{k + 1}")
            os.rename(path, f"{path}.1")
            write(path, part)
            done += len(part)
            if not part:
                time.sleep(0.3)  # until the agent has it open
        consumed(agent, done, deadline)
    return result


def restart(tmp_path: Path, rest: list[dict]) -> dict:
    write(tmp_path / "rot.jsonl", rest, "a")
    return Agent(parse_config(config(tmp_path, tmp_path / "rot.jsonl", follow=True))
                 ).run(once=True)


def test_a_restart_after_a_rotation_replays_the_rotated_files_tail(tmp_path, caplog):
    # windows open across the rotation: the kept events are in the renamed file
    events = stream(1600, seed=13)  # the old code missed 3 of 570 matches
    old = [*events[:998], "not json", *events[998:1000]]  # counted once, not again
    first = follow_rotation(tmp_path, [old, events[1000:1003]])
    assert (first["events_in"], first["bad_lines"]) == (1003, 1)
    final = restart(tmp_path, events[1003:])
    assert final["events_in"] == 597 and final["bad_lines"] == 0
    assert final["events_replayed"] > 3  # reaches into rot.jsonl.1
    assert first["matches"] + final["matches"] == direct(events, flush=False)
    assert "may be missed" not in caplog.text


def test_a_restart_replays_across_several_rotations_within_a_window(tmp_path, caplog):
    events = stream(1600, seed=14)  # the old code missed 5 of 586 matches
    parts = [events[:1000], events[1000:1001], [], events[1001:1002], events[1002:1003]]
    first = follow_rotation(tmp_path, parts)
    assert first["events_in"] == 1003
    final = restart(tmp_path, events[1003:])
    assert final["events_in"] == 597 and final["bad_lines"] == 0
    assert final["events_replayed"] > 3  # from rot.jsonl.4, through the empty .2
    assert first["matches"] + final["matches"] == direct(events, flush=False)
    assert "may be missed" not in caplog.text


def test_a_restart_without_the_rotated_file_says_what_may_be_missed(tmp_path, caplog):
    events = stream(1600, seed=13)
    first = follow_rotation(tmp_path, [events[:1000], events[1000:1003]])
    os.unlink(tmp_path / "rot.jsonl.1")  # compressed or deleted
    final = restart(tmp_path, events[1003:])
    assert final["events_in"] == 597 and final["events_replayed"] == 3
    assert first["matches"] + final["matches"] < direct(events, flush=False)
    assert "may be missed" in caplog.text


# --------------------------------------------------------------------------- bad events


def test_every_bad_line_and_event_is_counted_once_and_named(tmp_path, caplog):
    path = tmp_path / "events.jsonl"
    lines = [
        {"type": "a", "t": 1, "id": "x", "x": 1},
        "not json",
        {"type": "b", "id": "x"},                   # no tag: refused building the batch
        {"type": "b", "t": 2, "id": "x", "x": 1},
        {"type": "a", "t": 0.5, "id": "x", "x": 1},  # the tag goes back (kernel)
        {"type": "c", "t": 3, "x": 1},              # no partition attribute (kernel)
        {"type": "c", "t": 3.5, "id": "x"},         # no predicate attribute (kernel)
        {"type": "c", "t": 4, "id": "x", "x": 2},
    ]
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n"
                            for x in lines))
    doc = config(tmp_path, path, where=["c.x >= a.x"])
    final = Agent(parse_config(doc)).run()
    assert (final["events_in"], final["events_bad"], final["bad_lines"]) == (3, 4, 1)
    assert final["events_in"] + final["events_bad"] + final["bad_lines"] == len(lines)
    m = acep.Matcher(PATTERN["text"], PATTERN["window"], PATTERN["k"], partition="id",
                     where=["c.x >= a.x"], on_bad_event="skip")
    good = [x for x in lines if isinstance(x, dict) and "t" in x]
    assert final["matches"] == len(m.match(good)) > 0
    for line, what in ((2, "not a JSON object"), (3, "field 't'"),
                       (5, "goes back in time"), (6, "partition attribute 'id'"),
                       (7, "attribute 'x', needed by a predicate")):
        named = [r.getMessage() for r in caplog.records if f"{path}, line {line}" in
                 r.getMessage()]
        assert len(named) == 1 and what in named[0], (line, named)
    assert "<agent>" not in caplog.text


def test_a_restart_does_not_count_or_log_again_the_bad_lines_it_replays(tmp_path, caplog):
    """A followed file read --once twice: the second run replays the kept window, bad line
    included, and counts (and names) only the lines it reads for the first time."""
    path = tmp_path / "events.jsonl"
    with open(path, "w") as fh:
        fh.write(json.dumps({"type": "a", "t": 1, "id": "x"}) + "\nnot json\n"
                 + json.dumps({"type": "b", "t": 2, "id": "x"}) + "\n")
    doc = config(tmp_path, path, follow=True)
    first = Agent(parse_config(doc)).run(once=True)
    assert (first["events_in"], first["bad_lines"]) == (2, 1)
    with open(path, "a") as fh:
        fh.write("still not json\n" + json.dumps({"type": "c", "t": 3, "id": "x"}) + "\n")
    caplog.clear()
    again = Agent(parse_config(doc)).run(once=True)
    assert again["events_replayed"] == 2  # the window of the kept events, read again
    assert (again["events_in"], again["bad_lines"]) == (1, 1)
    assert f"{path}, line 4" in caplog.text and f"{path}, line 2" not in caplog.text


def test_a_line_nested_too_deep_is_one_bad_line_and_the_agent_goes_on(tmp_path, caplog):
    """A line nested 1,000 deep raised RecursionError in the source: the agent died before
    it saved its progress, and again at that line on every restart."""
    path = tmp_path / "events.jsonl"
    deep = '{"type": "a", "t": 2, "id": "x", "v": ' + "[" * 1000 + "]" * 1000 + "}"
    events = [{"type": "a", "t": 1, "id": "x"}, deep, {"type": "b", "t": 3, "id": "x"},
              {"type": "c", "t": 4, "id": "x"}]
    write(path, events)
    final = Agent(parse_config(config(tmp_path, path))).run()
    assert (final["events_in"], final["bad_lines"]) == (3, 1)
    m = acep.Matcher(PATTERN["text"], PATTERN["window"], PATTERN["k"], partition="id")
    assert final["matches"] == len(m.match([e for e in events if isinstance(e, dict)])) > 0
    named = [r.getMessage() for r in caplog.records if f"{path}, line 2:" in r.getMessage()]
    assert len(named) == 1 and "nested deeper than the limit of 64 levels" in named[0]


def test_a_line_over_the_size_limit_is_one_bad_line_never_held_whole(tmp_path, caplog,
                                                                      monkeypatch):
    """Read in pieces, so a line of any length costs the limit's memory at most; the
    offsets still count its bytes, so a restart resumes after it."""
    monkeypatch.setattr("acep._bounds.MAX_LINE_BYTES", 1000)
    path = tmp_path / "events.jsonl"
    long = json.dumps({"type": "b", "t": 2, "id": "x", "v": "y" * 70000})  # > a read
    write(path, [{"type": "a", "t": 1, "id": "x"}, long, {"type": "b", "t": 3, "id": "x"}])
    doc = config(tmp_path, path, follow=True)
    first = Agent(parse_config(doc)).run(once=True)
    assert (first["events_in"], first["bad_lines"]) == (2, 1)
    named = [r.getMessage() for r in caplog.records if f"{path}, line 2:" in r.getMessage()]
    assert len(named) == 1
    assert f"line is longer than the limit of 1000 bytes ({len(long) + 1})" in named[0]
    write(path, [{"type": "c", "t": 4, "id": "x"}], "a")
    again = Agent(parse_config(doc)).run(once=True)
    assert (again["events_in"], again["bad_lines"]) == (1, 0)
    assert first["matches"] + again["matches"] > 0
    lines = []
    with open(path, "rb") as fh:
        while block := read_lines(fh):
            lines += block
    assert [len(x) for x in lines] == [len(x) for x in path.read_bytes().splitlines(True)]
    assert len(bytes(lines[1])) == 61  # its first 60 bytes and its newline are held


def test_many_bad_lines_are_logged_rate_limited(tmp_path, caplog):
    path = tmp_path / "events.jsonl"
    path.write_text("garbage\n" * 500 + json.dumps({"type": "a", "t": 1, "id": 1}) + "\n")
    final = Agent(parse_config(config(tmp_path, path))).run()
    assert final["bad_lines"] == 500 and final["events_in"] == 1
    assert 1 <= caplog.text.count("not a JSON object") <= 20


# ------------------------------------------------------------------ files that move at once


def moving_after_find(monkeypatch, move) -> list[str]:
    """Every ``find_file`` in edge.* answers as before, then ``move(found)`` runs once, on its
    first answer: logrotate renaming or deleting the file between the agent finding it and
    opening it. Returns the paths ``move`` was given."""
    import sys

    import edge.agent.sources
    original, moved = edge.agent.sources.find_file, []

    def find_then_move(directory, identity):
        found = original(directory, identity)
        if found is not None and not moved:
            moved.append(found)
            move(found)
        return found
    for name, module in list(sys.modules.items()):
        if name.startswith("edge") and getattr(module, "find_file", None) is original:
            monkeypatch.setattr(module, "find_file", find_then_move)
    return moved


def test_a_rotated_file_deleted_as_a_restart_finds_it_is_missed_not_a_crash(
        tmp_path, caplog, monkeypatch):
    events = stream(1600, seed=13)
    first = follow_rotation(tmp_path, [events[:1000], events[1000:1003]])
    moved = moving_after_find(monkeypatch, os.unlink)  # the oldest rotated file, deleted
    final = restart(tmp_path, events[1003:])
    assert moved == [f"{tmp_path / 'rot.jsonl'}.1"]
    assert final["events_in"] == 597 and final["events_replayed"] == 3
    assert first["matches"] + final["matches"] < direct(events, flush=False)
    assert "may be missed" in caplog.text
    assert outbox_rows(tmp_path)  # the first run's batches are all there


def test_a_rotated_file_that_cannot_be_opened_is_named_with_the_reason(
        tmp_path, caplog, monkeypatch):
    events = stream(1600, seed=13)
    follow_rotation(tmp_path, [events[:1000], events[1000:1003]])

    def unreadable(found):  # its name now holds something open() refuses, not a move
        os.unlink(found)
        os.mkdir(found)
    moved = moving_after_find(monkeypatch, unreadable)
    final = restart(tmp_path, events[1003:])
    assert final["events_in"] == 597 and final["events_replayed"] == 3
    assert f"cannot open {moved[0]} ([Errno 21] Is a directory" in caplog.text


def test_a_rotated_file_renamed_as_a_restart_finds_it_is_found_again(
        tmp_path, caplog, monkeypatch):
    events = stream(1600, seed=13)
    first = follow_rotation(tmp_path, [events[:1000], events[1000:1003]])
    moving_after_find(monkeypatch, lambda found: os.rename(found, found[:-1] + "2"))
    final = restart(tmp_path, events[1003:])
    assert final["events_in"] == 597 and final["events_replayed"] > 3
    assert first["matches"] + final["matches"] == direct(events, flush=False)
    assert "may be missed" not in caplog.text


def test_a_file_rotated_while_stopped_and_deleted_as_it_is_found_is_not_a_crash(
        tmp_path, caplog, monkeypatch):
    path, offset = rotated_while_stopped(tmp_path, stream(400, seed=1),
                                         stream(20, seed=2, t0=500), stream(50, seed=3, t0=1000))
    moving_after_find(monkeypatch, os.unlink)
    final = Agent(parse_config(config(tmp_path, path, follow=True))).run(once=True)
    assert (final["events_in"], final["events_replayed"], final["bad_lines"]) == (50, 0, 0)
    assert f"its unread rest, from byte {offset} to its end, may be lost" in caplog.text


def test_a_file_rotated_while_stopped_and_renamed_as_it_is_found_is_read(
        tmp_path, caplog, monkeypatch):
    events = stream(1600, seed=21)
    path, _ = rotated_while_stopped(tmp_path, events[:1000], events[1000:1200], events[1200:])
    moving_after_find(monkeypatch, lambda found: os.rename(found, found[:-1] + "2"))
    final = Agent(parse_config(config(tmp_path, path, follow=True))).run(once=True)
    assert (final["events_in"], final["consumed"]) == (600, 1600)
    assert outbox_rows(tmp_path) == direct_rows(events)
    assert "may be lost" not in caplog.text
