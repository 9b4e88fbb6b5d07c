"""The agent's MQTT source against a real Mosquitto broker on loopback: events published
are matched as acep.Matcher matches them, a persistent session keeps what is published
while the agent is down, and a bad payload is counted and logged, never the end."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.links import free_port
from support.wait import wait_for

import acep
from edge.agent import Agent
from edge.agent.config import ConfigError, parse_config
from edge.agent.preflight import check
from edge.wire import decode_batch

mqtt = pytest.importorskip("paho.mqtt.client", reason="paho-mqtt is not installed "
                           "(pip install 'acep[mqtt]')")
MOSQUITTO = shutil.which("mosquitto") or next(
    (p for p in ("/usr/sbin/mosquitto", "/usr/local/sbin/mosquitto") if os.path.exists(p)),
    None)
PATTERN = {"id": "abc", "text": "a b c", "window": 5.0, "k": 1, "partition": "id"}
TOPIC = "sensors/dev-m/events"
ROOT = Path(__file__).resolve().parents[2]


@contextlib.contextmanager
def mosquitto(tmp: Path, conf: str = "allow_anonymous true\n",
              port: int | None = None) -> Iterator[int]:
    """A Mosquitto broker on loopback (a free port unless given), with persistence in
    ``tmp`` and ``conf``; its port."""
    if MOSQUITTO is None:
        pytest.skip("mosquitto is not installed (apt-get install mosquitto)")
    port = port or free_port()
    data = tmp / "mosquitto"
    data.mkdir(exist_ok=True)
    path = tmp / "mosquitto.conf"
    # as root it would switch to the user "mosquitto", who cannot read the test's files
    user = "user root\n" if os.geteuid() == 0 else ""
    path.write_text(f"listener {port} 127.0.0.1\npersistence true\n"
                    f"persistence_location {data}/\n{user}{conf}")
    proc = subprocess.Popen([MOSQUITTO, "-c", str(path)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 10
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port),
                                                                        0.2):
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"mosquitto did not start: {proc.stderr.read().decode()}")
            time.sleep(0.05)
        yield port
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture
def broker(tmp_path) -> Iterator[int]:
    with mosquitto(tmp_path) as port:
        yield port


def stream(n: int, seed: int = 1) -> list[dict]:
    rng = random.Random(seed)
    t, out = 0.0, []
    for _ in range(n):
        t += rng.random()
        out.append({"type": rng.choice("abc"), "t": round(t, 3), "id": rng.randrange(4)})
    return out


def config(tmp: Path, port: int, **source) -> dict:
    return {"device": {"id": "dev-m"}, "pattern": PATTERN,
            "source": {"kind": "mqtt", "host": "127.0.0.1", "port": port, "topics": [TOPIC],
                       "batch_events": 50, "batch_seconds": 0.05, **source},
            "outbox": {"path": str(tmp / "outbox.db")},
            "metrics": {"path": str(tmp / "metrics.jsonl"), "interval": 3600}}


def publish(port: int, payloads: list, topic: str = TOPIC, setup=None) -> None:
    """Each payload (a dict as JSON, bytes as they are) at QoS 1, all acknowledged;
    ``setup`` is called with the client first (TLS, a password)."""
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="test-publisher")
    if setup is not None:
        setup(client)
    client.connect("127.0.0.1", port)
    client.loop_start()
    try:
        infos = [client.publish(topic, p if isinstance(p, bytes) else json.dumps(p), qos=1)
                 for p in payloads]
        for info in infos:
            info.wait_for_publish(10)
    finally:
        client.disconnect()
        client.loop_stop()


def direct_rows(events: list[dict]) -> list[tuple]:
    m = acep.Matcher(PATTERN["text"], PATTERN["window"], PATTERN["k"], partition="id")
    found = m.match_batch(acep.EventBatch.from_events(events))
    return sorted(((x.partition, x.point, x.errors, tuple(x.events)) for x in found), key=repr)


def outbox_rows(tmp: Path) -> list[tuple]:
    db = sqlite3.connect(tmp / "outbox.db")
    rows = []
    for (body,) in db.execute("SELECT body FROM pending ORDER BY n"):
        b = decode_batch(body)
        for i in range(len(b)):
            traj = b.trajectory[b.trajectory_ptr[i]:b.trajectory_ptr[i + 1]].tolist()
            rows.append((b.partition[i], float(b.point[i]), int(b.errors[i]), tuple(traj)))
    db.close()
    return sorted(rows, key=repr)


@contextlib.contextmanager
def running(agent: Agent) -> Iterator[dict]:
    """The agent's run in a thread, stopped on leaving; yields its final metrics."""
    result: dict = {}
    runner = threading.Thread(target=lambda: result.update(agent.run()))
    runner.start()
    try:
        yield result
    finally:
        agent.stop()
        runner.join(30)
        assert not runner.is_alive()


