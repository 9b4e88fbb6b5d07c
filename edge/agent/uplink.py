"""The agent's side of the collector's HTTP API (``docs/WIRE.md``, last sections).

:class:`Uplink` posts one batch (or heartbeat) and classifies the answer, and downloads a
sketch; :class:`Uploader` is the thread that drains the outbox: ``200`` ("stored" or
"duplicate") acks; ``5xx``, ``408``, ``429``, connection errors and timeouts are retried
with the outbox's backoff (an answer with ``Retry-After``, such as the collector's ``507``
on a full disk, also holds every other batch that long, up to the backoff's maximum);
``401`` and ``403`` (a wrong token or device id: the operator's problem, not the batch's)
keep every batch and pause all uploads with the same backoff, logged once per streak; any
other ``4xx`` moves the batch to the outbox's dead letters with the collector's reason
(never sent again unless an operator requeues it).

A body of :data:`EXPECT_MIN_BYTES` or more is posted with ``Expect: 100-continue`` (RFC 9110
10.1.1): it goes only after the collector's ``100 Continue``, so a refusal (``429``, ``503``,
``507``, ``401``) costs a device on a metered link its headers, not its batch; smaller ones
go at once, with their headers. Bodies go at once through a proxy from the environment
(``http_proxy``, ``https_proxy``: urllib's way), with
``collector.expect_continue = false``, after a collector answered ``417``, and after one
left the expectation unanswered for :data:`CONTINUE_WAIT` (the body then goes anyway) and
answered without ``100 Continue`` (an HTTP/1.0 server; a success from an HTTP/1.1 one: a
late refusal may be a busy collector's). Only the standard library (``http.client``,
``urllib.request``, ``gzip``).

``collector.timeout`` bounds each wait of an upload, not the upload: connecting (over
https, the connection, a proxy's tunnel and the TLS handshake together:
:class:`~acep._https.HTTPSWithin`), each
:data:`SEND_PIECE` bytes of a body leaving (``http.client`` sends a body with one
``sendall``, whose timeout is the whole body's: a device on a thin link could never send a
large batch), the body's last bytes, queued in the kernel, being acknowledged by the
collector (Linux; :func:`_drain`), and the answer. So a slow but steady upload takes as
long as its link needs, as at the collector (``--body-idle-timeout``, ``--body-min-rate``):
the whole request, its body included, must get across within ``collector.answer_timeout``
and 1/:data:`ANSWER_MIN_RATE` s more per byte of the body (:class:`BodyTimeout`, retried as
a timeout), so a collector that keeps its receive window almost shut holds no upload for
long. The answer as a whole (status line, headers and body) must come within
``collector.answer_timeout`` of the request having got across (default three times
``collector.timeout``), and each byte of its body buys :data:`ANSWER_MIN_RATE`'s share of a
second more: a collector that trickles its answer a byte at a time no longer holds the upload
thread, a heartbeat or a sketch check for ever (:class:`AnswerTimeout`, retried as a
timeout), while a large sketch over a thin link still comes. One upload as a whole (a batch
or heartbeat, its resends after a ``417`` or ``415`` included) ends within
:meth:`Uplink.upload_bound`: ``collector.timeout``, the wait for ``100 Continue``, twice
``collector.answer_timeout`` and 1 s per KiB of the body (71 s and 1 s per KiB by
default), what its first request's waits may add up to; a resend gets what is left of it,
not fresh timeouts (:class:`UploadTimeout`, retried as a timeout).

Bodies of 1 KiB or more are gzipped (``Content-Encoding: gzip``) once an answer of the
collector says it takes them (``Accept-Encoding``, RFC 7694), unless ``collector.compress =
false``; after a ``415`` to a gzipped body the batch is sent again as it is, and so are all
from then on.

A success (``2xx``) for a body that did not go whole (the connection failed part-way, or
the answer came before the body) cannot be the collector's, which stores a batch only once
it has it whole: it is retried like a failed connection (a resend of a batch stored is a
duplicate, by digest), never taken as an acknowledgement.

Every answer tells the collector's time: its ``Date`` header (to the second), and a
heartbeat's answer its ``time``. ``Uplink.clock_ahead`` is how far this device's clock is
ahead of it (the metrics' ``clock_ahead_s``); beyond :data:`CLOCK_SLACK` it is logged as a
warning once per streak, its end at info level. No request is made for it.
"""

from __future__ import annotations

import email.utils
import functools
import gzip
import http.client
import io
import json
import logging
import re
import socket
import ssl
import struct
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass

from acep.utils import HTTPSWithin, json_problem, readable

from ..logs import Crashes, duration, one_line
from ..wire import sketch_etag, split_body
from .outbox import Due, Outbox

__all__ = ["Uplink", "Outcome", "Uploader", "download_sketch", "tls_context", "error_body",
           "error_text", "CLOCK_SLACK", "NoRedirects", "redirect_text", "MAX_HEAD",
           "AnswerTimeout", "BodyTimeout", "UploadTimeout", "ANSWER_MIN_RATE", "ANSWER_TIMES",
           "answer_opener", "timed"]

log = logging.getLogger("edge.agent")
CONTINUE_WAIT = 1.0  # seconds a body waits for "100 Continue" before it goes anyway (as curl)
EXPECT_MIN_BYTES = 1024  # smaller bodies go at once (and as they are): little to save
GZIP_LEVEL = 1  # bench/herd: 0.27 of the bytes at a sixth of level 6's CPU (0.24)
# a body leaves in pieces of this many bytes, each within collector.timeout: 8 KiB per 10 s
# is 6.6 kbit/s, below the collector's --body-min-rate (8 kbit/s), so it is the collector
# that says a link is too slow, in a 408 naming its rate
SEND_PIECE = 8 << 10
DRAIN_POLL = 0.05  # seconds between two looks at the bytes not yet acknowledged
# seconds an uploader with nothing due sleeps before it looks at its outbox again: the agent
# wakes it at once for a batch or a heartbeat, so this only bounds how soon it sees what
# another process changed (acep outbox requeue). At 0.5 s, bench/herd's 1,600 idle
# uploaders took more CPU than the collector they waited for
IDLE_SECONDS = 5.0
_SIOCOUTQ = 0x5411  # Linux: the bytes of a TCP socket's send queue not yet acknowledged
# seconds this clock may differ from the collector's without a warning (the agent's log and
# acep agent --check); a streak of warnings ends within half of it (a Date is to the second)
CLOCK_SLACK = 60.0
# bytes of an answer's head the agent reads itself (an interim answer, the final one's status
# line; http.client's own line limit): a server that sends no line end costs no more
MAX_HEAD = 1 << 16
MAX_INTERIM = 16  # interim answers (103 Early Hints) skipped before the final one, at most
# collector.answer_timeout's default, in collector.timeout's: the answer's waits together
ANSWER_TIMES = 3
# bytes/s an answer's body, and a request's, must keep up past collector.answer_timeout (each
# byte buys 1/rate s more): the collector's --body-min-rate default, 8 kbit/s; a sketch of
# sketch.max_bytes (1 MiB) over 100 kbit/s takes 84 s, a trickle of a byte a second buys
# nothing
ANSWER_MIN_RATE = 1024.0
_REDIRECTS = (301, 302, 303, 307, 308)
_RETRY_4XX = (408, 429)
_AUTH_4XX = (401, 403)


@dataclass(frozen=True)
class Outcome:
    """What became of one delivery attempt: ``"ack"``, ``"retry"``, ``"auth"`` (401 or
    403: retried, the batch is not at fault) or ``"reject"`` (refused for good)."""

    action: str
    status: int | None
    detail: str
    retry_after: float | None = None  # seconds, from the answer's Retry-After

    @property
    def why(self) -> str:
        """The detail, after the HTTP status when an answer came."""
        return self.detail if self.status is None else f"HTTP {self.status}: {self.detail}"


