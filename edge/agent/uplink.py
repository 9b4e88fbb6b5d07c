"""The agent's side of the collector's HTTP API: post a batch or heartbeat, fetch a sketch.

:class:`Uplink` sends one request over the paced connections of
:mod:`~edge.agent.transport` (``Expect: 100-continue``, gzip once the collector takes it)
and classifies the answer as an :class:`Outcome` (ack, retry, reject); it also reads the
collector's clock from its answers. The protocol, with its timeouts and retries, is
``docs/WIRE.md`` (The collector's HTTP API; Agent, Uploads).
"""

from __future__ import annotations

import email.utils
import functools
import gzip
import http.client
import json
import logging
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass

from acep.utils import json_problem

from ..logs import duration, one_line
from ..wire import sketch_etag
from .deadlines import ANSWER_MIN_RATE, BodyDeadline, Deadline, UploadDeadline, UploadTimeout
from .transport import (
    _Answer,
    _drain,
    _final_head,
    _first_answer,
    _ignores_expect,
    _Paced,
    _PacedHTTP,
    _PacedHTTPS,
    _proxied,
    _Sent,
    answer_opener,
    redirect_text,
    timed,
)

__all__ = ["Uplink", "Outcome", "download_sketch", "tls_context", "error_body",
           "error_text", "CLOCK_SLACK", "ANSWER_TIMES", "answer_json", "retry_after"]

log = logging.getLogger("edge.agent")
CONTINUE_WAIT = 1.0  # seconds a body waits for "100 Continue" before it goes anyway (as curl)
EXPECT_MIN_BYTES = 1024  # smaller bodies go at once (and as they are): little to save
GZIP_LEVEL = 1  # bench/herd: 0.27 of the bytes at a sixth of level 6's CPU (0.24)
# seconds this clock may differ from the collector's without a warning (the agent's log and
# acep agent --check); a streak of warnings ends within half of it (a Date is to the second)
CLOCK_SLACK = 60.0
# collector.answer_timeout's default, in collector.timeout's: the answer's waits together
ANSWER_TIMES = 3
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
    and with 1 s per KiB a request's body (``docs/WIRE.md``, Agent, Uploads); :meth:`upload_bound`
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
                 bound: UploadDeadline | None = None) -> urllib.request.Request:
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
        bound = UploadDeadline(self.upload_bound(len(body), timeout), len(body),
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
              timeout: float | None, bound: UploadDeadline
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
                 bound: UploadDeadline) -> tuple[int, bytes, float | None] | Outcome:
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
                      bound: UploadDeadline, sent: _Sent
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
                        bound: UploadDeadline, sent: _Sent
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
             timeout: float | None) -> Deadline:
        """Send the head of a POST of ``size`` bytes with ``Expect: 100-continue``; the
        answer's deadline, started then."""
        conn.putrequest("POST", (self.target.path or "") + path)
        for name, value in self._headers({**headers, "Content-Length": str(size),
                                          "Expect": "100-continue"}).items():
            conn.putheader(name, value)
        conn.endheaders()
        return Deadline(*self._answer_time(timeout))

    def _send_when_asked(self, conn: _Paced, body: bytes, deadline: Deadline
                         ) -> bytes | None:
        """Send ``body`` after the collector's ``100 Continue``, or after
        :data:`CONTINUE_WAIT` without an answer, not at all when its first answer is final
        (a refusal); the final answer's first bytes read so far (perhaps none), None when
        none came."""
        first, head = _first_answer(conn.sock, min(CONTINUE_WAIT, conn.timeout), deadline)
        if first != "final":
            conn.body_deadline = BodyDeadline(deadline.seconds, len(body), deadline.name)
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
