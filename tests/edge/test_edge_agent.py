"""Tests of the device agent (edge.agent): config errors, the followed file, matches equal a
direct matcher run, sketch refusal and fallback, SIGKILL and restart of a real subprocess,
uploads with retry against a real HTTP server on loopback."""

from __future__ import annotations

import copy
import dataclasses
import gzip
import json
import logging
import os
import random
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import tomllib
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import numpy as np
import pytest
from support.agent import PATTERN, config, stream
from support.links import Serving, free_port
from support.wait import wait_for

import acep
from acep.shedding import Budget
from edge.agent import Agent
from edge.agent.config import ConfigError, load_config, parse_config
from edge.agent.outbox import Outbox
from edge.agent.sources import FileSource, chunk_events
from edge.agent.uplink import Uplink, retry_after
from edge.agent.uploader import Uploader
from edge.wire import decode_batch

ROOT = Path(__file__).resolve().parents[2]


def outbox_matches(db_path) -> tuple[list[str], list[tuple]]:
    """Batch ids and (partition, point, trajectory) of every match in the outbox (pending or
    acked bodies are both in ``pending`` until acked, so read before any upload)."""
    db = sqlite3.connect(db_path)
    ids, rows = [], []
    for bid, body in db.execute("SELECT batch_id, body FROM pending ORDER BY n"):
        ids.append(bid)
        b = decode_batch(body)
        for i in range(len(b)):
            traj = b.trajectory[b.trajectory_ptr[i]:b.trajectory_ptr[i + 1]].tolist()
            rows.append((b.partition[i], float(b.point[i]), int(b.errors[i]), tuple(traj)))
    db.close()
    return ids, rows


def direct(events, budget=None, flush: bool = True) -> list[tuple]:
    m = acep.Matcher(PATTERN["text"], PATTERN["window"], PATTERN["k"], partition="id",
                     budget=budget)
    found = m.match(events) if flush else m.match_batch(acep.EventBatch.from_events(events))
    return [(x.partition, x.point, x.errors, x.events) for x in found]


# --------------------------------------------------------------------------- config

@pytest.mark.parametrize("change, key", [
    ({"device": {}}, "device.id"),
    ({"device": {"id": "bad id!"}}, "device.id"),
    ({"pattern": {"id": "p", "window": 5}}, "pattern.text"),
    ({"pattern": {"text": "a b", "window": -1}}, "pattern.window"),
    ({"budget": {"mode": "sometimes"}}, "budget.mode"),
    ({"budget": {"mode": "fixed"}}, "budget.ops_per_event"),
    ({"budget": {"ops_per_event": "many"}}, "budget.ops_per_event"),
    ({"source": {"kind": "file"}}, "source.path"),
    ({"collector": {"url": "http://x"}}, "device.token"),
    ({"collector": {"url": "ftp://x"}, "device": {"id": "d", "token": "t"}}, "collector.url"),
    ({"collector": {"url": "http://exa mple.com"}, "device": {"id": "d", "token": "t"}},
     "collector.url: 'http://exa mple.com' contains a space"),
    ({"collector": {"url": "http://"}, "device": {"id": "d", "token": "t"}},
     "collector.url: 'http://' has no host"),
    ({"collector": {"url": "http://x:99999"}, "device": {"id": "d", "token": "t"}},
     "collector.url: 'http://x:99999' has a bad port"),
    ({"collector": {"url": "http://x/#top"}, "device": {"id": "d", "token": "t"}},
     "collector.url: 'http://x/#top' must not have a query"),
    ({"collector": {"url": "http://x", "timeout": float("inf")},
      "device": {"id": "d", "token": "t"}}, "collector.timeout: must be a finite number"),
    ({"collector": {"url": "http://x", "timeout": 1e8}, "device": {"id": "d", "token": "t"}},
     "collector.timeout: 100,000,000 seconds is more than a year"),
    ({"pattern": {"text": "a b", "window": float("inf")}}, "pattern.window: must be a finite"),
    ({"budget": {"max_ops": float("nan")}}, "budget.max_ops: must be a finite"),
    ({"budget": {"mode": "fixed", "ops_per_event": 0.01, "burst": 64}},
     "budget.burst: a bucket of 64 events at budget.ops_per_event 0.01 holds 0.64 "
     "operations, less than the one a match node costs, so the agent would keep nothing; "
     "make budget.burst 100 or more"),
    ({"collector": {"url": "http://x", "heartbeat": -5}, "device": {"id": "d", "token": "t"}},
     "collector.heartbeat"),
    ({"collector": {"url": "http://x", "answer_timeout": 5},
      "device": {"id": "d", "token": "t"}}, "collector.answer_timeout: 5 s is less than "
                                            "collector.timeout"),
    ({"collector": {"url": "http://x", "answer_timeout": "30"},
      "device": {"id": "d", "token": "t"}}, "collector.answer_timeout: must be float"),
    ({"collector": {"url": "http://x", "expect_continue": "yes"},
      "device": {"id": "d", "token": "t"}}, "collector.expect_continue"),
    ({"collector": {"url": "http://x", "compress": 1},
      "device": {"id": "d", "token": "t"}}, "collector.compress"),
    ({"sketch": {"path": "s.bin"}}, "sketch.key_file"),
    ({"sketch": {"path": "s.bin", "key_file": "k", "defer": -1}}, "sketch.defer"),
    ({"sketch": {"path": "s.bin", "key_file": "k", "defer": "4"}}, "sketch.defer"),
    ({"outbox": {"polcy": "drop-oldest"}}, "outbox.polcy"),
    ({"pattern": {"text": "a b", "window": 5, "id": "rising/v2"}}, "pattern.id"),
    ({"outbox": {"policy": "keep-all"}}, "outbox.policy"),
    ({"outbox": {"path": "/nonexistent/dir/o.db"}}, "outbox.path: the directory "
                                                    "/nonexistent/dir does not exist"),
    ({"metrics": {"path": "/nonexistent/m.jsonl"}}, "metrics.path: the directory"),
    ({"metrics": {"interval": 1e-9}}, "metrics.interval: 1e-09 seconds is below the least "
                                      "of 1"),
    ({"sketch": {"path": "s.bin", "key_file": "k", "save_path": "/nonexistent/l.sketch"}},
     "sketch.save_path: the directory"),
])
def test_config_errors_name_the_key(tmp_path, change, key):
    doc = {"device": {"id": "d"}, "pattern": {"text": "a b", "window": 5},
           "source": {"kind": "stdin"}}
    for name, value in change.items():
        doc[name] = value if name in ("device", "pattern") else {**doc.get(name, {}), **value}
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        parse_config(doc)