class Uplink:
    """HTTP to the collector at ``url`` with a device's bearer token.

    ``timeout`` bounds each wait (connecting is one, over https with a proxy's tunnel and
    the TLS handshake), ``answer_timeout`` (default :data:`ANSWER_TIMES` times
    ``timeout``) a whole answer,
    and with 1 s per KiB a request's body (see the module docstring); :meth:`upload_bound`
    one upload, its resends after a ``417`` or ``415`` included. ``bytes_on_wire`` counts
    the request body bytes sent (gzipped, when they were), every attempt included: the
    bytes the kernel took, so a body refused before it was sent (``Expect``) or whose
    connection was refused counts none, and one whose connection failed part-way what went
    (queued in the kernel, not necessarily across)."""

    def __init__(self, url: str, token: str, timeout: float = 10.0,
                 ca_file: str | None = None, expect_continue: bool = True,
                 compress: bool = True, answer_timeout: float | None = None):
        self.url, self.token, self.timeout = url.rstrip("/"), token, float(timeout)
        self.answer_timeout = float(answer_timeout or ANSWER_TIMES * self.timeout)
        self.context = tls_context(url, ca_file)
        self.opener = answer_opener(self.context)
        self.target = urllib.parse.urlsplit(self.url)
        self.expect_continue = expect_continue and not _proxied(self.target)
        self.compress = compress
        self.gzip_taken = False  # the collector's answers say it takes gzip (RFC 7694)
        self.bytes_on_wire = 0
        self.clock_ahead: float | None = None  # seconds this clock is ahead of the collector's
        self._clock_off = False  # in a streak of offsets beyond CLOCK_SLACK (warned once)
        self._clock_lock = threading.Lock()  # the uploads' and the sketch checks' answers

    def _headers(self, headers: dict | None = None) -> dict:
        return {"Authorization": f"Bearer {self.token}", **(headers or {})}

    def _request(self, method: str, path: str, body: bytes | None = None,
                 headers: dict | None = None, timeout: float | None = None,
                 bound: _UploadDeadline | None = None) -> urllib.request.Request:
        req = urllib.request.Request(self.url + path, data=body, method=method,
                                     headers=self._headers(headers))
        req = timed(req, *self._answer_time(timeout))
        req.answer_deadline.bound = bound
        if req.body_deadline is not None:
            req.body_deadline.bound = bound
        return req

    def _answer_time(self, timeout: float | None) -> tuple[float, str | None]:
        """The whole answer's seconds, and the setting they come from: ``answer_timeout``,
        or ``timeout`` when a request is given a shorter one (the last heartbeat)."""
        if timeout is None or timeout >= self.answer_timeout:
            return self.answer_timeout, "collector.answer_timeout"
        return timeout, None

    def _post(self, path: str, body: bytes, content_type: str, timeout: float | None = None
              ) -> tuple[int, bytes, float | None] | Outcome:
        """``(status, answer body, Retry-After seconds)``, or a ``"retry"`` outcome when no
        answer came or it was a redirect (never followed: :class:`NoRedirects`). The body
        is gzipped when the collector takes it (RFC 7694). Its requests (the resends after
        a ``417`` or ``415`` too) end within one :meth:`upload_bound`."""
        bound = _UploadDeadline(self.upload_bound(len(body), timeout), len(body),
                                named=timeout is None)
        if not (self.compress and self.gzip_taken and len(body) >= EXPECT_MIN_BYTES):
            return self._send(path, body, content_type, None, timeout, bound)
        answer = self._send(path, gzip.compress(body, GZIP_LEVEL, mtime=0), content_type,
                            "gzip", timeout, bound)
        if _status(answer) != 415:
            return answer
        self.compress = False
        log.info("the collector refused a gzipped body (HTTP 415: %s); bodies are sent "
                 "uncompressed from now on", error_text(answer[1]))
        return self._send(path, body, content_type, None, timeout, bound)

    def upload_bound(self, size: int, timeout: float | None = None) -> float:
        """Seconds one upload of a ``size``-byte body may take, its resends after a ``417``
        or ``415`` included: what its first request's waits may add up to, ``timeout``
        (default ``collector.timeout``) to connect, :data:`CONTINUE_WAIT` for ``100
        Continue``, ``answer_timeout`` for the body to get across and again for the answer,
        and 1/:data:`ANSWER_MIN_RATE` s per byte of the body (and of the answers' bodies,
        as they come). A resend gets what is left, not fresh timeouts."""
        wait = timeout or self.timeout
        return wait + min(CONTINUE_WAIT, wait) + 2 * self._answer_time(timeout)[0] + \
            size / ANSWER_MIN_RATE

    def _send(self, path: str, body: bytes, content_type: str, coding: str | None,
              timeout: float | None, bound: _UploadDeadline
              ) -> tuple[int, bytes, float | None] | Outcome:
        """:meth:`_post` of ``body`` as it is (``coding``: its Content-Encoding)."""
        headers = {"Content-Type": content_type}
        if coding:
            headers["Content-Encoding"] = coding
        if self.expect_continue and len(body) >= EXPECT_MIN_BYTES:
            answer = self._counted(self._post_expecting, path, body, headers, timeout, bound)
            if _status(answer) != 417:
                return answer
            self.expect_continue = False
            log.info("the collector (or a proxy before it) refused Expect: 100-continue "
                     "(HTTP 417); bodies are sent at once from now on")
        return self._counted(self._post_at_once, path, body, headers, timeout, bound)

    def _counted(self, post, path: str, body: bytes, headers: dict, timeout: float | None,
                 bound: _UploadDeadline) -> tuple[int, bytes, float | None] | Outcome:
        """``post(path, body, headers, timeout, bound, sent)``'s answer, the body bytes it
        sent counted (``bytes_on_wire``); a success for a body not sent whole is not
        believed (:func:`_whole`). ``post`` begins no request past ``bound``."""
        sent = _Sent()
        try:
            answer = post(path, body, headers, timeout, bound, sent)
        finally:
            self.bytes_on_wire += sent.bytes
        return _whole(answer, sent.bytes, len(body))

    def _post_at_once(self, path: str, body: bytes, headers: dict, timeout: float | None,
                      bound: _UploadDeadline, sent: _Sent
                      ) -> tuple[int, bytes, float | None] | Outcome:
        """:meth:`_post` of ``body`` with its headers, by urllib."""
        req = self._request("POST", path, body, headers, timeout, bound)
        req.sent = sent
        try:
            wait = bound.wait(timeout or self.timeout)
            with self.opener.open(req, timeout=wait) as resp:
                return self._answered(resp.status, resp.headers, lambda: resp.read(1 << 16))
        except urllib.error.HTTPError as e:
            return self._answered(e.code, e.headers, functools.partial(error_body, e))
        except (OSError, http.client.HTTPException) as e:  # URLError; cut short, not HTTP
            return _no_answer(e)

    def _answered(self, status: int, headers, read) -> tuple[int, bytes, float | None] | Outcome:
        """:meth:`_post`'s result for an answer of ``status``, whose body ``read()`` reads
        (64 KiB at most), noting what its ``headers`` say (:meth:`_heard`)."""
        self._heard(headers)
        if status in _REDIRECTS:
            return Outcome("retry", status, redirect_text(headers.get("Location")))
        return status, read(), None if status == 200 else retry_after(headers.get("Retry-After"))

    def _heard(self, headers) -> None:
        """Note what the collector's answer says it takes (``Accept-Encoding``) and its
        clock (``Date``)."""
        if "gzip" in (headers.get("Accept-Encoding") or "").lower():
            self.gzip_taken = True
        theirs = http_date(headers.get("Date"))
        if theirs is not None:  # a Date is to the second: the middle of it
            self.clock_seen(time.time() - (theirs + 0.5))

    def clock_seen(self, ahead: float) -> None:
        """This device's clock is ``ahead`` seconds ahead of the collector's (negative:
        behind): kept for the metrics; beyond :data:`CLOCK_SLACK` a warning, once per
        streak, and its end (within half of it again) at info level."""
        with self._clock_lock:
            self.clock_ahead = round(ahead, 3)
            off, way = duration(abs(ahead)), "ahead" if ahead > 0 else "behind"
            if not self._clock_off and abs(ahead) > CLOCK_SLACK:
                self._clock_off = True
                log.warning("this device's clock is %s %s the collector's (more than %g s): "
                            "batches are dated by it, and the collector's retention goes by "
                            "their date (it refuses those too far ahead or too old); set "
                            "the clock (NTP)", off, "ahead of" if ahead > 0 else way,
                            CLOCK_SLACK)
            elif self._clock_off and abs(ahead) <= CLOCK_SLACK / 2:
                self._clock_off = False
                log.info("this device's clock is within %g s of the collector's again (%s "
                         "%s)", CLOCK_SLACK / 2, off, way)

    def _post_expecting(self, path: str, body: bytes, headers: dict, timeout: float | None,
                        bound: _UploadDeadline, sent: _Sent
                        ) -> tuple[int, bytes, float | None] | Outcome:
        """:meth:`_post` with ``Expect: 100-continue``: the body is sent after the
        collector's ``100 Continue``, or after :data:`CONTINUE_WAIT` without an answer; not
        at all when the first answer is final (a refusal)."""
        try:
            wait = bound.wait(timeout or self.timeout)
        except UploadTimeout as e:
            return _no_answer(e)
        conn = self._connection(wait, sent)
        try:
            deadline = self._ask(conn, path, len(body), headers, timeout)
            deadline.bound = bound
            head = self._send_when_asked(conn, body, deadline)
            if head is None:
                return Outcome("retry", None, "connection: timed out")
            head = _final_head(conn.sock, head, deadline, conn.body_deadline)
            with _Answer(conn.sock, head, deadline, method="POST") as answer:
                answer.begin()
                return self._answered(answer.status, answer.headers,
                                      lambda: answer.read(1 << 16))
        except (OSError, http.client.HTTPException) as e:
            return _no_answer(conn.cut or e)  # after a cut body, the cut says why
        finally:
            conn.close()

    def _ask(self, conn: _Paced, path: str, size: int, headers: dict,
             timeout: float | None) -> _Deadline:
        """Send the head of a POST of ``size`` bytes with ``Expect: 100-continue``; the
        answer's deadline, started then."""
        conn.putrequest("POST", (self.target.path or "") + path)
        for name, value in self._headers({**headers, "Content-Length": str(size),
                                          "Expect": "100-continue"}).items():
            conn.putheader(name, value)
        conn.endheaders()
        return _Deadline(*self._answer_time(timeout))

    def _send_when_asked(self, conn: _Paced, body: bytes, deadline: _Deadline
                         ) -> bytes | None:
        """Send ``body`` after the collector's ``100 Continue``, or after
        :data:`CONTINUE_WAIT` without an answer, not at all when its first answer is final
        (a refusal); the final answer's first bytes read so far (perhaps none), None when
        none came."""
        first, head = _first_answer(conn.sock, min(CONTINUE_WAIT, conn.timeout), deadline)
        if first != "final":
            conn.body_deadline = _BodyDeadline(deadline.seconds, len(body), deadline.name)
            conn.body_deadline.bound = deadline.bound
            conn.send(body)
            head += _drain(conn.sock, conn.timeout, deadline, conn.body_deadline)
        if first == "silent":  # a busy collector says 100 late; an HTTP/1.0 one never
            first, head = _first_answer(conn.sock, conn.timeout, deadline, head)
            if first == "silent":
                return None
            if first == "final" and _ignores_expect(head):
                self._stop_expecting()
        return head

    def _stop_expecting(self) -> None:
        self.expect_continue = False  # waiting would cost every batch CONTINUE_WAIT
        log.info("the collector answered without 100 Continue, after %g s of silence (an "
                 "HTTP/1.0 server or proxy?); bodies are sent at once from now on",
                 CONTINUE_WAIT)

    def _connection(self, timeout: float, sent: _Sent) -> http.client.HTTPConnection:
        host, port = self.target.hostname, self.target.port
        if self.target.scheme == "https":
            return _PacedHTTPS(host, port, timeout=timeout, context=self.context, sent=sent)
        return _PacedHTTP(host, port, timeout=timeout, sent=sent)

    def _post_200(self, path: str, body: bytes, content_type: str,
                  timeout: float | None = None) -> bytes | Outcome:
        """The body of a ``200`` answer to :meth:`_post`; the outcome of any other answer
        (:func:`_classify`), or of none."""
        answer = self._post(path, body, content_type, timeout)
        if isinstance(answer, Outcome):
            return answer
        status, text, wait = answer
        return text if status == 200 else _classify(status, error_text(text), wait)

    def post_batch(self, body: bytes) -> Outcome:
        """``POST /v1/batches``; never raises for network or HTTP problems."""
        text = self._post_200("/v1/batches", body, "application/msgpack")
        if isinstance(text, Outcome):
            return text
        try:
            doc = answer_json(text)
        except ValueError:
            return Outcome("retry", 200, "200 with a body that is not JSON")
        if not isinstance(doc, dict):  # another API at the collector's address
            return Outcome("retry", 200, "200 with a body that is not a JSON object: "
                           f"{one_line(text[:100].decode('utf-8', 'replace'))}")
        if doc.get("status") in ("stored", "duplicate"):
            return Outcome("ack", 200, doc["status"])
        return Outcome("retry", 200, f"200 with status {doc.get('status')!r}")

    def post_heartbeat(self, status: dict, timeout: float | None = None) -> Outcome:
        """``POST /v1/heartbeat`` with ``status`` (the agent's metrics) as JSON: ``"ack"``
        on 200; never raises for network or HTTP problems."""
        body = json.dumps(status, default=str).encode()
        text = self._post_200("/v1/heartbeat", body, "application/json", timeout)
        if isinstance(text, Outcome):
            return text
        self._their_time(text)
        return Outcome("ack", 200, "seen")

    def _their_time(self, text: bytes) -> None:
        """The collector's clock from a heartbeat's answer (``time``: finer than ``Date``)."""
        try:
            theirs = answer_json(text).get("time")
        except (ValueError, AttributeError):
            return
        if isinstance(theirs, (int, float)) and not isinstance(theirs, bool) \
                and abs(theirs) < 1e15:
            self.clock_seen(time.time() - theirs)

    def get_sketch(self, pattern_id: str, max_bytes: int, etag: str | None = None
                   ) -> bytes | None:
        """``GET /v1/sketches/{pattern_id}``: the signed bytes (not verified here). With
        ``etag`` (the ETag of the sketch held) it sends ``If-None-Match`` and returns None
        when the collector answers 304 (still that sketch: no bytes sent). Raises
        ``OSError`` naming the problem: a refused connection, an HTTP error, and an answer
        cut short or not HTTP alike."""
        path = "/v1/sketches/" + urllib.parse.quote(pattern_id, safe="")
        headers = {"If-None-Match": f'"{etag}"'} if etag else None
        try:
            with self.opener.open(self._request("GET", path, headers=headers),
                                  timeout=self.timeout) as r:
                self._heard(r.headers)
                data = r.read(max_bytes + 1)
        except urllib.error.HTTPError as e:
            self._heard(e.headers)
            if e.code == 304 and etag:
                return None
            if e.code in _REDIRECTS:
                raise OSError(f"GET {path}: HTTP {e.code}: "
                              f"{redirect_text(e.headers.get('Location'))}") from None
            raise OSError(f"GET {path}: HTTP {e.code} {error_text(error_body(e))}") from None
        except (urllib.error.URLError, TimeoutError) as e:
            raise OSError(f"GET {path}: {getattr(e, 'reason', e)}") from None
        except (OSError, http.client.HTTPException, ValueError) as e:
            # the connection cut within the body (IncompleteRead, a reset), an answer that
            # is not HTTP (BadStatusLine), a URL http.client refuses (ValueError): a
            # failed download like a refused connection, retried
            raise OSError(f"GET {path}: {type(e).__name__}: {one_line(e)}") from None
        if len(data) > max_bytes:
            raise OSError(f"GET {path}: more than sketch.max_bytes = {max_bytes} bytes")
        return data


