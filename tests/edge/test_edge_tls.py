"""HTTPS between the agents, the trainer and the collector, with certificates of a private
CA made for the test (trustme): the collector serves ``--tls-cert``/``--tls-key``, an agent
with ``collector.ca_file`` uploads, heartbeats and passes ``--check``; without the CA it
refuses the certificate and keeps its batches; bad TLS settings are refused by name before
anything runs."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import trustme
from support.agent import config, stream
from support.collector import DEVICE, ROOT, CollectorProcess, query
from support.e2e import sketch_bytes, write_config
from support.links import ConnectProxy, ThinLink
from support.uplink import given_up

from edge.agent import Agent
from edge.agent.config import ConfigError, load_config, parse_config
from edge.agent.preflight import checks
from edge.agent.uplink import CONTINUE_WAIT, Uplink
from trainer.publish import check_publisher
from trainer.train import publish_sketch


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> dict[str, Path]:
    """A CA, the collector's certificate chain and key for 127.0.0.1, and another CA."""
    d = tmp_path_factory.mktemp("pki")
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    server.cert_chain_pems[0].write_to_path(d / "server.pem")
    server.private_key_pem.write_to_path(d / "server.key")
    ca.cert_pem.write_to_path(d / "ca.pem")
    trustme.CA().cert_pem.write_to_path(d / "other-ca.pem")
    return {name: d / name for name in ("server.pem", "server.key", "ca.pem", "other-ca.pem")}


@pytest.fixture(scope="module")
def collector(tmp_path_factory, pki):
    c = CollectorProcess(tmp_path_factory.mktemp("collector"), "--tls-cert",
                         str(pki["server.pem"]), "--tls-key", str(pki["server.key"]))
    c.token = c.add("dev-1")
    c.admin = c.add("ops", "--add-admin")
    c.start()
    assert c.url.startswith("https://127.0.0.1:")
    yield c
    c.kill()


def agent_doc(tmp: Path, collector: CollectorProcess, ca_file: Path | None) -> dict:
    col = {"url": collector.url, "timeout": 5, "drain_timeout": 1.0}
    if ca_file is not None:
        col["ca_file"] = str(ca_file)
    doc = config(tmp, collector=col, outbox={"backoff_base": 0.05, "backoff_max": 0.2})
    doc["device"]["token"] = collector.token
    return doc


def test_an_agent_with_the_ca_uploads_over_https_and_says_it_stopped(tmp_path, collector, pki):
    final = Agent(parse_config(agent_doc(tmp_path, collector, pki["ca.pem"])),
                  events=stream(800)).run()
    assert final["batches_put"] > 0 and final["outbox_pending"] == 0
    stored = query(collector.db, "SELECT batch_id FROM batches WHERE device = 'dev-1'")
    assert len(stored) >= final["batches_sent"] == final["batches_put"]
    (status,) = query(collector.db, "SELECT status FROM devices WHERE device_id = 'dev-1'")
    assert json.loads(status[0])["stopped"] is True  # the final heartbeat went over TLS too
    assert 0 < final["upload_bytes_on_wire"] < final["bytes_sent"]  # gzipped, after the first
    assert final["upload_expect_continue"] and final["upload_gzip"]


def test_a_batch_over_https_waits_for_100_continue(collector, pki):
    """TLS 1.3 sends session tickets after the handshake: they must not pass for an answer."""
    uplink = Uplink(collector.url, collector.token, ca_file=str(pki["ca.pem"]))
    start = time.monotonic()
    out = uplink.post_batch(b"\xc1" * 4096)  # read after 100 Continue, then refused
    assert (out.action, out.status) == ("reject", 400)
    assert time.monotonic() - start < CONTINUE_WAIT / 2 and uplink.expect_continue
    assert uplink.bytes_on_wire == 4096


