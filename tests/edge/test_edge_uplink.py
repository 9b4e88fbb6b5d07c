"""Tests of the agent's uploads with ``Expect: 100-continue`` and gzip (edge.agent.uplink) against
real HTTP servers on loopback: the body goes after ``100 Continue``, not at all after a
refusal, and at once where the server (or a proxy) cannot take the expectation; it is
gzipped once the server says it takes gzip. The collector's side is in
test_edge_collector.py."""

from __future__ import annotations

import contextlib
import gzip
import http.client
import json
import logging
import random
import socket
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.links import Serving, ThinLink
from support.uplink import ANSWER, TRICKLED, given_up, trickling
from support.wait import eventually

from edge.agent.transport import (
    SEND_PIECE,
    _Answer,
    _final_head,
    _first_answer,
    _PacedHTTP,
    redirect_text,
)
from edge.agent.uplink import (
    CONTINUE_WAIT,
    EXPECT_MIN_BYTES,
    GZIP_LEVEL,
    Outcome,
    Uplink,
    retry_after,
)

BIG = b"x" * (4 * EXPECT_MIN_BYTES)


class _Recorder(BaseHTTPRequestHandler):
    """Records each request that reached its handler: (target, Expect, body bytes); answers
    ``stored``, or ``503`` to each body while ``busy``. ``protocol_version`` HTTP/1.1
    answers ``100 Continue`` (http.server's own), HTTP/1.0 ignores the expectation;
    ``refuse_expect`` answers it ``417``, after ``delay`` seconds."""

    seen: list = []
    refuse_expect = False
    busy = False
    delay = 0.0  # seconds before answering the expectation
    accept_encoding: str | None = None  # said in every answer
    refuse_coding = False  # 415 to a body with a Content-Encoding
    early_hints = 0  # "103 Early Hints" answers before each answer (as a CDN may send)
    unauthorized = False  # 401 to every request

    def handle_expect_100(self):
        self.server.closed.wait(self.delay)
        self._hints()
        if self.refuse_expect:
            self.send_response(417)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return False
        if self.busy:  # a refusal before the body, as the collector's 503
            self._answer(503, {"error": "busy", "status": 503}, retry_after="2")
            return False
        return super().handle_expect_100()

    def do_POST(self):  # noqa: N802 (http.server's naming)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.unauthorized:
            return self._answer(401, {"error": "unknown token", "status": 401})
        coding = self.headers.get("Content-Encoding")
        if coding and self.refuse_coding:
            return self._answer(415, {"error": f"no {coding}", "status": 415})
        decoded = gzip.decompress(body) if coding == "gzip" else body
        self.seen.append((self.path, self.headers.get("Expect"), len(decoded)))
        self.codings.append(coding)
        self._hints()
        self._answer(200, {"status": "stored"})

    def do_GET(self):  # noqa: N802 (a sketch; http.server's naming)
        self._hints()
        self._answer(200, {"sketch": self.path})

    def _hints(self) -> None:
        for _ in range(self.early_hints):
            self.send_response_only(103)
            self.send_header("Link", "</sketch.css>; rel=preload")
            self.end_headers()

    def _answer(self, code: int, doc: dict, retry_after: str | None = None) -> None:
        out = json.dumps(doc).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        if retry_after:
            self.send_header("Retry-After", retry_after)
        if self.accept_encoding:
            self.send_header("Accept-Encoding", self.accept_encoding)
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args):
        pass


@pytest.fixture
def server(monkeypatch):
    """A running recorder (class attributes set per test) at ``server.url``."""
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "no_proxy",
                 "NO_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    handler = type("Handler", (_Recorder,), {"seen": [], "codings": []})
    with Serving(handler) as srv:
        srv.handler = handler
        yield srv


def timed_post(uplink: Uplink, body: bytes):
    start = time.monotonic()
    out = uplink.post_batch(body)
    return out, time.monotonic() - start


def test_a_batch_waits_for_100_continue_and_a_small_one_goes_at_once(server):
    server.handler.protocol_version = "HTTP/1.1"
    uplink = Uplink(server.url, "tok")
    for body in (BIG, BIG, b"y" * (EXPECT_MIN_BYTES - 1)):
        out, took = timed_post(uplink, body)
        assert out.action == "ack" and took < CONTINUE_WAIT / 2, (out, took)
    assert server.handler.seen == [("/v1/batches", "100-continue", len(BIG))] * 2 + [
        ("/v1/batches", None, EXPECT_MIN_BYTES - 1)]
    assert uplink.expect_continue
    assert uplink.bytes_on_wire == 2 * len(BIG) + EXPECT_MIN_BYTES - 1


def test_a_refusal_before_the_body_costs_no_body_bytes_and_keeps_its_retry_after(server):
    server.handler.protocol_version = "HTTP/1.1"
    server.handler.busy = True
    uplink = Uplink(server.url, "tok")
    out = uplink.post_batch(BIG)
    assert (out.action, out.status, out.retry_after) == ("retry", 503, 2.0)
    assert uplink.bytes_on_wire == 0 and server.handler.seen == []
    server.handler.busy = False
    assert uplink.post_batch(BIG).action == "ack"
    assert uplink.bytes_on_wire == len(BIG)


@pytest.mark.parametrize("busy", [False, True])
def test_interim_answers_such_as_103_early_hints_are_skipped(server, busy):
    """RFC 9110 15.2: a client skips 1xx answers it did not ask for; a 103 before the 100
    (or before a refusal) and before the final answer neither stands for the final answer
    nor sends the body early."""
    server.handler.protocol_version = "HTTP/1.1"
    server.handler.early_hints, server.handler.busy = 2, busy
    uplink = Uplink(server.url, "tok")
    out, took = timed_post(uplink, BIG)
    assert took < CONTINUE_WAIT / 2 and uplink.expect_continue
    if busy:
        assert (out.action, out.status, out.retry_after) == ("retry", 503, 2.0)
        assert uplink.bytes_on_wire == 0 and server.handler.seen == []
    else:
        assert (out.action, out.status) == ("ack", 200)
        assert server.handler.seen == [("/v1/batches", "100-continue", len(BIG))]


def test_interim_answers_are_skipped_where_the_body_goes_at_once_too(server):
    """http.client skips 100 Continue alone: a 103 before the answer to a small batch, a
    heartbeat, a body sent without Expect or a sketch check was taken for the final answer
    (a retry with HTTP 103, for ever, and the collector's answer unread)."""
    server.handler.protocol_version = "HTTP/1.1"
    server.handler.early_hints = 3
    uplink = Uplink(server.url, "tok")
    assert uplink.post_batch(b"y" * 10) == Outcome("ack", 200, "stored")
    assert uplink.post_heartbeat({"consumed": 1}) == Outcome("ack", 200, "seen")
    assert Uplink(server.url, "tok", expect_continue=False).post_batch(BIG) == \
        Outcome("ack", 200, "stored")
    assert uplink.get_sketch("p1", 1 << 10) == b'{"sketch": "/v1/sketches/p1"}'
    assert [n for _, _, n in server.handler.seen] == [10, len(b'{"consumed": 1}'), len(BIG)]