class AnswerTimeout(TimeoutError):
    """No whole answer in the time a :class:`_Deadline` gave it: retried as a timeout."""


class BodyTimeout(TimeoutError):
    """A request's body not across in the time a :class:`_BodyDeadline` gave it: retried
    as a timeout."""


class _Deadline:
    """When an answer must have come whole: ``seconds`` from :meth:`restart` (the request
    across the link), and 1/:data:`ANSWER_MIN_RATE` s more per byte of its body
    (:meth:`earn`). ``name`` is the setting that gave ``seconds``, for the message."""

    def __init__(self, seconds: float, name: str | None = None):
        self.seconds, self.name = float(seconds), name
        self.bound: _Deadline | None = None  # the upload's (_UploadDeadline), when sooner
        self.restart()

    def restart(self) -> None:
        self.started = time.monotonic()
        self.at, self.earned = self.started + self.seconds, 0

    def earn(self, n: int) -> None:
        self.at += n / ANSWER_MIN_RATE
        self.earned += n
        if self.bound is not None:
            self.bound.earn(n)

    def binding(self) -> _Deadline:
        """This deadline, or its ``bound`` when that comes sooner."""
        if self.bound is not None and self.bound.at < self.at:
            return self.bound.binding()
        return self

    def left(self) -> float:
        """Seconds left; the :meth:`binding` deadline's error when none are."""
        deadline = self.binding()
        left = deadline.at - time.monotonic()
        if left <= 0:
            raise deadline.expired()
        return left

    def wait(self, timeout: float) -> float:
        """``timeout``, or the seconds left when fewer (:meth:`left`)."""
        return min(timeout, self.left())

    def expired(self) -> AnswerTimeout:
        said = f"no whole answer within {self.seconds:g} s"
        if self.name:
            said += f" ({self.name})"
        if self.earned:
            said += (f", and its body came slower than {ANSWER_MIN_RATE:g} bytes/s "
                     f"({self.earned} bytes in {time.monotonic() - self.started:.1f} s)")
        return AnswerTimeout(said)


