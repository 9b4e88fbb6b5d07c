"""``acep train --publish`` as an operator meets it: a collector that is down, a token it
refuses or that is not an admin's, an address where no collector answers, a sketch the
collector refuses (409). Each is one line; what can be checked before the job is (exit 2,
nothing trained), and a sketch refused after the job is kept where ``--sketch`` put it
(real collector and web servers on loopback, a real local Spark session)."""

from __future__ import annotations

import functools
import http.server
import json
import socket
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pyspark", reason="the trainer needs PySpark (pip install 'acep[spark]')")

from support.collector import CollectorProcess  # noqa: E402
from support.links import Serving  # noqa: E402

import acep  # noqa: E402
from acep import EventBatch  # noqa: E402
from acep.matcher import MatchBatch  # noqa: E402
from edge.wire import PatternRef, batch_from_matches, encode_batch  # noqa: E402
from history.sketch import Sketch  # noqa: E402
from trainer.cli import main as train_main  # noqa: E402
from trainer.publish import publish_sketch  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
KEY = b"publish-test-key"
DEPLOYED = PatternRef("abc", "a b c", 4.0, 1, (), None)  # what the device runs


@pytest.fixture(scope="module")
def collector(tmp_path_factory):
    """A collector on loopback with an admin and a device, which uploaded a batch of
    pattern 'abc' (so a sketch of another definition is refused)."""
    work = tmp_path_factory.mktemp("collector")
    (work / "fleet.key").write_bytes(KEY + b"\n")
    server = CollectorProcess(work, sketch_key=KEY)
    for role, name in (("--add-admin", "ops"), ("--add-device", "pi-1")):
        (work / f"{name}.token").write_text(server.add(name, role) + "\n")
    (work / "wrong.token").write_text("not-a-token-it-knows\n")
    url = server.start().url
    try:
        _upload(url, (work / "pi-1.token").read_text().strip())
        yield url, work
    finally:
        server.stop()


def _rows(n: int = 120) -> list[dict]:
    rng = np.random.default_rng(2)
    return [{"type": str(rng.choice(list("abc"))), "t": float(t), "v": float(rng.integers(5))}
            for t in np.cumsum(rng.integers(0, 2, n))]


def _upload(url: str, token: str) -> None:
    events = EventBatch.from_events(_rows())
    m = acep.Matcher(DEPLOYED.text, window=DEPLOYED.window, k=DEPLOYED.k)
    found = MatchBatch.concat([m.match_batch(events), m.flush()])
    body = encode_batch(batch_from_matches(found, events, device="pi-1", seq=0,
                                           pattern=DEPLOYED, created_at=time.time()))
    req = urllib.request.Request(url + "/v1/batches", data=body, method="POST", headers={
        "Authorization": f"Bearer {token}", "Content-Type": "application/msgpack"})
    with urllib.request.urlopen(req, timeout=30) as answer:
        assert json.loads(answer.read())["status"] == "stored"


@pytest.fixture()
def web(tmp_path):
    """A plain web server on loopback (not a collector): 404 pages for what it lacks."""
    (tmp_path / "site").mkdir()
    with Serving(functools.partial(_Quiet, directory=str(tmp_path / "site"))) as server:
        yield server.url


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _argv(tmp_path: Path, work: Path, url: str, token: str) -> list[str]:
    path = tmp_path / "events.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in _rows()))
    return [str(path), "-p", "a c", "-w", "4", "-o", str(tmp_path / "h.history"),
            "--sketch", str(tmp_path / "s.sketch"), "--key-file", str(work / "fleet.key"),
            "--publish", url, "--token-file", str(work / token), "--pattern-id", "abc",
            "--no-progress"]


@pytest.mark.parametrize("where, token, says", [
    ("down", "ops.token", "--publish: cannot reach the collector at {url}: [Errno 111] "
                          "Connection refused (checked before training)"),
    ("collector", "wrong.token", "--publish: the collector at {url} refuses the token: "
                                 "HTTP 401 unknown token (checked before training)"),
    ("collector", "pi-1.token", "--publish: the collector at {url} knows the token as "
                                "'pi-1', a device: publishing takes an admin's (acep serve "
                                "--add-admin NAME) (checked before training)"),
    ("web", "ops.token", "--publish: {url} is not an acep collector: GET /v1/whoami answered "
                         "HTTP 404 <!DOCTYPE HTML> <html lang=\"en\"> <head> <meta charset=\""),
])
def test_publishing_is_checked_before_the_job(collector, web, tmp_path, capsys, where, token,
                                              says):
    """Before, each of these was found after the whole job (an operator's night of Spark):
    and a web server's page was printed whole, over many lines."""
    url = {"down": f"http://127.0.0.1:{_closed_port()}", "collector": collector[0],
           "web": web}[where]
    assert train_main(_argv(tmp_path, collector[1], url, token)) == 2
    err = capsys.readouterr().err
    assert err.startswith("acep train: " + says.format(url=url)) and err.count("\n") == 1, err
    assert not (tmp_path / "h.history").exists() and not (tmp_path / "s.sketch").exists()