def test_a_server_that_ignores_expect_gets_the_body_after_the_wait_then_at_once(
        server, caplog):
    caplog.set_level(logging.INFO, logger="edge")
    server.handler.protocol_version = "HTTP/1.0"
    uplink = Uplink(server.url, "tok")
    out, took = timed_post(uplink, BIG)
    assert out.action == "ack" and took >= CONTINUE_WAIT
    out, took = timed_post(uplink, BIG)
    assert out.action == "ack" and took < CONTINUE_WAIT / 2
    assert [e for _, e, _ in server.handler.seen] == ["100-continue", None]
    assert not uplink.expect_continue and uplink.bytes_on_wire == 2 * len(BIG)
    assert "answered without 100 Continue, after 1 s of silence" in caplog.text


def test_a_collector_that_says_100_continue_late_is_still_asked_to(server, caplog):
    """A busy collector may answer the headers after the body went: the next batch waits
    for it again (only a server that never says it makes the agent stop asking)."""
    caplog.set_level(logging.INFO, logger="edge")
    server.handler.protocol_version = "HTTP/1.1"
    server.handler.delay = CONTINUE_WAIT + 0.3
    uplink = Uplink(server.url, "tok")
    out, took = timed_post(uplink, BIG)
    assert out.action == "ack" and took >= CONTINUE_WAIT + 0.3
    assert uplink.expect_continue and uplink.bytes_on_wire == len(BIG)
    assert server.handler.seen == [("/v1/batches", "100-continue", len(BIG))]
    assert "bodies are sent at once" not in caplog.text


def test_a_collector_that_refuses_late_is_still_asked_for_100_continue(server, caplog):
    """A busy collector may answer the headers with a refusal (503 and Retry-After) after
    the body went: that is no sign of a server that ignores the expectation, which the
    agent took it for, sending every body at once from then on (an HTTP/1.0 server, the
    log said); only an answer that read the body without a 100 (or an HTTP/1.0 one) is."""
    caplog.set_level(logging.INFO, logger="edge")
    server.handler.protocol_version = "HTTP/1.1"
    server.handler.delay, server.handler.busy = CONTINUE_WAIT + 0.3, True
    uplink = Uplink(server.url, "tok")
    out = uplink.post_batch(BIG)
    assert (out.action, out.status, out.retry_after) == ("retry", 503, 2.0), out
    assert uplink.expect_continue and "bodies are sent at once" not in caplog.text
    server.handler.busy = False
    assert uplink.post_batch(BIG).action == "ack"
    assert server.handler.seen == [("/v1/batches", "100-continue", len(BIG))]


def test_a_late_100_continue_on_a_thin_link_waits_for_the_body_to_get_across(server):
    """The body went after CONTINUE_WAIT; the collector's 100 Continue comes while most of
    it is still queued in the kernel: the wait for the final answer starts when the link
    has taken it all, not at the 100 (the body takes 3 times the timeout)."""
    server.handler.protocol_version = "HTTP/1.1"
    server.handler.delay = CONTINUE_WAIT + 0.3
    body = b"x" * 48000
    with ThinLink(server.server_address[1], rate=16000) as link:
        uplink = Uplink(f"http://127.0.0.1:{link.port}", "tok", timeout=1.0)
        out, took = timed_post(uplink, body)
    assert (out.action, out.status) == ("ack", 200), out
    assert took > CONTINUE_WAIT + 2.5 and uplink.expect_continue
    assert server.handler.seen == [("/v1/batches", "100-continue", len(body))]


@pytest.mark.parametrize("expect", [False, True], ids=["at once", "expect"])
def test_a_body_over_https_on_a_thin_link_gets_across_before_the_answer_is_awaited(
        server, tls, expect):
    """TLS 1.3 session tickets, sent by the server after the handshake, made the socket
    readable, which ended the wait for the body's last bytes at once: over HTTPS without
    Expect, a body that takes three times collector.timeout to cross timed out every
    time. The tickets are read now and the wait goes on."""
    server.handler.protocol_version = "HTTP/1.1"
    server.socket = tls[0].wrap_socket(server.socket, server_side=True)
    body = b"x" * 48000
    with ThinLink(server.server_address[1], rate=16000) as link:
        uplink = Uplink(f"https://127.0.0.1:{link.port}", "tok", timeout=1.0,
                        ca_file=tls[1], expect_continue=expect)
        out, took = timed_post(uplink, body)
    assert (out.action, out.status) == ("ack", 200), out
    assert took > 2.5
    assert server.handler.seen == [("/v1/batches", "100-continue" if expect else None,
                                    len(body))]



@pytest.mark.parametrize("request_kind", ["batch", "heartbeat", "sketch"])
def test_connecting_and_the_tls_handshake_end_within_collector_timeout_together(
        server, tls, request_kind):
    """A collector, or a middlebox before it, slow to take the connection (a full accept
    queue: the SYN is sent again a second later) and then trickling its TLS handshake a
    few bytes at a time, each within collector.timeout: Python gives the connection the
    timeout and the handshake the timeout again, so a batch, a heartbeat or a sketch check
    was given up after up to twice collector.timeout (3.5 s here, 2.5 s being the timeout).
    The two together end within it now, retried like a timeout."""
    server.handler.protocol_version = "HTTP/1.1"
    server.socket = tls[0].wrap_socket(server.socket, server_side=True)
    with ThinLink(server.server_address[1], rate=1e6, trickle=(5, 1.2),
                  full_for=0.3) as link:
        uplink = Uplink(f"https://127.0.0.1:{link.port}", "tok", timeout=2.5,
                        ca_file=tls[1])
        start = time.monotonic()
        said = given_up(uplink, request_kind, BIG, "p1")
        took = time.monotonic() - start
    assert said == ("GET /v1/sketches/p1: " if request_kind == "sketch" else "connection: ") \
        + "timed out: no TLS connection within 2.5 s (connecting and the handshake together)"
    assert 2.0 < took < 3.0, took
    assert server.handler.seen == []


@pytest.mark.parametrize("expect", [True, False], ids=["expect", "at once"])
def test_a_collector_that_takes_the_body_a_few_bytes_a_second_is_given_up(server, tmp_path,
                                                                          expect):
    """A collector that keeps its receive window almost shut, taking a few hundred bytes
    a second, moved each piece of the body within collector.timeout, so the upload
    thread went on for as long as it liked (a 4 KiB batch: 14 s here, 4 MiB: hours). The
    body must now get across within collector.answer_timeout and 1 s per KiB of it: the
    attempt is given up, the batch kept and retried with the backoff, saying why."""
    from edge.agent.outbox import Outbox
    from edge.agent.outbox_reader import Backoff
    from edge.agent.uploader import Uploader

    server.handler.protocol_version = "HTTP/1.1"
    with ThinLink(server.server_address[1], rate=300) as link, \
            Outbox(tmp_path / "outbox.db", backoff=Backoff(60.0, jitter=0.0)) as outbox:
        outbox.put(BIG, "dev/1")
        uplink = Uplink(f"http://127.0.0.1:{link.port}", "tok", timeout=5.0,
                        answer_timeout=1.0, expect_continue=expect)
        uploader = Uploader(outbox, uplink)
        start = time.monotonic()
        assert uploader.send_one()
        took = time.monotonic() - start
        summary = outbox.summary()
    assert uploader.counts["retried"] == 1 and summary["pending"] == 1
    assert summary["oldest"]["last_error"] == (
        "connection: the body did not get across within 5 s (collector.answer_timeout, 1 s, "
        "and 1 s per KiB of its 4096 bytes): the collector took it slower than 1024 bytes/s")
    assert summary["next_due"] > time.time() + 50  # the backoff's 60 s
    assert 4.5 < took < 8, took
    assert server.handler.seen == []