class _BodyDeadline(_Deadline):
    """When a request's ``size`` bytes of body must have got across (handed to the kernel
    in pieces, and acknowledged by the collector where that can be asked: :func:`_drain`):
    ``seconds`` and 1/:data:`ANSWER_MIN_RATE` s more per byte, from :meth:`restart` (the
    connection made, or the body's start after ``100 Continue``). A collector that keeps
    its receive window almost shut holds an upload no longer than that."""

    def __init__(self, seconds: float, size: int, name: str | None = None):
        self.size, self.base = size, float(seconds)
        self.moved = -float("inf")  # when the body last moved: sent, or acknowledged in part
        super().__init__(self.base + size / ANSWER_MIN_RATE, name)

    def expired(self) -> BodyTimeout:
        given = f"{self.name}, {self.base:g} s" if self.name else f"{self.base:g} s"
        return BodyTimeout(
            f"the body did not get across within {self.seconds:g} s ({given}, and "
            f"{1024 / ANSWER_MIN_RATE:g} s per KiB of its {self.size} bytes): the collector "
            f"took it slower than {ANSWER_MIN_RATE:g} bytes/s")


class UploadTimeout(TimeoutError):
    """An upload not over in the time an :class:`_UploadDeadline` gave it (its resends
    after a ``417`` or ``415`` included): retried as a timeout."""


class _UploadDeadline(_Deadline):
    """When one upload, all its requests included, must be over:
    :meth:`Uplink.upload_bound` seconds from its start (``named``: the Uplink's timeouts
    gave them, not a request's own, for the message); nothing restarts it."""

    def __init__(self, seconds: float, size: int, named: bool = True):
        self.size = size
        super().__init__(seconds, "collector.timeout, the wait for 100 Continue, twice "
                         "collector.answer_timeout" if named else None)

    def expired(self) -> UploadTimeout:
        given = f"{self.name} and " if self.name else ""
        return UploadTimeout(
            f"the upload did not end within {self.seconds:g} s ({given}1 s per KiB of its "
            f"{self.size} bytes), its resends after a 417 or 415 included")


def timed(req: urllib.request.Request, seconds: float, name: str | None = None
          ) -> urllib.request.Request:
    """``req``, whose whole answer an :func:`answer_opener` reads within ``seconds`` of the
    request having got across (:class:`_Deadline`; ``name``: the setting they come from),
    else :class:`AnswerTimeout`; and whose body, if any, gets across within ``seconds`` and
    1 s per KiB of it (:class:`_BodyDeadline`), else :class:`BodyTimeout`."""
    req.answer_deadline = _Deadline(seconds, name)
    req.body_deadline = None if req.data is None else \
        _BodyDeadline(seconds, len(req.data), name)
    return req


def answer_opener(context: ssl.SSLContext | None = None) -> urllib.request.OpenerDirector:
    """urllib as the agent uses it: redirects not followed (:class:`NoRedirects`), bodies
    sent in pieces, each wait within the request's timeout and, for a request
    :func:`timed`, the body and the whole answer each within its time; proxies from the
    environment (read now, as :func:`_proxied` reads them); https verified with
    ``context``."""
    return urllib.request.build_opener(
        NoRedirects(), _PacedHTTPHandler(),
        *([_PacedHTTPSHandler(context=context)] if context else []))


def _within(sock: socket.socket, deadline: _Deadline, io):
    """``io()``, a read or a send on ``sock``, within its timeout (one wait) and
    ``deadline``'s time (its :meth:`~_Deadline.binding` one's error past it)."""
    deadline = deadline.binding()
    timeout = sock.gettimeout()
    left = deadline.left()
    binding = timeout is None or left < timeout
    sock.settimeout(left if binding else timeout)
    try:
        return io()
    except TimeoutError:
        if binding:
            raise deadline.expired() from None
        raise
    finally:
        sock.settimeout(timeout)


def _recv(sock: socket.socket, deadline: _Deadline | None) -> bytes:
    """The next bytes of an answer: within ``sock``'s timeout, and ``deadline``'s."""
    if deadline is None:
        return sock.recv(1 << 16)
    return _within(sock, deadline, lambda: sock.recv(1 << 16))


