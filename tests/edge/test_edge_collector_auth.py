"""Wrong tokens at the collector are throttled per client address (edge/throttle.py,
docs/WIRE.md Security): after --auth-failures refused within --auth-window, the address's
requests that need a token are 429 with Retry-After, their tokens never looked up, while
other addresses and /health go on. Real collectors on loopback (one in this process, its
database lookups counted, and one as `python -m edge.collector`), real SQLite files; the
clients bind 127.0.0.1 and 127.0.0.2 and more as their source addresses."""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest
from support.collector import (
    MAX_BODY,
    CollectorProcess,
    CollectorThread,
    ask,
    assert_error,
    make_batch,
    request,
)

from edge.collector.store import open_store
from edge.collector.throttle import MAX_ADDRESSES, AuthThrottle, client_of
from edge.wire import encode_batch

WRONG = "x" * 43  # a token's shape, no device's


def _bindable(address: str, family: int = socket.AF_INET) -> bool:
    try:
        with socket.socket(family) as s:
            s.bind((address, 0))
        return True
    except OSError:
        return False


pytestmark = pytest.mark.skipif(not _bindable("127.0.0.2"),
                                reason="no loopback address beside 127.0.0.1 to send from")


@pytest.fixture
def served(tmp_path, request):
    server = CollectorThread(tmp_path, **getattr(request, "param", {}))
    yield server
    server.close()


def assert_throttled(answer, most: float) -> None:
    status, doc, headers = answer
    assert_error(status, doc, 429, "too many requests with a wrong or missing token from",
                 "--auth-failures", "send it again after Retry-After")
    assert 1 <= int(headers["Retry-After"]) <= most, headers


FIVE = pytest.mark.parametrize("served", [{"auth_failures": 5, "auth_window": 3.0}],
                               indirect=True, ids=["5-in-3s"])


@pytest.mark.parametrize("served", [{"auth_failures": 5, "auth_window": 30.0}],
                         indirect=True, ids=["5-in-30s"])
def test_guessing_is_429_after_n_failures_and_no_token_is_looked_up_while_throttled(
        served, caplog):
    caplog.set_level(logging.INFO, logger="acep.collector")
    for _ in range(5):
        assert served.ask("/v1/whoami", WRONG)[0] == 401
    assert served.store.lookups == 5
    assert_throttled(served.ask("/v1/whoami", WRONG), 30)
    # no token, a correct one, an upload, a sketch: all 429, none looked up
    assert_throttled(served.ask("/v1/whoami"), 30)
    assert_throttled(served.ask("/v1/whoami", served.tokens["d1"]), 30)
    assert_throttled(served.ask("/v1/batches", served.tokens["d1"], method="POST",
                                body=encode_batch(make_batch("d1"))), 30)
    assert_throttled(served.ask("/v1/sketches/p1", served.tokens["d1"]), 30)
    assert_throttled(served.ask("/v1/devices", served.tokens["admin"]), 30)
    assert served.store.lookups == 5
    assert served.store.query("SELECT count(*) FROM batches") == [(0,)]
    # another address is not throttled: its correct token passes, its wrong one is 401
    assert served.ask("/v1/whoami", served.tokens["d2"], source="127.0.0.2")[1] == \
        {"device": "d2", "role": "device"}
    assert served.ask("/v1/whoami", WRONG, source="127.0.0.2")[0] == 401
    assert served.ask("/health")[0] == 200  # a load balancer's check needs no token
    metrics = served.ask("/metrics")[1]
    assert (metrics["refused_unauthorized"], metrics["refused_auth_throttled"]) == (6, 6)
    assert (metrics["auth_failing_addresses"], metrics["auth_throttled_addresses"]) == (2, 1)
    said = [r.getMessage() for r in caplog.records if "wrong or missing token within" in
            r.getMessage()]
    assert said == ["127.0.0.1 sent 5 requests with a wrong or missing token within 30 s: its "
                    "requests with a token are answered 429, unchecked, for 30 s"]


@FIVE
def test_the_throttle_ends_after_the_window_and_the_count_starts_again(served):
    for _ in range(5):
        assert served.ask("/v1/whoami", WRONG)[0] == 401
    status, _, headers = served.ask("/v1/whoami", served.tokens["d1"])
    assert status == 429
    time.sleep(int(headers["Retry-After"]) + 0.2)
    assert served.ask("/v1/whoami", served.tokens["d1"])[0] == 200
    for _ in range(4):  # a new count: four more refusals are not yet five
        assert served.ask("/v1/whoami", WRONG)[0] == 401
    assert served.ask("/v1/whoami", served.tokens["d1"])[0] == 200
    assert served.store.lookups == 11