def test_a_417_sends_the_batch_again_at_once_in_the_same_attempt(server, caplog):
    caplog.set_level(logging.INFO, logger="edge")
    server.handler.protocol_version = "HTTP/1.1"
    server.handler.refuse_expect = True
    uplink = Uplink(server.url, "tok")
    assert uplink.post_batch(BIG).action == "ack"
    assert uplink.post_batch(BIG).action == "ack"
    assert server.handler.seen == [("/v1/batches", None, len(BIG))] * 2
    assert not uplink.expect_continue and uplink.bytes_on_wire == 2 * len(BIG)
    assert "refused Expect: 100-continue (HTTP 417)" in caplog.text


def test_through_a_proxy_from_the_environment_bodies_go_the_way_urllib_sends_them(
        server, monkeypatch):
    """The collector's name is not even resolvable here: only the proxy can reach it."""
    monkeypatch.setenv("http_proxy", server.url)
    uplink = Uplink("http://collector.invalid:8750", "tok")
    assert not uplink.expect_continue
    assert uplink.post_batch(BIG).action == "ack"
    assert server.handler.seen == [("http://collector.invalid:8750/v1/batches", None,
                                    len(BIG))]
    monkeypatch.setenv("no_proxy", "collector.invalid")
    assert Uplink("http://collector.invalid:8750", "tok").expect_continue
    assert not Uplink(server.url, "tok", expect_continue=False).expect_continue


@pytest.mark.parametrize("expect", [True, False], ids=["expect", "at once"])
def test_bodies_are_gzipped_once_the_server_says_it_takes_gzip(server, expect):
    server.handler.protocol_version = "HTTP/1.1"
    uplink = Uplink(server.url, "tok", expect_continue=expect)
    assert uplink.post_batch(BIG).action == "ack" and not uplink.gzip_taken
    server.handler.accept_encoding = "gzip, deflate"
    for _ in range(3):
        assert uplink.post_batch(BIG).action == "ack"
    assert server.handler.codings == [None, None, "gzip", "gzip"]
    assert [n for _, _, n in server.handler.seen] == [len(BIG)] * 4  # the same bytes
    assert uplink.bytes_on_wire == 2 * len(BIG) + 2 * len(gzip.compress(BIG, GZIP_LEVEL, mtime=0))
    small = Uplink(server.url, "tok")
    small.gzip_taken = True
    assert small.post_batch(BIG[:EXPECT_MIN_BYTES - 1]).action == "ack"
    assert server.handler.codings[-1] is None  # too small to be worth it
    off = Uplink(server.url, "tok", compress=False)
    off.post_batch(BIG), off.post_batch(BIG)
    assert server.handler.codings[-2:] == [None, None]


def test_a_415_to_a_gzipped_body_sends_it_again_as_it_is_and_all_from_then_on(server,
                                                                              caplog):
    caplog.set_level(logging.INFO, logger="edge")
    server.handler.protocol_version = "HTTP/1.1"
    server.handler.accept_encoding = "gzip"
    server.handler.refuse_coding = True
    uplink = Uplink(server.url, "tok")
    for _ in range(3):
        assert uplink.post_batch(BIG).action == "ack"
    assert server.handler.codings == [None] * 3 and not uplink.compress
    assert uplink.bytes_on_wire == 3 * len(BIG) + len(gzip.compress(BIG, GZIP_LEVEL, mtime=0))
    assert "refused a gzipped body (HTTP 415: no gzip)" in caplog.text


CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
FINAL = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
         b"Content-Length: 17\r\nRetry-After: 3\r\n\r\n{\"status\": \"no\"}\n")
EARLY = b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n"


@settings(max_examples=60, deadline=None)
@given(interim=st.booleans(), hints=st.tuples(st.integers(0, 2), st.integers(0, 2)),
       cuts=st.lists(st.integers(1, 400), max_size=4, unique=True))
def test_the_first_answer_is_read_right_however_the_network_cuts_it(interim, hints, cuts):
    """``_first_answer`` tells ``100 Continue`` from a final answer whatever segments its
    bytes come in, skipping ``103`` answers before either, and the final answer reads whole
    after it (the ``103`` answers after the ``100`` skipped too)."""
    data = EARLY * hints[0] + (CONTINUE + EARLY * hints[1] if interim else b"") + FINAL
    bounds = [0, *sorted(c for c in cuts if c < len(data)), len(data)]
    device, collector = socket.socketpair()
    with device, collector:
        def send():
            for a, b in zip(bounds, bounds[1:]):
                collector.sendall(data[a:b])
                time.sleep(0.002)
        sender = threading.Thread(target=send)
        sender.start()
        device.settimeout(5.0)
        first, head = _first_answer(device, 5.0)
        head = _final_head(device, head)
        answer = _Answer(device, head, method="POST")
        answer.begin()
        body = answer.read()
        sender.join()
    assert first == ("continue" if interim else "final")
    assert (answer.status, answer.getheader("Retry-After"), body) == (
        503, "3", b'{"status": "no"}\n')


def test_an_agent_says_it_is_up_at_start_so_its_first_batch_is_gzipped(server, tmp_path):
    """The first heartbeat goes as the agent starts, before any batch: the collector lists
    the device at once, not a metrics interval later, and its answer tells the agent that
    the collector takes gzip before the first batch goes."""
    from support.agent import config, stream

    from edge.agent import Agent
    from edge.agent.config import parse_config

    server.handler.protocol_version = "HTTP/1.1"
    server.handler.accept_encoding = "gzip, deflate"
    doc = config(tmp_path, collector={"url": server.url, "timeout": 5, "heartbeat": 300})
    doc["device"]["token"] = "tok"
    final = Agent(parse_config(doc), events=stream(800)).run(once=True)
    sent = [(path, size, coding) for (path, _, size), coding
            in zip(server.handler.seen, server.handler.codings)]
    assert sent[0][0] == sent[-1][0] == "/v1/heartbeat"  # at start, and the "stopped" one
    assert [path for path, _, _ in sent].count("/v1/heartbeat") == 2
    batches = [(size, coding) for path, size, coding in sent if path == "/v1/batches"]
    assert len(batches) == final["batches_sent"] > 0
    assert any(size >= EXPECT_MIN_BYTES for size, _ in batches)
    assert all(coding == "gzip" for size, coding in batches if size >= EXPECT_MIN_BYTES)