def test_a_source_path_that_is_a_directory_is_named_as_one(tmp_path):
    """It was a bare errno message ("[Errno 21] Is a directory") at the first read."""
    doc = {"device": {"id": "d"}, "pattern": {"text": "a b", "window": 5},
           "source": {"kind": "file", "path": str(tmp_path)}}
    with pytest.raises(ConfigError) as refused:
        parse_config(doc)
    assert str(refused.value) == (f"source.path: {tmp_path} is a directory; name the JSON "
                                  "Lines file in it that the agent reads")


def test_a_collector_url_with_a_password_does_not_show_it(tmp_path):
    doc = {"device": {"id": "d", "token": "t"}, "pattern": {"text": "a b", "window": 5},
           "source": {"kind": "stdin"}, "collector": {"url": "https://me:s3cret@x"}}
    with pytest.raises(ConfigError) as refused:
        parse_config(doc)
    assert str(refused.value) == (
        "collector.url: 'https://***@x' must not hold a user name or password "
        "(user:password@): the collector takes a token, set by device.token or "
        "device.token_file")


def _agent_toml(tmp: Path, **sections: str) -> Path:
    """agent.toml with a stdin source and an outbox beside it, ``sections`` added as TOML
    lines by table name."""
    parts = {"device": 'id = "pi-1"', "pattern": 'text = "a b"\nwindow = 10',
             "source": 'kind = "stdin"', "outbox": 'path = "outbox.db"', **sections}
    path = tmp / "agent.toml"
    path.write_text("".join(f"[{name}]\n{body}\n" for name, body in parts.items()))
    return path


@pytest.mark.parametrize("pattern, said", [
    ('text = "a b ("\nwindow = 10', "pattern.text: pattern error at position 5: expected "
                                     "an event type or '(', found end of input (in 'a b (')"),
    ('text = "a b"\nwindow = 10\nwhere = ["b.x >"]',
     "pattern.where: predicate error at position 5: "),
    ('text = "a b"\nwindow = inf', "pattern.window: must be a finite number >= 0, not inf"),
])
def test_pattern_errors_are_config_errors_naming_the_file_and_the_key(tmp_path, capsys,
                                                                      pattern, said):
    from edge.agent import main

    cfg = _agent_toml(tmp_path, pattern=pattern)
    for check in ([], ["--check"]):
        assert main(["--config", str(cfg), *check]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"acep agent: config error: {cfg}: {said}")
        assert err.count("\n") == 1


@pytest.mark.parametrize("name, body, kind", [
    ("events.parquet", None, "Parquet"),  # not there yet: its name says it
    ("events.jsonl.gz", None, "gzip"),
    ("events.jsonl", gzip.compress(b'{"type": "a", "t": 1}\n'), "gzip"),  # its bytes say it
    ("events.log", b"PAR1\x15\x04", "Parquet"),
])
def test_a_source_file_the_agent_cannot_read_as_json_lines_is_refused_by_name(
        tmp_path, name, body, kind):
    if body is not None:
        (tmp_path / name).write_bytes(body)
    doc = config(tmp_path, source={"kind": "file", "path": name, "follow": False})
    with pytest.raises(ConfigError) as refused:
        parse_config(doc, base_dir=str(tmp_path))
    assert str(refused.value).startswith(
        f"source.path: {tmp_path / name} is {kind}, but the agent reads JSON Lines only")


@pytest.mark.parametrize("make, why", [
    (lambda p: p.mkdir(), "is a directory, not a file"),
    (lambda p: p.write_text("not sqlite\n" * 200), "is not an outbox (not an SQLite database)"),
])
def test_an_outbox_that_cannot_be_opened_is_one_line_naming_it_and_its_key(
        tmp_path, capsys, make, why):
    from edge.agent import main

    cfg = _agent_toml(tmp_path)
    make(tmp_path / "outbox.db")
    assert main(["--config", str(cfg)]) == 2
    assert capsys.readouterr().err == (f"acep agent: config error: {cfg}: outbox.path: "
                                       f"{tmp_path / 'outbox.db'}: {why}\n")


