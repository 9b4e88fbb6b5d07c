"""The loopback test peers of tests/support/links.py end with their test: an HTTP server's request
handlers (``Serving``) do not outlive the ``with`` block that ran it, to print
``Exception occurred during processing of request`` while another test runs or after
pytest's summary, as a stdlib server's handler threads did."""

from __future__ import annotations

import http.client
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler

import pytest
from support.links import Serving
from support.wait import eventually


class _Late(BaseHTTPRequestHandler):
    """A GET is answered only when the test ends (a collector that never answers); a POST
    after its whole body, however long it takes to come."""

    def do_GET(self):  # noqa: N802 (http.server's naming)
        self.server.closed.wait(30)
        self._answer()

    def do_POST(self):  # noqa: N802
        self.rfile.read(int(self.headers["Content-Length"]))
        self._answer()

    def _answer(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args):
        pass


def test_a_server_s_handlers_end_with_the_test_and_say_nothing_after_it(capfd):
    """A handler waiting to answer a client that gave up, and one reading a body that a
    client still connected does not send: both end when the ``with`` block does, at once
    (not after the late answer's 30 s), and what they meet then is not printed."""
    before = set(threading.enumerate())
    with Serving(_Late) as server:
        gave_up = http.client.HTTPConnection("127.0.0.1", server.server_address[1],
                                             timeout=0.2)
        gave_up.request("GET", "/")
        with pytest.raises(TimeoutError):
            gave_up.getresponse()
        gave_up.close()
        stalled = socket.create_connection(("127.0.0.1", server.server_address[1]))
        stalled.sendall(b"POST / HTTP/1.1\r\nContent-Length: 100\r\n\r\nhalf")
        assert eventually(lambda: len(set(threading.enumerate()) - before) == 3, 5.0,
                      every=0.01)  # and serving
        leaving = time.monotonic()
    took = time.monotonic() - leaving
    stalled.close()
    assert set(threading.enumerate()) - before == set()
    assert took < 1.0, took
    assert capfd.readouterr().err == ""