def test_a_wrong_token_shows_at_the_first_heartbeat_and_holds_the_uploads(server, tmp_path,
                                                                          caplog):
    """A device with nothing to upload yet learns at start that its token is refused: the
    error is logged (once) and every upload is held with the backoff, as after a batch's."""
    from edge.agent.outbox import Outbox
    from edge.agent.uploader import Uploader

    caplog.set_level(logging.INFO, logger="edge")
    server.handler.unauthorized = True
    with Outbox(tmp_path / "outbox.db") as outbox:
        uploader = Uploader(outbox, Uplink(server.url, "wrong"))
        uploader.beat({"consumed": 0})
        assert uploader.send_beat()
        assert (uploader.counts["unauthorized"], uploader.counts["heartbeats_failed"]) == (1, 0)
        assert uploader.hold_until > time.monotonic()
        assert uploader.last_error.startswith("HTTP 401")
        uploader.beat({"consumed": 0})
        assert not uploader.send_beat()  # held, as a batch would be
        server.handler.unauthorized = False
        uploader.hold_until = 0.0
        uploader.beat({"consumed": 0})
        assert uploader.send_beat() and uploader.auth_streak == 0
    said = [r.getMessage() for r in caplog.records if "credentials" in r.getMessage()
            or "token again" in r.getMessage()]
    assert len(said) == 2 and said[0].startswith("collector refused this device's credentials")
    assert said[1].startswith("the collector accepts this device's token again")


def test_a_clock_set_back_holds_the_uploads_no_longer_than_the_collector_asked(
        server, tmp_path, monkeypatch):
    """The collector answers 503 with Retry-After: 2, then the device's clock is set back 3
    hours (a Pi without a real-time clock, NTP): the hold and the batch's retry were both
    on the wall clock, so nothing was sent for 3 hours. The hold is on the monotonic clock
    now, and a due time written before the clock went back is due at once."""
    from edge.agent.outbox import Outbox
    from edge.agent.uploader import Uploader

    server.handler.protocol_version = "HTTP/1.1"
    server.handler.busy = True
    with Outbox(tmp_path / "outbox.db") as outbox:
        outbox.put(BIG, "dev/1")
        uploader = Uploader(outbox, Uplink(server.url, "tok"), idle_seconds=0.05)
        assert uploader.send_one() and uploader.counts["retried"] == 1
        server.handler.busy = False
        wall = time.time
        monkeypatch.setattr(time, "time", lambda: wall() - 3 * 3600)
        start = time.monotonic()
        uploader.start()
        try:
            while outbox.metrics()["pending"] and time.monotonic() - start < 10:
                time.sleep(0.05)
        finally:
            uploader.stop(5)
        took = time.monotonic() - start
        assert outbox.metrics()["sent"] == 1 and uploader.counts["acked"] == 1
        assert 1.5 < took < 5, took  # the Retry-After held it, and nothing more


def test_an_idle_uploader_sleeps_until_woken_and_sees_another_process_s_requeue(
        server, tmp_path):
    """With nothing due, the uploader looked at its outbox twice a second: bench/herd's
    1,600 idle uploaders took more CPU than the collector. It now sleeps until woken (the
    agent wakes it for each batch), looking again only every ``idle_seconds`` for what
    another process changed (``acep outbox requeue`` beside the running agent)."""
    from edge.agent.outbox import Outbox
    from edge.agent.uploader import IDLE_SECONDS, Uploader

    with Outbox(tmp_path / "outbox.db") as outbox:
        rounds, next_due = [], outbox.next_due
        outbox.next_due = lambda *a, **k: rounds.append(1) or next_due(*a, **k)
        uploader = Uploader(outbox, Uplink(server.url, "tok"))
        uploader.start()
        try:
            time.sleep(2.0)
            assert len(rounds) == 1 and IDLE_SECONDS >= 2.0  # its first round only
            outbox.put(b"x" * 10, "dev/1")
            uploader.wake.set()  # as the agent does
            assert eventually(lambda: outbox.metrics()["sent"] == 1, 5)
        finally:
            uploader.stop(5)
        outbox.put(b"y" * 10, "dev/2")
        outbox.reject("dev/2", "400: refused")
        uploader = Uploader(outbox, Uplink(server.url, "tok"), idle_seconds=0.2)
        uploader.start()
        try:
            with Outbox(tmp_path / "outbox.db") as admin:  # acep outbox ... requeue
                assert admin.requeue(["dev/2"]) == 1
            assert eventually(lambda: outbox.metrics()["sent"] == 2, 5)
        finally:
            uploader.stop(5)


def test_a_heartbeat_held_by_a_retry_after_goes_when_the_hold_ends(server, tmp_path):
    """No batch waits, a heartbeat does, and an answer's Retry-After holds the uploads: it
    goes when the hold ends, not at the idle uploader's next look at its outbox."""
    from edge.agent.outbox import Outbox
    from edge.agent.uploader import IDLE_SECONDS, Uploader

    with Outbox(tmp_path / "outbox.db") as outbox:
        uploader = Uploader(outbox, Uplink(server.url, "tok"))
        uploader.hold_until = time.monotonic() + 0.5  # as a Retry-After: 1 heard before
        uploader.beat({"consumed": 1})
        start = time.monotonic()
        uploader.start()
        try:
            assert eventually(lambda: uploader.counts["heartbeats"] == 1, IDLE_SECONDS - 1)
        finally:
            uploader.stop(5)
        assert time.monotonic() - start >= 0.5
    assert [path for path, _, _ in server.handler.seen] == ["/v1/heartbeat"]


def test_the_uploader_survives_an_unexpected_error_and_delivers_after_its_backoff(
        server, tmp_path, caplog):
    from edge.agent.outbox import Outbox
    from edge.agent.outbox_reader import Backoff
    from edge.agent.uploader import Uploader

    caplog.set_level(logging.INFO, logger="edge")

    with Outbox(tmp_path / "outbox.db", backoff=Backoff(0.05, max_delay=0.1)) as outbox:
        outbox.put(b"x" * 10, "dev/1")
        uplink = Uplink(server.url, "tok")
        post, calls = uplink.post_batch, []

        def once_broken(body):
            calls.append(body)
            if len(calls) == 1:
                raise RuntimeError("a bug")
            return post(body)

        uplink.post_batch = once_broken
        uploader = Uploader(outbox, uplink, idle_seconds=0.02)
        uploader.start()
        try:
            deadline = time.monotonic() + 10
            while outbox.metrics()["pending"] and time.monotonic() < deadline:
                time.sleep(0.02)
            assert uploader.is_alive()
        finally:
            uploader.stop(5)
        assert outbox.metrics()["sent"] == 1 and len(calls) == 2
    said = [r for r in caplog.records if "unexpected error" in r.getMessage()]
    assert len(said) == 1 and "RuntimeError: a bug" in said[0].getMessage()
    assert said[0].levelno == logging.ERROR and said[0].exc_info[0] is RuntimeError
    assert "uploads no longer fail unexpectedly (after 1 failed attempt)" in caplog.messages