def test_config_file_relative_paths_and_token_file(tmp_path):
    (tmp_path / "token").write_text("s3cret\n")
    (tmp_path / "agent.toml").write_text(
        '[device]\nid = "pi-1"\ntoken_file = "token"\n'
        '[collector]\nurl = "http://127.0.0.1:9"\n'
        '[pattern]\ntext = "a b"\nwindow = 10\n'
        '[source]\npath = "events.jsonl"\n')
    cfg = load_config(tmp_path / "agent.toml")
    assert cfg.token == "s3cret"
    assert cfg.source.path == str(tmp_path / "events.jsonl")
    (tmp_path / "bad.toml").write_text("[device\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(tmp_path / "bad.toml")


# --------------------------------------------------------------------------- sources

def test_follow_source_reads_appends_and_partial_lines(tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_bytes(b"")
    src = FileSource(path, follow=True, poll_seconds=0.01, batch_events=2, batch_seconds=0.05)
    stop = threading.Event()
    got: list[dict] = []

    def read():
        for chunk in src.chunks(stop):
            got.extend(chunk_events(chunk))

    reader = threading.Thread(target=read)
    reader.start()
    with open(path, "ab") as fh:
        fh.write(b'{"type": "a", "t": 1}\n{"type": "b", "t": 2}\n')
        fh.flush()
        time.sleep(0.2)
        fh.write(b'{"type": "c", ')  # half a line: must not be read yet
        fh.flush()
        time.sleep(0.2)
        assert [e["type"] for e in got] == ["a", "b"]
        fh.write(b'"t": 3}\nnot json\n{"type": "d", "t": 4}\n')
        fh.flush()
        deadline = time.time() + 5
        while len(got) < 4 and time.time() < deadline:
            time.sleep(0.02)
    stop.set()
    reader.join(5)
    assert [e["type"] for e in got] == ["a", "b", "c", "d"]
    assert src.bad_lines == 1
    assert src.offset == path.stat().st_size


def test_a_file_rewritten_while_the_reader_is_busy_is_read_from_its_start(tmp_path, caplog):
    # copytruncate under load: the writer passes the old offset before the reader is idle
    # again, so no poll sees the file short; the next read must not start mid-file
    path = tmp_path / "busy.jsonl"
    old, new = stream(3000, seed=1), stream(2000, seed=2)
    lines = [(json.dumps(e) + "\n").encode() for e in old]
    path.write_bytes(b"".join(lines))
    src = FileSource(path, follow=True, poll_seconds=0.01, batch_events=100, batch_seconds=5)
    got: list[dict] = []
    first: int | None = None
    for chunk in src.chunks(threading.Event()):
        got.extend(chunk_events(chunk))
        if first is None:  # one block is read; the rest of the file is not
            ends = np.cumsum([len(line) for line in lines])
            first = int(np.searchsorted(ends, src.offset, side="right"))
            assert 100 <= first < len(old)
            path.write_bytes(b"".join((json.dumps(e) + "\n").encode() for e in new))
            assert path.stat().st_size > src.offset
        if len(got) >= first + len(new):
            break
    assert got == old[:first] + new
    assert (src.bad_lines, src.left, src.generation) == (0, [None], 1)
    assert "changed in its first 1024 bytes" in caplog.text


# --------------------------------------------------------------------------- matching

@pytest.mark.parametrize("budget", [None, {"mode": "fixed", "ops_per_event": 0.6,
                                           "burst": 8}])
def test_outbox_holds_the_direct_matchers_matches(tmp_path, budget):
    events = stream(3000)
    extra = {} if budget is None else {"budget": budget}
    agent = Agent(parse_config(config(tmp_path, **extra)), events=events)
    final = agent.run()
    ids, rows = outbox_matches(tmp_path / "outbox.db")
    expect = direct(events, None if budget is None else Budget(0.6, 8))
    assert sorted(rows, key=repr) == sorted(expect, key=repr)
    assert len(ids) == len(set(ids)) == final["batches_put"]
    assert final["events_in"] == 3000 and final["matches"] == len(expect)
    if budget is not None:
        assert final["shed"] > 0 and final["policy"] == "oldest-first"
    # every match's window events travel with it
    db = sqlite3.connect(tmp_path / "outbox.db")
    body = db.execute("SELECT body FROM pending LIMIT 1").fetchone()[0]
    b = decode_batch(body)
    assert set(b.trajectory.tolist()) <= set(b.event_position.tolist())



def test_tampered_sketch_falls_back_to_named_policy(tmp_path, caplog):
    from history.sketch import Sketch

    key = b"device-key"
    (tmp_path / "key").write_bytes(key)
    bins_rem, bins_gap = np.array([1.0, 3.0]), np.array([0.5])
    m = acep.Matcher(PATTERN["text"], PATTERN["window"], PATTERN["k"])
    n_cells = m.pattern.automaton.n_states * 2 * 3 * 2
    sk = Sketch(PATTERN["text"], (), 1, 5.0, m.pattern.automaton.n_states, bins_rem, bins_gap,
                np.full(n_cells, 0.5, np.float32), np.zeros((n_cells, 4), np.uint32),
                partition_by=PATTERN["partition"])
    good = sk.to_bytes(key)
    bad = bytearray(good)
    bad[len(bad) // 2] ^= 0xFF
    (tmp_path / "good.sketch").write_bytes(good)
    (tmp_path / "bad.sketch").write_bytes(bytes(bad))
    events = stream(500)
    budget = {"mode": "fixed", "ops_per_event": 0.8}
    for name, policy in (("good", "history"), ("bad", "oldest-first"),
                         ("missing", "oldest-first")):
        d = tmp_path / name
        d.mkdir()
        doc = config(d, budget=budget, sketch={
            "path": str(tmp_path / f"{name}.sketch"), "key_file": str(tmp_path / "key"),
            "save_path": str(d / "learned.sketch"), "defer": 2})
        caplog.clear()
        agent = Agent(parse_config(doc), events=events)
        final = agent.run()
        assert final["policy"] == policy, name
        metrics = [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines()]
        assert metrics[-1]["policy"] == policy
        if name != "good":
            assert "sketch refused" in final["policy_error"]
            assert "fallback policy oldest-first" in caplog.text
        else:
            assert final["policy_error"] is None
            assert agent.history.defer == 2  # [sketch] defer reaches the policy
            # the learned sketch is saved signed and loads with the device key
            assert Sketch.load(d / "learned.sketch", key).n_cells == n_cells


@pytest.mark.parametrize("trained, pattern, why", [
    ({"partition_by": None}, {}, "trained without a partition, and this run is partitioned "
                                 "by 'id'"),
    ({"partition_by": "other"}, {}, "partitioned by 'other'"),
    ({"partition_by": "id"}, {"where": ["c.x >= a.x"]}, "where=['c.x >= a.x']"),
    ({"partition_by": "id", "where": ("[id]",)}, {"partition": None, "where": ["[id]"]}, None),
])
def test_a_sketch_for_other_settings_is_refused_by_name(tmp_path, caplog, trained, pattern,
                                                        why):
    """The device runs its sketch only for the pattern, predicates and partition attribute
    it was trained for (the equivalence test [id] partitions by id too)."""
    from history.sketch import Sketch

    key = b"device-key"
    (tmp_path / "key").write_bytes(key)
    m = acep.Matcher(PATTERN["text"], PATTERN["window"], PATTERN["k"])
    n_cells = m.pattern.automaton.n_states * 2 * 3 * 2
    Sketch(PATTERN["text"], trained.get("where", ()), 1, 5.0, m.pattern.automaton.n_states,
           np.array([1.0, 3.0]), np.array([0.5]), np.full(n_cells, 0.5, np.float32),
           np.zeros((n_cells, 4), np.uint32), partition_by=trained["partition_by"]
           ).save(tmp_path / "s.sketch", key)
    doc = config(tmp_path, budget={"mode": "fixed", "ops_per_event": 0.8},
                 sketch={"path": str(tmp_path / "s.sketch"), "key_file": str(tmp_path / "key")})
    doc["pattern"].update(pattern)
    doc["pattern"] = {k: v for k, v in doc["pattern"].items() if v is not None}
    final = Agent(parse_config(doc), events=stream(200)).run()
    if why is None:
        assert final["policy"] == "history" and final["policy_error"] is None
    else:
        assert final["policy"] == "oldest-first"
        assert why in final["policy_error"] and why in caplog.text


# --------------------------------------------------------------------------- SIGKILL

def _spawn(cfg_path: Path, once: bool) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    args = [sys.executable, "-m", "edge.agent", "--config", str(cfg_path),
            "--log-level", "WARNING"] + (["--once"] if once else [])
    return subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)


def _consumed(db_path: Path) -> int:
    if not db_path.exists():
        return 0
    db = sqlite3.connect(db_path, timeout=10)
    try:
        row = db.execute("SELECT value FROM state WHERE name = 'consumed'").fetchone()
    except sqlite3.OperationalError:  # the agent has not created the tables yet
        row = None
    db.close()
    return 0 if row is None else json.loads(row[0])


def test_sigkill_mid_stream_loses_and_duplicates_nothing(tmp_path):
    """A real agent process follows a file that grows; it is killed with SIGKILL right after
    it has committed progress, restarted, and at the end every match of the stream is in the
    outbox once (the pending ones at the end of a followed file are not flushed)."""
    events = stream(5000, seed=7)
    path, db_path = tmp_path / "events.jsonl", tmp_path / "outbox.db"
    cfg_path = tmp_path / "agent.toml"
    cfg_path.write_text(
        '[device]\nid = "dev-k"\n'
        '[pattern]\ntext = "a b c"\nwindow = 5.0\nk = 1\npartition = "id"\n'
        f'[source]\nkind = "file"\npath = "{path}"\nbatch_events = 20\n'
        'batch_seconds = 0.05\npoll_seconds = 0.02\n'
        f'[outbox]\npath = "{db_path}"\n'
        f'[metrics]\npath = "{tmp_path / "metrics.jsonl"}"\n')
    rng = random.Random(3)
    written = 0

    def append(n):
        nonlocal written
        with open(path, "a") as fh:
            for e in events[written:written + n]:
                fh.write(json.dumps(e) + "\n")
        written = min(written + n, len(events))

    append(1000)
    kills, before, mid_stream = 0, 0, 0
    while written < len(events) or before < written:
        proc = _spawn(cfg_path, once=False)
        append(700)  # new events first, so the agent always has something to consume
        deadline = time.time() + 30
        while _consumed(db_path) <= before and time.time() < deadline:
            time.sleep(0.005)
        time.sleep(rng.uniform(0.0, 0.02))
        assert proc.poll() is None, proc.stderr.read().decode()
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        kills += 1
        now = _consumed(db_path)
        assert now > before
        mid_stream += now < written
        before = now
        if kills >= 12:
            break
    assert mid_stream >= 1  # at least one kill landed with events still to consume
    proc = _spawn(cfg_path, once=True)
    assert proc.wait(60) == 0, proc.stderr.read().decode()
    assert _consumed(db_path) == len(events)
    ids, rows = outbox_matches(db_path)
    assert len(ids) == len(set(ids))
    seqs = sorted(int(i.split("/")[1]) for i in ids)
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))  # no gap, no repeat
    assert len(rows) == len(set(rows))
    assert sorted(rows, key=repr) == sorted(direct(events, flush=False), key=repr)