class _Paced:
    """An ``http.client`` connection whose timeout bounds each wait, not a whole body: a
    body goes in pieces of :data:`SEND_PIECE` bytes, each with the timeout, and the answer
    is awaited once the body's last bytes got across (:func:`_drain`), then read within
    ``answer_deadline`` (restarted then: the request, made after it, always moved since,
    so that is :func:`_drain`'s rule; None: each wait bounded, not their sum).

    The request, its body included, gets across within ``body_deadline`` (restarted
    once connected; None: each wait bounded, not their sum).

    A server may answer before it has the whole body (a refusal: ``413``, ``401``,
    ``503``) and close: the rest of the body is then not sent, and the answer that came
    is read all the same; ``cut`` is the error that stopped the body, raised when no
    answer can be read. ``sent`` counts the body's bytes the kernel took (the pieces are
    sent with ``send``, not ``sendall``, whose count is lost when it fails).

    A proxy's tunnel (``CONNECT``, sent and answered on this connection while
    ``tunneling``) is the connection's: its bytes are not the request's, nor its answer the
    collector's (:class:`~acep._https.HTTPSWithin` times it)."""

    tunneling = False  # making a proxy's tunnel (HTTPSWithin sets it)

    def __init__(self, *args, answer_deadline: _Deadline | None = None,
                 body_deadline: _BodyDeadline | None = None, sent: _Sent | None = None,
                 **kw):
        super().__init__(*args, **kw)
        self.answer_deadline, self.body_deadline = answer_deadline, body_deadline
        self.sent = sent or _Sent()
        self.head_sent = False
        self.cut: OSError | None = None
        self.early = b""  # the answer's first bytes, read while the body drained

    def response_class(self, sock, debuglevel: int = 0, method: str | None = None):
        if self.tunneling:
            return super().response_class(sock, debuglevel=debuglevel, method=method)
        deadline = self.answer_deadline
        if deadline is not None:
            deadline.restart()
        return _Answer(sock, self.early, deadline, debuglevel=debuglevel, method=method)

    def connect(self) -> None:
        super().connect()
        if self.body_deadline is not None:
            self.body_deadline.restart()

    def send(self, data) -> None:
        if self.tunneling:
            return super().send(data)
        if self.sock is None:
            self.connect()  # a refused connection fails here, as in http.client
        if self.cut is not None:
            return
        # http.client sends a request's head in one call, before its body
        body, self.head_sent = self.head_sent, True
        try:
            if isinstance(data, (bytes, bytearray, memoryview)):
                view = memoryview(data).cast("B")
                for at in range(0, len(view), SEND_PIECE):
                    self._send_piece(view[at:at + SEND_PIECE], body)
            else:  # a file or an iterable: http.client's own way, not counted
                self._paced(lambda: super(_Paced, self).send(data))
        except (ConnectionError, ssl.SSLEOFError) as e:  # the server stopped taking it
            self.cut = e
        if body and self.body_deadline is not None:
            self.body_deadline.moved = time.monotonic()

    def _send_piece(self, piece: memoryview, body: bool) -> None:
        """``piece`` handed to the kernel within one timeout (as one ``sendall``), its
        bytes counted in ``sent`` as they go when they are the ``body``'s."""
        timeout = self.sock.gettimeout()
        until = None if timeout is None else time.monotonic() + timeout
        try:
            while piece:
                if until is not None:
                    self.sock.settimeout(max(until - time.monotonic(), 1e-3))
                n = self._paced(functools.partial(self.sock.send, piece))
                if body:
                    self.sent.bytes += n
                piece = piece[n:]
        finally:
            self.sock.settimeout(timeout)

    def _paced(self, send):
        """``send()`` within the body's deadline, when it has one."""
        return send() if self.body_deadline is None else \
            _within(self.sock, self.body_deadline, send)

    def getresponse(self):
        if self.sock is not None and self.cut is None:
            self.early = _drain(self.sock, self.timeout, within=self.body_deadline)
        try:
            return super().getresponse()
        except (OSError, http.client.HTTPException):
            if self.cut is not None:
                raise self.cut from None
            raise


class _Sent:
    """The body bytes of one request the kernel took: fewer than the body's when its
    connection failed part-way."""

    def __init__(self) -> None:
        self.bytes = 0


class _PacedHTTP(_Paced, http.client.HTTPConnection):
    pass


class _PacedHTTPS(_Paced, HTTPSWithin):
    pass


class _PacedHTTPHandler(urllib.request.HTTPHandler):
    def do_open(self, http_class, req, **kw):
        return super().do_open(_paced(_PacedHTTP, req), req, **kw)


class _PacedHTTPSHandler(urllib.request.HTTPSHandler):
    def do_open(self, http_class, req, **kw):
        return super().do_open(_paced(_PacedHTTPS, req), req, **kw)


def _paced(connection: type, req: urllib.request.Request):
    """``connection`` for ``req``: its body sent and its answer read within ``req``'s
    deadlines (:func:`timed`)."""
    return functools.partial(connection,
                             answer_deadline=getattr(req, "answer_deadline", None),
                             body_deadline=getattr(req, "body_deadline", None),
                             sent=getattr(req, "sent", None))


class NoRedirects(urllib.request.HTTPRedirectHandler):
    """A redirect is an answer like another (an ``HTTPError`` with its 3xx), never
    followed: urllib would send it every header of the request, the bearer token too, to
    whatever host and scheme its ``Location`` names (a captive portal, ``http://`` from
    ``https://``). The collector's API never redirects."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


def redirect_text(location: str | None) -> str:
    """What a redirect to ``location`` is taken as: not followed, and why."""
    return (f"a redirect to {one_line(location or '(no Location)')[:200]}, not followed (the "
            "collector's API never redirects, and the token would go along): set the "
            "collector's URL to the address that answers")


def _unacknowledged(sock: socket.socket) -> int | None:
    """The bytes sent on ``sock`` that its peer has not acknowledged yet (Linux's
    ``SIOCOUTQ``); None where that cannot be asked."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import fcntl

        return struct.unpack("i", fcntl.ioctl(sock.fileno(), _SIOCOUTQ, b"\0" * 4))[0]
    except (OSError, ValueError):
        return None


def _drain(sock: socket.socket, timeout: float | None, restart: _Deadline | None = None,
           within: _BodyDeadline | None = None) -> bytes:
    """Wait while the bytes handed to the kernel cross the link: the last ones of a body
    may be megabytes (the send buffer grows to 4 MiB), minutes on a thin link. Returns
    when all are acknowledged, when an answer (or the end) can be read, or where the queue
    cannot be asked; ``TimeoutError`` when none was acknowledged for ``timeout`` seconds
    (a stalled link), :class:`BodyTimeout` past ``within``, the body's deadline. Returns
    the answer's first bytes when it read them (:func:`_answer_start`), else ``b""``.

    The answer's wait, ``restart``, counts neither the body's sending nor its last bytes'
    crossing: when the drain returns it starts again if the body moved since it last
    started (sent, or acknowledged in part: ``within.moved``), however long that took,
    whether an answer came while bytes still crossed or before any did. Not otherwise:
    not at an interim answer once the body is across (a server that trickled them held
    the agent :data:`MAX_INTERIM` + 1 times as long)."""
    early = _crossing(sock, timeout, within)
    if restart is not None and within is not None and within.moved > restart.started:
        restart.restart()
    return early


def _crossing(sock: socket.socket, timeout: float | None,
              within: _BodyDeadline | None) -> bytes:
    """:func:`_drain`'s wait, noting when the link took bytes in ``within.moved``."""
    left = _unacknowledged(sock)
    if not left or timeout is None:
        return b""
    moved = time.monotonic()
    while left:
        if within is not None:
            within.left()
        if readable(sock, DRAIN_POLL):
            early = _answer_start(sock)
            if early is not None:
                return early
        now_left = _unacknowledged(sock)
        if now_left is None:
            return b""
        if now_left < left:
            moved = time.monotonic()
            if within is not None:
                within.moved = moved
        elif time.monotonic() - moved >= timeout:
            raise TimeoutError(f"timed out: the link took no byte of the body for "
                               f"{timeout:g} s ({left} bytes still to go)")
        left = now_left
    return b""


