"""Test peers on loopback: a thin link, a TCP relay that passes a client's bytes on at a
set rate, and the answers' a few at a time if asked (tests/edge/test_edge_collector.py,
tests/edge/test_edge_uplink.py); an HTTPS proxy that tunnels (CONNECT), its answer a few bytes
at a time if asked (tests/edge/test_edge_tls.py); and an HTTP server that ends with its test
(``Serving``: tests/edge/test_edge_uplink.py, tests/edge/test_edge_agent.py,
tests/edge/test_edge_agent_threads.py, tests/trainer/test_trainer_publish.py)."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable
from http.server import ThreadingHTTPServer
from socketserver import BaseRequestHandler
from typing import Self


class _Loopback:
    """A test server on loopback: its ``listener``, the sockets it opened (``socks``),
    and ``closed``; leaving ``with`` closes them all."""

    listener: socket.socket

    def __init__(self):
        self.closed = threading.Event()
        self.socks: list[socket.socket] = []

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.closed.set()
        for sock in [self.listener, *self.socks]:
            sock.close()


class ThinLink(_Loopback):
    """A TCP relay on loopback to ``port`` that passes the client's bytes on at ``rate``
    bytes/s, and none after ``stall_after`` of them, nor any answer (a link that died).
    Its receive buffer is the smallest (its window opens a little at a time, as a link's
    acknowledgements come), so the client's kernel queues what the link has not taken.

    ``trickle``, ``(n, seconds)``: the server's bytes are passed back ``n`` at a time,
    ``seconds`` apart. ``full_for``: the relay's accept queue is full for that many
    seconds (one connection waits in it), so a connection made meanwhile takes a second
    (Linux drops its SYN; the client sends it again a second later)."""

    def __init__(self, port: int, rate: float, stall_after: int | None = None, *,
                 trickle: tuple[int, float] | None = None, full_for: float = 0.0):
        super().__init__()
        self.target, self.rate, self.stall_after = port, rate, stall_after
        self.trickle = trickle
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(0 if full_for else 4)
        self.port = self.listener.getsockname()[1]
        self.waiting = socket.create_connection(("127.0.0.1", self.port)) if full_for \
            else None
        self.full_for = full_for
        self.stalled = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        if self.waiting is not None:
            time.sleep(self.full_for)
            self.waiting.close()
            try:
                self.listener.accept()[0].close()
            except OSError:
                return
        while not self.closed.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target))
            self.socks += [client, upstream]
            threading.Thread(target=self._up, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._down, args=(upstream, client), daemon=True).start()

    def _up(self, client: socket.socket, upstream: socket.socket) -> None:
        start, moved = time.monotonic(), 0
        try:
            while moved != self.stall_after and not self.closed.is_set():
                room = max(int(self.rate / 20), 1)
                if self.stall_after is not None:
                    room = min(room, self.stall_after - moved)
                data = client.recv(room)
                if not data:
                    upstream.shutdown(socket.SHUT_WR)
                    return
                # no credit for a time the client sent nothing: a link saves none up
                start = max(start, time.monotonic() - moved / self.rate)
                upstream.sendall(data)
                moved += len(data)
                time.sleep(max(start + moved / self.rate - time.monotonic(), 0.0))
            self.stalled.set()  # take nothing more
            self.closed.wait()
        except OSError:
            pass

    def _down(self, upstream: socket.socket, client: socket.socket) -> None:
        step, every = self.trickle or (65536, 0.0)
        try:
            while data := upstream.recv(step):
                time.sleep(every)
                if not self.stalled.is_set():
                    client.sendall(data)
            client.shutdown(socket.SHUT_WR)
        except OSError:
            pass


class ConnectProxy(_Loopback):
    """An HTTPS proxy on loopback (``https_proxy``): it reads a client's ``CONNECT
    host:port``, connects there, answers ``200`` and passes the bytes both ways as they
    come. ``trickle``, ``(n, seconds)``: its answer to the CONNECT goes ``n`` bytes at a
    time, ``seconds`` apart. ``asked`` lists the ``host:port`` of each CONNECT."""

    ANSWER = b"HTTP/1.1 200 Connection established\r\n\r\n"

    def __init__(self, trickle: tuple[int, float] | None = None):
        super().__init__()
        self.trickle, self.asked = trickle, []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.closed.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            self.socks.append(client)
            threading.Thread(target=self._tunnel, args=(client,), daemon=True).start()

    def _tunnel(self, client: socket.socket) -> None:
        try:
            head = b""
            while b"\r\n\r\n" not in head:
                head += client.recv(4096) or b"\r\n\r\n"
            target = head.split(b" ")[1].decode()
            self.asked.append(target)
            host, port = target.rsplit(":", 1)
            upstream = socket.create_connection((host, int(port)))
            self.socks.append(upstream)
            self._answer(client)
            threading.Thread(target=_relay, args=(upstream, client), daemon=True).start()
            _relay(client, upstream)
        except (OSError, IndexError, ValueError):
            client.close()

    def _answer(self, client: socket.socket) -> None:
        step, every = self.trickle or (len(self.ANSWER), 0.0)
        for at in range(0, len(self.ANSWER), step):
            time.sleep(every)
            client.sendall(self.ANSWER[at:at + step])


def _relay(source: socket.socket, sink: socket.socket) -> None:
    """``source``'s bytes to ``sink`` until its end, which ``sink`` is then told."""
    try:
        while data := source.recv(65536):
            sink.sendall(data)
        sink.shutdown(socket.SHUT_WR)
    except OSError:
        pass