def limit_pages(outbox: Outbox, room: int) -> None:
    """SQLite's page limit on the outbox's own connection, ``room`` pages above what it
    holds: its writes then fail as on a full SD card (SQLITE_FULL, "database or disk is
    full"), which a test cannot make by filling a disk."""
    with outbox._lock:
        pages = outbox._db.execute("PRAGMA page_count").fetchone()[0]
        outbox._db.execute(f"PRAGMA max_page_count = {pages + room}")


def run_in_thread(agent: Agent) -> tuple[threading.Thread, list]:
    out: list = []
    thread = threading.Thread(target=lambda: out.append(agent.run()))
    thread.start()
    return thread, out


def test_a_full_disk_holds_the_input_until_there_is_room_and_loses_nothing(
        tmp_path, caplog, monkeypatch):
    import edge.agent.loop
    monkeypatch.setattr(edge.agent.loop, "DISK_FULL_RETRY", 0.05)
    events = stream(3000)
    cfg = parse_config(config(tmp_path))
    cfg.metrics.interval = 0.05  # below what agent.toml may say: a test waits less
    agent = Agent(cfg, events=events)
    limit_pages(agent.outbox, 2)
    thread, result = run_in_thread(agent)
    wait_for(lambda: agent.commits.disk_full, "the disk to be full", 30.0)
    held = agent.consumed
    metrics = tmp_path / "metrics.jsonl"
    wait_for(lambda: metrics.exists() and '"outbox_disk_full": true' in metrics.read_text(),
             "a metrics line saying so", 30.0)
    assert agent.consumed == held < 3000  # no input is taken meanwhile
    limit_pages(agent.outbox, 1 << 20)  # room again
    thread.join(60)
    final = result[0]
    assert final["events_in"] == 3000 and not final["outbox_disk_full"]
    ids, rows = outbox_matches(tmp_path / "outbox.db")
    assert sorted(rows, key=repr) == sorted(direct(events), key=repr)
    assert len(ids) == len(set(ids)) == final["batches_put"]
    said = [r.getMessage() for r in caplog.records if "outbox" in r.getMessage()]
    assert [m[:26] for m in said] == ["the outbox's disk is full ", "the outbox is written agai"]