@pytest.mark.parametrize("served", [{"auth_failures": 3, "auth_window": 60.0,
                                     "metrics_token": b"scrape-token"}],
                         indirect=True, ids=["metrics-token"])
def test_wrong_metrics_tokens_are_throttled_and_counted_for_prometheus(served):
    for token in ("wrong", None, "wrong-again"):
        status, doc, headers = served.ask("/metrics?format=prometheus", token)
        assert_error(status, doc, 401, "--metrics-token-file")
    assert_throttled(served.ask("/metrics?format=prometheus", "scrape-token"), 60)
    status, text, _ = served.ask("/metrics?format=prometheus", "scrape-token",
                                 source="127.0.0.2")
    assert status == 200
    for line in ("acep_collector_refused_unauthorized_total 3.0",
                 "acep_collector_refused_auth_throttled_total 1.0",
                 "acep_collector_auth_throttled_addresses 1.0",
                 "acep_collector_auth_failing_addresses 1.0"):
        assert line in text.decode(), text.decode()
    assert served.store.lookups == 0  # the metrics token is not in the database


@pytest.mark.parametrize("served", [{"auth_failures": 2, "auth_window": 60.0,
                                     "auth_addresses": 4}],
                         indirect=True, ids=["4-addresses"])
def test_the_table_of_failing_addresses_stays_bounded(served):
    sources = [f"127.0.0.{k}" for k in range(10, 40)]
    for source in sources:
        assert served.ask("/v1/whoami", WRONG, source=source)[0] == 401
        assert len(served.collector.throttle.records) <= 4
    assert served.ask("/metrics")[1]["auth_failing_addresses"] == 4
    newest = sources[-1]
    assert served.ask("/v1/whoami", WRONG, source=newest)[0] == 401
    assert_throttled(served.ask("/v1/whoami", served.tokens["d1"], source=newest), 60)
    # the oldest were dropped: their count starts again
    assert served.ask("/v1/whoami", WRONG, source=sources[0])[0] == 401
    assert served.ask("/v1/whoami", served.tokens["d1"], source=sources[0])[0] == 200


def burst(served: CollectorThread, n: int, token: str, source: str = "127.0.0.1") -> Counter:
    """The statuses of ``n`` requests for /v1/whoami sent at once, each on a connection of
    its own, while the collector's database thread is busy (storing a big upload, say): so
    every one of them reaches the collector before any token is looked up."""
    busy = threading.Event()
    served.collector.pool.submit(busy.wait, 30)
    with ThreadPoolExecutor(n) as clients:
        answers = [clients.submit(served.ask, "/v1/whoami", token, source) for _ in range(n)]
        time.sleep(1.0)  # every request in and past the throttle's check
        busy.set()
        return Counter(answer.result()[0] for answer in answers)


@pytest.mark.parametrize("served", [{"auth_failures": 5, "auth_window": 60.0}],
                         indirect=True, ids=["5-in-60s"])
def test_guesses_on_many_connections_at_once_get_no_more_lookups_than_the_limit(served):
    assert burst(served, 40, WRONG) == {401: 5, 429: 35}
    assert served.store.lookups == 5
    metrics = served.ask("/metrics")[1]
    assert (metrics["refused_unauthorized"], metrics["refused_auth_throttled"]) == (5, 35)
    assert metrics["auth_throttled_addresses"] == 1


@pytest.mark.parametrize("served", [{"auth_failures": 3, "auth_window": 60.0}],
                         indirect=True, ids=["3-in-60s"])
def test_correct_tokens_on_many_connections_of_one_address_all_pass(served):
    """Devices behind one NAT, one with a wrong token: beyond the limit's checks at once,
    a correct token waits for one to end (the lookups take turns in one thread anyway)
    rather than being refused."""
    for _ in range(2):
        assert served.ask("/v1/whoami", WRONG)[0] == 401
    assert burst(served, 30, served.tokens["d1"]) == {200: 30}
    assert served.store.lookups == 32
    assert served.ask("/v1/whoami", WRONG)[0] == 401  # the third failure: throttled
    assert_throttled(served.ask("/v1/whoami", served.tokens["d1"]), 60)


def test_the_throttle_keeps_at_most_its_capacity_of_addresses():
    now = [0.0]
    throttle = AuthThrottle(failures=2, window=60.0, clock=lambda: now[0])
    for k in range(3 * MAX_ADDRESSES):
        throttle.failed(f"10.{k >> 16}.{(k >> 8) & 255}.{k & 255}")
        now[0] += 0.001
    assert len(throttle.records) == MAX_ADDRESSES
    assert throttle.failed("10.9.9.9") is False and throttle.failed("10.9.9.9") is True
    assert throttle.retry_after("10.9.9.9") == 60
    now[0] += 61  # a window later every address is quiet: the next failure drops them
    assert throttle.retry_after("10.9.9.9") is None
    throttle.failed("10.8.8.8")
    assert list(throttle.records) == ["10.8.8.8"]