@pytest.fixture
def proxied(monkeypatch):
    """A tunnelling proxy (CONNECT) that https requests go through (``https_proxy``)."""
    for name in ("HTTPS_PROXY", "no_proxy", "NO_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)

    def through(**kw) -> ConnectProxy:
        proxy = ConnectProxy(**kw)
        monkeypatch.setenv("https_proxy", proxy.url)
        return proxy
    return through


def test_through_a_proxy_the_tunnel_is_not_counted_as_the_body(collector, pki, proxied):
    """http.client sends the proxy's CONNECT through the uplink's connection: it was taken
    for the request's head, and the request's head then counted as body bytes."""
    with proxied() as proxy:
        uplink = Uplink(collector.url, collector.token, ca_file=str(pki["ca.pem"]),
                        compress=False)
        beat = uplink.post_heartbeat({"consumed": 1})
        assert (beat.action, uplink.bytes_on_wire) == ("ack", len(b'{"consumed": 1}'))
        out = uplink.post_batch(b"\xc1" * 4096)  # read whole (no Expect via a proxy), refused
        assert (out.action, out.status) == ("reject", 400)
        assert uplink.bytes_on_wire == len(b'{"consumed": 1}') + 4096
    assert proxy.asked == [f"127.0.0.1:{collector.url.rsplit(':', 1)[1]}"] * 2


@pytest.mark.parametrize("request_kind", ["batch", "heartbeat", "sketch"])
def test_a_proxy_that_trickles_its_tunnel_is_given_up_within_collector_timeout(
        collector, pki, proxied, request_kind):
    """A proxy that answers the CONNECT a byte at a time, each within collector.timeout:
    its answer was read within collector.answer_timeout (three times as long) and then
    given up, as the handshake had no time left. Connecting, the tunnel and the TLS
    handshake together end within collector.timeout, as without a proxy."""
    with proxied(trickle=(1, 0.3)):
        uplink = Uplink(collector.url, collector.token, timeout=1.5,
                        ca_file=str(pki["ca.pem"]))
        start = time.monotonic()
        said = given_up(uplink, request_kind, b"\xc1" * 4096, "abc")
        took = time.monotonic() - start
    assert said == ("GET /v1/sketches/abc: " if request_kind == "sketch" else "connection: ") \
        + "timed out: no TLS connection within 1.5 s (connecting, the proxy's tunnel and the " \
        "handshake together)"
    assert 1.2 < took < 2.0, took
    assert uplink.bytes_on_wire == 0


@pytest.mark.parametrize("ca", [None, "other-ca.pem"], ids=["system CAs", "another CA"])
def test_a_collector_certificate_the_ca_does_not_vouch_for_is_refused(tmp_path, collector, pki,
                                                                      ca):
    doc = agent_doc(tmp_path, collector, None if ca is None else pki[ca])
    final = Agent(parse_config(doc), events=stream(300)).run()
    assert final["batches_put"] > 0 and final["outbox_pending"] == final["batches_put"]
    assert "CERTIFICATE_VERIFY_FAILED" in final["upload_error"]


def test_check_verifies_the_collector_with_the_ca_and_warns_about_plain_http(tmp_path,
                                                                              collector, pki):
    # write_config's device is DEVICE; collector.token is dev-1's (the check fails that)
    cfg = write_config(tmp_path / "good", collector.url, collector.add(DEVICE), sketch=None)
    cfg.write_text(cfg.read_text().replace("timeout = 5.0\n",
                                           f'timeout = 5.0\nca_file = "{pki["ca.pem"]}"\n'))
    lines = [(c.level, c.what, c.why) for c in checks(load_config(cfg))]
    assert ("ok", f"collector {collector.url}", "/health answers") in lines
    assert [level for level, what, _ in lines if what.startswith("device token")] == ["ok"]
    plain = write_config(tmp_path / "plain", "http://192.0.2.1:9", "t", sketch=None)
    plain.write_text(plain.read_text().replace("timeout = 5.0", "timeout = 0.3"))
    warned = [c for c in checks(load_config(plain)) if c.level == "WARN"]
    assert any("plain http: the device token travels in clear" in c.why for c in warned)


def test_the_trainer_publishes_and_agents_download_over_https_with_the_ca(collector, pki):
    body = sketch_bytes(0.5)
    answer = publish_sketch(collector.url, "abc", body, collector.admin, unchecked=True,
                            ca_file=str(pki["ca.pem"]))
    assert answer["bytes"] == len(body)
    # and the agents download it the same way (sketch.download)
    assert Uplink(collector.url, collector.token, ca_file=str(pki["ca.pem"])).get_sketch(
        "abc", 1 << 20) == body
    with pytest.raises(RuntimeError, match="CERTIFICATE_VERIFY_FAILED"):
        publish_sketch(collector.url, "abc", body, collector.admin, unchecked=True,
                       ca_file=str(pki["other-ca.pem"]))


@pytest.mark.parametrize("step", ["check", "publish"])
def test_the_trainer_connects_and_shakes_hands_within_its_timeout_together(collector, pki,
                                                                          step):
    """A collector (or a middlebox) slow to take the connection (a full accept queue: the
    SYN is sent again a second later) and then trickling its TLS handshake: the publish
    and the check before the job gave each the timeout (3.5 s here, 2.5 s being the
    timeout); the two together end within it now."""
    port = int(collector.url.rsplit(":", 1)[1])
    with ThinLink(port, rate=1e6, trickle=(5, 1.2), full_for=0.3) as link:
        url, start = f"https://127.0.0.1:{link.port}", time.monotonic()
        with pytest.raises(RuntimeError) as failed:
            if step == "check":
                check_publisher(url, collector.admin, str(pki["ca.pem"]), timeout=2.5)
            else:
                publish_sketch(url, "abc", sketch_bytes(0.5), collector.admin, timeout=2.5,
                               unchecked=True, ca_file=str(pki["ca.pem"]))
        took = time.monotonic() - start
    assert str(failed.value) == f"cannot reach the collector at {url}: timed out: no TLS " \
        "connection within 2.5 s (connecting and the handshake together)"
    assert 2.0 < took < 3.0, took


def test_the_trainer_publishes_through_a_proxy_within_its_timeout(collector, pki, proxied):
    """A proxy that trickles its answer to the CONNECT: each wait of the tunnel had the
    timeout, and the handshake the timeout again."""
    with proxied():
        answer = publish_sketch(collector.url, "abc", sketch_bytes(0.5), collector.admin,
                                unchecked=True, ca_file=str(pki["ca.pem"]))
    assert answer["bytes"] == len(sketch_bytes(0.5))
    with proxied(trickle=(1, 0.3)):
        start = time.monotonic()
        with pytest.raises(RuntimeError) as failed:
            check_publisher(collector.url, collector.admin, str(pki["ca.pem"]), timeout=1.5)
        took = time.monotonic() - start
    assert str(failed.value).endswith("timed out: no TLS connection within 1.5 s (connecting, "
                                      "the proxy's tunnel and the handshake together)")
    assert 1.2 < took < 2.0, took


def test_bad_tls_settings_are_refused_by_name(tmp_path, pki):
    serve = [sys.executable, "-m", "edge.collector", "--db", str(tmp_path / "c.db"),
             "--archive", str(tmp_path / "a"), "--port", "0"]
    half = subprocess.run(serve + ["--tls-cert", str(pki["server.pem"])], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert half.returncode == 2 and "--tls-cert and --tls-key go together" in half.stderr
    (tmp_path / "junk.pem").write_text("not a certificate\n")
    junk = subprocess.run(serve + ["--tls-cert", str(tmp_path / "junk.pem"), "--tls-key",
                                   str(pki["server.key"])],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert junk.returncode == 2 and f"--tls-cert {tmp_path / 'junk.pem'}" in junk.stderr
    doc = config(tmp_path, collector={"url": "http://127.0.0.1:1", "ca_file": str(pki["ca.pem"])})
    doc["device"]["token"] = "t"
    with pytest.raises(ConfigError, match="collector.ca_file: verifies an https collector"):
        parse_config(doc)
    doc["collector"] = {"url": "https://127.0.0.1:1", "ca_file": str(tmp_path / "junk.pem")}
    with pytest.raises(ConfigError, match="collector.ca_file: .*junk.pem is not a readable PEM"):
        parse_config(doc)
    train = subprocess.run([sys.executable, "-m", "acep.cli", "train", "x.jsonl",
                            "--pattern", "a b", "--window", "1", "--sketch", "s", "--key-file", "k",
                            "--ca-file", str(pki["ca.pem"])],
                           cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert train.returncode == 2 and "--ca-file verifies an https:// --publish URL" in \
        train.stderr
    junk_ca = subprocess.run([sys.executable, "-m", "acep.cli", "train", "x.jsonl",
                              "--pattern", "a b", "--window", "1", "--key-file", "k", "--publish",
                              "https://127.0.0.1:1", "--token-file", "t", "--pattern-id", "p",
                              "--ca-file", str(tmp_path / "junk.pem")],
                             cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert junk_ca.returncode == 2 and \
        f"--ca-file {tmp_path / 'junk.pem'}: not a readable PEM certificate file" in junk_ca.stderr
    with pytest.raises(RuntimeError, match="not a readable PEM certificate file"):
        publish_sketch("https://127.0.0.1:1", "p", b"", "t", ca_file=str(tmp_path / "junk.pem"))