def test_a_stop_while_the_disk_is_full_leaves_the_chunk_to_the_next_start(
        tmp_path, caplog, monkeypatch):
    import edge.agent.loop
    monkeypatch.setattr(edge.agent.loop, "DISK_FULL_RETRY", 0.05)
    events = stream(3000)
    agent = Agent(parse_config(config(tmp_path)), events=events)
    limit_pages(agent.outbox, 2)
    thread, result = run_in_thread(agent)
    wait_for(lambda: agent.commits.disk_full, "the disk to be full", 30.0)
    agent.stop()
    thread.join(60)
    assert result and result[0]["events_in"] < 3000  # stopped cleanly, not by an exception
    assert "the next start reads them again" in caplog.text
    again = Agent(parse_config(config(tmp_path)), events=events)  # room again
    again.run()
    ids, rows = outbox_matches(tmp_path / "outbox.db")
    assert sorted(rows, key=repr) == sorted(direct(events), key=repr)  # none lost, none twice
    assert len(ids) == len(set(ids))


# --------------------------------------------------------------------------- uploads

class _Collector(BaseHTTPRequestHandler):
    fail_first = 3
    bodies: list = []
    statuses: list = []
    lock = threading.Lock()

    def do_POST(self):  # noqa: N802 (http.server's naming)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.path != "/v1/batches":  # a collector from before heartbeats
            return self._answer(404, {"error": "not found", "status": 404})
        with self.lock:
            if self.headers.get("Authorization") != "Bearer tok-1":
                code, doc = 401, {"error": "bad token", "status": 401}
            elif len(self.statuses) < self.fail_first:
                code, doc = 500, {"error": "down for a while", "status": 500}
            else:
                known = any(b == body for b in self.bodies)
                self.bodies.append(body)
                b = decode_batch(body)
                code, doc = 200, {"status": "duplicate" if known else "stored",
                                  "batch_id": b.batch_id, "matches": len(b), "exact": None}
            self.statuses.append(code)
        self._answer(code, doc)

    def _answer(self, code: int, doc: dict) -> None:
        out = json.dumps(doc).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args):
        pass