def subscribed(agent: Agent) -> None:
    """Wait until the agent's source has its subscriptions granted."""
    deadline = time.monotonic() + 10
    while getattr(agent, "source", None) is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert agent.source.subscribed.wait(10), "the agent never subscribed"


def consumed(agent: Agent, n: int, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while agent.consumed < n:
        assert time.monotonic() < deadline, f"{agent.consumed} of {n} events consumed"
        time.sleep(0.02)


def test_published_events_are_matched_as_the_matcher_matches_them(tmp_path, broker):
    events = stream(300)
    agent = Agent(parse_config(config(tmp_path, broker)))
    with running(agent) as final:
        subscribed(agent)
        publish(broker, events)
        consumed(agent, len(events))
    assert final["consumed"] == len(events)
    assert final["bad_lines"] == 0
    assert outbox_rows(tmp_path) == direct_rows(events)


class Recording(Agent):
    """An agent that keeps the events of its chunks, in order."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.seen: list[dict] = []

    def _process(self, chunk, source):
        self.seen.extend(event for event, _ in chunk)
        super()._process(chunk, source)


def test_messages_published_while_the_agent_is_down_arrive_after_a_restart(tmp_path, broker):
    events = stream(200, seed=2)
    first = Recording(parse_config(config(tmp_path, broker)))
    with running(first):
        subscribed(first)
        publish(broker, events[:80])
        consumed(first, 80)
    publish(broker, events[80:])  # nobody subscribed now: the broker keeps them
    second = Recording(parse_config(config(tmp_path, broker)))
    with running(second):
        consumed(second, len(events))
        time.sleep(0.3)  # nothing more comes: no message twice after a clean stop
    assert first.seen == events[:80]
    assert second.seen == events[80:]
    assert second.consumed == len(events)


def test_a_stop_after_a_full_chunk_acknowledges_its_last_event(tmp_path, broker):
    """The last event of a chunk closed full is acknowledged once the agent has processed
    the chunk; a clean stop right then must not leave it to come again."""
    events = stream(20, seed=6)
    doc = config(tmp_path, broker, batch_events=10, batch_seconds=30.0)
    first = Recording(parse_config(doc))
    with running(first):
        subscribed(first)
        publish(broker, events)
        consumed(first, 20)
    second = Recording(parse_config(doc))
    with running(second):
        subscribed(second)
        time.sleep(0.5)
    assert first.seen == events and second.seen == []


def test_another_client_id_is_another_session(tmp_path, broker):
    first = Recording(parse_config(config(tmp_path, broker)))
    with running(first):
        subscribed(first)
    publish(broker, stream(10))
    other = Recording(parse_config(config(tmp_path, broker, client_id="someone-else")))
    with running(other):
        subscribed(other)
        time.sleep(0.3)
    assert other.seen == []


def test_a_bad_payload_is_counted_and_logged_with_its_topic(tmp_path, broker, caplog):
    events = stream(100, seed=3)
    bad = [b"not json", b"[" * 200 + b"]" * 200, b'["a list"]']
    payloads = events[:50] + bad + events[50:]
    agent = Agent(parse_config(config(tmp_path, broker, topic_field="topic")))
    with caplog.at_level(logging.WARNING, "edge.agent"), running(agent) as final:
        subscribed(agent)
        publish(broker, payloads)
        consumed(agent, len(events))
    assert final["bad_lines"] == len(bad)
    logged = [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()]
    assert len(logged) == len(bad) and all(TOPIC in line for line in logged)
    assert any("not a JSON object" in line for line in logged)
    assert outbox_rows(tmp_path) == direct_rows([{**e, "topic": TOPIC} for e in events])


@pytest.mark.parametrize("change, key", [
    ({"host": None}, "source.host"),
    ({"topics": []}, "source.topics"),
    ({"topics": ["a/#/b"]}, "source.topics"),
    ({"topics": ["a/b+"]}, "source.topics"),
    ({"qos": 3}, "source.qos"),
    ({"port": 70000}, "source.port"),
    ({"keepalive": 0}, "source.keepalive"),
    ({"inflight": 0}, "source.inflight"),
    ({"password": "secret"}, "source.password"),
    ({"password_file": "pw"}, "source.password_file"),
    ({"username": "u", "password_file": "missing"}, "source.password_file"),
    ({"ca_file": "ca.pem"}, "source.ca_file"),
    ({"tls": True, "cert_file": "c.pem"}, "source.cert_file"),
    ({"client_id": ""}, "source.client_id"),
    ({"kind": "file", "path": "x.jsonl"}, "source.host"),
])
def test_config_errors_name_the_key(tmp_path, change, key):
    doc = config(tmp_path, 1883)
    for name, value in change.items():
        if value is None:
            del doc["source"][name]
        else:
            doc["source"][name] = value
    with pytest.raises(ConfigError, match=f"^{key}: "):
        parse_config(doc, base_dir=str(tmp_path))


def test_defaults_and_secrets(tmp_path):
    (tmp_path / "pw").write_text("s3cret\n")
    cfg = parse_config(config(tmp_path, 1883, username="u", password_file="pw"),
                       base_dir=str(tmp_path))
    s = cfg.source
    assert (s.qos, s.client_id, s.password) == (1, "acep-dev-m-abc", "s3cret")
    assert "s3cret" not in repr(cfg)
    doc = config(tmp_path, 1883, tls=True)
    del doc["source"]["port"]
    assert parse_config(doc).source.port == 8883


def test_without_paho_the_agent_says_which_extra_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "paho.mqtt.client", None)
    agent = Agent(parse_config(config(tmp_path, 1883)))
    try:
        with pytest.raises(ConfigError, match=r"needs paho-mqtt.*pip install 'acep\[mqtt\]'"):
            agent.run()
    finally:
        agent.outbox.close()



def agent_toml(tmp: Path, doc: dict) -> Path:
    """``doc`` as agent.toml (JSON values are TOML values here: strings, ints, lists)."""
    path = tmp / "agent.toml"
    path.write_text("".join(f"[{name}]\n" + "".join(f"{k} = {json.dumps(v)}\n"
                                                     for k, v in table.items())
                            for name, table in doc.items()))
    return path


def test_check_connects_to_the_broker_and_says_where(tmp_path, broker, capsys):
    assert check(str(agent_toml(tmp_path, config(tmp_path, broker)))) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if "source" in x)
    assert line == (f"ok  source mqtt://127.0.0.1:{broker} topics {TOPIC} (qos 1, client id "
                    "acep-dev-m-abc) (the broker accepts the connection)")


def test_check_fails_when_no_broker_answers(tmp_path, capsys):
    assert check(str(agent_toml(tmp_path, config(tmp_path, free_port())))) == 1
    line = next(x for x in capsys.readouterr().out.splitlines() if "source" in x)
    assert line.startswith("FAIL source mqtt://127.0.0.1:") and "cannot connect" in line


def test_once_reads_what_the_broker_holds_then_ends(tmp_path, broker):
    events = stream(120, seed=4)
    Agent(parse_config(config(tmp_path, broker))).run(once=True)  # the session is made
    publish(broker, events)
    started = time.monotonic()
    final = Agent(parse_config(config(tmp_path, broker))).run(once=True)
    assert time.monotonic() - started < 10
    assert final["consumed"] == len(events)
    m = acep.Matcher(PATTERN["text"], PATTERN["window"], PATTERN["k"], partition="id")
    flushed = sorted(((x.partition, x.point, x.errors, tuple(x.events))
                      for x in m.match(events)), key=repr)
    assert outbox_rows(tmp_path) == flushed
    publish(broker, stream(30, seed=5))  # a finished run does not end the next one
    again = Agent(parse_config(config(tmp_path, broker))).run(once=True)
    assert again["consumed"] == len(events) + 30


def test_the_example_mqtt_source_parses(tmp_path):
    """examples/agent.toml's commented [source] for MQTT, uncommented in place of its own
    (without the TLS files and the password file, which must exist)."""
    example = Path(__file__).resolve().parents[2] / "examples" / "agent.toml"
    text = example.read_text()
    block = text[text.index("# [source]\n# kind = \"mqtt\""):]
    block = block[:block.index("\n\n")]
    source = tomllib.loads(re.sub(r"^# (?=[\w\[])", "", block, flags=re.M))["source"]
    for key in ("ca_file", "cert_file", "key_file", "password_file"):
        source.pop(key)
    raw = tomllib.loads(text)
    raw["source"] = source
    raw["device"].pop("token_file", None)
    raw["collector"].pop("ca_file", None)
    cfg = parse_config(raw, base_dir=str(tmp_path)).source
    assert (cfg.kind, cfg.port, cfg.qos, cfg.topics) == ("mqtt", 1883, 1, ("sensors/+/events",))


def test_the_documented_mqtt_source_parses(tmp_path):
    text = (Path(__file__).resolve().parents[2] / "docs" / "OPERATIONS.md").read_text()
    block = re.search(r"```toml\n(\[source\]\nkind = \"mqtt\".*?)```", text, re.S).group(1)
    (tmp_path / "mqtt.password").write_text("secret\n")
    doc = {**config(tmp_path, 1883), **tomllib.loads(block)}
    s = parse_config(doc, base_dir=str(tmp_path)).source
    assert (s.host, s.port, s.password, s.topic_field) == ("127.0.0.1", 1883, "secret", "topic")


def test_a_wildcard_subscription_with_the_topic_as_the_partition(tmp_path, broker):
    events = stream(150, seed=7)
    topics = [f"sensors/{e['id']}/events" for e in events]
    doc = config(tmp_path, broker, topics=["sensors/+/events"], topic_field="topic")
    doc["pattern"] = {**PATTERN, "partition": "topic"}
    agent = Agent(parse_config(doc))
    with running(agent):
        subscribed(agent)
        for event, topic in zip(events, topics):
            publish(broker, [event], topic=topic)
        consumed(agent, len(events))
    tagged = [{**e, "topic": topic} for e, topic in zip(events, topics)]
    m = acep.Matcher(PATTERN["text"], PATTERN["window"], PATTERN["k"], partition="topic")
    found = m.match_batch(acep.EventBatch.from_events(tagged))
    assert found and outbox_rows(tmp_path) == sorted(
        ((x.partition, x.point, x.errors, tuple(x.events)) for x in found), key=repr)


def test_check_without_paho_names_the_extra(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "paho.mqtt.client", None)
    assert check(str(agent_toml(tmp_path, config(tmp_path, 1883)))) == 1
    assert "FAIL source mqtt://127.0.0.1:1883 topics sensors/dev-m/events (qos 1, client id " \
           "acep-dev-m-abc): source.kind = \"mqtt\" needs paho-mqtt, which is not installed: " \
           "pip install 'acep[mqtt]'" in capsys.readouterr().out


def test_tls_and_a_password(tmp_path, capsys):
    trustme = pytest.importorskip("trustme")
    passwd = shutil.which("mosquitto_passwd")
    if passwd is None:
        pytest.skip("mosquitto_passwd is not installed")
    ca = trustme.CA()
    ca.cert_pem.write_to_path(tmp_path / "ca.pem")
    server = ca.issue_cert("127.0.0.1")
    server.cert_chain_pems[0].write_to_path(tmp_path / "server.pem")
    server.private_key_pem.write_to_path(tmp_path / "server.key")
    subprocess.run([passwd, "-b", "-c", str(tmp_path / "users"), "pi", "s3cret"], check=True)
    (tmp_path / "mqtt.password").write_text("s3cret\n")
    conf = (f"allow_anonymous false\npassword_file {tmp_path / 'users'}\n"
            f"cafile {tmp_path / 'ca.pem'}\ncertfile {tmp_path / 'server.pem'}\n"
            f"keyfile {tmp_path / 'server.key'}\n")

    def setup(client):
        client.tls_set(ca_certs=str(tmp_path / "ca.pem"))
        client.username_pw_set("pi", "s3cret")

    events = stream(60, seed=8)
    with mosquitto(tmp_path, conf) as port:
        doc = config(tmp_path, port, tls=True, ca_file="ca.pem", username="pi",
                     password_file="mqtt.password")
        assert check(str(agent_toml(tmp_path, doc))) == 0
        assert "the broker accepts the connection" in capsys.readouterr().out
        agent = Agent(parse_config(doc, base_dir=str(tmp_path)))
        with running(agent):
            subscribed(agent)
            publish(port, events, setup=setup)
            consumed(agent, len(events))
        (tmp_path / "mqtt.password").write_text("wrong\n")
        assert check(str(agent_toml(tmp_path, doc))) == 1
        line = next(x for x in capsys.readouterr().out.splitlines() if "source" in x)
        assert line.startswith(f"FAIL source mqtts://127.0.0.1:{port} ") and "refused" in line
    assert outbox_rows(tmp_path) == direct_rows(events)


def test_the_agent_reconnects_when_the_broker_restarts(tmp_path, caplog):
    events = stream(100, seed=9)
    with contextlib.ExitStack() as stack:
        first = contextlib.ExitStack()
        port = first.enter_context(mosquitto(tmp_path))
        agent = Recording(parse_config(config(tmp_path, port)))
        with caplog.at_level(logging.INFO, "edge.agent"), running(agent):
            subscribed(agent)
            publish(port, events[:40])
            consumed(agent, 40)
            agent.source.subscribed.clear()
            first.close()  # SIGTERM: the broker saves the session, then stops
            stack.enter_context(mosquitto(tmp_path, port=port))
            assert agent.source.subscribed.wait(30), "the agent never subscribed again"
            publish(port, events[40:])
            consumed(agent, len(events))
    assert agent.seen == events
    assert any("disconnected" in r.getMessage() for r in caplog.records)


def test_messages_kept_for_the_agent_survive_a_broker_restart(tmp_path):
    events = stream(50, seed=10)
    with mosquitto(tmp_path) as port:
        first = Recording(parse_config(config(tmp_path, port)))
        with running(first):
            subscribed(first)
        publish(port, events)
    with mosquitto(tmp_path, port=port):  # the session and its messages, from persistence
        second = Recording(parse_config(config(tmp_path, port)))
        with running(second):
            consumed(second, len(events))
    assert second.seen == events


def test_a_client_certificate_that_does_not_load_names_the_key(tmp_path):
    trustme = pytest.importorskip("trustme")
    ca = trustme.CA()
    ca.cert_pem.write_to_path(tmp_path / "ca.pem")
    ca.issue_cert("pi-01").cert_chain_pems[0].write_to_path(tmp_path / "pi.pem")
    ca.issue_cert("other").private_key_pem.write_to_path(tmp_path / "other.key")
    doc = config(tmp_path, 8883, tls=True, ca_file="ca.pem", cert_file="pi.pem",
                 key_file="other.key")
    with pytest.raises(ConfigError, match="^source.cert_file: .*pi.pem with source.key_file"):
        parse_config(doc, base_dir=str(tmp_path))
    (tmp_path / "ca.pem").write_text("not a certificate")
    with pytest.raises(ConfigError, match="^source.ca_file: .*not a readable PEM"):
        parse_config(doc, base_dir=str(tmp_path))


def test_an_agent_with_no_broker_keeps_trying_and_stops_at_once(tmp_path, caplog):
    agent = Agent(parse_config(config(tmp_path, free_port())))
    with caplog.at_level(logging.WARNING, "edge.agent"):
        with running(agent):
            time.sleep(2.5)  # a try at once, then one after 1 s, then 2 s
            stopping = time.monotonic()
        assert time.monotonic() - stopping < 3
    assert any("cannot connect" in r.getMessage() for r in caplog.records)


# --------------------------------------------------------------------------- kills


class Relay:
    """A TCP relay on loopback to ``port``; once ``hold`` is set, the client's bytes are
    read and dropped (a link that died one way: the broker hears nothing more)."""

    def __init__(self, port: int):
        self.port_to, self.hold = port, threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.socks: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.port_to))
            self.socks += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream, True),
                             daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, False),
                             daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, held: bool) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                if not (held and self.hold.is_set()):
                    sink.sendall(data)
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        for sock in [self.listener, *self.socks]:
            sock.close()


class AgentProcess:
    """``python -m edge.agent`` as a process, uploading to ``collector``, with the source
    ``source`` (keys of :func:`config`)."""

    def __init__(self, tmp: Path, port: int, collector, **source):
        from support.collector import DEVICE

        self.tmp = tmp
        self.doc = config(tmp, port, **source)
        self.doc["device"] = {"id": DEVICE, "token": collector.token}
        self.doc["collector"] = {"url": collector.url, "timeout": 5.0}
        self.doc["metrics"]["interval"] = 1.0
        self.doc["outbox"].update(backoff_base=0.05, backoff_max=0.5)
        self.proc: subprocess.Popen | None = None

    def start(self, port: int | None = None, once: bool = False) -> subprocess.Popen:
        if port is not None:
            self.doc["source"]["port"] = port
        path = agent_toml(self.tmp, self.doc)
        with open(self.tmp / "agent.err", "a") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "edge.agent", "--config", str(path)]
                + (["--once"] if once else []), cwd=ROOT, stdout=subprocess.DEVNULL,
                stderr=err, env={**os.environ, "PYTHONPATH": str(ROOT)})
        return self.proc

    def kill(self) -> None:
        assert self.proc.poll() is None, self.log()
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def log(self) -> str:
        return (self.tmp / "agent.err").read_text()

    def state(self, name: str, default=0):
        from support.collector import query

        row = query(self.tmp / "outbox.db", "SELECT value FROM state WHERE name = ?", (name,))
        return json.loads(row[0][0]) if row else default

    def pending(self) -> int:
        from support.collector import query

        row = query(self.tmp / "outbox.db", "SELECT COUNT(*) FROM pending")
        return row[0][0] if row else -1

    def metrics(self) -> dict:
        path = self.tmp / "metrics.jsonl"
        lines = path.read_text().splitlines() if path.exists() else []
        return json.loads(lines[-1]) if lines else {}


def stored_rows(matches) -> list[tuple]:
    """acep matches as the collector's rows (support/collector.py CollectorProcess.matches)."""
    return sorted(((float(x.partition), x.point, x.errors, tuple(x.events))
                   for x in matches), key=repr)


@pytest.fixture
def collector(tmp_path):
    from support.collector import serving

    with serving(tmp_path) as c:
        yield c


def test_a_kill_before_the_commit_loses_no_message(tmp_path, collector):
    """SIGKILL with every message received and none committed (the chunk is open): none
    was acknowledged, so the broker sends them all again and each is matched once."""
    events = stream(60, seed=11)
    with mosquitto(tmp_path, "allow_anonymous true\nmax_inflight_messages 100\n") as port:
        agent = AgentProcess(tmp_path, port, collector, batch_events=1000,
                             batch_seconds=3600.0, inflight=100)
        agent.start()
        wait_for(lambda: "mqtt_unacked" in agent.metrics(), "the agent's first metrics")
        publish(port, events)
        wait_for(lambda: agent.metrics().get("mqtt_unacked") == len(events),
                 "every message to reach the agent")
        assert agent.state("consumed") == 0
        agent.kill()
        assert agent.start(once=True).wait(60) == 0, agent.log()
    final = agent.metrics()
    assert (final["consumed"], final["mqtt_unacked"], final["outbox_pending"]) == (60, 0, 0)
    m = acep.Matcher(PATTERN["text"], PATTERN["window"], PATTERN["k"], partition="id")
    expect = stored_rows(m.match(events))
    assert expect and collector.matches() == expect


def test_a_kill_after_the_commit_uploads_no_match_twice(tmp_path, collector):
    """SIGKILL after a chunk is committed (and uploaded) but before the broker has its
    acknowledgements: it sends the messages again (DUP); they are known and skipped."""
    events = stream(60, seed=12)
    with mosquitto(tmp_path, "allow_anonymous true\nmax_inflight_messages 100\n") as port:
        relay = Relay(port)
        try:
            agent = AgentProcess(tmp_path, relay.port, collector, batch_events=30,
                                 batch_seconds=3600.0, inflight=100)
            agent.start()
            wait_for(lambda: "mqtt_unacked" in agent.metrics(), "the agent's first metrics")
            publish(port, events[:30])
            wait_for(lambda: agent.metrics().get("consumed") == 30
                     and agent.metrics()["mqtt_unacked"] == 0, "the first chunk acknowledged")
            time.sleep(0.2)  # the acknowledgements were handed to paho: now on their way
            relay.hold.set()  # the acknowledgements of the next chunk never arrive
            publish(port, events[30:])
            wait_for(lambda: agent.state("consumed") == 60 and agent.pending() == 0,
                     "the second chunk committed and uploaded")
            agent.kill()
        finally:
            relay.close()
        assert agent.start(port, once=True).wait(60) == 0, agent.log()
        final = agent.metrics()
        assert (final["consumed"], final["mqtt_redelivered"]) == (60, 30)
        again = agent.start(port, once=True)  # the redelivered ones were acknowledged
        assert again.wait(60) == 0, agent.log()
        assert agent.metrics()["mqtt_redelivered"] == 0
    stored = collector.matches()
    assert len(stored) == len(set(stored)), "a match is stored twice"
    assert stored and stored == stored_rows(
        acep.Matcher(PATTERN["text"], PATTERN["window"], PATTERN["k"], partition="id")
        .match_batch(acep.EventBatch.from_events(events)).to_matches())