def test_a_late_failure_does_not_extend_the_throttle_nor_log_it_again():
    now = [0.0]
    throttle = AuthThrottle(failures=2, window=10.0, clock=lambda: now[0])
    assert [throttle.failed("a"), throttle.failed("a")] == [False, True]
    now[0] = 5.0  # a lookup that began before the throttle comes back refused
    assert throttle.failed("a") is False and throttle.retry_after("a") == 5
    now[0] = 10.0
    assert throttle.retry_after("a") is None
    assert AuthThrottle(failures=0).failed("a") is False  # 0: off


def test_a_check_counts_as_a_failure_until_it_ends_well():
    now = [0.0]
    throttle = AuthThrottle(failures=3, window=10.0, clock=lambda: now[0])
    assert throttle.failed("a") is False
    assert throttle.reserve("a") and throttle.reserve("a")
    assert not throttle.reserve("a")  # one failure and two checks under way: the limit
    throttle.release("a")  # a correct token: no failure, its check ends
    assert throttle.reserve("a")
    assert throttle.failed("a") is False
    throttle.release("a")
    assert not throttle.reserve("a")
    assert throttle.failed("a") is True  # the third: throttled, no check under way left
    throttle.release("a")
    assert throttle.retry_after("a") == 10 and throttle.checking == {}
    assert throttle.reserve("b")  # another client's checks go on
    now[0] = 10.0  # the throttle is over: the count starts again
    assert [throttle.reserve("a") for _ in range(4)] == [True, True, True, False]
    off = AuthThrottle(failures=0)
    assert all(off.reserve("a") for _ in range(100)) and off.checking == {}


@pytest.mark.parametrize("address, client", [
    ("2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64"),
    ("2001:db8:1:2:ffff:ffff:ffff:ffff", "2001:db8:1:2::/64"),  # the same /64
    ("2001:db8:1:3::1", "2001:db8:1:3::/64"),  # the next one
    ("fe80::1%eth0", "fe80::/64"),
    ("::1", "::/64"),
    ("::ffff:192.0.2.7", "192.0.2.7"),  # IPv4-mapped: its IPv4 address, not ::ffff:0:0/64
    ("192.0.2.7", "192.0.2.7"),
    (None, "?"), ("", "?"),  # no peer address (a Unix socket)
    ("not-an-address", "not-an-address"),
])
def test_a_client_is_an_ipv4_address_or_an_ipv6_64(address, client):
    assert client_of(address) == client


def test_an_ipv6_client_rotating_through_its_64_is_throttled_as_one():
    throttle = AuthThrottle(failures=3, window=60.0)
    for k in range(3):
        throttle.failed(client_of(f"2001:db8:0:7::{k + 1:x}"))
    assert throttle.retry_after(client_of("2001:db8:0:7:abcd::99")) == 60
    assert throttle.retry_after(client_of("2001:db8:0:8::1")) is None


def listening(address: str) -> socket.socket:
    """An IPv6 socket listening on ``address`` (an IPv4-mapped one takes IPv4 clients)."""
    sock = socket.socket(socket.AF_INET6)
    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    sock.bind((address, 0))
    sock.listen()
    return sock


@pytest.mark.skipif(not socket.has_ipv6 or not _bindable("::1", socket.AF_INET6),
                    reason="no IPv6 loopback address (::1) to serve on")
@pytest.mark.parametrize("served", [{"auth_failures": 3, "auth_window": 60.0}],
                         indirect=True, ids=["3-in-60s"])
def test_an_ipv6_client_is_throttled_as_its_64(served, caplog):
    caplog.set_level(logging.INFO, logger="acep.collector")
    port = served.serve_on(listening("::1"))
    for _ in range(3):
        assert ask(port, "/v1/whoami", WRONG, source="::1", host="::1")[0] == 401
    answer = ask(port, "/v1/whoami", served.tokens["d1"], source="::1", host="::1")
    assert_throttled(answer, 60)
    assert "from ::/64 (at most 3 within 60 s" in answer[1]["error"]
    assert served.ask("/v1/whoami", served.tokens["d1"])[0] == 200  # 127.0.0.1: another
    metrics = served.ask("/metrics")[1]
    assert (metrics["auth_failing_addresses"], metrics["auth_throttled_addresses"]) == (1, 1)
    assert any(r.getMessage().startswith("::/64 sent 3 requests with a wrong or missing "
                                         "token") for r in caplog.records)


@pytest.mark.skipif(not socket.has_ipv6 or not _bindable("::ffff:127.0.0.1", socket.AF_INET6),
                    reason="no IPv6 socket taking IPv4 clients (::ffff:127.0.0.1) here")