def test_uploads_retry_5xx_then_ack(tmp_path, caplog):
    """5xx answers are retried until acknowledged; a run of failures is logged once, and
    so is the recovery (a collector that is down fails every batch: one line, not one per
    batch and attempt)."""
    caplog.set_level(logging.DEBUG, logger="edge")
    _Collector.bodies, _Collector.statuses = [], []
    with Serving(_Collector) as server:
        doc = config(tmp_path, collector={"url": server.url, "timeout": 5},
                     outbox={"backoff_base": 0.05, "backoff_max": 0.2})
        doc["device"]["token"] = "tok-1"
        events = stream(800)
        final = Agent(parse_config(doc), events=events).run(once=True)
    assert _Collector.statuses[:3] == [500, 500, 500]
    assert final["outbox_pending"] == 0
    assert final["batches_sent"] == final["batches_put"] > 0
    # an HTTP/1.0 server: it never says 100 Continue, nor that it takes gzip
    assert (final["upload_expect_continue"], final["upload_gzip"]) == (False, False)
    stored = [decode_batch(b) for b in _Collector.bodies]
    assert len({b.batch_id for b in stored}) == final["batches_put"]
    got = sorted((b.partition[i], float(b.point[i])) for b in stored for i in range(len(b)))
    assert got == sorted((r[0], r[1]) for r in direct(events))
    failed = [r for r in caplog.records if r.getMessage().startswith("upload of ")]
    assert len(failed) == _Collector.statuses.count(500) >= 3
    assert [r.levelno for r in failed] == [logging.WARNING] + [logging.DEBUG] * (len(failed) - 1)
    back = [r.getMessage() for r in caplog.records if "go through again" in r.getMessage()]
    assert back == [f"uploads go through again (after {len(failed)} failed attempts)"]


def test_heartbeats_stop_quietly_at_an_older_collector_and_warn_once_when_it_is_down(
        tmp_path, caplog):
    caplog.set_level(logging.DEBUG, logger="edge")
    outbox = Outbox(tmp_path / "outbox.db")
    with Serving(_Collector) as server:
        old = Uploader(outbox, Uplink(server.url, "tok-1"))
        old.beat({"consumed": 1})
        assert old.send_beat() and old.beats_off
        old.beat({"consumed": 2})
        assert not old.send_beat() and old.counts["heartbeats_failed"] == 0
    down = Uploader(outbox, Uplink(f"http://127.0.0.1:{free_port()}", "tok-1", timeout=1))
    for n in range(3):
        down.beat({"consumed": n})
        assert down.send_beat() and not down.beats_off
    assert down.counts["heartbeats_failed"] == 3 and down.counts["heartbeats"] == 0
    outbox.close()
    said = [(r.levelno, r.getMessage()) for r in caplog.records if "heartbeat" in r.getMessage()]
    assert said[0] == (logging.INFO, "the collector has no heartbeat endpoint (HTTP 404: an "
                                     "older version); heartbeats are off until the agent "
                                     "restarts")
    assert [level for level, _ in said[1:]] == [logging.WARNING, logging.DEBUG, logging.DEBUG]
    assert said[1][1].startswith("heartbeat failed (connection: ")


def test_a_finite_run_with_the_collector_down_waits_then_warns_and_keeps(tmp_path, caplog):
    url = f"http://127.0.0.1:{free_port()}"
    doc = config(tmp_path, collector={"url": url, "timeout": 1, "drain_timeout": 1.5},
                 outbox={"backoff_base": 0.05, "backoff_max": 0.2})
    doc["device"]["token"] = "tok-1"
    t0 = time.monotonic()
    final = Agent(parse_config(doc), events=stream(800)).run()
    took = time.monotonic() - t0
    # it tried for drain_timeout, then gave up; it stops early, by at most backoff_max,
    # when the next retry would fall after the deadline
    assert 1.5 - 0.2 <= took < 8
    assert final["outbox_pending"] == final["batches_put"] > 0
    assert final["batches_sent"] == final["batches_rejected"] == 0
    assert final["upload_error"].startswith("connection: ")  # no HTTP status: none came
    warning = [r.getMessage() for r in caplog.records if "not acknowledged" in r.getMessage()]
    assert len(warning) == 1 and warning[0].startswith(f"{final['batches_put']} batches")
    with sqlite3.connect(tmp_path / "outbox.db") as db:  # kept for the next run
        assert db.execute("SELECT COUNT(*) FROM pending").fetchone()[0] == final["batches_put"]


def test_an_unexpected_upload_error_keeps_the_batches_and_a_finite_run_still_ends(
        tmp_path, caplog, monkeypatch):
    """A bug raising inside the uploader's send must not end it and leave the agent
    draining forever."""
    from edge.agent.uplink import Uplink

    def broken(self, body, timeout=None):
        raise RuntimeError("a bug")

    monkeypatch.setattr(Uplink, "post_batch", broken)
    doc = config(tmp_path, collector={"url": "http://x", "timeout": 1, "drain_timeout": 1},
                 outbox={"backoff_base": 0.05, "backoff_max": 0.2})
    doc["device"]["token"] = "tok-1"
    thread, out = run_in_thread(Agent(parse_config(doc), events=stream(800)))
    thread.join(20)
    assert not thread.is_alive(), "the agent hangs after an unexpected upload error"
    final = out[0]
    assert final["outbox_pending"] == final["batches_put"] > 0
    assert final["upload_error"] == "unexpected error: RuntimeError: a bug"
    said = [r for r in caplog.records if r.getMessage().startswith("uploads failed")]
    assert len(said) == 1 and said[0].levelno == logging.ERROR  # once, not per attempt