class Serving(_Loopback, ThreadingHTTPServer):
    """An HTTP server on loopback at ``url`` while ``with`` lasts: ``handler`` answers each
    request in a thread of its own. A handler that waits (an answer late, or never) waits
    on ``self.server.closed``. Leaving stops the server, sets ``closed``, stops reading
    the connections still open (a handler blocked on a client that sends no more wakes;
    an answer on its way still goes) and waits up to ``LINGER`` seconds for the handlers
    it started, failing the test if one is still running, then closes its sockets: none
    outlives its test, to print ``Exception occurred during processing of request``
    while another test runs or the interpreter exits. A handler's error once its test
    has ended is not printed."""

    LINGER = 5.0

    def __init__(self, handler: Callable[..., BaseRequestHandler]):
        _Loopback.__init__(self)
        ThreadingHTTPServer.__init__(self, ("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.server_address[1]}"
        self.handlers: list[threading.Thread] = []
        # shutdown() waits for serve_forever to look: 0.5 s, by default
        self.serving = threading.Thread(target=self.serve_forever, args=(0.05,), daemon=True)
        self.serving.start()

    @property
    def listener(self) -> socket.socket:
        return self.socket  # replaced by a test that serves TLS

    def process_request(self, request: socket.socket, client_address) -> None:
        self.socks.append(request)
        handler = threading.Thread(target=self.process_request_thread,
                                   args=(request, client_address), daemon=True)
        self.handlers.append(handler)
        handler.start()

    def handle_error(self, request: socket.socket, client_address) -> None:
        if not self.closed.is_set():
            super().handle_error(request, client_address)

    def __exit__(self, *exc) -> None:
        self.closed.set()  # first: what a handler meets from here on is its test's end
        self.shutdown()
        for sock in self.socks:  # socket's own: an SSLSocket's would drop the TLS session
            with contextlib.suppress(OSError):
                socket.socket.shutdown(sock, socket.SHUT_RD)
        deadline = time.monotonic() + self.LINGER
        for thread in [self.serving, *self.handlers]:
            thread.join(max(deadline - time.monotonic(), 0.0))
        super().__exit__(*exc)
        running = sum(thread.is_alive() for thread in self.handlers)
        if running and exc[0] is None:
            raise AssertionError(f"{self.url}: {running} request handler(s) still running "
                                 f"{self.LINGER} s after the test")


def free_port() -> int:
    """A loopback port nothing listens on (it was free a moment ago)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
