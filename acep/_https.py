"""HTTPS connections made within one timeout, for the agent's requests (``edge.agent.transport``)
and the trainer's publishing (``trainer.publish``).

Python gives the TCP connection its timeout, each wait of a proxy's tunnel (``CONNECT``,
``https_proxy``) the timeout again and the TLS handshake the timeout once more, so a
server or middlebox slow at each (a full accept queue, a trickled proxy answer or
handshake) held a request several times as long as its timeout.
"""

from __future__ import annotations

import http.client
import io
import socket
import time
import urllib.request
from collections.abc import Callable

__all__ = ["HTTPSWithin", "HTTPSWithinHandler"]


class HTTPSWithin(http.client.HTTPSConnection):
    """HTTPS whose connection is made within its timeout as a whole: the TCP connection,
    a proxy's tunnel (its ``CONNECT`` sent and answered) and the TLS handshake, each given
    what the ones before left. ``tunneling`` is true while the tunnel is made: a subclass
    that counts or times a request's bytes leaves the tunnel's to this class."""

    tunneling = False
    _until: float | None = None  # when the connection must be made, while it is

    def connect(self) -> None:
        if not isinstance(self.timeout, (int, float)):  # None, or the sockets' default
            return super().connect()
        self._until = time.monotonic() + self.timeout
        try:
            http.client.HTTPConnection.connect(self)  # TCP, and the tunnel (_tunnel)
            self.sock.settimeout(self._left())
            self.sock = self._context.wrap_socket(
                self.sock, server_hostname=self._tunnel_host or self.host)
        except TimeoutError:
            if self.sock is None:  # TCP's own timeout: said as Python says it
                raise
            raise self._late() from None
        finally:
            self._until = None
        self.sock.settimeout(self.timeout)

    def _tunnel(self) -> None:
        self.tunneling = True
        try:
            super()._tunnel()
        finally:
            self.tunneling = False

    def send(self, data) -> None:
        if self._until is None or not self.tunneling:
            return super().send(data)
        self.sock.settimeout(self._left())
        self.sock.sendall(data)

    def response_class(self, sock: socket.socket, *args, **kw) -> http.client.HTTPResponse:
        """The answer to a request; while tunnelling, the proxy's, read within what is
        left of the connection's time."""
        if self._until is not None and self.tunneling:
            sock = _Within(sock, self._left)
        return http.client.HTTPResponse(sock, *args, **kw)

    def _left(self) -> float:
        left = self._until - time.monotonic()
        if left <= 0:
            raise self._late()
        return left

    def _late(self) -> TimeoutError:
        parts = "connecting, the proxy's tunnel and the handshake" if self._tunnel_host \
            else "connecting and the handshake"
        return TimeoutError(f"timed out: no TLS connection within {self.timeout:g} s "
                            f"({parts} together)")


class HTTPSWithinHandler(urllib.request.HTTPSHandler):
    """urllib's https by :class:`HTTPSWithin`."""

    def do_open(self, http_class, req, **kw):
        return super().do_open(HTTPSWithin, req, **kw)


class _Within:
    """A socket as :class:`http.client.HTTPResponse` reads it, each read given what
    ``left()`` says is left (its error when nothing is)."""

    def __init__(self, sock: socket.socket, left: Callable[[], float]):
        self.sock, self.left = sock, left

    def makefile(self, mode: str) -> io.BufferedReader:
        return io.BufferedReader(_WithinReader(self.sock, self.left))


class _WithinReader(io.RawIOBase):
    def __init__(self, sock: socket.socket, left: Callable[[], float]):
        self.sock, self.left = sock, left

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:
        self.sock.settimeout(self.left())
        return self.sock.recv_into(buf)