def test_a_fresh_outbox_starts_its_seq_at_the_time_and_a_restart_keeps_it(tmp_path):
    before = time.time_ns() // 1000
    agent = Agent(parse_config(config(tmp_path)), events=stream(300))
    first = agent.seq
    assert before <= first <= time.time_ns() // 1000
    final = agent.run()
    ids, _ = outbox_matches(tmp_path / "outbox.db")
    assert [int(i.split("/")[1]) for i in ids] == list(range(first, final["seq"]))
    # a restart (no new events: the iterator was consumed) goes on from the stored seq
    again = Agent(parse_config(config(tmp_path)), events=stream(300))
    assert again.seq == final["seq"]
    again.outbox.close()


def test_metrics_are_written_every_interval_while_no_event_arrives(tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_text("")
    url = f"http://127.0.0.1:{free_port()}"
    doc = config(tmp_path, source={"kind": "file", "path": str(path), "follow": True},
                 collector={"url": url, "timeout": 1})
    doc["device"]["token"] = "tok-1"
    cfg = parse_config(doc)
    cfg.metrics.interval = 0.2  # below what agent.toml may say: a test waits less
    agent = Agent(cfg)
    runner = threading.Thread(target=agent.run)
    runner.start()
    metrics = tmp_path / "metrics.jsonl"
    try:
        deadline = time.time() + 20
        while time.time() < deadline:
            if metrics.exists() and len(metrics.read_text().splitlines()) >= 4:
                break
            time.sleep(0.05)
    finally:
        agent.stop()
        runner.join(30)
    lines = [json.loads(x) for x in metrics.read_text().splitlines()]
    assert len(lines) >= 5  # at least 4 while idle, and the final one
    assert all(x["events_in"] == 0 and x["outbox_pending"] == 0 for x in lines)
    assert all(b["time"] > a["time"] for a, b in zip(lines, lines[1:]))


def test_example_config_parses():
    cfg = load_config(ROOT / "examples" / "agent.toml")
    assert cfg.budget.mode == "wall-clock" and cfg.pattern.partition == "id"


def _example_keys() -> tuple[dict, dict]:
    """examples/agent.toml with its commented-out [sketch] keys on (and without the keys
    that exclude the shown ones: token_file, ca_file of an https url), and each key's
    comment: its own line's and the indented comment lines under it."""
    text = (ROOT / "examples" / "agent.toml").read_text()
    doc = tomllib.loads(re.sub(r"^#(\[sketch\]|\w+ *=)", r"\1", text, flags=re.M))
    doc["device"].pop("token_file")
    doc["collector"].pop("ca_file")
    comments, section, key = {}, None, None
    for line in text.splitlines():
        if m := re.match(r"#?\[(\w+)\]", line):
            section = m.group(1)
        elif m := re.match(r"#?(\w+) *= *[^#]*(#.*)?$", line):
            key = (section, m.group(1))
            comments[key] = m.group(2) or ""
        elif line.startswith(" ") and line.strip().startswith("#") and key:
            comments[key] += line
    return doc, comments


def test_example_config_says_the_default_of_every_key_it_sets_otherwise(tmp_path):
    """A user copies examples/agent.toml and deletes what they do not need: a key whose
    value there is not what the agent takes without it says its default (budget.mode is
    "none", no shedding, without it; the outbox has no caps without max_rows, max_bytes)."""
    doc, comments = _example_keys()
    base = dataclasses.asdict(parse_config(doc, base_dir=str(tmp_path)))
    silent = []
    for section, keys in doc.items():
        for key in keys:
            without = copy.deepcopy(doc)
            del without[section][key]
            try:
                default = dataclasses.asdict(parse_config(without, base_dir=str(tmp_path)))
            except ConfigError:
                continue  # needed: no default to say
            if default != base and "default" not in comments[(section, key)]:
                silent.append(f"{section}.{key}")
    assert not silent, silent


def test_wall_clock_budget_adapts_and_keeps_matching(tmp_path):
    events = stream(4000, seed=5)
    doc = config(tmp_path, budget={"mode": "wall-clock", "ops_per_event": 50.0,
                                   "target_utilization": 0.5, "min_ops": 0.2})
    agent = Agent(parse_config(doc), events=events)
    final = agent.run()
    assert final["events_in"] == 4000
    assert final["cost_per_op_ns"] > 0 and final["arrival_rate"] > 0
    # an in-memory iterator arrives as fast as it is read, so the budget must come down
    assert final["ops_per_event"] < 50.0
    ids, rows = outbox_matches(tmp_path / "outbox.db")
    assert rows and len(ids) == len(set(ids))


def _backlog_run(tmp_path, events, **budget) -> tuple[dict, list[tuple]]:
    """A file written before the agent starts (an outage, or a file read once), read in
    wall-clock mode; the final metrics and the matches."""
    path = tmp_path / "events.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    doc = config(tmp_path, source={"kind": "file", "path": str(path), "follow": False,
                                   "batch_events": 500},
                 budget={"mode": "wall-clock", "burst": 64.0, "max_ops": 1000.0, **budget})
    final = Agent(parse_config(doc)).run()
    return final, outbox_matches(tmp_path / "outbox.db")[1]


def test_wall_clock_works_off_a_backlog_at_the_arrival_rate_not_the_reading_rate(tmp_path):
    events = stream(30_000, seed=8)
    final, rows = _backlog_run(tmp_path, events)
    # read far faster than it arrived (it all came before the start): 30,000 events to
    # work off in catch_up = 600 s is 50 per second, which the budget pays in full
    assert final["arrival_rate"] < 100 and final["shed"] == 0
    assert sorted(rows) == sorted(direct(events))


