"""A loopback collector whose answer trickles, and what an uplink says when it gives up
waiting."""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest

from edge.agent.uplink import Uplink


def given_up(uplink: Uplink, request_kind: str, batch: bytes, pattern: str) -> str:
    """What a request of ``request_kind`` (``batch`` of ``batch``, ``heartbeat``, ``sketch``
    check of ``pattern``) that got no answer says: a batch's or heartbeat's outcome is a
    retry without a status, a sketch check raises OSError."""
    if request_kind == "sketch":
        with pytest.raises(OSError) as failed:
            uplink.get_sketch(pattern, 1 << 20)
        return str(failed.value)
    out = (uplink.post_batch(batch) if request_kind == "batch" else
           uplink.post_heartbeat({"consumed": 1}))
    assert (out.action, out.status) == ("retry", None), out
    return out.detail


ANSWER_BODY = json.dumps({"status": "stored", "batch_id": "dev/1", "matches": 0,
                          "pad": "x" * 64}).encode()
ANSWER = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
          b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(ANSWER_BODY)) + ANSWER_BODY


# where the trickle starts: in the status line, in the headers, in the body
TRICKLED = {"status line": 5, "headers": ANSWER.index(b"Content-Length"),
            "body": ANSWER.index(b"\r\n\r\n") + 4 + 10}


def trickling(answer: bytes, at: int, every: float, rate: float | None = None,
               step: int = 1) -> socket.socket:
    """A listener that reads each request whole (saying ``100 Continue`` when asked) and
    answers it with ``answer``'s first ``at`` bytes at once, then the rest ``step`` bytes
    every ``every`` seconds (each wait shorter than the agent's timeout), or at ``rate``
    bytes/s."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve(conn: socket.socket) -> None:
        with conn:
            got = b""
            while b"\r\n\r\n" not in got:
                got += conn.recv(1 << 16)
            head, _, body = got.partition(b"\r\n\r\n")
            if b"100-continue" in head.lower():
                conn.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
            length = int(next((line.split(b":")[1] for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), b"0"))
            while len(body) < length:
                body += conn.recv(1 << 16)
            try:
                conn.sendall(answer[:at])
                n = step if rate is None else max(int(rate / 20), 1)
                for i in range(at, len(answer), n):
                    time.sleep(every if rate is None else n / rate)
                    conn.sendall(answer[i:i + n])
            except OSError:  # the agent gave up
                pass

    def accept() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()
    threading.Thread(target=accept, daemon=True).start()
    return listener
