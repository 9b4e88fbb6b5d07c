"""Waiting on descriptors numbered 1024 or more: ``select.select`` refused them (a fleet
of uploaders in one process, bench/herd's 1,600 devices, crashed every upload whose body
was still crossing), ``acep._readable.readable`` does not."""

from __future__ import annotations

import os
import resource
import socket
import sys

import pytest

from acep._readable import readable
from acep.events import _live_lines
from edge.agent.transport import _drain

HIGH = 1100


@pytest.fixture
def high_descriptors():
    """Holds descriptors until the next one opened is numbered above ``HIGH``."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < HIGH + 64:
        pytest.skip(f"the descriptor limit ({hard}) is below {HIGH + 64}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, HIGH + 64), hard))
    held = []
    while not held or held[-1] < HIGH:
        held.append(os.open(os.devnull, os.O_RDONLY))
    yield
    for fd in held:
        os.close(fd)
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_readable_answers_for_a_descriptor_above_1024(high_descriptors):
    r, w = os.pipe()
    try:
        assert r > 1024
        assert not readable(r, 0.0)
        os.write(w, b"x")
        assert readable(r, 0.0)
        os.read(r, 1)
        os.close(w)
        w = None
        assert readable(r, 1.0)  # the end can be read too
    finally:
        os.close(r)
        if w is not None:
            os.close(w)


def test_live_stdin_lines_from_a_descriptor_above_1024(high_descriptors):
    r, w = os.pipe()
    os.write(w, b'{"type": "a"}\n{"type": "b"}\n{"type"')
    os.close(w)
    with os.fdopen(r, "rb") as f:
        assert f.fileno() > 1024
        assert list(_live_lines(f)) == [b'{"type": "a"}\n', b'{"type": "b"}\n', b'{"type"']


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="SIOCOUTQ is Linux's")
def test_drain_of_an_upload_on_a_descriptor_above_1024(high_descriptors):
    """A peer that reads nothing: the body's last bytes stay unacknowledged, and the
    wait for them ends in the uplink's own timeout, not in select's ValueError."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        client = socket.create_connection(server.getsockname())
        peer, _ = server.accept()
        try:
            assert client.fileno() > 1024
            client.setblocking(False)
            with pytest.raises(BlockingIOError):
                while True:
                    client.send(b"\0" * 65536)
            client.setblocking(True)
            with pytest.raises(TimeoutError, match="took no byte of the body"):
                _drain(client, 0.3)
        finally:
            client.close()
            peer.close()
