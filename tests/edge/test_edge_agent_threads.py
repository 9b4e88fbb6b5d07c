"""The agent's background threads outlive the unexpected, as the uploader does: the sketch
watch (``acep-sketch``) and the metrics thread (``agent-metrics``, which also hands the
heartbeats to the uploader). Before, one exception they did not expect ended the thread and
the agent went on for days without new sketches, or without metrics and heartbeats.

Real threads throughout: the real collector and agent as processes on loopback
(tests/edge/test_edge_e2e.py), with a peer on the collector's port that answers what no collector
would (a body cut short, a service that does not speak HTTP); and agents in this process
whose outbox read or sketch check fails as a bug would."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
from support.collector import DEVICE, ROOT, SKETCH_KEY, CollectorProcess, publish, query
from support.e2e import (
    BUDGET,
    PATTERN,
    AgentRun,
    chunks_until,
    metrics_lines,
    sketch_bytes,
    sketch_section,
    stream,
)
from support.links import Serving
from support.wait import wait_for

from edge.agent import Agent
from edge.agent.config import parse_config
from edge.agent.sketches import Sketches
from edge.agent.uplink import Uplink
from history.sketch import key_id

ANSWERS = {
    # a proxy's chunked answer whose connection is cut within the body
    "cut": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n100\r\nabc",
    # another service on the collector's port while it restarts
    "not-http": b"SSH-2.0-OpenSSH_9.6\r\n",
}
SAID = {"cut": "IncompleteRead", "not-http": "BadStatusLine: SSH-2.0-OpenSSH_9.6"}


class Peer(threading.Thread):
    """Listens on loopback (``port``: 0 picks one) and answers every request with
    ``answer``, then closes the connection; ``requests`` are their request lines."""

    def __init__(self, answer: bytes, port: int = 0):
        super().__init__(name="test-peer", daemon=True)
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", port))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.answer, self.requests = answer, []

    def run(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:  # closed
                return
            with conn:
                conn.settimeout(5)
                try:
                    self.requests.append(conn.recv(1 << 16).split(b"\r\n", 1)[0].decode())
                    conn.sendall(self.answer)
                except OSError:
                    pass

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        self.join(10)


def _end(proc: subprocess.Popen | None) -> None:
    """Kill a process a failed test left running."""
    if proc is not None and proc.poll() is None:
        proc.kill()
        proc.wait(30)


# --------------------------------------------------------------------------- sketch watch


@pytest.mark.parametrize("kind", sorted(ANSWERS))
def test_a_malformed_answer_does_not_end_the_sketch_checks(tmp_path, kind):
    """The collector restarts; meanwhile its port answers a sketch check with what no HTTP
    client expects (before: an http.client error, not an OSError, ended the watch, and the
    agent never took a sketch published after). Then the collector publishes a new one."""
    c = CollectorProcess(tmp_path)
    token, admin = c.add(DEVICE), c.add("ops", "--add-admin")
    c.start()
    run = AgentRun(tmp_path, c.url, token, budget=BUDGET,
                   sketch=sketch_section(tmp_path, check_interval=0.3))
    peer = None
    try:
        publish(c, admin, sketch_bytes(0.5))
        run.append(stream(300, seed=23))
        run.start()
        wait_for(lambda: run.state("consumed") == 300, "the run")
        c.kill()
        peer = Peer(ANSWERS[kind], c.port)
        peer.start()
        wait_for(lambda: any("/v1/sketches/" in r for r in peer.requests),
                 "a sketch check answered by the peer")
        peer.close()
        c.start()
        publish(c, admin, sketch_bytes(0.9))
        chunks_until(run, lambda: "using the sketch published as" in run.log(),
                          "the agent to take the newly published sketch")
        final = run.stop()
    finally:
        if peer is not None:
            peer.close()
        _end(run.proc)
        _end(c.proc)
    log = run.log()
    assert "Exception in thread acep-sketch" not in log
    # a malformed answer is a failed download like any other: one line, retried
    assert f"sketch download failed (GET /v1/sketches/abc: {SAID[kind]}" in log
    assert final["sketch_updates"] == 1 and final["policy"] == "history"
    assert final["sketch_error"] is None


def test_an_agent_booting_on_a_malformed_answer_falls_back_and_takes_the_sketch_later(
        tmp_path):
    """Before, the agent died at start (BadStatusLine out of Sketches.load): it was meant to
    run on the fallback policy while the download is retried."""
    c = CollectorProcess(tmp_path)
    token, admin = c.add(DEVICE), c.add("ops", "--add-admin")
    peer = Peer(ANSWERS["not-http"])
    peer.start()
    run = AgentRun(tmp_path, f"http://127.0.0.1:{peer.port}", token, budget=BUDGET,
                   sketch=sketch_section(tmp_path))
    try:
        run.append(stream(200, seed=21))
        run.start()
        wait_for(lambda: run.alive() or run.state("consumed") == 200, "the agent to run")
        first = chunks_until(run, lambda: metrics_lines(run), "a metrics line")[0]
        assert first["policy"] == "oldest-first"
        assert first["sketch_error"].startswith(
            "sketch download failed: GET /v1/sketches/abc: BadStatusLine: SSH-2.0")
        peer.close()
        c.port = peer.port
        c.start()  # the collector is back, on its port
        publish(c, admin, sketch_bytes(0.5))
        chunks_until(run, lambda: "using the sketch published as" in run.log(),
                          "the agent to take the sketch")
        final = run.stop()
    finally:
        peer.close()
        _end(run.proc)
        _end(c.proc)
    assert final["policy"] == "history" and final["policy_error"] is None
    assert final["sketch_updates"] == 1 and final["sketch_error"] is None
    assert "Exception in thread" not in run.log()


class _Sketch(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server's naming)
        data = self.server.data
        tag = None if data is None else hashlib.sha256(data).hexdigest()
        status = 404 if data is None else \
            304 if self.headers.get("If-None-Match") == f'"{tag}"' else 200
        self.server.answers.append(status)
        self.send_response(status)
        if status == 304:
            self.end_headers()
            return
        if data is None:
            data = b'{"error": "no sketch"}'
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


class _Published(Serving):
    """A collector's ``GET /v1/sketches/abc`` on loopback: ``data`` (None: 404), ``304``
    to an ``If-None-Match`` of its ETag; ``answers``, the statuses it gave."""

    def __init__(self, data: bytes | None):
        self.data, self.answers = data, []
        super().__init__(_Sketch)


def _sketches(tmp: Path, url: str) -> Sketches:
    (tmp / "sketch.key").write_bytes(b"fleet-sketch-key\n")
    doc = {"device": {"id": DEVICE, "token": "tok"}, "pattern": dict(PATTERN),
           "source": {"kind": "iterator"}, "collector": {"url": url, "timeout": 5},
           "sketch": {"download": True, "key_file": str(tmp / "sketch.key"),
                      "check_interval": 0.05},
           "outbox": {"path": str(tmp / "outbox.db"), "backoff_base": 0.05,
                      "backoff_max": 0.2}}
    cfg = parse_config(doc)
    return Sketches(cfg, Uplink(url, "tok", 5.0))


def test_the_sketch_checks_outlive_an_unexpected_error(tmp_path, caplog):
    """A bug in a check (here where a downloaded sketch is checked against the pattern,
    twice): logged once with its traceback, the sketch downloaded again with backoff (not
    taken for the one published: no 304), ``sketch_error`` says it meanwhile; the sketch
    still comes."""
    caplog.set_level(logging.DEBUG, logger="edge.agent")
    calls, errors, stop = [], [], threading.Event()
    with _Published(sketch_bytes(0.5)) as server:
        sketches = _sketches(tmp_path, server.url)
        fitting = sketches.fitting

        def broken_twice(sketch):
            calls.append(time.monotonic())
            errors.append(sketches.error)
            if len(calls) <= 2:
                raise RuntimeError("a bug")
            return fitting(sketch)

        sketches.fitting = broken_twice
        try:
            sketches.watch(stop)
            offered = wait_for(sketches.take_offered, "the sketch to be offered", timeout=20)
        finally:
            stop.set()
    assert offered[1] == hashlib.sha256(sketch_bytes(0.5)).hexdigest()
    assert errors == [None] + ["unexpected error: RuntimeError: a bug"] * 2
    assert sketches.error is None  # the check went through
    said = [(r.levelno, r.getMessage(), r.exc_info) for r in caplog.records
            if r.getMessage().startswith("sketch checks")]
    assert [level for level, _, _ in said] == [logging.ERROR, logging.DEBUG, logging.INFO]
    assert said[0][1] == ("sketch checks failed (unexpected error: RuntimeError: a bug); the "
                          "sketch is asked for again with backoff (up to 0.2s apart)")
    assert said[0][2] is not None and said[0][2][0] is RuntimeError  # the traceback
    assert said[2][1] == "sketch checks no longer fail unexpectedly (after 2 failed attempts)"
    assert calls[1] - calls[0] >= 0.05 * 0.8  # the backoff, not a busy loop
    assert server.answers[:3] == [200] * 3  # downloaded again after each bug (no 304)


def test_sketch_error_says_why_the_checks_fail_until_one_succeeds(tmp_path):
    good, stop = sketch_bytes(0.5), threading.Event()
    with _Published(None) as server:  # nothing published yet: 404
        sketches = _sketches(tmp_path, server.url)
        try:
            sketches.watch(stop)
            wait_for(lambda: (sketches.error or "").startswith(
                "sketch download failed: GET /v1/sketches/abc: HTTP 404 no sketch"), "a 404")
            tampered = bytearray(good)
            tampered[len(good) // 2] ^= 1
            server.data = bytes(tampered)
            wait_for(lambda: "is refused" in (sketches.error or ""), "the refusal")
            assert sketches.error.endswith("signature check failed: the sketch is damaged or "
                                           "was changed after signing (it was signed with this "
                                           f"key, {key_id(SKETCH_KEY)})")
            asked = len(server.answers)
            wait_for(lambda: server.answers[asked:].count(304) >= 3, "checks answered 304")
            assert "is refused" in sketches.error  # still published, still refused
            assert sketches.take_offered() is None
            server.data = good
            wait_for(sketches.take_offered, "the good sketch to be offered")
            assert sketches.error is None
        finally:
            stop.set()


# --------------------------------------------------------------------------- metrics thread


def _followed_agent(tmp: Path, metrics_path: Path, interval: float = 0.05) -> Agent:
    events = tmp / "events.jsonl"
    events.write_text("")
    doc = {"device": {"id": DEVICE}, "pattern": dict(PATTERN),
           "source": {"kind": "file", "path": str(events), "follow": True,
                      "poll_seconds": 0.02},
           "outbox": {"path": str(tmp / "outbox.db")},
           "metrics": {"path": str(metrics_path)}}
    cfg = parse_config(doc)
    cfg.metrics.interval = interval  # below what agent.toml may say: a test waits less
    return Agent(cfg)


def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def test_the_metrics_thread_outlives_an_unexpected_error(tmp_path, caplog):
    """A read of the outbox that fails as an SD card's I/O error would (not an OSError, a
    sqlite3 one), three times: before, the first ended the thread (no metrics line, no
    heartbeat ever again); now it is logged once with its traceback, and the next line
    written says what failed."""
    caplog.set_level(logging.DEBUG, logger="edge.agent")
    path = tmp_path / "metrics.jsonl"
    agent = _followed_agent(tmp_path, path)
    read, failed = agent.outbox.metrics, []

    def failing_thrice():
        if len(failed) < 3:
            failed.append(threading.current_thread().name)
            raise sqlite3.OperationalError("disk I/O error")
        return read()

    agent.outbox.metrics = failing_thrice
    runner = threading.Thread(target=agent.run)
    runner.start()
    try:
        wait_for(lambda: len(_lines(path)) >= 3, "metrics lines after the failures", 20)
    finally:
        agent.stop()
        runner.join(30)
    assert failed == ["agent-metrics"] * 3
    lines = _lines(path)
    assert lines[0]["metrics_error"] == "unexpected error: OperationalError: disk I/O error"
    assert all(x["metrics_error"] is None for x in lines[1:])
    said = [(r.levelno, r.getMessage(), r.exc_info) for r in caplog.records
            if r.getMessage().startswith("metrics ")]
    assert [level for level, _, _ in said] == [logging.ERROR, logging.DEBUG, logging.DEBUG,
                                               logging.INFO]
    assert said[0][1] == ("metrics failed (unexpected error: OperationalError: disk I/O "
                          "error); metrics lines and heartbeats are tried again every 0.05s")
    assert said[0][2][0] is sqlite3.OperationalError
    assert said[3][1] == "metrics no longer fail unexpectedly (after 3 failed attempts)"


def test_metrics_error_while_the_metrics_file_cannot_be_written(tmp_path, caplog):
    """The metrics file's directory vanishes (an expected failure: one line, as before),
    then comes back: the first line written after says why lines were lost."""
    caplog.set_level(logging.INFO, logger="edge.agent")
    folder = tmp_path / "m"
    folder.mkdir()
    path = folder / "metrics.jsonl"
    agent = _followed_agent(tmp_path, path)
    runner = threading.Thread(target=agent.run)
    runner.start()
    try:
        wait_for(lambda: _lines(path), "a metrics line", 20)
        folder.rename(tmp_path / "gone")  # at once (rmtree raced the agent's next write)
        wait_for(lambda: agent.metrics_error, "a line not written", 20)
        assert agent.metrics()["metrics_error"] == (
            f"cannot write metrics.path {path}: [Errno 2] No such file or directory: "
            f"'{path}'")
        folder.mkdir()
        wait_for(lambda: len(_lines(path)) >= 2, "lines again", 20)
    finally:
        agent.stop()
        runner.join(30)
    lines = _lines(path)
    assert lines[0]["metrics_error"].startswith("cannot write metrics.path ")
    assert lines[-1]["metrics_error"] is None
    said = [r for r in caplog.records if "metrics" in r.getMessage()]
    assert said[0].levelno == logging.ERROR and said[0].exc_info is None  # expected: no trace
    assert said[0].getMessage().startswith(f"cannot write metrics.path {path} ([Errno 2]")
    assert said[1].getMessage().startswith("metrics lines are written again (after ")


def test_heartbeats_go_on_when_the_metrics_cannot_be_written_to_stderr(tmp_path):
    """Without metrics.path the metrics lines go to stderr; its reader goes away (a log pipe
    whose reader died). Before, the BrokenPipeError ended the metrics thread, and with it
    the heartbeats, while the agent went on uploading: the collector took the device for
    dead. Now the heartbeats go on and say so."""
    c = CollectorProcess(tmp_path)
    token = c.add(DEVICE)
    c.start()
    run = AgentRun(tmp_path, c.url, token, heartbeat=0.5)
    run.cfg.write_text(run.cfg.read_text().replace(f'path = "metrics-{run.outbox.name}.jsonl"\n',
                                                   ""))
    assert "metrics-" not in run.cfg.read_text()
    proc = subprocess.Popen([sys.executable, "-m", "edge.agent", "--config", str(run.cfg)],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})

    def status() -> dict | None:
        assert proc.poll() is None
        rows = query(c.db, "SELECT status FROM devices WHERE device_id = ?", (DEVICE,))
        return json.loads(rows[0][0]) if rows and rows[0][0] else None

    try:
        wait_for(status, "a heartbeat")
        proc.stderr.readline()
        proc.stderr.close()  # the reader of the agent's stderr goes away
        run.append(stream(300, seed=4))
        # the line of the metrics these events show fails first: before, no heartbeat after
        wait_for(lambda: status()["consumed"] == 300, "a heartbeat after the events")
        said = wait_for(lambda: status().get("metrics_error"), "a heartbeat saying it")
        assert said == "cannot write the metrics to stderr: [Errno 32] Broken pipe"
        wait_for(lambda: c.seqs(), "batches uploaded")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        finally:
            _end(proc)
            _end(c.proc)