def _answer_start(sock: socket.socket) -> bytes | None:
    """What made ``sock`` readable: None when it was TLS's own records (the session
    tickets a TLS 1.3 server sends after the handshake, which ended every drain at once),
    else the bytes that had to be read to tell (``b""`` for plain TCP: none read)."""
    if not isinstance(sock, ssl.SSLSocket):
        return b""
    timeout = sock.gettimeout()
    sock.settimeout(0)
    try:
        return sock.recv(1)
    except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
        return None
    except OSError:  # reset: reading the answer says so
        return b""
    finally:
        sock.settimeout(timeout)


def _status(answer: tuple[int, bytes, float | None] | Outcome) -> int | None:
    """The HTTP status of :meth:`Uplink._post`'s answer; None when none came."""
    return answer.status if isinstance(answer, Outcome) else answer[0]


def _whole(answer: tuple[int, bytes, float | None] | Outcome, sent: int, size: int
           ) -> tuple[int, bytes, float | None] | Outcome:
    """``answer``, unless it is a success for a body of ``size`` bytes of which only
    ``sent`` went (the connection failed part-way, or a final answer came before the
    body): that is a retry, as if no answer had come. The collector stores a batch only
    once it has it whole; a resend of one it stored is a duplicate (by digest)."""
    status = _status(answer)
    if status is None or not 200 <= status < 300 or sent >= size:
        return answer
    return Outcome("retry", status, f"a success for a body cut short ({sent} of {size} "
                   "bytes sent): not taken as an acknowledgement")


def _first_answer(sock: socket.socket, wait: float, deadline: _Deadline | None = None,
                  data: bytes = b"") -> tuple[str, bytes]:
    """Wait up to ``wait`` seconds for the collector's first answer to headers sent with
    ``Expect: 100-continue``: ``("continue", bytes after it)`` after its ``100 Continue``;
    ``("final", bytes read)`` when the first answer is final (a refusal: the body is not
    sent; the bytes are the answer's start); ``("silent", b"")`` when none came. Other
    interim answers (``103 Early Hints``) are skipped, as RFC 9110 15.2 asks of a client.
    The rest of an answer's head is read within the socket's timeout; past ``deadline``:
    :class:`AnswerTimeout`. ``data``: the answer's first bytes when some were read
    already."""
    until, timeout = time.monotonic() + wait, sock.gettimeout()
    skipped = 0
    while True:
        if not data:
            sock.settimeout(max(until - time.monotonic(), 1e-3))
            try:
                data = _recv(sock, deadline)
            except (AnswerTimeout, UploadTimeout):
                raise
            except TimeoutError:
                return "silent", b""
            finally:
                sock.settimeout(timeout)
            if not data:
                return "final", b""  # closed, which reading the answer reports
        data = _read_until(sock, data, b"\r\n", deadline)
        if data[9:12] == b"100":
            return "continue", _after_head(sock, data, deadline)
        if not _interim(data):
            return "final", data
        skipped = _skip_interim(skipped)
        data = _after_head(sock, data, deadline)


def _final_head(sock: socket.socket, head: bytes, deadline: _Deadline | None = None,
                body: _BodyDeadline | None = None) -> bytes:
    """``head`` (an answer's first bytes, perhaps none) with the interim answers before the
    final one taken off. Each wait for an answer starts once the body's bytes got across
    (:func:`_drain`, within ``body``: a late ``100 Continue`` may come while the body is
    still on its way), and ``deadline`` runs by :func:`_drain`'s rule."""
    skipped = 0
    while True:
        if not head:
            head = _drain(sock, sock.gettimeout(), deadline, body) or _recv(sock, deadline)
        head = _read_until(sock, head, b"\r\n", deadline)
        if not (_interim(head) or head[9:12] == b"100"):
            return head
        skipped = _skip_interim(skipped)
        head = _after_head(sock, head, deadline)


def _ignores_expect(head: bytes) -> bool:
    """Whether a final answer that came after the body went, without ``100 Continue``,
    shows a server that ignores the expectation: an HTTP/1.0 one's, or a success (it read
    the body without saying 100). A refusal (``503``, ``429``, ``401``) may be a busy
    collector's that answered the headers late."""
    return head.startswith(b"HTTP/1.0 ") or head[9:10] == b"2"


def _skip_interim(skipped: int) -> int:
    """One more interim answer skipped; ``http.client.HTTPException`` past
    :data:`MAX_INTERIM` (a server that sends them for ever)."""
    if skipped >= MAX_INTERIM:
        raise http.client.HTTPException(f"more than {MAX_INTERIM} interim (1xx) answers "
                                        "before the final one: not the collector")
    return skipped + 1


def _interim(head: bytes) -> bool:
    """Whether the answer ``head`` starts with is interim, other than ``100``
    (:func:`_interim_status`)."""
    status = head[9:12]
    return status.isdigit() and _interim_status(int(status))


def _interim_status(status: int) -> bool:
    """An interim status other than ``100`` (``101`` switches protocols: final here)."""
    return 100 < status < 200 and status != 101


def _after_head(sock: socket.socket, data: bytes, deadline: _Deadline | None = None) -> bytes:
    """The bytes after the head (status line and headers) that ``data`` starts with."""
    return _read_until(sock, data, b"\r\n\r\n", deadline).partition(b"\r\n\r\n")[2]


def _read_until(sock: socket.socket, data: bytes, end: bytes,
                deadline: _Deadline | None = None) -> bytes:
    """``data`` and what follows it on ``sock`` up to ``end`` at least (or to the end);
    ``http.client.HTTPException`` when :data:`MAX_HEAD` bytes came without it,
    :class:`AnswerTimeout` past ``deadline``."""
    while data and end not in data:
        if len(data) >= MAX_HEAD:
            raise http.client.HTTPException(
                f"an answer head of more than {MAX_HEAD} bytes without its end "
                f"({end!r}): not HTTP, or not the collector")
        more = _recv(sock, deadline)
        if not more:
            break
        data += more
    return data


class _AnswerSource:
    """What an :class:`_Answer` reads, as :class:`http.client.HTTPResponse` reads a
    socket: ``head``, the answer's first bytes when some were read from ``sock`` already,
    then the rest of ``sock``, before ``deadline``'s end."""

    def __init__(self, sock: socket.socket, head: bytes, deadline: _Deadline | None = None):
        self.sock, self.head, self.deadline = sock, head, deadline
        self.bytes: _AnswerBytes | None = None

    def makefile(self, mode: str) -> io.BufferedReader:
        self.bytes = _AnswerBytes(self.sock, self.head, self.deadline)
        return io.BufferedReader(self.bytes)


class _AnswerBytes(io.RawIOBase):
    """An answer's bytes: ``head``, then the socket's, each read within the socket's
    timeout and ``deadline``'s (when given); once ``in_body``, each byte earns it time."""

    def __init__(self, sock: socket.socket, head: bytes, deadline: _Deadline | None):
        self.sock, self.head, self.deadline = sock, head, deadline
        # holds the socket open while the answer is read: urllib closes its connection
        # as soon as the answer's head is in
        self.io = sock.makefile("rb", buffering=0)
        self.in_body = False

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:
        if self.head:
            n = min(len(buf), len(self.head))
            buf[:n], self.head = self.head[:n], self.head[n:]
            return n
        if self.deadline is None:
            return self.io.readinto(buf)
        n = _within(self.sock, self.deadline, lambda: self.io.readinto(buf))
        if n and self.in_body:
            self.deadline.earn(n)
        return n

    def close(self) -> None:
        self.io.close()
        super().close()


