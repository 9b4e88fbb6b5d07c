"""The collector as the tests run it: ``python -m edge.collector``, a real process on
loopback with its own SQLite file and Parquet archive, and the requests and batches sent to it."""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import random
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import acep
from acep import EventBatch
from acep.events import Event
from acep.matcher import MatchBatch
from edge.collector import Collector, make_app
from edge.collector.archive import Archive
from edge.collector.store import Store
from edge.wire import PatternRef, batch_from_matches, encode_batch
from support.wait import wait_for

ROOT = Path(__file__).resolve().parents[2]
SKETCH_KEY = b"fleet-sketch-key"
DEVICE = "pi-e2e"
MAX_BODY = 256 << 10
REF = PatternRef("p1", "a b c", 4.0, 1, ("c.x >= a.x",), "o")


def query(db: Path, sql: str, params=()) -> list:
    """The rows of ``sql`` on the SQLite file ``db``; none while it or its tables do not exist."""
    if not db.exists():
        return []
    con = sqlite3.connect(db, timeout=10)
    try:
        return con.execute(sql, params).fetchall()
    except sqlite3.OperationalError:  # tables not created yet
        return []
    finally:
        con.close()


class CollectorProcess:
    """``python -m edge.collector`` on loopback, its database, archive and log in ``tmp``.

    ``extra`` are more arguments of the server (TLS, --mirror...); ``max_body`` its
    --max-body; ``sketch_key`` the key it checks sketches with. A restart listens on the
    port the first start picked, so agents configured with its URL reach it again.
    """

    def __init__(self, tmp: Path, *extra: str, max_body: int | None = None,
                 sketch_key: bytes = SKETCH_KEY):
        self.tmp, self.db, self.archive = tmp, tmp / "collector.db", tmp / "archive"
        (tmp / "sketch.key").write_bytes(sketch_key + b"\n")
        self.extra = extra
        self.max_body = max_body
        self.err = tmp / "collector.err"
        self.port, self.proc, self.starts = 0, None, 0

    def manage(self, *args: str) -> subprocess.CompletedProcess:
        """Run the collector's management command (``--add-device``, ``--backup``...) on its
        database."""
        return subprocess.run([sys.executable, "-m", "edge.collector", "--db", str(self.db),
                               *args], cwd=ROOT, capture_output=True, text=True, timeout=60)

    def add(self, name: str, flag: str = "--add-device") -> str:
        """Register device (or, with ``--add-admin``, admin) ``name``; its token."""
        out = self.manage(flag, name)
        assert out.returncode == 0, out.stderr
        return out.stdout.strip()

    def start(self) -> CollectorProcess:
        """Start the server and wait until it listens (``url`` and ``port`` say where)."""
        self.starts += 1
        out = self.err.with_name(f"collector-{self.starts}.out")  # beside its log
        limit = () if self.max_body is None else ("--max-body", str(self.max_body))
        # its log goes to a file: a pipe nobody reads would stop a collector that logs a lot
        with open(out, "w") as o, open(self.err, "a") as e:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "edge.collector", "--db", f"sqlite:///{self.db}",
                 "--archive", str(self.archive), "--port", str(self.port), *limit,
                 "--sketch-key-file", str(self.tmp / "sketch.key"), *self.extra],
                cwd=ROOT, stdout=o, stderr=e)

        def listening():  # the first line says "listening on http://..." (or https)
            assert self.proc.poll() is None, self.log()
            text = out.read_text()
            return "listening on http" in text and text.splitlines()[0]

        self.url = wait_for(listening, "the collector to listen", 60).strip().rsplit(" ", 1)[1]
        self.port = int(self.url.rsplit(":", 1)[1])
        return self

    def stop(self, sig=signal.SIGTERM) -> int:
        """Send ``sig`` and return the exit code."""
        self.proc.send_signal(sig)
        return self.proc.wait(30)

    def kill(self) -> int:
        """SIGKILL: a crash."""
        return self.stop(signal.SIGKILL)

    def log(self) -> str:
        return self.err.read_text()

    def rows(self, sql: str, params=()) -> list:
        """The rows of ``sql`` on its database (fails while there is none)."""
        with sqlite3.connect(self.db) as db:
            return db.execute(sql, params).fetchall()

    def matches(self) -> list[tuple]:
        """The stored matches as (partition, point, errors, trajectory), sorted."""
        rows = query(self.db, "SELECT partition, point, errors, trajectory FROM matches")
        return sorted(((float(json.loads(p)), pt, e, tuple(json.loads(tr)))
                       for p, pt, e, tr in rows), key=repr)

    def seqs(self, device: str = DEVICE) -> list[int]:
        """The sequence numbers of the batches stored from ``device``."""
        return sorted(s for (s,) in query(self.db, "SELECT seq FROM batches WHERE device = ?",
                                          (device,)))

    def counts(self) -> tuple[int, int]:
        """How many batches and matches are stored."""
        return (query(self.db, "SELECT COUNT(*) FROM batches")[0][0],
                query(self.db, "SELECT COUNT(*) FROM matches")[0][0])