def test_a_body_slower_than_the_timeout_goes_while_the_link_takes_it_piece_by_piece():
    """``http.client`` sends a body with one ``sendall``, whose timeout is the whole body's
    (Python 3.5 on): over a link slower than body / timeout it always timed out. The
    agent's connections send it in pieces of SEND_PIECE bytes, each with the timeout."""
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)  # the least: no slack
    listener.bind(("127.0.0.1", 0))
    listener.listen(2)
    body = b"x" * (10 * SEND_PIECE)  # 2 s at 40 kB/s: four times the timeout

    def slow_reader(peer: socket.socket, rate: float = 40000) -> None:
        start, got = time.monotonic(), 0
        while got < len(body) and (data := peer.recv(1000)):
            got += len(data)
            time.sleep(max(start + got / rate - time.monotonic(), 0.0))
        peer.close()

    try:
        for paced in (False, True):
            conn = (_PacedHTTP if paced else http.client.HTTPConnection)(
                "127.0.0.1", listener.getsockname()[1], timeout=0.5)
            conn.connect()
            conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)  # a thin link's
            peer, _ = listener.accept()
            reader = threading.Thread(target=slow_reader, args=(peer,))
            reader.start()
            start = time.monotonic()
            try:
                if paced:
                    conn.send(body)
                    assert time.monotonic() - start > 1.0
                else:
                    with pytest.raises(TimeoutError):
                        conn.send(body)
            finally:
                conn.close()
                reader.join(10)
    finally:
        listener.close()



@pytest.mark.parametrize("answer", [b"SSH-2.0-OpenSSH_9.6\r\n",  # another service
                                    b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"st"])
@pytest.mark.parametrize("size", [10, 1 << 16])  # a small body (urllib) and one that expects
def test_an_answer_cut_short_or_not_http_is_a_retry_for_any_body(answer, size):
    """Another service on the port, or an answer cut within its body: a failed connection
    for a small body (urllib's way) as for a large one (Expect: 100-continue), not an
    unexpected error with a traceback."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve():
        for _ in range(2):
            try:  # the test closes the listener when one connection was enough
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(2)
                try:
                    conn.recv(1 << 20)
                    conn.sendall(answer)
                except OSError:
                    pass
    threading.Thread(target=serve, daemon=True).start()
    try:
        uplink = Uplink(f"http://127.0.0.1:{listener.getsockname()[1]}", "tok", timeout=2.0)
        out = uplink.post_batch(b"x" * size)
        assert out.action == "retry", out
        if answer.startswith(b"SSH"):
            assert out.detail.startswith("connection: "), out
    finally:
        listener.close()


# --------------------------------------------------------------------------- a hostile answer


class _Elsewhere(BaseHTTPRequestHandler):
    """Another host: records the method, path and Authorization of what reaches it."""

    seen: list = []

    def _record(self):
        self.seen.append((self.command, self.path, self.headers.get("Authorization")))
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    do_GET = do_POST = do_PUT = _record  # noqa: N815 (http.server's naming)

    def log_message(self, *args):
        pass


class _Redirector(BaseHTTPRequestHandler):
    """Answers every request with ``code`` to the same path on ``to``, after its body."""

    protocol_version = "HTTP/1.1"
    code, to = 302, ""

    def _redirect(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(self.code)
        self.send_header("Location", self.to + self.path)
        self.send_header("Content-Length", "0")
        self.send_header("Connection", "close")
        self.end_headers()

    do_GET = do_POST = do_PUT = _redirect  # noqa: N815

    def log_message(self, *args):
        pass


@pytest.mark.parametrize("code", [301, 302, 303, 307, 308])
def test_a_redirect_is_not_followed_so_the_token_never_goes_to_another_host(server, code):
    """urllib follows a redirect with every header of the request, the bearer token too,
    to the host it names (a captive portal, a proxy's mistake): the agent follows none,
    and says where it was sent. The ``server`` fixture clears the proxies."""
    from edge.agent.preflight import _get

    with Serving(type("Elsewhere", (_Elsewhere,), {"seen": []})) as elsewhere:
        to = f"http://localhost:{elsewhere.server_address[1]}"  # another host name
        with Serving(type("Redirector", (_Redirector,), {"code": code, "to": to})) as there:
            url = there.url
            uplink = Uplink(url, "device-secret", timeout=5)
            try:
                sketch = uplink.get_sketch("p1", 1 << 20)
            except OSError as e:
                sketch = str(e)
            outs = [uplink.post_batch(b"x" * 10), uplink.post_batch(BIG),
                    uplink.post_heartbeat({"time": 1.0})]
            status, _, error = _get(url + "/v1/whoami", "device-secret", 5, 1 << 16)
    assert elsewhere.RequestHandlerClass.seen == []  # the token stayed home
    assert sketch == (f"GET /v1/sketches/p1: HTTP {code}: "
                      f"{redirect_text(to + '/v1/sketches/p1')}")
    assert "not followed" in sketch
    for out, path in zip(outs, ("batches", "batches", "heartbeat")):
        assert out == Outcome("retry", code, redirect_text(f"{to}/v1/{path}")), out
    assert status == code and error == redirect_text(f"{to}/v1/whoami")


def _answering(answer, most: int) -> tuple[socket.socket, list]:
    """A listener that reads each request's head (and a body of up to 1 KiB) and sends
    ``answer`` over and over, ``most`` bytes at most, then closes; how many it could
    send, per connection."""
    listener = socket.create_server(("127.0.0.1", 0))
    sent: list = []

    def serve():
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                got = b""
                while b"\r\n\r\n" not in got:
                    got += conn.recv(1 << 16)
                if b"Expect" not in got:
                    conn.settimeout(0.2)
                    with contextlib.suppress(TimeoutError):
                        conn.recv(1 << 10)
                    conn.settimeout(None)
                sent.append(0)
                try:
                    while sent[-1] < most:
                        conn.sendall(answer)
                        sent[-1] += len(answer)
                except OSError:  # the agent closed it
                    pass
    threading.Thread(target=serve, daemon=True).start()
    return listener, sent


@pytest.fixture(scope="module")
def tls(tmp_path_factory) -> tuple[ssl.SSLContext, str]:
    """A server context with a certificate for 127.0.0.1 from a CA made for the tests, and
    the CA's file for the agent (collector.ca_file)."""
    import trustme

    ca, where = trustme.CA(), tmp_path_factory.mktemp("pki") / "ca.pem"
    ca.cert_pem.write_to_path(where)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    return context, str(where)


def _refusing(answer: bytes, after: float, context: ssl.SSLContext | None = None
              ) -> socket.socket:
    """A listener that reads a request's head, answers ``answer`` ``after`` seconds later
    without reading the body and closes (its unread bytes reset the connection), as a
    server that refuses by ``Content-Length`` or token does; its receive buffer is the
    smallest, so a large body is still on its way. Over TLS with ``context``."""
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)

    def serve():
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                if context is not None:
                    conn = context.wrap_socket(conn, server_side=True)
                got = b""
                while b"\r\n\r\n" not in got:
                    got += conn.recv(1 << 10)
                time.sleep(after)
                conn.sendall(answer)
                conn.close()
    threading.Thread(target=serve, daemon=True).start()
    return listener


@pytest.mark.parametrize("status, action, wait", [(413, "reject", None), (401, "auth", None),
                                                  (503, "retry", 7.0)])
