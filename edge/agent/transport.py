"""The agent's paced HTTP connections: bodies sent in pieces, every wait bounded.

``http.client`` sends a body with one ``sendall`` and waits for an answer as long as its
socket's timeout: :class:`_Paced` connections send each :data:`SEND_PIECE` bytes within
``collector.timeout``, wait until the collector acknowledged the body (:func:`_drain`),
skip interim answers and hold the whole answer to its :mod:`~edge.agent.deadlines`
(``docs/WIRE.md``, Agent, Uploads). Only the standard library.
"""

from __future__ import annotations

import functools
import http.client
import io
import socket
import ssl
import struct
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

from acep.utils import HTTPSWithin, readable

from ..logs import one_line
from .deadlines import AnswerTimeout, BodyDeadline, Deadline, UploadTimeout

__all__ = ["timed", "answer_opener", "NoRedirects", "redirect_text", "MAX_HEAD", "SEND_PIECE"]

# a body leaves in pieces of this many bytes, each within collector.timeout: 8 KiB per 10 s
# is 6.6 kbit/s, below the collector's --body-min-rate (8 kbit/s), so it is the collector
# that says a link is too slow, in a 408 naming its rate
SEND_PIECE = 8 << 10
DRAIN_POLL = 0.05  # seconds between two looks at the bytes not yet acknowledged
_SIOCOUTQ = 0x5411  # Linux: the bytes of a TCP socket's send queue not yet acknowledged
# bytes of an answer's head the agent reads itself (an interim answer, the final one's status
# line; http.client's own line limit): a server that sends no line end costs no more
MAX_HEAD = 1 << 16
MAX_INTERIM = 16  # interim answers (103 Early Hints) skipped before the final one, at most


def timed(req: urllib.request.Request, seconds: float, name: str | None = None
          ) -> urllib.request.Request:
    """``req``, whose whole answer an :func:`answer_opener` reads within ``seconds`` of the
    request having got across (:class:`Deadline`; ``name``: the setting they come from),
    else :class:`AnswerTimeout`; and whose body, if any, gets across within ``seconds`` and
    1 s per KiB of it (:class:`BodyDeadline`), else :class:`BodyTimeout`."""
    req.answer_deadline = Deadline(seconds, name)
    req.body_deadline = None if req.data is None else \
        BodyDeadline(seconds, len(req.data), name)
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


def _within(sock: socket.socket, deadline: Deadline, io):
    """``io()``, a read or a send on ``sock``, within its timeout (one wait) and
    ``deadline``'s time (its :meth:`~Deadline.binding` one's error past it)."""
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


def _recv(sock: socket.socket, deadline: Deadline | None) -> bytes:
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

    def __init__(self, *args, answer_deadline: Deadline | None = None,
                 body_deadline: BodyDeadline | None = None, sent: _Sent | None = None,
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


def _drain(sock: socket.socket, timeout: float | None, restart: Deadline | None = None,
           within: BodyDeadline | None = None) -> bytes:
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
              within: BodyDeadline | None) -> bytes:
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


def _first_answer(sock: socket.socket, wait: float, deadline: Deadline | None = None,
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


def _final_head(sock: socket.socket, head: bytes, deadline: Deadline | None = None,
                body: BodyDeadline | None = None) -> bytes:
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


def _after_head(sock: socket.socket, data: bytes, deadline: Deadline | None = None) -> bytes:
    """The bytes after the head (status line and headers) that ``data`` starts with."""
    return _read_until(sock, data, b"\r\n\r\n", deadline).partition(b"\r\n\r\n")[2]


def _read_until(sock: socket.socket, data: bytes, end: bytes,
                deadline: Deadline | None = None) -> bytes:
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

    def __init__(self, sock: socket.socket, head: bytes, deadline: Deadline | None = None):
        self.sock, self.head, self.deadline = sock, head, deadline
        self.bytes: _AnswerBytes | None = None

    def makefile(self, mode: str) -> io.BufferedReader:
        self.bytes = _AnswerBytes(self.sock, self.head, self.deadline)
        return io.BufferedReader(self.bytes)


class _AnswerBytes(io.RawIOBase):
    """An answer's bytes: ``head``, then the socket's, each read within the socket's
    timeout and ``deadline``'s (when given); once ``in_body``, each byte earns it time."""

    def __init__(self, sock: socket.socket, head: bytes, deadline: Deadline | None):
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
    """An answer read within ``deadline`` (see :class:`Deadline`; None: each wait bounded,
    not their sum), ``head`` its first bytes when read already."""

    def __init__(self, sock: socket.socket, head: bytes = b"",
                 deadline: Deadline | None = None, **kw):
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