@contextlib.contextmanager
def serving(tmp: Path, *extra: str) -> Iterator[CollectorProcess]:
    """A collector of its own in ``tmp/collector`` (``extra``: more server arguments) with
    DEVICE registered (``.token``); killed at the end."""
    (tmp / "collector").mkdir()
    c = CollectorProcess(tmp / "collector", *extra)
    c.token = c.add(DEVICE)
    c.start()
    try:
        yield c
    finally:
        c.kill()


def device_series(c: CollectorProcess, device: str = DEVICE) -> dict[str, float]:
    """The collector's Prometheus series of ``device`` (``/metrics``): {name: value}."""
    from prometheus_client.parser import text_string_to_metric_families

    text = urllib.request.urlopen(c.url + "/metrics?format=prometheus", timeout=10).read()
    return {s.name: s.value for f in text_string_to_metric_families(text.decode())
            for s in f.samples if s.labels.get("device") == device}


# --------------------------------------------------------------------------- requests


def request(url: str, method: str = "GET", body: bytes | None = None, token: str | None = None,
            ctype: str = "application/msgpack", headers: dict | None = None):
    """One HTTP request; its status, body and headers, whatever the status."""
    h = dict(headers or {})
    if token is not None:
        h["Authorization"] = f"Bearer {token}"
    if body is not None:
        h["Content-Type"] = ctype
    req = urllib.request.Request(url, data=body, method=method, headers=h)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read(), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read(), dict(e.headers)


def post(srv: CollectorProcess, body: bytes, token: str | None, ctype="application/msgpack"):
    """Upload a batch; the status and JSON answer."""
    status, data, _ = request(srv.url + "/v1/batches", "POST", body, token, ctype)
    return status, json.loads(data)


def beat(srv: CollectorProcess, body: bytes, token: str | None, ctype="application/json"):
    """Send a heartbeat; the status and JSON answer."""
    status, data, _ = request(srv.url + "/v1/heartbeat", "POST", body, token, ctype)
    return status, json.loads(data)


def metrics(srv: CollectorProcess) -> dict:
    """The collector's ``/metrics`` as JSON."""
    return json.loads(request(srv.url + "/metrics")[1])


def publish(c: CollectorProcess, admin: str, data: bytes) -> None:
    """PUT the sketch ``data`` as pattern abc's, unchecked, with the admin token ``admin``."""
    req = urllib.request.Request(c.url + "/v1/sketches/abc?unchecked=1", data=data,
                                 method="PUT", headers={"Authorization": f"Bearer {admin}"})
    with urllib.request.urlopen(req, timeout=30) as r:
        assert r.status == 200


def raw(srv: CollectorProcess, head: str, body: bytes = b"", wait_answer: bool = True) -> tuple:
    """Send raw bytes; the status and JSON body of the answer (or the socket when not
    waiting)."""
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
    s.sendall(head.replace("\n", "\r\n").encode() + b"\r\n" + body)
    return read_answer(s) if wait_answer else s


def read_answer(s: socket.socket, data: bytes = b"") -> tuple[int, dict]:
    """The status and JSON body of the answer on ``s`` (``data``: its start, already
    read), which is then closed."""
    while b"\r\n\r\n" not in data or len(data.split(b"\r\n\r\n", 1)[1]) < _length(data):
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    s.close()
    head_text, _, payload = data.partition(b"\r\n\r\n")
    return int(head_text.split()[1]), json.loads(payload)


def _length(data: bytes) -> int:
    for line in data.split(b"\r\n\r\n", 1)[0].split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return int(line.split(b":")[1])
    return 1 << 30


def assert_error(status, doc, want_status, *words):
    """The answer is an error ``want_status`` whose message has each of ``words``."""
    assert status == want_status, doc
    assert doc["status"] == want_status and isinstance(doc["error"], str)
    for w in words:
        assert w in doc["error"], doc


# --------------------------------------------------------------------------- batches