@pytest.mark.parametrize("expect", [True, False], ids=["late refusal", "without Expect"])
@pytest.mark.parametrize("scheme", ["http", "https"])
def test_a_refusal_while_the_body_goes_is_read_though_the_server_closes(
        status, action, wait, expect, scheme, tls):
    """The collector refuses (a body over --max-body, a wrong token, too busy) while the
    body is on its way, after the 1 s wait for 100 Continue or without Expect, and closes:
    the send failed with a reset, so its answer was never read, and a 413 was retried for
    ever (its whole body each time), a 401 did not hold the uploads and a Retry-After was
    lost. The answer is read now."""
    doc = b'{"error": "refused", "status": %d}' % status
    answer = (b"HTTP/1.1 %d Refused\r\nContent-Type: application/json\r\nContent-Length: %d"
              b"\r\nRetry-After: 7\r\nConnection: close\r\n\r\n%s" % (status, len(doc), doc))
    listener = _refusing(answer, CONTINUE_WAIT + 0.3 if expect else 0.3,
                         tls[0] if scheme == "https" else None)
    try:
        uplink = Uplink(f"{scheme}://127.0.0.1:{listener.getsockname()[1]}", "tok",
                        timeout=5, expect_continue=expect, ca_file=tls[1])
        out = uplink.post_batch(b"x" * (8 << 20))  # more than the socket buffers hold
    finally:
        listener.close()
    assert out == Outcome(action, status, "refused", wait if action == "retry" else None), out
    assert uplink.expect_continue == expect


def _answer(status: int, doc: bytes) -> bytes:
    return (b"HTTP/1.1 %d X\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
            b"Connection: close\r\n\r\n%s" % (status, len(doc), doc))


@pytest.mark.parametrize("expect", [True, False], ids=["late refusal", "without Expect"])
def test_bytes_on_wire_counts_what_went_of_a_body_cut_short_and_none_of_a_refused_one(
        expect):
    """upload_bytes_on_wire counted a body sent without Expect (or after the wait for 100
    Continue) whole, even when the collector closed on it part-way, and even when the
    connection was refused: it counts the bytes the kernel took now."""
    body = b"x" * (8 << 20)  # more than the socket buffers hold
    listener = _refusing(_answer(413, b'{"error": "too large"}'),
                         CONTINUE_WAIT + 0.3 if expect else 0.3)
    try:
        uplink = Uplink(f"http://127.0.0.1:{listener.getsockname()[1]}", "tok", timeout=5,
                        expect_continue=expect)
        out = uplink.post_batch(body)
    finally:
        listener.close()
    assert (out.action, out.status) == ("reject", 413), out
    assert 0 < uplink.bytes_on_wire < len(body) // 2, uplink.bytes_on_wire
    closed = socket.create_server(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # nothing listens there: the connection is refused
    nowhere = Uplink(f"http://127.0.0.1:{port}", "tok", timeout=5, expect_continue=expect)
    assert nowhere.post_batch(body[:100]).action == "retry" and nowhere.bytes_on_wire == 0


@pytest.mark.parametrize("expect", [True, False], ids=["late answer", "without Expect"])
@pytest.mark.parametrize("scheme", ["http", "https"])
def test_a_200_to_a_body_cut_short_is_not_taken_as_stored(expect, scheme, tls, tmp_path):
    """What answers at the collector's address says "stored" to a batch it never read and
    closes on its body: the agent believed it and dropped the batch from its outbox. A
    success for a body that did not go whole is retried now (the collector stores a batch
    only whole, and a resend of one it stored is a duplicate, by digest)."""
    from edge.agent.outbox import Outbox
    from edge.agent.outbox_reader import Backoff
    from edge.agent.uploader import Uploader

    listener = _refusing(_answer(200, b'{"status": "stored"}'),
                         CONTINUE_WAIT + 0.3 if expect else 0.3,
                         tls[0] if scheme == "https" else None)
    body = b"x" * (8 << 20)
    try:
        uplink = Uplink(f"{scheme}://127.0.0.1:{listener.getsockname()[1]}", "tok",
                        timeout=5, expect_continue=expect, ca_file=tls[1])
        with Outbox(tmp_path / "outbox.db", backoff=Backoff(60.0, jitter=0.0)) as outbox:
            outbox.put(body, "dev/1")
            uploader = Uploader(outbox, uplink)
            assert uploader.send_one()
            summary = outbox.summary()
    finally:
        listener.close()
    assert uploader.counts["acked"] == 0 and summary["pending"] == 1
    said = summary["oldest"]["last_error"]
    assert said.startswith("HTTP 200: a success for a body cut short (") and said.endswith(
        f" of {len(body)} bytes sent): not taken as an acknowledgement"), said


@pytest.mark.parametrize("flood, most, says", [
    (b"H" * 65536, 32 << 20, "an answer head of more than 65536 bytes without its end"),
    (b"HTTP/1.1 100 Continue\r\n" + b"X-Hint: " + b"h" * 1000 + b"\r\n", 32 << 20,
     "an answer head of more than 65536 bytes without its end"),
    (EARLY, 4 << 20, "more than 16 interim (1xx) answers before the final one"),
])
def test_an_answer_head_that_never_ends_is_given_up_after_a_bound(flood, most, says):
    """A server at the collector's address (another service, a compromised collector) that
    sends a head with no end, or interim answers for ever: the agent reads a bounded head,
    gives up at once with a retry, and closes the connection (it read everything, copying
    it again at each read, before: 32 MiB cost seconds, a stream without end its memory)."""
    listener, sent = _answering(flood, most)
    try:
        uplink = Uplink(f"http://127.0.0.1:{listener.getsockname()[1]}", "tok", timeout=5)
        out, took = timed_post(uplink, BIG)
        assert (out.action, out.status) == ("retry", None) and says in out.detail, out
        assert took < 2.0
        time.sleep(0.2)
        assert sent[0] < most  # the agent stopped reading: the server could not send it all
    finally:
        listener.close()


@pytest.mark.parametrize("size", [10, 4 * EXPECT_MIN_BYTES])
def test_a_retry_after_that_is_not_ascii_digits_is_ignored_not_a_crash(size):
    """``'²'.isdigit()`` is true and ``float('²')`` raises: a Retry-After of byte 0xB2 (read
    as latin-1) ended the upload with an unexpected error (a traceback, the crash backoff)."""
    answer = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 2\r\nRetry-After: \xb2\r\n"
              b"Connection: close\r\n\r\n{}")
    listener, _ = _answering(answer, len(answer))
    try:
        uplink = Uplink(f"http://127.0.0.1:{listener.getsockname()[1]}", "tok", timeout=5)
        out = uplink.post_batch(b"x" * size)
        assert (out.action, out.status, out.retry_after) == ("retry", 503, None), out
    finally:
        listener.close()
    assert retry_after("\u00b2") is None and retry_after(" 12 ") == 12.0
    assert retry_after("-5") is None and retry_after(str(10 ** 12)) == 1e12  # the outbox caps it


@pytest.mark.parametrize("doc", [b"[]", b'"stored"', b"null"])
@pytest.mark.parametrize("size", [10, 4 * EXPECT_MIN_BYTES])
def test_a_200_whose_json_is_not_an_object_is_a_retry_not_a_crash(doc, size):
    """Another API at the collector's address answers 200 with a JSON list: the uploads
    read ``.get`` of it, an AttributeError (an unexpected error with a traceback and the
    crash backoff); it is a retry like a 200 that is not JSON. (It reads the body first:
    a 200 before the body went is not believed at all.)"""
    _a_200_with(doc, size, "200 with a body that is not a JSON object: " + doc.decode())