def test_wall_clock_sheds_when_the_backlog_must_be_worked_off_sooner(tmp_path):
    events = stream(30_000, seed=8)
    final, rows = _backlog_run(tmp_path, events, catch_up=1e-3, min_ops=0.2)
    assert final["shed"] > 0  # (the budget is back at max_ops once the backlog is gone)
    assert {r[:2] for r in rows} < {r[:2] for r in direct(events)}  # points missed


def test_wall_clock_after_an_outage_catches_up_on_a_followed_file_without_shedding(tmp_path):
    # 30,000 events written while the agent was down, then 200 per second while it
    # catches up: the arrivals are the 200, the backlog is worked off within catch_up
    events = stream(31_000, seed=9)
    path = tmp_path / "events.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in events[:30_000]))
    doc = config(tmp_path, source={"kind": "file", "path": str(path), "follow": True},
                 budget={"mode": "wall-clock", "ops_per_event": 4.0, "burst": 64.0,
                         "max_ops": 1000.0})
    agent = Agent(parse_config(doc))
    runner = threading.Thread(target=agent.run)
    runner.start()
    try:
        with open(path, "a") as fh:
            for i in range(30_000, 31_000, 20):
                fh.write("".join(json.dumps(e) + "\n" for e in events[i:i + 20]))
                fh.flush()
                time.sleep(0.1)
        deadline = time.time() + 30
        while agent.consumed < 31_000 and time.time() < deadline:
            time.sleep(0.05)
    finally:
        agent.stop()
        runner.join(30)
    assert agent.consumed == 31_000 and agent.matcher.stats["shed"] == 0
    assert 0 < agent.wallclock.rate < 1_000  # the writer's pace, not the reading's
    _, rows = outbox_matches(tmp_path / "outbox.db")
    assert sorted(rows) == sorted(direct(events, flush=False))


def test_a_file_source_measures_arrivals_by_its_growth_and_the_unread_events(tmp_path):
    path = tmp_path / "events.jsonl"
    line = lambda e: json.dumps(e) + "\n"  # noqa: E731
    events = stream(3000)
    path.write_text("".join(map(line, events[:2000])))
    source = FileSource(path, follow=True, batch_events=100, poll_seconds=0.01)
    stop, seen = threading.Event(), []
    for chunk in source.chunks(stop):
        seen.append((len(chunk), source.arrival_rate, source.backlog_events))
        if sum(n for n, _, _ in seen) == 1000:  # half read: 1000 more arrive
            with open(path, "a") as fh:
                fh.write("".join(map(line, events[2000:])))
        if sum(n for n, _, _ in seen) == 3000:
            stop.set()
        time.sleep(0.15)  # a slow reader: a rate is taken over sources.RATE_WINDOW
    rates = [rate for _, rate, _ in seen]
    before, after = rates[:10], rates[10:]
    # none until a second has passed, then 0 while nothing was written
    assert before[0] is None and before[-1] == 0
    assert all(r is None for r in before[:before.index(0)])
    assert all(r == 0 for r in before[before.index(0):])
    # the 1000 events written, over at least a second: not the reading's 667 per second
    assert any(r > 0 for r in after) and all(r < 1000 for r in after)
    # in events, from the mean line length read so far (the lines differ a little)
    unread = [b for _, _, b in seen[1:10]]
    assert all(abs(b - n) < 0.1 * n for b, n in zip(unread, range(1800, 900, -100)))
    assert abs(seen[10][2] - 1900) < 190 and seen[-1][2] == 0  # the 1000 written


def test_sigterm_finishes_the_batch_and_exits_cleanly(tmp_path):
    path, db_path = tmp_path / "events.jsonl", tmp_path / "outbox.db"
    path.write_text("".join(json.dumps(e) + "\n" for e in stream(2000)))
    cfg_path = tmp_path / "agent.toml"
    cfg_path.write_text(
        '[device]\nid = "dev-t"\n'
        '[pattern]\ntext = "a b c"\nwindow = 5.0\nk = 1\npartition = "id"\n'
        f'[source]\nkind = "file"\npath = "{path}"\nbatch_events = 100\n'
        f'[outbox]\npath = "{db_path}"\n[metrics]\npath = "{tmp_path / "m.jsonl"}"\n')
    proc = _spawn(cfg_path, once=False)
    deadline = time.time() + 20
    while _consumed(db_path) < 2000 and time.time() < deadline:
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(20) == 0
    last = json.loads((tmp_path / "m.jsonl").read_text().splitlines()[-1])
    assert last["consumed"] == 2000 and last["events_in"] == 2000


def test_retry_after_reads_seconds_and_http_dates_and_ignores_junk():
    import email.utils

    now = 1_700_000_000.0
    assert retry_after("120", now) == 120.0 and retry_after(" 0 ", now) == 0.0
    assert retry_after(email.utils.formatdate(now + 30, usegmt=True), now) == 30.0
    assert retry_after(email.utils.formatdate(now - 30, usegmt=True), now) == 0.0  # past
    for junk in (None, "", "soon", "-5", "1.5e3", "Mon, 99 Foo 2023"):
        assert retry_after(junk, now) is None, junk