class _Answer(http.client.HTTPResponse):
    """An answer read within ``deadline`` (see :class:`_Deadline`; None: each wait bounded,
    not their sum), ``head`` its first bytes when read already."""

    def __init__(self, sock: socket.socket, head: bytes = b"",
                 deadline: _Deadline | None = None, **kw):
        self._source = _AnswerSource(sock, head, deadline)
        super().__init__(self._source, **kw)

    def begin(self) -> None:
        super().begin()
        self._source.bytes.in_body = True

    def _read_status(self) -> tuple[str, int, str]:
        """The final answer's status line. Interim answers before it (``100 Continue``,
        ``103 Early Hints``) are skipped with their headers, as RFC 9110 15.2 asks of a
        client (http.client skips ``100`` alone, and took a ``103`` for the answer), at
        most :data:`MAX_INTERIM` of them."""
        skipped = 0
        while True:
            version, status, reason = super()._read_status()
            if not (_interim_status(status) or status == 100):
                return version, status, reason
            skipped = _skip_interim(skipped)
            http.client.parse_headers(self.fp)


def _proxied(target: urllib.parse.SplitResult) -> bool:
    """Whether urllib would reach ``target`` through a proxy from the environment."""
    proxy = urllib.request.getproxies().get(target.scheme)
    return bool(proxy) and not urllib.request.proxy_bypass(target.hostname or "")


def tls_context(url: str, ca_file: str | None = None) -> ssl.SSLContext | None:
    """How an https ``url`` is verified: by the system's trusted CAs, or with ``ca_file``
    (a private CA's certificates, PEM) by those alone; None for http."""
    if not url.lower().startswith("https://"):
        return None
    return ssl.create_default_context(cafile=ca_file)


def download_sketch(uplink: Uplink, pattern_id: str, max_bytes: int,
                    etag: str | None = None) -> bytes | None:
    """The sketch bytes for ``pattern_id``, or None when it is still ``etag`` (see
    :meth:`Uplink.get_sketch`)."""
    data = uplink.get_sketch(pattern_id, max_bytes, etag)
    if data is None:
        return None
    log.info("downloaded sketch %s: %d bytes, sha256 %s", pattern_id, len(data),
             sketch_etag(data)[:16])
    return data


def http_date(value: str | None) -> float | None:
    """The Unix time of an HTTP date (``Date``: ``Sun, 06 Nov 1994 08:49:37 GMT``); None
    when absent or unreadable."""
    if not value:
        return None
    try:
        return email.utils.parsedate_to_datetime(value.strip()).timestamp()
    except (TypeError, ValueError, IndexError, OverflowError):
        return None


def retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delay-seconds or an HTTP date);
    None when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    if value.isascii() and value.isdigit():  # '²' is a digit to str.isdigit, not to float()
        return float(value)
    when = http_date(value)
    if when is None:
        return None
    return max(when - (time.time() if now is None else now), 0.0)


def _no_answer(e: BaseException) -> Outcome:
    """A retry for a request that got no answer (or one cut short, or not HTTP): ``e``,
    or the ``reason`` urllib wrapped in it, says why."""
    reason = getattr(e, "reason", e)
    return Outcome("retry", None, f"connection: {str(reason) or type(reason).__name__}")


def _classify(status: int, detail: str, wait: float | None = None) -> Outcome:
    """What to do about an answer other than 200."""
    if status >= 500 or status in _RETRY_4XX:
        return Outcome("retry", status, detail, wait)
    if status in _AUTH_4XX:
        return Outcome("auth", status, detail)
    if 400 <= status < 500:
        return Outcome("reject", status, detail)
    return Outcome("retry", status, detail)


def error_body(e: urllib.error.HTTPError) -> bytes:
    """The body of an HTTP error answer (64 KiB at most; empty when it cannot be read)."""
    try:
        return e.read(1 << 16)
    except (OSError, http.client.HTTPException):  # cut short (IncompleteRead)
        return b""


def answer_json(text: bytes):
    """The JSON of an answer's body; ValueError when it is not JSON or is over a limit of
    :func:`acep._bounds.json_problem` (a RecursionError is no ValueError)."""
    if problem := json_problem(text):
        raise ValueError(problem)
    return json.loads(text)


def error_text(text: bytes) -> str:
    """The collector's ``error`` message in an answer body, else its first bytes."""
    try:
        doc = answer_json(text)
        if isinstance(doc, dict) and "error" in doc:
            return str(doc["error"])[:500]
    except ValueError:
        pass
    return text[:200].decode("utf-8", "replace")