def make_events(seed: int = 3, n: int = 80) -> list[Event]:
    """``n`` random events of types a, b, c with a number x and an origin o."""
    rng = random.Random(seed)
    t, out = 1.7e9, []
    for _ in range(n):
        t += rng.choice([0.0, 1.0, 1.0, 2.0])
        out.append(Event(rng.choice("abc"), t, {"x": float(rng.randint(0, 5)),
                                                 "o": rng.choice(["ATL", "SFO"])}))
    return out


def make_batch(device="d1", seq=0, events=None, created_at=None, ref=REF):
    """The batch a device running ``ref`` over ``events`` uploads."""
    events = EventBatch.from_events(events or make_events())
    m = acep.Matcher(ref.text, window=ref.window, k=ref.k, where=list(ref.where), partition="o")
    found = MatchBatch.concat([m.match_batch(events), m.flush()])
    return batch_from_matches(found, events, device=device, seq=seq, pattern=ref,
                              created_at=1.7e9 + seq if created_at is None else created_at)


@contextlib.contextmanager
def uploading(srv: CollectorProcess, device: str, first_seq: int = 0):
    """While the block runs, ``device`` uploads batch after batch (seq from ``first_seq``);
    the block starts once three are stored. Yields the list of the seqs stored."""
    stop, stored = threading.Event(), []

    def upload():
        while not stop.is_set():
            seq = first_seq + len(stored)
            assert post(srv, encode_batch(make_batch(device, seq)), srv.tokens[device])[0] == 200
            stored.append(seq)
    uploader = threading.Thread(target=upload)
    uploader.start()
    try:
        while len(stored) < 3:
            time.sleep(0.01)
        yield stored
    finally:
        stop.set()
        uploader.join()


# --------------------------------------------------------------------------- in a thread


class CountingStore(Store):
    """The collector's database, counting the token lookups made in it."""

    def __init__(self, path: Path):
        super().__init__(path)
        self.lookups = 0

    def identify(self, token: str, now: float | None = None):
        self.lookups += 1
        return super().identify(token, now)


class CollectorThread:
    """A collector served by aiohttp on 127.0.0.1 in a thread of this process, with the
    devices d1 and d2 and an admin.

    Where :class:`CollectorProcess` is the server as it is deployed, this one lets a test
    reach into it: count its database's token lookups (``store``), serve on a socket of
    its own, send from other loopback addresses.
    """

    def __init__(self, tmp: Path, **options):
        self.store = CountingStore(tmp / "collector.db")
        self.tokens = {d: self.store.add_device(d) for d in ("d1", "d2")}
        self.tokens["admin"] = self.store.add_device("admin", "admin")
        self.collector = Collector(self.store, Archive(tmp / "archive"), recheck_workers=0,
                                   **options)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.runner, self.port = self._call(self._start())

    def _call(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=30)

    async def _start(self):
        from aiohttp import web

        runner = web.AppRunner(make_app(self.collector), auto_decompress=False)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        return runner, runner.addresses[0][1]

    def serve_on(self, sock: socket.socket) -> int:
        """Serve on ``sock`` too (bound, listening): its port."""
        from aiohttp import web

        async def start():
            await web.SockSite(self.runner, sock).start()

        self._call(start())
        return sock.getsockname()[1]

    def ask(self, path: str, token: str | None = None, source: str = "127.0.0.1",
            method: str = "GET", body: bytes | None = None, headers: dict | None = None
            ) -> tuple[int, dict | bytes, dict]:
        """One request from ``source``: status, JSON (or bytes) and headers."""
        return ask(self.port, path, token, source, method, body, headers)

    def close(self) -> None:
        self._call(self.runner.cleanup())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.collector.close()


def ask(port: int, path: str, token: str | None = None, source: str = "127.0.0.1",
        method: str = "GET", body: bytes | None = None, headers: dict | None = None,
        host: str = "127.0.0.1") -> tuple[int, dict | bytes, dict]:
    """One request to ``host:port`` sent from the address ``source``: status, JSON (or
    bytes) and headers."""
    h = dict(headers or {})
    if token is not None:
        h["Authorization"] = f"Bearer {token}"
    if body is not None:
        h["Content-Type"] = "application/msgpack"
    conn = http.client.HTTPConnection(host, port, timeout=30, source_address=(source, 0))
    try:
        conn.request(method, path, body=body, headers=h)
        answer = conn.getresponse()
        data = answer.read()
        kind = answer.headers.get("Content-Type", "")
        return answer.status, json.loads(data) if "json" in kind else data, dict(answer.headers)
    finally:
        conn.close()
