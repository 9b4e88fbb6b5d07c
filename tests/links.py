"""A thin link for tests: a TCP relay on loopback that passes a client's bytes on at a
set rate, and the answers' a few at a time if asked (tests/test_edge_collector.py,
tests/test_edge_uplink.py); and an HTTPS proxy that tunnels (CONNECT), its answer a few
bytes at a time if asked (tests/test_edge_tls.py)."""

from __future__ import annotations

import socket
import threading
import time
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