@pytest.mark.parametrize("doc", [b"[" * 30000 + b"]" * 30000, b'{"a": ' + b"[" * 100 + b"]" * 100
                                 + b"}"], ids=["30000", "100"])
def test_a_200_whose_json_nests_too_deep_is_a_retry_not_a_crash(doc):
    """A RecursionError in the uploader before: no ``except ValueError`` catches it."""
    _a_200_with(doc, 10, "200 with a body that is not JSON")


def _a_200_with(doc: bytes, size: int, said: str) -> None:
    """A batch of ``size`` bytes posted to a server answering 200 with ``doc``: a retry
    that ``said``."""
    answer = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
              b"Connection: close\r\n\r\n%s" % (len(doc), doc))
    listener = trickling(answer, len(answer), every=0)
    try:
        uplink = Uplink(f"http://127.0.0.1:{listener.getsockname()[1]}", "tok", timeout=5)
        out = uplink.post_batch(b"x" * size)
    finally:
        listener.close()
    assert out == Outcome("retry", 200, said), out


@pytest.mark.parametrize("status", [200, 500])
def test_acep_train_publish_reads_a_bounded_answer(status):
    """``acep train --publish``: an answer without end (a server that is not the collector)
    is read to 1 MiB, then refused in one line; it was read to its end before."""
    from trainer.train import publish_sketch

    head = f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n\r\n".encode()
    listener, sent = _answering(head + b"[" * (1 << 16), 32 << 20)
    try:
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        with pytest.raises((ValueError, RuntimeError)) as refused:
            publish_sketch(url, "p1", b"sketch", "admin-secret", timeout=5)
        time.sleep(0.2)
        assert sent[0] < 32 << 20  # it stopped reading
        if status == 500:
            assert str(refused.value).startswith("the collector refused the sketch: HTTP 500 [[[")
    finally:
        listener.close()


# --------------------------------------------------------------------------- a trickled answer


@pytest.mark.parametrize("part", list(TRICKLED))
@pytest.mark.parametrize("request_kind", ["batch", "large batch", "heartbeat", "sketch"])
def test_an_answer_that_trickles_is_given_up_after_the_answer_timeout(part, request_kind):
    """A collector (or what answers at its address) that sends its answer a byte at a time,
    each within collector.timeout: every wait was bounded, not their sum, so an upload, a
    heartbeat or a sketch check went on for as long as the answer lasted, and the thread
    with it (a byte every 9 s of a 200-byte answer: half an hour). Now the whole answer
    must come within collector.answer_timeout: a retry like a timeout, saying so."""
    listener = trickling(ANSWER, TRICKLED[part], every=0.3)
    try:
        uplink = Uplink(f"http://127.0.0.1:{listener.getsockname()[1]}", "tok", timeout=1.0,
                        answer_timeout=1.5)
        start = time.monotonic()
        if request_kind == "sketch":
            with pytest.raises(OSError) as failed:
                uplink.get_sketch("p1", 1 << 20)
            said = str(failed.value)
        elif request_kind == "heartbeat":
            out = uplink.post_heartbeat({"consumed": 1})
            assert (out.action, out.status) == ("retry", None), out
            said = out.detail
        else:
            out = uplink.post_batch(BIG if request_kind == "large batch" else b"x" * 10)
            assert (out.action, out.status) == ("retry", None), out
            said = out.detail
        took = time.monotonic() - start
    finally:
        listener.close()
    assert said.startswith("GET /v1/sketches/p1: " if request_kind == "sketch" else
                           "connection: ")
    assert "no whole answer within 1.5 s (collector.answer_timeout)" in said, said
    assert took < 3.0, took


def test_interim_answers_after_100_continue_do_not_restart_the_answer_timeout():
    """Each interim answer after the 100 (103 Early Hints), when the bytes after it had
    not come yet, started the answer's time again: a server that trickled 16 of them, each
    within collector.answer_timeout, held the upload 17 times as long. The time now runs
    from the body's end over all of them."""
    # each 103 whole, 0.5 s apart: nothing follows it at once, and it is within 1.5 s
    listener = trickling(EARLY * 8 + ANSWER, 0, every=0.5, step=len(EARLY))
    try:
        uplink = Uplink(f"http://127.0.0.1:{listener.getsockname()[1]}", "tok", timeout=1.0,
                        answer_timeout=1.5)
        out, took = timed_post(uplink, BIG)
    finally:
        listener.close()
    assert (out.action, out.status) == ("retry", None), out
    assert out.detail == "connection: no whole answer within 1.5 s (collector.answer_timeout)"
    assert took < 3.0, took


def _answering_late(answer: bytes, after: float, reads_body: bool) -> tuple[socket.socket,
                                                                             threading.Event]:
    """A listener that never says 100 Continue (an HTTP/1.0 server, or one behind an
    HTTP/1.0 proxy) and answers a request ``answer`` ``after`` seconds after it read its
    body, or, unless ``reads_body``, after its head, taking no byte of the body (its
    receive buffer the smallest: the body stays queued in the agent's kernel); it keeps
    the connection open until the event returned is set."""
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    done = threading.Event()

    def serve():
        conn, _ = listener.accept()
        with conn:
            got = b""
            while b"\r\n\r\n" not in got:
                got += conn.recv(1 << 10)
            if reads_body:
                head, _, body = got.partition(b"\r\n\r\n")
                length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                                  if line.lower().startswith(b"content-length:")))
                while len(body) < length:
                    body += conn.recv(1 << 16)
            time.sleep(after)
            conn.sendall(answer)
            done.wait(10)
    threading.Thread(target=serve, daemon=True).start()
    return listener, done


@pytest.mark.parametrize("reads_body, after, size, out", [
    (True, 0.6, len(BIG), ("ack", 200, "stored", None)),
    (False, 1.8, 64 << 10, ("retry", 503, "busy", 7.0))],
    ids=["an answer after the body", "a refusal while the body is queued"])
def test_the_answer_timeout_runs_from_the_body_sent_not_from_the_head(reads_body, after,
                                                                      size, out):
    """The wait for the answer counts neither the wait for 100 Continue nor the body's
    sending, whether the link took the body at once (all acknowledged before the agent
    looked) or the answer came while the body was still queued (a refusal, with its
    Retry-After, from a server that stopped reading): it gets collector.answer_timeout
    from then. One rule decides it wherever the agent waits for the body's last bytes
    (edge.agent.transport._drain): the rule that restarted the wait only when the link took some
    of the body during that drain counted the first from the head (1 s for 100 Continue
    and 0.6 s: past 1.2 s), and gave an answer that came before a byte moved no fresh
    time."""
    doc = (b'{"status": "stored"}' if reads_body else
           b'{"error": "busy", "status": 503}')
    answer = (b"HTTP/1.1 %d X\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
              b"Retry-After: 7\r\nConnection: close\r\n\r\n%s"
              % (200 if reads_body else 503, len(doc), doc))
    listener, done = _answering_late(answer, after, reads_body)
    try:
        uplink = Uplink(f"http://127.0.0.1:{listener.getsockname()[1]}", "tok", timeout=2.0,
                        answer_timeout=1.2)
        got = uplink.post_batch(b"x" * size)
    finally:
        done.set()
        listener.close()
    assert (got.action, got.status, got.detail, got.retry_after) == out, got