@pytest.mark.parametrize("served", [{"auth_failures": 3, "auth_window": 60.0}],
                         indirect=True, ids=["3-in-60s"])
def test_an_ipv4_client_of_an_ipv6_socket_counts_as_its_ipv4_address(served):
    """Its peer address is IPv4-mapped (::ffff:127.0.0.1): all of IPv4 is in one /64 so."""
    port = served.serve_on(listening("::ffff:127.0.0.1"))
    for _ in range(3):
        assert ask(port, "/v1/whoami", WRONG)[0] == 401
    answer = ask(port, "/v1/whoami", served.tokens["d1"])
    assert_throttled(answer, 60)
    assert "from 127.0.0.1 (at most 3" in answer[1]["error"]
    assert ask(port, "/v1/whoami", served.tokens["d2"], source="127.0.0.2")[0] == 200
    assert_throttled(served.ask("/v1/whoami", served.tokens["d1"]), 60)  # and on IPv4


# --------------------------------------------------------------------------- the process


@pytest.fixture
def srv(tmp_path, request):
    server = CollectorProcess(tmp_path, *request.param, max_body=MAX_BODY)
    store = open_store(server.db)
    server.tokens = {"d1": store.add_device("d1")}
    store.close()
    server.start()
    yield server
    if server.proc.poll() is None:
        assert server.stop() == 0


@pytest.mark.parametrize("srv", [("--auth-failures", "3")], indirect=True, ids=["3"])
def test_the_collector_throttles_an_address_that_guesses_and_says_so_once(srv):
    for _ in range(3):
        assert request(srv.url + "/v1/whoami", token=WRONG)[0] == 401
    for token in (WRONG, srv.tokens["d1"], WRONG):
        status, data, headers = request(srv.url + "/v1/whoami", token=token)
        assert_throttled((status, json.loads(data), headers), 60)
        assert int(headers["Retry-After"]) >= 55  # the default --auth-window, 60 s
    assert ask(srv.port, "/v1/whoami", srv.tokens["d1"], source="127.0.0.2")[0] == 200
    assert request(srv.url + "/health")[0] == 200
    text = request(srv.url + "/metrics?format=prometheus")[1].decode()
    assert "acep_collector_refused_auth_throttled_total 3.0" in text
    assert "acep_collector_requests_total{status=\"429\"} 3.0" in text
    log = srv.log()
    assert log.count("127.0.0.1 sent 3 requests with a wrong or missing token within 60 "
                     "s") == 1, log
    assert WRONG not in log and srv.tokens["d1"] not in log


@pytest.mark.parametrize("srv", [("--auth-failures", "0")], indirect=True, ids=["off"])
def test_auth_failures_0_turns_the_throttle_off(srv):
    for _ in range(40):  # twice the default limit
        assert request(srv.url + "/v1/whoami", token=WRONG)[0] == 401
    assert request(srv.url + "/v1/whoami", token=srv.tokens["d1"])[0] == 200
    assert "wrong or missing token within" not in srv.log()


@pytest.mark.parametrize("srv", [()], indirect=True, ids=["default"])
def test_by_default_twenty_guesses_a_minute_are_answered(srv):
    for _ in range(20):
        assert request(srv.url + "/v1/whoami", token=WRONG)[0] == 401
    status, _, headers = request(srv.url + "/v1/whoami", token=srv.tokens["d1"])
    assert status == 429 and 55 <= int(headers["Retry-After"]) <= 60


@pytest.mark.parametrize("srv", [("--auth-failures", "2")], indirect=True, ids=["2"])
def test_a_device_behind_a_throttled_address_holds_its_uploads_for_retry_after(srv, tmp_path):
    """A device that shares its address (a NAT) with one that has a wrong token: its
    uploader takes the 429 as any other and holds its batches for Retry-After, not its
    backoff, and keeps them."""
    from edge.agent.outbox import Backoff, Outbox
    from edge.agent.uplink import Uplink
    from edge.agent.uploader import Uploader

    for _ in range(2):
        assert request(srv.url + "/v1/whoami", token=WRONG)[0] == 401
    with Outbox(tmp_path / "outbox.db", backoff=Backoff(1.0, 2.0, 300.0, 0.0)) as box:
        box.put(encode_batch(make_batch("d1", seq=0)), "d1/0")
        uploader = Uploader(box, Uplink(srv.url, srv.tokens["d1"]))
        assert uploader.send_one()
        assert uploader.counts["retried"] == 1 and "HTTP 429" in uploader.last_error
        assert uploader.counts["unauthorized"] == 0  # not its token's fault
        assert time.time() + 55 <= uploader.next_attempt_at() <= time.time() + 61
        assert not uploader.send_one()  # held until then
        assert box.metrics()["pending"] == 1