def test_a_sketch_the_collector_refuses_is_kept_and_said_in_one_line(spark, collector,
                                                                     tmp_path, capsys):
    url, work = collector
    assert train_main(_argv(tmp_path, work, url, "ops.token")) == 1
    out, err = capsys.readouterr()
    assert err == ("acep train: error: the collector refused the sketch: HTTP 409 sketch: the "
                   "devices upload pattern 'abc' as 'a b c' and would refuse this sketch: it "
                   "is for pattern 'a c' (k=0, window=4, where=[]), not 'a b c' (k=1, "
                   "window=4, where=[]) (1 definition(s) checked; ?unchecked=1 publishes it "
                   "anyway); the sketch is saved in "
                   f"{tmp_path / 's.sketch'}\n"), err
    assert Sketch.load(tmp_path / "s.sketch", key=KEY).pattern == "a c"


class _Answering(http.server.BaseHTTPRequestHandler):
    """What a server that is not the collector (or a proxy before it) answers a PUT."""

    answers = {"/v1/sketches/html": (413, "text/html", b"<html>\r\n<head><title>413 Request "
                                     b"Entity Too Large</title></head>\r\n</html>\r\n"),
               "/v1/sketches/page": (200, "text/html", b"<html>\n<body>Welcome</body>\n"),
               "/v1/sketches/empty": (200, "application/json", b"{}"),
               "/v1/sketches/silent": (502, "text/plain", b"")}

    def do_PUT(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        if self.path == "/v1/sketches/cut":  # the connection closed before an answer
            self.close_connection = True
            return
        if self.path == "/v1/sketches/slow":
            self.server.closed.wait(3)
        if self.path == "/v1/sketches/moved":  # the token would go along: not followed
            self.send_response(307)
            self.send_header("Location", "http://192.0.2.1/v1/sketches/moved")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        status, kind, body = self.answers.get(self.path, (200, "application/json", b"{}"))
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.mark.parametrize("pattern_id, says", [
    ("html", "the collector refused the sketch: HTTP 413 <html> <head><title>413 Request "
             "Entity Too Large</title></head> </html> (not an acep collector's answer)"),
    ("page", "{url} did not store the sketch: HTTP 200 <html> <body>Welcome</body> (not an "
             "acep collector's answer)"),
    ("empty", "{url} did not store the sketch: HTTP 200 {{}} (not an acep collector's "
              "answer)"),
    ("silent", "the collector refused the sketch: HTTP 502 (an empty answer) (not an acep "
               "collector's answer)"),
    ("cut", "no answer from the collector at {url}: Remote end closed connection without "
            "response"),
    ("slow", "no answer from the collector at {url}: timed out"),
    ("moved", "the collector refused the sketch: HTTP 307 a redirect to "
              "http://192.0.2.1/v1/sketches/moved, not followed (the token would go along)"),
])
def test_answers_no_collector_gives_are_one_line(pattern_id, says):
    """Before, an HTML page was the message (many lines), a page with 200 failed with
    'Expecting value: line 1 column 1 (char 0)', and a JSON answer without the sketch's
    etag was taken as published."""
    with Serving(_Answering) as server, pytest.raises(RuntimeError) as refused:
        publish_sketch(server.url, pattern_id, b"sketch", "admin-token", timeout=1)
    assert str(refused.value) == says.format(url=server.url)


@pytest.mark.parametrize("pattern_id", ["", "rising edge", "../abc", "x" * 65])
def test_publish_sketch_refuses_an_id_the_collector_would_before_any_request(collector,
                                                                            pattern_id):
    """Before, the sketch went up and came back as the collector's 400 (a RuntimeError, or
    for '' a PUT to /v1/sketches/ itself): the Python API checks what acep train checks."""
    url, work = collector
    token = (work / "ops.token").read_text().strip()
    with pytest.raises(ValueError) as refused:
        publish_sketch(url, pattern_id, b"a sketch", token)
    assert str(refused.value) == (f"pattern id {pattern_id!r} must match [A-Za-z0-9._-]{{1,64}} "
                                  "(the ids the collector and the agents take)")