class Uploader(threading.Thread):
    """Sends due batches until stopped.

    Between attempts it sleeps until the next batch is due (or the hold below ends), at
    most ``idle_seconds``; ``wake`` ends the sleep at once (the agent sets it when it puts a
    batch or a heartbeat, and to stop it).
    No batch (and no heartbeat) is sent before ``hold_until`` (``time.monotonic()``
    seconds: a clock set back must not stretch a hold by as much): set after a 401/403
    (``auth_streak`` counts them in a row), by an answer's ``Retry-After`` and after an
    unexpected error.
    ``last_error`` is the last failed attempt's error, None once a batch is acknowledged.
    ``failing_since`` is when the uploads began to fail (no answer, an answer to retry
    after, a refused token, an unexpected error), None once a batch is acknowledged or
    refused for good, or a heartbeat is taken while no batch waits (the metrics'
    ``upload_failing_since``)."""

    def __init__(self, outbox: Outbox, uplink: Uplink, idle_seconds: float = IDLE_SECONDS,
                 max_body: int = 16 << 20):
        super().__init__(name="acep-uploader", daemon=True)
        self.max_body = max_body  # the collector's body limit, unless its 413 says it
        self.outbox, self.uplink, self.idle = outbox, uplink, float(idle_seconds)
        self.stop_event = threading.Event()
        self.wake = threading.Event()
        self.counts = {"attempts": 0, "acked": 0, "retried": 0, "rejected": 0, "split": 0,
                       "unauthorized": 0, "bytes_sent": 0, "heartbeats": 0,
                       "heartbeats_failed": 0}
        self.last_error: str | None = None
        self.auth_streak = 0
        self.hold_until = 0.0
        self.fail_streak = 0  # attempts retried (5xx, 408, 429, no answer) since the last ack
        self.failing_since: float | None = None
        self.crashes = Crashes(log, "uploads", "batches are kept and uploads are retried with "
                               f"backoff (up to {outbox.backoff.max_delay:g}s apart)")
        self._beat: dict | None = None
        self._beat_streak = 0  # failed heartbeats in a row
        self.beats_off = False  # the collector has no heartbeat endpoint (an older one)

    def run(self) -> None:
        while not self.stop_event.is_set():
            try:
                self._round()
            except Exception as e:  # a bug must not end uploads: the batches stay, retried
                self._crashed(e)

    def _round(self) -> None:
        beat = self.send_beat()
        if not self.send_one() and not beat:
            self.wake.wait(self._sleep_for())
            self.wake.clear()

    def _crashed(self, e: Exception) -> None:
        """An unexpected error in an upload: hold every upload with the outbox's backoff
        (its batches are kept) and say it, with its traceback, once per streak."""
        wait = self.outbox.backoff.delay("crash", self.crashes.streak + 1)
        self.last_error = self.crashes.failed(e, wait)
        self._failing()
        self.hold_until = max(self.hold_until, time.monotonic() + wait)
        self.stop_event.wait(wait)

    def beat(self, status: dict) -> None:
        """Have the thread send a heartbeat with ``status`` (the agent's metrics) before its
        next batch; a newer status replaces one not sent yet."""
        if not self.beats_off:
            self._beat = status
            self.wake.set()

    def send_beat(self, timeout: float | None = None) -> bool:
        """Send the heartbeat waiting, if any; False when none was sent. While uploads are
        on hold (a refused token, an answer's ``Retry-After``) it waits for the hold's end,
        unless a newer one replaces it: dropped, a collector that answers every batch with
        ``503`` and ``Retry-After`` (its disk missing) heard from no device meanwhile."""
        status, self._beat = self._beat, None
        if status is None:
            return False
        if time.monotonic() < self.hold_until:
            if self._beat is None:  # not replaced by a newer one meanwhile
                self._beat = status
            return False
        out = self.uplink.post_heartbeat(status, timeout)
        self.crashes.ended()  # an answer came: no bug on the way
        if out.action == "ack":
            if self._beat_streak:
                log.info("heartbeats go through again")
            self.counts["heartbeats"] += 1
            self._beat_streak = 0
            self._authorized()
            if self.outbox.next_due_at() is None:  # no batch waits: nothing fails now
                self.failing_since = None
        elif out.action == "auth":  # the first request of a run: a wrong token shows at once
            self._unauthorized(out)
        elif out.status == 404:
            self.beats_off = True
            log.info("the collector has no heartbeat endpoint (HTTP 404: an older version); "
                     "heartbeats are off until the agent restarts")
        else:
            self.counts["heartbeats_failed"] += 1
            self._beat_streak += 1
            self._failing()
            say = log.warning if self._beat_streak == 1 else log.debug
            say("heartbeat failed (%s); the next one goes at the next interval", out.why)
        return True

    def next_attempt_at(self) -> float | None:
        """When the next batch may be sent (Unix seconds); None when nothing is pending."""
        due = self.outbox.next_due_at()
        held = self.hold_until - time.monotonic()
        return due if due is None or held <= 0 else max(due, time.time() + held)

    def _sleep_for(self) -> float:
        at = self.next_attempt_at()
        if self._beat is not None:  # a heartbeat held back goes when the hold ends
            hold_ends = time.time() + max(self.hold_until - time.monotonic(), 0.0)
            at = hold_ends if at is None else min(at, hold_ends)
        return self.idle if at is None else min(max(at - time.time(), 0.01), self.idle)

    def send_one(self) -> bool:
        """Send the oldest due batch; False when none was due (or uploads are on hold)."""
        if time.monotonic() < self.hold_until:
            return False
        due = self.outbox.next_due()
        if due is None:
            return False
        self.counts["attempts"] += 1
        out = self.uplink.post_batch(due.body)
        self.crashes.ended()  # an answer came: no bug on the way
        if out.action == "ack":
            self._acked(due)
        elif out.action == "auth":
            self._unauthorized(out)
        elif out.status == 413 and out.action == "reject":
            self._too_large(due, out)
        elif out.action == "reject":
            self._rejected(due, out)
        else:
            self._retried(due, out)
        return True

    def _too_large(self, due: Due, out: Outcome) -> None:
        """A batch over the collector's body limit (413) replaced by its two halves, due at
        once (their ids derived from its own: :func:`edge.wire.split_body`). One that holds
        one match (or a summary) is refused for good, its reason saying its size and the
        limit."""
        parts = split_body(due.body)
        if parts is None:
            limit = self._limit(out.detail)
            self._rejected(due, Outcome(
                out.action, out.status, f"{out.detail}; its body of {len(due.body)} bytes "
                f"holds one match (or a summary) and is over the collector's limit of "
                f"{limit} bytes: it cannot be sent"))
            return
        self._authorized()
        self.outbox.split(due.batch_id, [(bid, body, f"{n} matches of batch {due.batch_id}, "
                                          "split: over the collector's body limit")
                                         for bid, body, n in parts])
        self.counts["split"] += 1
        self.last_error = out.why
        log.warning("collector refused batch %s of %d bytes as too large (HTTP 413: %s); "
                    "split in two: %s", due.batch_id, len(due.body), out.detail,
                    ", ".join(f"{bid} ({n} matches, {len(body)} bytes)"
                              for bid, body, n in parts))

    def _limit(self, detail: str) -> int:
        """The body limit a 413's detail names, else ``max_body``."""
        found = re.search(r"(?:limit of|more than) (\d+) bytes", detail)
        return int(found.group(1)) if found else self.max_body

    def _acked(self, due: Due) -> None:
        if self.fail_streak:
            log.info("uploads go through again (after %d failed attempts)", self.fail_streak)
            self.fail_streak = 0
        self.outbox.ack(due.batch_id)
        self.counts["acked"] += 1
        self.counts["bytes_sent"] += len(due.body)
        self.last_error = self.failing_since = None
        self._authorized()

    def _rejected(self, due: Due, out: Outcome) -> None:
        """Refused for good: a dead letter, said once as an error."""
        self._authorized()  # the collector checks the token before anything else
        self.outbox.reject(due.batch_id, out.why)
        self.counts["rejected"] += 1
        self.last_error, self.failing_since = out.why, None
        log.error("collector refused batch %s (HTTP %s): %s; kept as a dead letter in %s "
                  "(acep outbox %s list)", due.batch_id, out.status, out.detail,
                  self.outbox.path, self.outbox.path)

    def _retried(self, due: Due, out: Outcome) -> None:
        """Failed, to be retried: after the backoff's delay or the collector's
        ``Retry-After`` (which also holds every upload), said once per streak."""
        when = self.outbox.fail(due.batch_id, out.why, delay=out.retry_after)
        self.counts["retried"] += 1
        self.last_error = out.why
        self.fail_streak += 1
        self._failing()
        wait = 0.0 if when is None else when - time.time()
        if out.retry_after is not None:
            wait = max(wait, self._hold(out))
        # a collector that is down fails every pending batch: say so once, not per batch
        say = log.warning if self.fail_streak == 1 else log.debug
        say("upload of %s failed (%s); retry in %.1fs (batches are kept and retried "
            "with backoff; further failures are logged at debug level until one is sent)",
            due.batch_id, out.why, wait)

    def _hold(self, out: Outcome) -> float:
        """Hold every upload for the answer's ``Retry-After`` (a collector with a full disk
        would refuse each batch in turn), at most the backoff's maximum; seconds held."""
        wait = min(out.retry_after, self.outbox.backoff.max_delay)
        self.hold_until = max(self.hold_until, time.monotonic() + wait)
        return self.hold_until - time.monotonic()

    def _unauthorized(self, out: Outcome) -> None:
        """A refused token (401/403) fails every request alike: hold them all (batches are
        kept), back off, and say it once."""
        self.auth_streak += 1
        self.counts["unauthorized"] += 1
        self.last_error = out.why
        self._failing()
        wait = self.outbox.backoff.delay("auth", self.auth_streak)
        self.hold_until = time.monotonic() + wait
        if self.auth_streak == 1:
            log.error("collector refused this device's credentials (HTTP %s: %s): check "
                      "device.token and device.id; %d batches are kept and uploads are "
                      "retried with backoff (up to %.0fs apart)", out.status, out.detail,
                      self.outbox.metrics()["pending"], self.outbox.backoff.max_delay)
        else:
            log.debug("still refused (HTTP %s), attempt %d; next in %.1fs", out.status,
                      self.auth_streak, wait)

    def _failing(self) -> None:
        if self.failing_since is None:
            self.failing_since = time.time()

    def _authorized(self) -> None:
        if self.auth_streak:
            log.info("the collector accepts this device's token again (after %d refused "
                     "attempts); uploading", self.auth_streak)
            self.auth_streak, self.hold_until = 0, 0.0

    def stop(self, timeout: float | None = None) -> None:
        self.stop_event.set()
        self.wake.set()
        self.join(timeout)