def _slowly(answers: list[bytes], seconds: float, every: float = 0.1) -> socket.socket:
    """A listener that reads each request whole (never saying 100 Continue: the agent
    sends the body after its wait) and answers the n-th with ``answers[n]``, its head drawn
    out over ``seconds`` (a header's byte every ``every`` s, each within the agent's
    timeout); past the list, with a head that does not end."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve(conn: socket.socket, answer: bytes | None) -> None:
        with conn:
            got = b""
            while b"\r\n\r\n" not in got:
                got += conn.recv(1 << 16)
            head, _, body = got.partition(b"\r\n\r\n")
            length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length:")))
            while len(body) < length:
                body += conn.recv(1 << 16)
            status, _, rest = (answer or b"HTTP/1.1 200 OK\r\n").partition(b"\r\n")
            until = time.monotonic() + (seconds if answer else 30)
            try:
                conn.sendall(status + b"\r\nX-Pad: ")
                while time.monotonic() < until:
                    time.sleep(every)
                    conn.sendall(b"x")
                conn.sendall(b"\r\n" + rest)
            except OSError:  # the agent gave up
                pass

    def accept() -> None:
        for n in range(len(answers) + 1):
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn, answers[n] if n < len(answers)
                                                 else None), daemon=True).start()
    threading.Thread(target=accept, daemon=True).start()
    return listener


def test_a_417_and_a_415_give_the_resends_what_is_left_of_one_upload_s_time():
    """After a 417 (Expect refused) and a 415 (gzip refused) the batch was sent again
    with fresh timeouts each time: a collector (or what answers at its address) that took
    its time over each answer held one upload three times as long as one request may take.
    The resends now get what is left of that time (Uplink.upload_bound), and the upload is
    given up, retried like a timeout, when it is over."""
    refused = b"HTTP/1.1 417 Expectation Failed\r\nContent-Length: 0\r\n\r\n"
    listener = _slowly([refused, _answer(415, b'{"error": "no gzip"}')], seconds=2.4)
    body = random.Random(0).randbytes(EXPECT_MIN_BYTES)  # gzipped, still Expect's size
    try:
        uplink = Uplink(f"http://127.0.0.1:{listener.getsockname()[1]}", "tok", timeout=0.3,
                        answer_timeout=3.0)
        uplink.gzip_taken = True  # an earlier answer said so
        bound = uplink.upload_bound(len(body))
        out, took = timed_post(uplink, body)
    finally:
        listener.close()
    assert bound == pytest.approx(0.3 + 0.3 + 2 * 3.0 + 1.0)
    assert not uplink.expect_continue and not uplink.compress, out  # both fallbacks taken
    assert out == Outcome("retry", None, (
        "connection: the upload did not end within 7.6 s (collector.timeout, the wait for "
        "100 Continue, twice collector.answer_timeout and 1 s per KiB of its 1024 bytes), "
        "its resends after a 417 or 415 included")), out
    assert bound - 0.1 < took < bound + 1.0, took


def test_the_uploader_retries_a_trickled_answer_as_a_timeout(tmp_path):
    """The upload thread is free again after collector.answer_timeout, and the batch is
    kept and retried with the backoff, its error saying why."""
    from edge.agent.outbox import Outbox
    from edge.agent.outbox_reader import Backoff
    from edge.agent.uploader import Uploader

    listener = trickling(ANSWER, TRICKLED["body"], every=0.3)
    try:
        with Outbox(tmp_path / "outbox.db", backoff=Backoff(60.0, jitter=0.0)) as outbox:
            outbox.put(b"x" * 10, "dev/1")
            uplink = Uplink(f"http://127.0.0.1:{listener.getsockname()[1]}", "tok",
                            timeout=1.0, answer_timeout=1.5)
            uploader = Uploader(outbox, uplink)
            assert uploader.send_one()
            summary = outbox.summary()
    finally:
        listener.close()
    assert uploader.counts["retried"] == 1 and summary["pending"] == 1
    assert summary["oldest"]["attempts"] == 1
    assert summary["oldest"]["last_error"].startswith(
        "connection: no whole answer within 1.5 s (collector.answer_timeout)")
    assert summary["next_due"] > time.time() + 50  # the backoff's 60 s


def test_an_agent_s_collector_answer_timeout_bounds_its_uploads(tmp_path):
    """agent.toml's collector.answer_timeout reaches the uploads: against a collector that
    trickles every answer, the upload thread gives each attempt up and retries (before, it
    was still in its first one when the finite run ended: upload_error null), and the run
    ends at its drain timeout with its batches kept and upload_error saying why."""
    from support.agent import config, stream

    from edge.agent import Agent
    from edge.agent.config import parse_config

    listener = trickling(ANSWER, TRICKLED["headers"], every=0.3)
    url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    doc = config(tmp_path, collector={"url": url, "timeout": 1, "answer_timeout": 1.5,
                                      "drain_timeout": 1, "heartbeat": 0},
                 outbox={"backoff_base": 0.05, "backoff_max": 0.2})
    doc["device"]["token"] = "tok"
    try:
        start = time.monotonic()
        final = Agent(parse_config(doc), events=stream(800)).run()
        took = time.monotonic() - start
    finally:
        listener.close()
    assert final["outbox_pending"] == final["batches_put"] > 0 and final["batches_sent"] == 0
    assert final["upload_error"] == \
        "connection: no whole answer within 1.5 s (collector.answer_timeout)"
    assert took < 10, took


def test_a_large_sketch_over_a_thin_link_still_comes_past_the_answer_timeout():
    """Each byte of an answer's body buys 1/ANSWER_MIN_RATE s more: a sketch that takes
    twice the answer timeout at four times that rate comes whole, as at the collector's
    --body-min-rate; one that keeps up half of it does not, and the message says so."""
    from edge.agent.deadlines import ANSWER_MIN_RATE

    sketch = bytes(range(256)) * int(ANSWER_MIN_RATE * 8 / 256)  # 8 s at the rate
    answer = (b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
              % len(sketch)) + sketch
    for rate, comes in ((4 * ANSWER_MIN_RATE, True), (ANSWER_MIN_RATE / 2, False)):
        listener = trickling(answer, answer.index(b"\r\n\r\n") + 4, 0, rate=rate)
        try:
            uplink = Uplink(f"http://127.0.0.1:{listener.getsockname()[1]}", "tok",
                            timeout=1.0, answer_timeout=1.0)
            start = time.monotonic()
            if comes:
                assert uplink.get_sketch("p1", 1 << 20) == sketch
                assert time.monotonic() - start > 1.5  # past the answer timeout
            else:
                with pytest.raises(OSError, match=r"no whole answer within 1 s \(collector"
                                   r"\.answer_timeout\), and its body came slower than 1024 "
                                   r"bytes/s \([0-9]+ bytes in [0-9.]+ s\)"):
                    uplink.get_sketch("p1", 1 << 20)
                assert time.monotonic() - start < 6
        finally:
            listener.close()

