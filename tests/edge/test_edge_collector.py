"""The collector as a real process on loopback: real HTTP, a real SQLite file, a real Parquet
archive. Good batches are stored once; bad requests get a clear 4xx and the server stays up;
SIGKILL mid-upload and a restart lose and duplicate nothing."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
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
from pathlib import Path

import msgpack
import pyarrow.parquet as pq
import pytest
from support.collector import (
    MAX_BODY,
    REF,
    ROOT,
    SKETCH_KEY,
    CollectorProcess,
    assert_error,
    beat,
    make_batch,
    make_events,
    metrics,
    post,
    raw,
    read_answer,
    request,
    uploading,
)
from support.links import ThinLink
from support.wait import wait_for

import acep
from acep import EventBatch
from acep.events import Event
from edge.collector.archive import Archive, archive_path, compacted_names
from edge.collector.store import hash_token, open_store
from edge.wire import (
    Condenser,
    PatternRef,
    decode_batch,
    encode_batch,
    encode_condensed,
)

# --------------------------------------------------------------------------- the server


# one device's many uploads at once: more than the default --device-uploads 1 allows
MANY = ("--device-uploads", "64")


@pytest.fixture(params=[()], ids=["workers"])
def srv(tmp_path, request):
    server = CollectorProcess(tmp_path, *request.param, max_body=MAX_BODY)
    store = open_store(server.db)
    server.tokens = {d: store.add_device(d) for d in ("d1", "d2")}
    server.tokens["admin"] = store.add_device("admin", "admin")
    store.close()
    server.start()
    yield server
    if server.proc.poll() is None:
        assert server.stop() == 0


# --------------------------------------------------------------------------- tests


def test_good_batch_is_stored_archived_rechecked_and_a_duplicate_is_not(srv):
    batch = make_batch()
    body = encode_batch(batch)
    status, doc = post(srv, body, srv.tokens["d1"])
    assert status == 200 and doc["status"] == "stored" and doc["batch_id"] == "d1/0"
    n = len(batch)
    assert n > 5 and doc["matches"] == n

    rows = srv.rows("SELECT idx, errors, exact, exact_count, exact_matches, trajectory, "
                    "partition FROM matches WHERE batch_id = 'd1/0' ORDER BY idx")
    assert len(rows) == n
    for (idx, errors, exact, count, found, traj, part) in rows:
        assert errors == int(batch.errors[idx])
        assert json.loads(traj) == batch.trajectory[
            batch.trajectory_ptr[idx]:batch.trajectory_ptr[idx + 1]].tolist()
        assert json.loads(part) == batch.partition[idx]
        assert exact == (errors == 0)  # the engine reports the least errors per point
        assert count == len(json.loads(found))  # small windows: the list is whole
        assert count >= exact  # an exact trajectory is one of its point's exact matches
    assert doc["exact"] == sum(r[2] for r in rows) > 0

    path = archive_path(srv.archive, batch)
    assert path.relative_to(srv.archive).parts[:2] == ("date=2023-11-14", "device=d1")
    table = pq.read_table(path)
    assert table.column("position").to_pylist() == batch.event_position.tolist()
    assert table.column("type").to_pylist() == [batch.type_names[c] for c in batch.event_type]
    assert table.column("o").to_pylist() == batch.columns["o"].tolist()
    assert set(table.column("batch_id").to_pylist()) == {"d1/0"}
    assert srv.rows("SELECT archive FROM batches")[0][0] == str(path.relative_to(srv.archive))

    status, doc = post(srv, body, srv.tokens["d1"])
    assert status == 200 and doc["status"] == "duplicate" and doc["matches"] == n
    assert srv.rows("SELECT count(*) FROM matches")[0][0] == n
    assert srv.rows("SELECT count(*) FROM batches")[0][0] == 1
    assert len(list(srv.archive.rglob("*.parquet"))) == 1

    summary = Condenser(slot=10.0, window=REF.window).summarize(
        acep.Matcher(REF.text, window=4.0, k=1, partition="o").match_batch(
            EventBatch.from_events(make_events())), device="d1", seq=1, pattern=REF)
    status, doc = post(srv, encode_condensed(summary), srv.tokens["d1"])
    assert status == 200 and doc["status"] == "stored" and doc["exact"] is None
    assert srv.rows("SELECT sum(matches) FROM summaries")[0][0] == int(summary.matches.sum())

    status, data, _ = request(srv.url + "/metrics")
    m = json.loads(data)
    assert m["batches_stored"] == 2 and m["batches_duplicate"] == 1
    assert m["batches_decoded"] == 2  # the resent body was answered before any re-check
    assert m["matches_stored"] == n and m["exact_rechecks"] == n
    assert m["requests"]["200"] == 3 and m["bytes_in"] >= 2 * len(body)


def test_bad_requests_get_clear_4xx_and_the_server_stays_up(srv):
    good = encode_batch(make_batch())
    d1 = srv.tokens["d1"]
    assert_error(*post(srv, b"\xc1garbage", d1), 400, "body")
    assert_error(*post(srv, good[: len(good) // 2], d1), 400, "truncated")
    doc = msgpack.unpackb(good, raw=False)
    doc["pattern"]["k"] = 7  # the hash no longer matches the pattern
    assert_error(*post(srv, msgpack.packb(doc, use_bin_type=True), d1), 400, "pattern.hash")
    assert_error(*post(srv, good, d1, ctype="application/json"), 415, "application/msgpack")
    assert_error(*post(srv, good, None), 401, "bearer")
    assert_error(*post(srv, good, "not-a-token"), 401, "unknown token")
    assert_error(*post(srv, good, srv.tokens["d2"]), 403, "device", "d1")

    # oversized: by Content-Length before any byte of the body, and while streaming chunks
    head = (f"POST /v1/batches HTTP/1.1\nHost: x\nAuthorization: Bearer {d1}\n"
            "Content-Type: application/msgpack\n")
    assert_error(*raw(srv, head + f"Content-Length: {MAX_BODY + 1}\n"), 413, "Content-Length")
    chunk = b"\x00" * 65536
    chunked = (b"%x\r\n" % len(chunk) + chunk + b"\r\n") * 5 + b"0\r\n\r\n"
    assert_error(*raw(srv, head + "Transfer-Encoding: chunked\n", chunked), 413, "more than")

    # sketches: 404 before any, admin only, signature checked first, ETag and 304
    from support.history import hand_graph

    from history.sketch import Sketch

    url = srv.url + "/v1/sketches/p1"
    status, data, _ = request(url, token=d1)
    assert_error(status, json.loads(data), 404, "p1")
    sketch = Sketch.from_graph(hand_graph(), hashes=8).to_bytes(SKETCH_KEY)
    tampered = bytearray(sketch)
    tampered[len(tampered) // 2] ^= 1
    for body, token, code, word in [(sketch, d1, 403, "admin"),
                                    (bytes(tampered), srv.tokens["admin"], 400, "damaged"),
                                    (Sketch.from_graph(hand_graph(), hashes=8).to_bytes(
                                        b"other key"), srv.tokens["admin"], 400, "key")]:
        status, data, _ = request(url, "PUT", body, token, "application/octet-stream")
        assert_error(status, json.loads(data), code, word)
    status, data, _ = request(url, "PUT", sketch, srv.tokens["admin"], "application/octet-stream")
    assert status == 200 and json.loads(data)["bytes"] == len(sketch)
    assert json.loads(data)["checked"] == 0  # no device has uploaded p1 yet: nothing to check
    status, data, headers = request(url, token=d1)
    assert status == 200 and data == sketch
    status, _, _ = request(url, token=d1, headers={"If-None-Match": headers["ETag"]})
    assert status == 304

    # nothing of the refused requests was stored, and the server still answers
    assert srv.rows("SELECT count(*) FROM batches")[0][0] == 0
    status, data, _ = request(srv.url + "/health")
    assert status == 200 and json.loads(data)["status"] == "ok"
    status, doc = post(srv, good, d1)
    assert status == 200 and doc["status"] == "stored"
    status, data, _ = request(srv.url + "/nowhere")
    assert_error(status, json.loads(data), 404, "Not Found")
    # the operator sees who was refused and why (a device's own log is elsewhere)
    log = srv.log()
    assert "POST /v1/batches from 127.0.0.1: 401 unknown token" in log
    assert "POST /v1/batches from d2: 403" in log and "POST /v1/batches from d1: 400" in log
    assert "/nowhere" not in log  # a 404 is not a refusal


def test_an_attribute_that_would_overwrite_another_in_the_archive_is_400(srv):
    import numpy as np

    doc = msgpack.unpackb(encode_batch(make_batch()), raw=False)
    n = len(np.frombuffer(doc["events"]["position"], "<i8"))
    for name, value in (("attr_tag", 111.0), ("tag", 222.0)):
        doc["events"]["columns"].append({"name": name, "kind": "f8",
                                         "data": np.full(n, value).tobytes()})
    status, answer = post(srv, msgpack.packb(doc, use_bin_type=True), srv.tokens["d1"])
    assert_error(status, answer, 400, "attribute 'attr_tag'", "rename it")
    assert srv.rows("SELECT count(*) FROM batches")[0][0] == 0
    assert not list(srv.archive.rglob("*.parquet"))


NO_VALUE = "is no value of the events' partition attribute 'o'"


@pytest.mark.parametrize("partitions, needle", [
    ([1, 1.0], NO_VALUE), (["ATL", "LAX"], NO_VALUE),
    # a 500 before, at every retry: the database keeps keys as JSON, which has neither
    ([float("nan"), "SFO"], "nan is not a partition key"),
    (["ATL", float("inf")], "inf is not a partition key"),
    ([float("-inf"), "SFO"], "-inf is not a partition key")])
def test_a_match_partition_no_event_has_is_400_naming_it(srv, partitions, needle):
    doc = msgpack.unpackb(encode_batch(make_batch()), raw=False)
    assert sorted(doc["matches"]["partitions"]) == ["ATL", "SFO"]
    doc["matches"]["partitions"] = partitions
    status, answer = post(srv, msgpack.packb(doc, use_bin_type=True), srv.tokens["d1"])
    assert_error(status, answer, 400, "field 'matches.partitions[", needle)
    assert srv.rows("SELECT count(*) FROM batches")[0][0] == 0


def _columns(doc: dict) -> dict:
    import numpy as np

    m, e = doc["matches"], doc["events"]
    return {"start": np.frombuffer(m["start"], "<f8").copy(),
            "point": np.frombuffer(m["point"], "<f8"),
            "ptr": np.frombuffer(m["trajectory_ptr"], "<i8"),
            "traj": np.frombuffer(m["trajectory"], "<i8"),
            "pos": np.frombuffer(e["position"], "<i8"),
            "tag": np.frombuffer(e["tag"], "<f8").copy()}


def test_a_match_whose_start_is_not_its_first_event_s_tag_is_400_naming_it(srv):
    """Stored before, with a start no event of its trajectory has."""
    doc = msgpack.unpackb(encode_batch(make_batch()), raw=False)
    c = _columns(doc)
    i = int(next(j for j in range(len(c["start"])) if c["start"][j] < c["point"][j]))
    c["start"][i] = (c["start"][i] + c["point"][i]) / 2
    doc["matches"]["start"] = c["start"].tobytes()
    status, answer = post(srv, msgpack.packb(doc, use_bin_type=True), srv.tokens["d1"])
    assert_error(status, answer, 400, f"field 'matches.start': match {i}: ",
                 "is not the tag of the trajectory's first event")
    assert srv.rows("SELECT count(*) FROM batches")[0][0] == 0


def test_events_whose_tags_go_back_in_their_partition_are_400_naming_them(srv):
    """Stored before; the exact re-check then gave up on them (exact: null)."""
    doc = msgpack.unpackb(encode_batch(make_batch()), raw=False)
    c = _columns(doc)
    ends = {int(p) for k in range(len(c["ptr"]) - 1)
            for p in (c["traj"][c["ptr"][k]], c["traj"][c["ptr"][k + 1] - 1])}
    k = max(k for k in range(1, len(c["pos"])) if int(c["pos"][k]) not in ends)
    c["tag"][k] = c["tag"][:k].min() - 1.0  # before every earlier event, whatever its partition
    doc["events"]["tag"] = c["tag"].tobytes()
    status, answer = post(srv, msgpack.packb(doc, use_bin_type=True), srv.tokens["d1"])
    assert_error(status, answer, 400, "field 'events.tag': the event at position "
                 f"{int(c['pos'][k])} has tag", "in its partition: tags go back in time")
    assert srv.rows("SELECT count(*) FROM batches")[0][0] == 0
    assert not list(srv.archive.rglob("*.parquet"))


def test_a_batch_the_engine_cannot_check_says_exact_null_stored_and_resent(srv):
    from edge.wire import pattern_hash

    doc = msgpack.unpackb(encode_batch(make_batch()), raw=False)
    p = doc["pattern"]
    p["text"] = "a b ((("
    p["hash"] = pattern_hash(p["text"], p["window"], p["k"], p["where"], p["partition_by"])
    body = msgpack.packb(doc, use_bin_type=True)
    first, again = post(srv, body, srv.tokens["d1"]), post(srv, body, srv.tokens["d1"])
    assert (first[0], first[1]["status"], again[1]["status"]) == (200, "stored", "duplicate")
    assert first[1]["exact"] is None and again[1]["exact"] is None
    assert srv.rows("SELECT count(*) FROM matches WHERE exact IS NULL")[0][0] == \
        first[1]["matches"] > 0


def test_malformed_http_is_a_400_and_one_rate_limited_warning_line_without_traceback(srv):
    malformed = ["GET /health HTTP/1.1\nContent-Length: -1\n",
                 "POST /v1/heartbeat HTTP/1.1\nHost: x\nTransfer-Encoding: chunked\n\nzz\n",
                 "GET /health HTTP/1.1\nX-Long: " + "a" * 9000 + "\n"]
    for head in malformed * 10:
        s = raw(srv, head, wait_answer=False)
        assert first_answer(s).startswith(b"HTTP/1.0 400 Bad Request")
        s.close()
    assert request(srv.url + "/health")[0] == 200
    log = srv.log()
    assert "Traceback" not in log and "ERROR" not in log
    assert "malformed request from 127.0.0.1: 400 Invalid character in Content-Length" in log
    assert "400 Invalid character in chunk size" in log and "Got more than 8190 bytes" in log
    assert log.count("malformed request from") == 20  # then the rate limit's count
    assert json.loads(request(srv.url + "/metrics")[1])["requests"]["400"] == 30


def raw_bytes(srv: CollectorProcess, head: bytes) -> socket.socket:
    """A connection on which ``head`` (bytes as they are, lines ending in LF) was sent."""
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
    s.sendall(head.replace(b"\n", b"\r\n") + b"\r\n")
    return s


@pytest.mark.parametrize("srv", [("--access-log",)], ids=["access-log"], indirect=True)
def test_a_token_is_never_logged_and_bytes_beyond_utf8_in_headers_are_4xx(srv):
    """aiohttp's parser quotes the header line it refuses: the token of an Authorization
    header with a stray byte, one too long or with a space before its colon went to the
    log (its 400 answer, to the sender alone, still shows it). An Authorization or an
    Expect header of bytes that are not UTF-8 was a 500 with a traceback (the token hashed
    as UTF-8; aiohttp's own 417 text)."""
    token = srv.tokens["d1"].encode()
    for line in (b"Authorization: Bearer " + token + b"\x01",
                 b"Authorization : Bearer " + token,
                 b"Authorization: Bearer " + token + b"x" * 9000,
                 b"Authorization: " + token + b"x" * 9000):  # the value quoted alone
        s = raw_bytes(srv, b"GET /v1/whoami HTTP/1.1\nHost: x\n" + line + b"\n")
        assert first_answer(s).startswith(b"HTTP/1.0 400 Bad Request")
        s.close()
    for target in (b"GET /v1/whoami", b"POST /v1/batches"):
        s = raw_bytes(srv, target + b" HTTP/1.1\nHost: x\nContent-Length: 0\n"
                      b"Authorization: Bearer \xff\xfe\n")
        status, doc = read_answer(s)
        assert (status, doc["error"]) == (401, "unknown token (not ASCII text: a token is 43 "
                                               "letters, digits, '-' and '_')"), doc
    for path in (b"/health", b"/metrics", b"/v1/whoami", b"/v1/sketches/p1", b"/v1/devices"):
        s = raw_bytes(srv, b"GET " + path + b" HTTP/1.1\nHost: x\nAuthorization: Bearer "
                      + token + b"\nExpect: \xb2\n")
        status, doc = read_answer(s)
        assert status == 417 and "only 100-continue is supported" in doc["error"], doc
    assert request(srv.url + "/v1/whoami", token=srv.tokens["d1"])[0] == 200
    log = srv.log()
    assert srv.tokens["d1"] not in log and "Traceback" not in log and "ERROR" not in log
    assert log.count("400 Invalid header value char: b'Authorization ... (not logged: it may "
                     "hold a token)") == 1
    assert "500" not in json.loads(request(srv.url + "/metrics")[1])["requests"]


def _sketch_for(partition, **kw) -> bytes:
    from history.build import build_history
    from history.sketch import Sketch

    spec = dict(pattern=REF.text, window=REF.window, k=REF.k, where=list(REF.where)) | kw
    events = EventBatch.from_events(make_events(n=200))
    graph = build_history(spec.pop("pattern"), events, partition=partition, n_bins=2, **spec)
    return Sketch.from_graph(graph, hashes=4).to_bytes(SKETCH_KEY)


def test_sketch_upload_must_fit_the_pattern_the_devices_upload(srv):
    """Once devices have uploaded batches under a pattern id, a sketch they would refuse
    (another pattern, k, window, predicates or partition attribute) is refused at PUT
    with 409 naming the difference, and what was published stays; ?unchecked=1 overrides."""
    admin, url = srv.tokens["admin"], srv.url + "/v1/sketches/p1"

    def put(body, query=""):
        status, data, _ = request(url + query, "PUT", body, admin, "application/octet-stream")
        return status, json.loads(data)

    assert post(srv, encode_batch(make_batch()), srv.tokens["d1"])[1]["status"] == "stored"
    good, whole = _sketch_for("o"), _sketch_for(None)
    status, doc = put(good)
    assert status == 200 and doc["checked"] == 1
    for body, words in [(_sketch_for("o", pattern="a c", where=["c.x >= a.x"]),
                         ["'a c'", "'a b c'"]),
                        (_sketch_for("o", k=0), ["k=0", "k=1"]),
                        (_sketch_for("o", window=8.0), ["window=8"]),
                        (_sketch_for("o", where=[]), ["where=[]"]),
                        (whole, ["without a partition", "partitioned by 'o'"])]:
        assert_error(*put(body), 409, "p1", "unchecked", *words)
        assert request(url, token=srv.tokens["d1"])[1] == good  # the published one stays
    status, doc = put(whole, "?unchecked=1")
    assert status == 200 and doc["checked"] == 0
    assert request(url, token=srv.tokens["d1"])[1] == whole
    assert json.loads(request(srv.url + "/metrics")[1])["sketches_stored"] == 2
    for bad in ("..%2F..%2Fetc", "a%20b", "x" * 65):  # no agent could ask for these
        status, data, _ = request(srv.url + "/v1/sketches/" + bad, "PUT", good, admin,
                                  "application/octet-stream")
        assert_error(status, json.loads(data), 400, "does not match [A-Za-z0-9._-]{1,64}")
    assert json.loads(request(srv.url + "/metrics")[1])["sketches_stored"] == 2


def test_a_sketch_signed_with_another_key_is_400_naming_both_fingerprints(srv):
    """The admin who signed with another key than the collector's is told so, with both
    keys' fingerprints; a sketch it takes answers with the fingerprint it verified."""
    from support.sketches import key_fingerprint, old_writer

    from history.sketch import Sketch

    admin, url = srv.tokens["admin"], srv.url + "/v1/sketches/p1"

    def put(body):
        status, data, _ = request(url, "PUT", body, admin, "application/octet-stream")
        return status, json.loads(data)

    sketch, trainer_key = _sketch_for("o"), b"the trainer's key"
    other = Sketch.from_bytes(sketch, SKETCH_KEY).to_bytes(trainer_key)
    assert_error(*put(other), 400, "sketch: signature check failed: the sketch was signed "
                 f"with another key, {key_fingerprint(trainer_key)}; this key is "
                 f"{key_fingerprint(SKETCH_KEY)} (the collector's --sketch-key-file)")
    old = old_writer(Sketch.from_bytes(sketch, SKETCH_KEY), trainer_key)
    assert_error(*put(old), 400, "damaged or was changed after signing, or it was signed "
                 "with another key", f"this key is {key_fingerprint(SKETCH_KEY)}")
    key_id = key_fingerprint(SKETCH_KEY)
    status, doc = put(sketch)
    assert status == 200 and (doc["key_id"], doc["key_recorded"]) == (key_id, True)
    written_before = old_writer(Sketch.from_bytes(sketch, SKETCH_KEY), SKETCH_KEY)
    status, doc = put(written_before)
    assert status == 200 and (doc["key_id"], doc["key_recorded"]) == (key_id, False)


@pytest.mark.parametrize("srv", [MANY], ids=["workers"], indirect=True)
def test_reused_batch_id_with_another_body_is_409_and_changes_nothing(srv):
    d1 = srv.tokens["d1"]
    first = make_batch(seq=7)
    body = encode_batch(first)
    assert post(srv, body, d1)[1]["status"] == "stored"
    archived = archive_path(srv.archive, first).read_bytes()
    stored = srv.rows("SELECT idx, trajectory FROM matches ORDER BY idx")
    other = make_batch(seq=7, events=make_events(seed=99))  # same id "d1/7", other matches
    status, doc = post(srv, encode_batch(other), d1)
    assert_error(status, doc, 409, "already stored with another body")
    assert "'d1/7'" in doc["error"]
    assert post(srv, body, d1)[1]["status"] == "duplicate"  # the same body still is
    assert srv.rows("SELECT idx, trajectory FROM matches ORDER BY idx") == stored
    assert archive_path(srv.archive, first).read_bytes() == archived
    # concurrent deliveries of the same batches are stored once, whatever their order
    bodies = [encode_batch(make_batch(seq=s, events=make_events(seed=s))) for s in range(10, 18)]
    answers: list = []
    threads = [threading.Thread(target=lambda b=b: answers.append(post(srv, b, d1)))
               for b in bodies + bodies]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    statuses = sorted(str(doc["status"]) for _, doc in answers)
    assert statuses == ["duplicate"] * 8 + ["stored"] * 8, answers
    per_batch = dict(srv.rows("SELECT batch_id, n_rows FROM batches"))
    counts = dict(srv.rows("SELECT batch_id, count(*) FROM matches GROUP BY batch_id"))
    assert counts == per_batch and len(per_batch) == 9
    metrics = json.loads(request(srv.url + "/metrics")[1])
    assert metrics["batches_conflict"] == 1 and metrics["batches_stored"] == 9


def test_sigkill_mid_upload_and_restart_lose_and_duplicate_nothing(srv):
    events = make_events(seed=11, n=200)
    bodies = [encode_batch(make_batch(seq=s, events=events[40 * s: 40 * s + 60]))
              for s in range(4)]
    d1 = srv.tokens["d1"]
    assert post(srv, bodies[0], d1)[1]["status"] == "stored"
    head = (f"POST /v1/batches HTTP/1.1\nHost: x\nAuthorization: Bearer {d1}\n"
            f"Content-Type: application/msgpack\nContent-Length: {len(bodies[1])}\n")
    accepted = {"d1/0"}
    rng = random.Random(5)
    for round_ in range(3):
        # a slow client: half of batch 1 sent, then the server is killed
        s = raw(srv, head, bodies[1][: len(bodies[1]) // 2], wait_answer=False)
        time.sleep(0.2)
        # and a whole batch in flight when the kill lands, at a random moment
        t = raw(srv, head.replace(str(len(bodies[1])), str(len(bodies[2]))), bodies[2],
                wait_answer=False)
        time.sleep(rng.uniform(0.0, 0.01))
        assert srv.stop(signal.SIGKILL) == -signal.SIGKILL
        t.settimeout(5)
        try:
            if b" 200 " in t.recv(65536).split(b"\r\n", 1)[0]:
                accepted.add("d1/2")  # answered "stored" before the kill: must survive
        except OSError:
            pass
        s.close()
        t.close()
        srv.start()
        stored = {r[0] for r in srv.rows("SELECT batch_id FROM batches")}
        assert accepted <= stored and "d1/1" not in stored, round_
        accepted |= stored
    # a kill between the archive write and the commit leaves a file and no row: the resend
    # rewrites the same file and stores the batch once
    Archive(srv.archive).write(decode_batch(bodies[3]))
    for seq, body in enumerate(bodies):
        status, doc = post(srv, body, d1)
        assert status == 200
        assert doc["status"] == ("duplicate" if f"d1/{seq}" in accepted else "stored"), seq
    per_batch = dict(srv.rows("SELECT batch_id, n_rows FROM batches"))
    assert sorted(per_batch) == [f"d1/{s}" for s in range(4)]
    counts = dict(srv.rows("SELECT batch_id, count(*) FROM matches GROUP BY batch_id"))
    assert counts == per_batch  # every match once, none missing
    assert len(list(srv.archive.rglob("*.parquet"))) == 4
    assert not [p for p in srv.archive.rglob("*") if p.name.endswith(".tmp")]


def test_cli_add_device_prints_a_token_once_and_bad_db_urls_are_named(tmp_path):
    run = [sys.executable, "-m", "edge.collector", "--db", str(tmp_path / "c.db")]
    out = subprocess.run(run + ["--add-device", "pi-1"], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout.strip()
    assert len(out) >= 40
    (token_hash,) = sqlite3.connect(tmp_path / "c.db").execute(
        "SELECT token_sha256 FROM devices WHERE device_id = 'pi-1'").fetchone()
    assert out not in token_hash and len(token_hash) == 64  # only the hash is stored
    bad = subprocess.run([sys.executable, "-m", "edge.collector", "--db", "postgresql://h/db",
                          "--archive", str(tmp_path)], cwd=ROOT, capture_output=True, text=True)
    assert bad.returncode == 2 and "postgresql" in bad.stderr and "sqlite:///" in bad.stderr
    assert not (tmp_path / "h").exists()
    (tmp_path / "empty.key").write_text("\n")
    empty = subprocess.run(run + ["--archive", str(tmp_path / "a"), "--sketch-key-file",
                                  str(tmp_path / "empty.key")],
                           cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert empty.returncode == 2, empty.stderr
    assert f"acep serve: --sketch-key-file {tmp_path / 'empty.key'}: the sketch key file is " \
        "empty" in empty.stderr


def test_a_revoked_device_is_refused_by_the_running_collector_and_its_batches_stay(srv):
    assert post(srv, encode_batch(make_batch("d1", 0)), srv.tokens["d1"])[0] == 200
    assert post(srv, encode_batch(make_batch("d2", 0)), srv.tokens["d2"])[0] == 200
    done = srv.manage("--revoke-device", "d1")
    assert done.returncode == 0 and "revoked d1" in done.stdout, done.stderr
    status, doc = post(srv, encode_batch(make_batch("d1", 1)), srv.tokens["d1"])
    assert status == 401, doc
    assert post(srv, encode_batch(make_batch("d2", 1)), srv.tokens["d2"])[0] == 200
    assert srv.rows("SELECT batch_id FROM batches WHERE device = 'd1'") == [("d1/0",)]

    listed = [json.loads(line) for line in srv.manage("--list-devices").stdout.splitlines()]
    assert [(d["device"], d["role"], d["registered"], d["batches"]) for d in listed] == [
        ("admin", "admin", True, 0), ("d1", None, False, 1), ("d2", "device", True, 2)]
    received = srv.rows("SELECT MAX(received_at) FROM batches WHERE device = 'd2'")[0][0]
    assert listed[2]["last_batch"] == received and listed[0]["last_batch"] is None
    assert listed[2]["token_issued"] <= received

    unknown = srv.manage("--revoke-device", "pi-9")
    assert unknown.returncode == 2 and "no device 'pi-9'" in unknown.stderr
    token = srv.manage("--add-device", "d1").stdout.strip()  # back, with a new token
    assert post(srv, encode_batch(make_batch("d1", 1)), token)[0] == 200
    assert post(srv, encode_batch(make_batch("d1", 2)), srv.tokens["d1"])[0] == 401


def test_a_rotated_token_is_accepted_beside_the_new_one_until_the_new_one_is_used(srv):
    new = srv.manage("--rotate-token", "d1").stdout.strip()
    assert new and new != srv.tokens["d1"]
    (listed,) = [d for d in map(json.loads, srv.manage("--list-devices").stdout.splitlines())
                 if d["device"] == "d1"]
    assert listed["old_token_until"] > time.time() + 6 * 86400  # a week at most
    # the device still holds the old token: it goes on uploading (a running collector)
    assert post(srv, encode_batch(make_batch("d1", 0)), srv.tokens["d1"])[0] == 200
    assert post(srv, encode_batch(make_batch("d1", 1)), new)[0] == 200  # now the new one
    assert post(srv, encode_batch(make_batch("d1", 2)), srv.tokens["d1"])[0] == 401
    unknown = srv.manage("--rotate-token", "pi-9")
    assert unknown.returncode == 2 and "no device 'pi-9'" in unknown.stderr


def test_a_rotated_token_ends_after_its_grace_or_at_another_new_token(tmp_path):
    store = open_store(tmp_path / "c.db")
    first = store.add_device("d1")
    second = store.rotate_token("d1", grace=60.0, now=1000.0)
    assert store.identify(first, now=1059.0) == ("d1", "device")  # within its grace
    assert store.identify(first, now=1061.0) is None  # past it
    third = store.rotate_token("d1", grace=60.0, now=2000.0)  # second never used
    assert store.identify(second, now=2001.0) == ("d1", "device")  # rotated out: still valid
    assert store.identify(third, now=2002.0) == ("d1", "device")  # the new one used ...
    assert store.identify(second, now=2003.0) is None  # ... ends the old one at once
    fourth = store.rotate_token("d1", grace=60.0, now=3000.0)
    store.add_device("d1")  # a new token the plain way: every other one ends at once
    assert store.identify(third, now=3001.0) is store.identify(fourth, now=3001.0) is None
    assert store.rotate_token("nobody") is None
    store.close()


def test_a_new_token_for_a_known_device_refuses_the_old_one_at_once(srv):
    token = srv.manage("--add-device", "d2").stdout.strip()
    assert post(srv, encode_batch(make_batch("d2", 0)), srv.tokens["d2"])[0] == 401
    assert post(srv, encode_batch(make_batch("d2", 0)), token)[0] == 200


def test_prune_deletes_the_days_before_a_date_from_the_database_and_the_archive(srv):
    day = 86400.0
    for seq, created in enumerate((1.7e9, 1.7e9 + 3 * day)):  # 2023-11-14 and 2023-11-17
        assert post(srv, encode_batch(make_batch("d1", seq, created_at=created)),
                    srv.tokens["d1"])[0] == 200
    kept = srv.rows("SELECT COUNT(*) FROM matches WHERE batch_id = 'd1/1'")[0][0]
    pruned = srv.rows("SELECT COUNT(*) FROM matches WHERE batch_id = 'd1/0'")[0][0]
    assert kept > 0 and pruned > 0
    done = srv.manage("--archive", str(srv.archive), "--prune-before", "2023-11-16")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"before": "2023-11-16", "batches": 1,
                                       "matches": pruned, "summaries": 0, "finds": 0,
                                       "archive_files": 1}
    assert srv.rows("SELECT batch_id FROM batches") == [("d1/1",)]
    assert srv.rows("SELECT COUNT(*) FROM matches")[0][0] == kept
    assert sorted(p.name for p in srv.archive.iterdir()) == ["date=2023-11-17"]
    # the running collector goes on: the kept batch is still a duplicate
    status, doc = post(srv, encode_batch(make_batch("d1", 1, created_at=1.7e9 + 3 * day)),
                       srv.tokens["d1"])
    assert (status, doc["status"]) == (200, "duplicate")
    bad = srv.manage("--prune-before", "16/11/2023")
    assert bad.returncode == 2 and "is not a day (YYYY-MM-DD)" in bad.stderr


def test_heartbeats_and_requests_tell_when_a_device_was_last_seen(srv):
    before = time.time()
    status, doc = beat(srv, json.dumps({"consumed": 7, "outbox_pending": 2}).encode(),
                       srv.tokens["d1"])
    assert status == 200 and doc["device"] == "d1" and doc["time"] >= before
    assert post(srv, encode_batch(make_batch("d2", 0)), srv.tokens["d2"])[0] == 200
    bad = [(b"{not json", "application/json", 400, "heartbeat: body is not JSON"),
           (b"[1, 2]", "application/json", 400, "must be a JSON object"),
           (b"[" * 5000 + b"]" * 5000, "application/json", 400, "heartbeat: body is nested"),
           (b'{"x": ' + b"[" * 500 + b"]" * 500 + b"}", "application/json", 400,
            "heartbeat: body is nested deeper than the limit of 64 levels"),
           (b"{}", "application/msgpack", 415, "a heartbeat is 'application/json'"),
           (json.dumps({"x": "y" * 20000}).encode(), "application/json", 413, "limit of 16384")]
    for body, ctype, code, message in bad:
        status, doc = beat(srv, body, srv.tokens["d1"], ctype)
        assert (status, message in doc["error"]) == (code, True), doc
    assert beat(srv, b"{}", None)[0] == 401 and beat(srv, b"{}", "wrong")[0] == 401

    listed = {d["device"]: d for d in map(json.loads, srv.manage("--list-devices")
                                          .stdout.splitlines())}
    assert listed["d1"]["status"] == {"consumed": 7, "outbox_pending": 2}  # the bad ones: none
    assert listed["d1"]["last_seen"] >= before and listed["d1"]["batches"] == 0
    assert listed["d2"]["last_seen"] >= before and listed["d2"]["status"] is None
    assert listed["admin"]["last_seen"] is None and listed["admin"]["status"] is None
    metrics = json.loads(request(srv.url + "/metrics")[1])
    assert metrics["heartbeats"] == 1
    status, data, _ = request(srv.url + "/v1/devices", token=srv.tokens["admin"])
    remote = json.loads(data)
    assert status == 200 and remote["time"] >= listed["d1"]["last_seen"]
    assert {d["device"]: d for d in remote["devices"]} == listed | {
        "admin": {**listed["admin"], "last_seen": remote["devices"][0]["last_seen"]}}
    assert remote["devices"][0]["last_seen"] >= before  # the admin's own request: seen
    status, data, _ = request(srv.url + "/v1/devices", token=srv.tokens["d1"])
    assert (status, json.loads(data)["error"]) == (403, "'d1' may not list the devices "
                                                        "(admin only)")
    status, data, _ = request(srv.url + "/v1/sketches/p1", "PUT", b"x", srv.tokens["d1"],
                              "application/octet-stream")
    assert (status, json.loads(data)["error"]) == (403, "'d1' may not publish sketches "
                                                        "(admin only)")
    assert request(srv.url + "/v1/devices")[0] == 401
    for name, role in (("d1", "device"), ("admin", "admin")):
        status, data, _ = request(srv.url + "/v1/whoami", token=srv.tokens[name])
        assert (status, json.loads(data)) == (200, {"device": name, "role": role})
    assert request(srv.url + "/v1/whoami", token="wrong")[0] == 401


def test_a_heartbeat_s_numbers_beyond_a_float_are_listed_as_null(srv):
    """--list-devices and GET /v1/devices print strict JSON whatever a device sends."""
    body = b'{"outbox_pending": 1e400, "outbox_dead": -1e400, "lag_s": 1' + b"0" * 400 + \
        b', "time": 1e400, "ok": 2.5}'
    assert beat(srv, body, srv.tokens["d1"])[0] == 200
    (line,) = [x for x in srv.manage("--list-devices").stdout.splitlines() if '"d1"' in x]
    strict = json.loads(line, parse_constant=lambda c: pytest.fail(f"{c} in {line}"))
    assert strict["status"]["outbox_pending"] is None and strict["status"]["outbox_dead"] is None
    assert strict["status"]["ok"] == 2.5 and strict["clock_ahead_s"] is None
    status, data, _ = request(srv.url + "/v1/devices", token=srv.tokens["admin"])
    assert status == 200 and b"Infinity" not in data
    status, text, _ = request(srv.url + "/metrics?format=prometheus")
    assert status == 200 and 'acep_device_lag_s{device="d1"}' not in text.decode()


def test_metrics_for_prometheus_say_what_the_json_says_and_when_each_device_was_seen(srv):
    from prometheus_client.parser import text_string_to_metric_families

    assert post(srv, encode_batch(make_batch("d1", 0)), srv.tokens["d1"])[0] == 200
    assert beat(srv, json.dumps({"outbox_pending": 4, "outbox_dead": 1, "lag_s": 0.25,
                                 "outbox_disk_full": True, "started_at": 1.7e9}).encode(),
                srv.tokens["d1"])[0] == 200
    assert beat(srv, b'{"outbox_pending": "many", "outbox_dead": [1], "lag_s": NaN}',
                srv.tokens["d2"])[0] == 200  # a device's numbers are not trusted
    assert post(srv, b"not msgpack", srv.tokens["d2"])[0] == 400
    listed = {d["device"]: d for d in map(json.loads, srv.manage("--list-devices")
                                          .stdout.splitlines())}
    assert listed["d2"]["status"] == {"outbox_pending": "many", "outbox_dead": [1],
                                      "lag_s": None}  # NaN is not JSON: stored as null
    as_json = json.loads(request(srv.url + "/metrics")[1])
    status, text, headers = request(srv.url + "/metrics",
                                    headers={"Accept": "text/plain;version=0.0.4"})
    assert status == 200 and headers["Content-Type"].startswith("text/plain")
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(text.decode())
               for s in family.samples}
    for name in ("batches_stored", "batches_decoded", "matches_stored", "heartbeats",
                 "bytes_in"):
        assert samples[(f"acep_collector_{name}_total", ())] == as_json[name], name
    for code, n in as_json["requests"].items():  # without the JSON request itself
        assert samples[("acep_collector_requests_total", (("status", code),))] >= n
    assert samples[("acep_collector_requests_total", (("status", "400"),))] == 1
    seen = {labels[0][1]: v for (name, labels), v in samples.items()
            if name == "acep_device_last_seen_timestamp_seconds"}
    assert seen == {d: listed[d]["last_seen"] for d in ("d1", "d2")}  # admin: never seen
    gauges = {(name, labels[0][1]): v for (name, labels), v in samples.items()
              if name.startswith("acep_device_") and "last_seen" not in name}
    assert gauges == {("acep_device_outbox_pending", "d1"): 4.0,
                      ("acep_device_outbox_dead", "d1"): 1.0, ("acep_device_lag_s", "d1"): 0.25,
                      ("acep_device_outbox_disk_full", "d1"): 1.0,
                      ("acep_device_started_timestamp_seconds", "d1"): 1.7e9}
    status, text, headers = request(srv.url + "/metrics", headers={
        "Accept": "application/openmetrics-text;version=1.0.0,text/plain;q=0.5"})
    assert headers["Content-Type"].startswith("application/openmetrics-text")
    assert text.decode().endswith("# EOF\n")
    assert request(srv.url + "/metrics?format=prometheus")[2]["Content-Type"].startswith(
        "text/plain")


def _prometheus(srv: CollectorProcess) -> tuple[str, dict, dict]:
    """The Prometheus exposition: its text, {(name, device): value} of the device series
    and {family: type}."""
    from prometheus_client.parser import text_string_to_metric_families

    text = request(srv.url + "/metrics?format=prometheus")[1].decode()
    families = list(text_string_to_metric_families(text))
    samples = {(s.name, s.labels.get("device")): s.value for f in families for s in f.samples
               if s.name.startswith("acep_device_")}
    return text, samples, {f.name: f.type for f in families}


def test_prometheus_says_which_jobs_of_a_device_fail_and_what_it_loses(srv):
    """A heartbeat says why a job fails in text (sketch_error, metrics_error, upload_error).
    Before, none of it reached /metrics: no alert could fire on a fleet whose sketch checks
    had failed for a day. Now each device has a 0/1 gauge per job (the text is no label: its
    values are unbounded), since when it fails (the agents that say it), and the counters
    of what it sheds, skips as bad input and loses; an older agent's heartbeat, without the
    *_failing_since fields, still gives the gauges its text fields tell."""
    now = time.time()
    assert beat(srv, json.dumps({
        "time": now, "sketch_error": "sketch download failed: GET /v1/sketches/p1: HTTP 404",
        "sketch_failing_since": now - 86400, "metrics_error": None,
        "metrics_failing_since": None, "upload_error": "HTTP 408: body: no byte for 30 s",
        "upload_failing_since": now - 600, "events_in": 1000, "events_bad": 3,
        "bad_lines": 7, "candidates": 5000, "shed": 1200, "batches_refused": 0,
        "batches_dropped": 2}).encode(), srv.tokens["d1"])[0] == 200
    assert beat(srv, json.dumps({  # an agent from before the *_failing_since fields
        "time": now, "sketch_error": None, "upload_error": "HTTP 503: busy",
        "metrics_error": "cannot write metrics.path m.jsonl: [Errno 28] No space left on "
                         "device"}).encode(), srv.tokens["d2"])[0] == 200
    text, samples, types = _prometheus(srv)
    assert "No space left" not in text and "HTTP 404" not in text  # no free text, anywhere
    device = {k: v for k, v in samples.items() if "last_seen" not in k[0]
              and "clock_ahead" not in k[0]}
    assert device == {
        ("acep_device_sketch_failing", "d1"): 1.0, ("acep_device_metrics_failing", "d1"): 0.0,
        ("acep_device_upload_failing", "d1"): 1.0,
        ("acep_device_sketch_failing_since_timestamp_seconds", "d1"): now - 86400,
        ("acep_device_upload_failing_since_timestamp_seconds", "d1"): now - 600,
        ("acep_device_events_in_total", "d1"): 1000.0,
        ("acep_device_events_bad_total", "d1"): 3.0, ("acep_device_bad_lines_total", "d1"): 7.0,
        ("acep_device_candidates_total", "d1"): 5000.0,
        ("acep_device_shed_total", "d1"): 1200.0,
        ("acep_device_batches_refused_total", "d1"): 0.0,
        ("acep_device_batches_dropped_total", "d1"): 2.0,
        # the older agent: its text fields say which jobs fail; it never said since when,
        # nor whether its uploads fail now (its upload_error stays after a dead letter)
        ("acep_device_sketch_failing", "d2"): 0.0, ("acep_device_metrics_failing", "d2"): 1.0}
    assert types["acep_device_shed"] == types["acep_device_batches_dropped"] == "counter"
    assert types["acep_device_sketch_failing"] == "gauge"

    # a device's values are not trusted: what is not a number (or null) for a gauge, or
    # not a finite count for a counter, is left out
    assert beat(srv, json.dumps({
        "sketch_error": 5, "metrics_error": ["x"], "upload_failing_since": "yesterday",
        "sketch_failing_since": True, "events_in": -1, "shed": "many", "bad_lines": 1e300,
        "candidates": 2.5}).encode(), srv.tokens["d2"])[0] == 200
    assert beat(srv, b'{"events_bad": 1e400, "batches_dropped": NaN}', srv.tokens["d1"])[0] \
        == 200
    _, samples, _ = _prometheus(srv)
    device = {k: v for k, v in samples.items() if "last_seen" not in k[0]
              and "clock_ahead" not in k[0]}
    assert device == {("acep_device_bad_lines_total", "d2"): 1e300,
                      ("acep_device_candidates_total", "d2"): 2.5}


ALERTS = ROOT / "examples" / "prometheus"


def test_the_example_alert_rules_name_metrics_the_collector_exports(srv):
    """examples/prometheus/acep-alerts.yml: every acep_* series its expressions read is one
    a real collector exports (mirroring its archive, after a heartbeat with every device
    number); a renamed metric would silence an alert without a word."""
    import re

    import yaml
    from prometheus_client.parser import text_string_to_metric_families

    from edge.collector.exposition import DEVICE_COUNTERS, DEVICE_FAILING, DEVICE_GAUGES

    assert srv.stop() == 0
    srv.extra = ("--mirror", str(srv.tmp / "mirror"))
    srv.start()
    status = {**{key: 1.0 for key in [*DEVICE_GAUGES, *DEVICE_COUNTERS]}, "time": time.time(),
              **{f"{job}_failing_since": time.time() for job in DEVICE_FAILING},
              "sketch_error": "why", "metrics_error": "why"}
    assert beat(srv, json.dumps(status).encode(), srv.tokens["d1"])[0] == 200
    text = request(srv.url + "/metrics?format=prometheus")[1].decode()
    exported = {s.name for family in text_string_to_metric_families(text)
                for s in family.samples}
    rules = [r for g in yaml.safe_load((ALERTS / "acep-alerts.yml").read_text())["groups"]
             for r in g["rules"]]
    assert len(rules) >= 8 and len({r["alert"] for r in rules}) == len(rules)
    read = set()
    for rule in rules:
        assert rule["labels"]["severity"] in ("info", "warning", "critical"), rule["alert"]
        assert rule["annotations"]["summary"], rule["alert"]
        read |= set(re.findall(r"\bacep_[a-z0-9_]+", rule["expr"]))
    assert read and read <= exported, read - exported
    assert {f"acep_device_{k}" for k in ("outbox_pending", "outbox_dead", "lag_s",
                                         "outbox_disk_full", "clock_ahead_seconds")} <= read
    assert {f"acep_device_{job}_failing" for job in DEVICE_FAILING} <= read
    assert {f"acep_device_{k}_total" for k in ("batches_dropped", "batches_refused",
                                               "bad_lines", "events_bad")} <= read
    assert "acep_device_shed_total" not in read  # a budget sheds by design: no alert on it
    assert {"acep_collector_storage_ok", "acep_collector_auth_throttled_addresses"} <= read


@pytest.mark.skipif(shutil.which("promtool") is None,
                    reason="promtool (Debian's prometheus package; .ci/run installs it)")
def test_the_example_alert_rules_pass_promtool_and_their_unit_tests():
    for args in (["check", "rules", "acep-alerts.yml"], ["test", "rules",
                                                         "acep-alerts.test.yml"]):
        done = subprocess.run(["promtool", *args], cwd=ALERTS, capture_output=True, text=True,
                              timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr


METRICS_TOKEN = "q8V1Y2jB-Ztx_example-metrics-token"


def with_metrics_token(srv: CollectorProcess) -> Path:
    """Restart ``srv`` with --metrics-token-file (the token, a newline after it)."""
    path = srv.tmp / "metrics.token"
    path.write_text(METRICS_TOKEN + "\n")
    assert srv.stop() == 0
    srv.extra = ("--metrics-token-file", str(path))
    srv.start()
    return path


def test_a_metrics_token_file_closes_metrics_to_all_but_its_bearer_and_health_stays_open(srv):
    """/metrics lists every device id with its activity: off loopback that is for the
    scraper alone, once the collector has a token for it."""
    assert request(srv.url + "/metrics")[0] == 200  # without the option: open, as before
    with_metrics_token(srv)
    wrong = METRICS_TOKEN[:-1] + "X"
    for headers in ({}, {"Authorization": f"Bearer {wrong}"},
                    {"Authorization": f"Bearer {srv.tokens['admin']}"},
                    {"Authorization": f"Basic {METRICS_TOKEN}"},
                    {"Authorization": "Bearer"}, {"Authorization": "Bearer t\u00f6ken"}):
        for path in ("/metrics", "/metrics?format=prometheus"):
            status, data, answer = request(srv.url + path, headers=headers)
            assert_error(status, json.loads(data), 401, "--metrics-token-file")
            assert answer["WWW-Authenticate"].startswith("Bearer realm="), answer
    status, data, _ = request(srv.url + "/metrics",
                              headers={"Authorization": f"Bearer {METRICS_TOKEN}"})
    assert status == 200 and json.loads(data)["requests"]["401"] == 12
    status, text, _ = request(srv.url + "/metrics?format=prometheus",
                              headers={"Authorization": f"bearer  {METRICS_TOKEN} "})
    assert status == 200 and "acep_collector_storage_ok 1.0" in text.decode()
    assert request(srv.url + "/health")[0] == 200  # a load balancer's check needs no token
    assert request(srv.url + "/v1/whoami", token=METRICS_TOKEN)[0] == 401  # nothing else
    assert post(srv, encode_batch(make_batch()), srv.tokens["d1"])[0] == 200
    log = srv.log()
    assert "GET /metrics from 127.0.0.1: 401" in log and wrong not in log
    assert METRICS_TOKEN not in log


def test_a_metrics_token_file_that_cannot_be_used_exits_2_naming_it(tmp_path):
    (tmp_path / "empty").write_text("\n")
    (tmp_path / "spaced").write_text("two words\n")
    (tmp_path / "accented").write_text("t\u00f6ken\n", encoding="utf-8")
    (tmp_path / "lines").write_text("one\ntwo\n")
    for name, want in (("missing", "cannot read the metrics token file (No such file"),
                       ("empty", "the metrics token file is empty"),
                       ("spaced", "a space at character 4"),
                       ("accented", "byte 0xc3 at character 2"),
                       ("lines", "a line break at character 4")):
        path = tmp_path / name
        done = subprocess.run([sys.executable, "-m", "edge.collector", "--db",
                               str(tmp_path / "c.db"), "--archive", str(tmp_path / "a"),
                               "--port", "0", "--metrics-token-file", str(path)], cwd=ROOT,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and "listening" not in done.stdout, done.stderr
        assert done.stderr.startswith(f"acep serve: --metrics-token-file {path}: "), done.stderr
        assert want in done.stderr and len(done.stderr.splitlines()) == 1, done.stderr


def _scrape_config(token_file: Path, port: int) -> dict:
    """The scrape job of the comment atop examples/prometheus/acep-alerts.yml, pointed at a
    collector on loopback over HTTP (the example's is HTTPS, with its CA) with
    ``token_file`` as its credentials file."""
    import yaml

    text = (ALERTS / "acep-alerts.yml").read_text()
    block = text.split("#   scrape_configs:\n", 1)[1].split("#   rule_files:", 1)[0]
    job = yaml.safe_load("\n".join(line[4:] for line in block.splitlines()))[0]
    assert job["authorization"] == {"credentials_file": "/etc/prometheus/acep-metrics.token"}
    del job["tls_config"]
    return {**job, "scheme": "http", "authorization": {"credentials_file": str(token_file)},
            "scrape_interval": "1s", "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}


@pytest.mark.skipif(shutil.which("prometheus") is None,
                    reason="prometheus (Debian's prometheus package)")
def test_prometheus_scrapes_a_collector_with_a_metrics_token_as_the_example_says(srv):
    import yaml

    token = with_metrics_token(srv)
    jobs = [_scrape_config(token, srv.port),
            {**_scrape_config(token, srv.port), "job_name": "no-token"}]
    del jobs[1]["authorization"]
    (srv.tmp / "prometheus.yml").write_text(yaml.safe_dump({"scrape_configs": jobs}))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        web = s.getsockname()[1]
    with open(srv.tmp / "prometheus.log", "w") as out:
        prom = subprocess.Popen(["prometheus", f"--config.file={srv.tmp / 'prometheus.yml'}",
                                 f"--storage.tsdb.path={srv.tmp / 'tsdb'}",
                                 f"--web.listen-address=127.0.0.1:{web}"],
                                stdout=out, stderr=subprocess.STDOUT)
    try:
        health, until = {}, time.time() + 60
        while len(health) < 2 or "unknown" in {h for h, _ in health.values()}:
            assert time.time() < until and prom.poll() is None, \
                (health, (srv.tmp / "prometheus.log").read_text()[-3000:])
            time.sleep(0.5)
            try:
                targets = json.loads(request(f"http://127.0.0.1:{web}/api/v1/targets")[1])
            except (OSError, ValueError):  # not listening yet
                continue
            health = {t["labels"]["job"]: (t["health"], t["lastError"])
                      for t in targets["data"]["activeTargets"]}
    finally:
        prom.terminate()
        prom.wait(30)
    assert health["acep-collector"] == ("up", ""), health
    assert health["no-token"][0] == "down" and "401" in health["no-token"][1], health


def test_a_database_from_before_heartbeats_and_digests_is_upgraded_in_place(tmp_path):
    db = tmp_path / "old.db"
    with sqlite3.connect(db) as old:  # the first schema's two tables, one device in it
        old.execute("CREATE TABLE devices (device_id TEXT PRIMARY KEY, role TEXT NOT NULL, "
                    "token_sha256 TEXT NOT NULL UNIQUE, created_at REAL NOT NULL)")
        old.execute("CREATE TABLE batches (batch_id TEXT PRIMARY KEY, device TEXT NOT NULL, "
                    "seq INTEGER NOT NULL, kind TEXT NOT NULL, pattern_id TEXT NOT NULL, "
                    "pattern TEXT NOT NULL, created_at REAL NOT NULL, received_at REAL NOT "
                    "NULL, n_rows INTEGER NOT NULL, n_events INTEGER NOT NULL, bytes INTEGER "
                    "NOT NULL, archive TEXT)")
        old.execute("INSERT INTO devices VALUES ('d1', 'device', ?, 1.0)", (hash_token("t"),))
    store = open_store(db)
    assert store.identify("t", now=100.0) == ("d1", "device")
    store.identify("t", now=110.0)  # within SEEN_EVERY: not written again
    assert store.devices()[0]["last_seen"] == 100.0
    store.heartbeat("d1", {"consumed": 3}, now=120.0)
    assert store.devices()[0] == {
        "device": "d1", "role": "device", "token_issued": 1.0, "batches": 0,
        "last_batch": None, "registered": True, "last_seen": 120.0, "status": {"consumed": 3},
        "old_token_until": None, "clock_ahead_s": None}
    store.close()


def test_a_backup_taken_while_devices_upload_is_whole_and_consistent(srv, tmp_path):
    for seq in range(5):
        assert post(srv, encode_batch(make_batch("d1", seq)), srv.tokens["d1"])[0] == 200
    with uploading(srv, "d2", 100) as posted:
        done = srv.manage("--backup", str(tmp_path / "copy.db"))
    assert done.returncode == 0, done.stderr
    with sqlite3.connect(tmp_path / "copy.db") as copy:
        assert copy.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        batches = {b for (b,) in copy.execute("SELECT batch_id FROM batches")}
        per_batch = dict(copy.execute("SELECT batch_id, COUNT(*) FROM matches GROUP BY 1"))
    assert {f"d1/{i}" for i in range(5)} | {f"d2/{s}" for s in posted[:3]} <= batches
    assert batches <= {b for (b,) in srv.rows("SELECT batch_id FROM batches")}
    assert per_batch == {b: n for b, n in srv.rows("SELECT batch_id, COUNT(*) FROM matches "
                                                   "GROUP BY 1") if b in batches}
    assert json.loads(done.stdout) == {"backup": str(tmp_path / "copy.db"), "batches":
                                       len(batches), "bytes": (tmp_path / "copy.db").stat()
                                       .st_size}
    restored = open_store(tmp_path / "copy.db")  # a collector database as it was
    assert {d["device"] for d in restored.devices()} == {"admin", "d1", "d2"}
    restored.close()
    again = srv.manage("--backup", str(tmp_path / "copy.db"))
    assert again.returncode == 2 and "exists (a backup never overwrites)" in again.stderr
    assert sorted(p.name for p in tmp_path.iterdir() if "copy" in p.name) == ["copy.db"]


def test_listing_or_revoking_on_a_missing_database_creates_none(tmp_path):
    for args in (["--list-devices"], ["--revoke-device", "d1"], ["--prune-before", "2026-01-01"],
                 ["--backup", str(tmp_path / "copy.db")]):
        out = subprocess.run([sys.executable, "-m", "edge.collector", "--db",
                              str(tmp_path / "typo.db"), *args],
                             cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert out.returncode == 2 and "no collector database there" in out.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_database_from_before_the_body_digest_gets_the_column(tmp_path):
    db = sqlite3.connect(tmp_path / "old.db")
    db.execute("CREATE TABLE batches (batch_id TEXT PRIMARY KEY, device TEXT NOT NULL, "
               "seq INTEGER NOT NULL, kind TEXT NOT NULL, pattern_id TEXT NOT NULL, "
               "pattern TEXT NOT NULL, created_at REAL NOT NULL, received_at REAL NOT NULL, "
               "n_rows INTEGER NOT NULL, n_events INTEGER NOT NULL, bytes INTEGER NOT NULL, "
               "archive TEXT)")
    db.execute("INSERT INTO batches VALUES ('d1/0','d1',0,'matches','p','{}',0,0,0,0,0,NULL)")
    db.commit()
    db.close()
    store = open_store(tmp_path / "old.db")
    assert store.stored_digests(["d1/0", "d1/1"]) == {"d1/0": ""}  # unknown: a duplicate
    assert store.store_batch(make_batch(seq=1), nbytes=1, digest="ab" * 32)
    assert store.stored_digests(["d1/1"]) == {"d1/1": "ab" * 32}
    store.close()


def _children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_re_check_workers_exit_when_the_collector_is_killed(srv):
    assert post(srv, encode_batch(make_batch(seq=3)), srv.tokens["d1"])[1]["status"] == "stored"
    children = _children(srv.proc.pid)
    assert children  # the re-check workers (and multiprocessing's resource tracker)
    assert srv.stop(signal.SIGKILL) == -signal.SIGKILL
    deadline = time.time() + 10
    while time.time() < deadline and any(Path(f"/proc/{p}").exists() for p in children):
        time.sleep(0.1)
    assert not [p for p in children if Path(f"/proc/{p}").exists()]
    srv.start()  # for the fixture's clean stop


# --------------------------------------------------------------------------- one bad batch


NO_WORKERS = pytest.mark.parametrize("srv", [(), ("--recheck-workers", "0")],
                                     ids=["workers", "no-workers"], indirect=True)


@NO_WORKERS
def test_created_at_out_of_range_is_400_naming_the_range(srv):
    d1 = srv.tokens["d1"]
    for seq, created in enumerate([1.7e12, 1e300, -1e12, -0.5, 253402300800.0]):
        status, doc = post(srv, encode_batch(make_batch(seq=seq, created_at=created)), d1)
        assert_error(status, doc, 400, "field 'created_at'", "[0, 253402300800)",
                     "9999-12-31")
    status, doc = post(srv, encode_batch(make_batch(seq=10, created_at=0.0)), d1)
    assert status == 200 and doc["status"] == "stored", doc  # the range's start
    paths = sorted(str(p.relative_to(srv.archive).parent) for p in srv.archive.rglob("*.parquet"))
    assert paths == ["date=1970-01-01/device=d1"]
    assert srv.rows("SELECT count(*) FROM batches")[0][0] == 1


@pytest.mark.parametrize("srv", [("--retain-days", "3"),
                                 ("--retain-days", "3", "--recheck-workers", "0")],
                         ids=["workers", "no-workers"], indirect=True)
def test_a_batch_retention_would_delete_at_once_is_400_not_stored_then_pruned(srv):
    """A device whose clock is behind (a Raspberry Pi without a real-time clock says 1970
    until NTP sets it) made batches before the first day --retain-days keeps: stored, the
    next retention pass would delete them within the hour, and the agent would have
    dropped them on the 200. Refused instead, the agent keeps them (a dead letter)."""
    d1, now, day = srv.tokens["d1"], time.time(), 86400.0
    first = (dt.datetime.fromtimestamp(now, dt.UTC).date()
             - dt.timedelta(days=3)).isoformat()
    for seq, created in enumerate([0.0, 1.7e9, now - 4 * day]):
        status, doc = post(srv, encode_batch(make_batch(seq=seq, created_at=created)), d1)
        assert_error(status, doc, 400, "field 'created_at'", f"is before {first}",
                     "the first day the collector keeps (--retain-days 3)",
                     "is the device's clock set?")
    assert not list(srv.archive.rglob("*.parquet"))
    assert srv.rows("SELECT count(*) FROM batches")[0][0] == 0
    for seq, created in enumerate([now - 2 * day, now], start=3):
        status, doc = post(srv, encode_batch(make_batch(seq=seq, created_at=created)), d1)
        assert (status, doc["status"]) == (200, "stored")
    health = json.loads(request(srv.url + "/health")[1])
    assert health["first_day_kept"] == first and health["max_clock_ahead"] == 86400.0
    assert abs(health["time"] - time.time()) < 60


def test_a_batch_from_a_clock_over_a_day_ahead_is_400_and_a_heartbeat_shows_the_offset(srv):
    """Retention goes by created_at: a batch from a clock set years ahead would never be
    deleted, so one over --max-clock-ahead (a day) ahead is refused; an hour ahead is
    stored. The offset of a device's clock shows in its heartbeat's listing."""
    d1, now = srv.tokens["d1"], time.time()
    for seq, created in enumerate([now + 2 * 86400, 253402300799.0]):
        status, doc = post(srv, encode_batch(make_batch(seq=seq, created_at=created)), d1)
        assert_error(status, doc, 400, "field 'created_at'", "ahead of the collector's clock",
                     "--max-clock-ahead 86400 s", "is the device's clock set?")
    assert not list(srv.archive.rglob("*.parquet"))
    status, doc = post(srv, encode_batch(make_batch(seq=2, created_at=now + 3600)), d1)
    assert (status, doc["status"]) == (200, "stored")

    assert beat(srv, json.dumps({"time": time.time() + 7200.0}).encode(), d1)[0] == 200
    assert beat(srv, json.dumps({"consumed": 1}).encode(), srv.tokens["d2"])[0] == 200
    listed = {d["device"]: d for d in map(json.loads, srv.manage("--list-devices")
                                          .stdout.splitlines())}
    assert 7190 < listed["d1"]["clock_ahead_s"] < 7201
    assert listed["d2"]["clock_ahead_s"] is None  # its heartbeat did not say its time
    text = request(srv.url + "/metrics?format=prometheus")[1].decode()
    assert 'acep_device_clock_ahead_seconds{device="d1"} 7' in text
    assert 'acep_device_clock_ahead_seconds{device="d2"}' not in text


def _post_all(srv, bodies: list[tuple[bytes, str]]) -> list[tuple[int, dict]]:
    """POST every body at once (one thread each), so they share commit groups."""
    answers: list = [None] * len(bodies)
    gate = threading.Barrier(len(bodies))

    def send(i: int) -> None:
        gate.wait()
        answers[i] = post(srv, *bodies[i])

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(bodies))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return answers


@pytest.mark.parametrize("srv", [MANY, (*MANY, "--recheck-workers", "0")],
                         ids=["workers", "no-workers"], indirect=True)
def test_a_batch_that_fails_to_store_fails_no_other_batch_of_its_commit_group(srv):
    # d2's archive directory cannot be made (a file is in its way): its batch fails
    # inside the commit, which also holds d1's batches
    day = srv.archive / "date=2023-11-14"
    day.mkdir(parents=True)
    (day / "device=d2").write_text("in the way")
    bad = encode_batch(make_batch(device="d2", seq=0))
    goods = [encode_batch(make_batch(seq=s, events=make_events(seed=s))) for s in range(30)]
    bodies = [(b, srv.tokens["d1"]) for b in goods]
    bodies.insert(10, (bad, srv.tokens["d2"]))
    answers = _post_all(srv, bodies)
    bad_answer = answers.pop(10)
    assert_error(*bad_answer, 500, "internal error")
    log = srv.log()
    assert "ERROR acep.collector: batch from d2 failed (id " in log and "Traceback" in log, log
    assert [a[0] for a in answers] == [200] * 30, [a for a in answers if a[0] != 200]
    assert {a[1]["status"] for a in answers} == {"stored"}
    assert srv.rows("SELECT count(*) FROM batches WHERE device = 'd1'")[0][0] == 30
    assert srv.rows("SELECT count(*) FROM batches WHERE device = 'd2'")[0][0] == 0
    # once the way is clear, the device's retry is stored
    (day / "device=d2").unlink()
    status, doc = post(srv, bad, srv.tokens["d2"])
    assert status == 200 and doc["status"] == "stored", doc


def test_a_500_names_an_id_the_log_has_with_the_traceback_not_the_exception(srv):
    """What failed inside (here: a file in the way of d2's archive folder, named by its
    path in the exception) is the operator's to read, in the log under the id the answer
    gives; the client learns the id alone."""
    day = srv.archive / "date=2023-11-14"
    day.mkdir(parents=True)
    (day / "device=d2").write_text("in the way")
    ids = set()
    for seq in range(2):
        status, doc = post(srv, encode_batch(make_batch(device="d2", seq=seq)),
                           srv.tokens["d2"])
        assert status == 500, doc
        match = re.fullmatch(r"internal error \(id ([0-9a-f]{8})\); see the collector's log",
                             doc["error"])
        assert match and doc["status"] == 500, doc
        ids.add(match[1])
        assert str(srv.archive) not in json.dumps(doc) and "Error" not in doc["error"]
    assert len(ids) == 2  # one id per failure
    log = srv.log()
    for failure in ids:
        (line,) = [x for x in log.splitlines() if f"(id {failure})" in x]
        assert "ERROR acep.collector: batch from d2 failed (id " in line, log
        assert str(day) in line, line  # the exception's text, with its path
    assert log.count("Traceback") == 2


# --------------------------------------------------------------------------- disk space


FULL = pytest.mark.parametrize("srv", [("--min-free", str(1 << 40))], ids=["min-free"],
                               indirect=True)


@FULL
def test_below_min_free_an_upload_is_507_with_retry_after_and_nothing_is_stored(srv):
    body, d1 = encode_batch(make_batch(seq=0)), srv.tokens["d1"]
    for _ in range(3):
        status, data, headers = request(srv.url + "/v1/batches", "POST", body, d1)
        assert_error(status, json.loads(data), 507, "below --min-free 1099511627776 MiB",
                     "send it again later")
        assert headers["Retry-After"] == "60"
    assert beat(srv, b'{"outbox_pending": 1}', d1)[0] == 200  # small: still taken
    metrics = json.loads(request(srv.url + "/metrics")[1])
    assert metrics["refused_no_space"] == 3 and metrics["requests"]["507"] == 3
    assert 0 < metrics["free_bytes"] < metrics["min_free_bytes"] == 1 << 60
    assert srv.rows("SELECT count(*) FROM batches")[0][0] == 0
    assert not list(srv.archive.rglob("*.parquet"))
    assert srv.log().count("uploads are refused until there is room") == 1  # once per spell
    assert srv.stop() == 0
    srv.extra = ()  # room again (the default --min-free): the device's retry is stored
    srv.start()
    status, doc = post(srv, body, d1)
    assert (status, doc["status"]) == (200, "stored")
    assert json.loads(request(srv.url + "/metrics")[1])["min_free_bytes"] == 64 << 20


def test_a_vanished_archive_is_503_for_uploads_and_health_while_metrics_say_so(srv):
    """The archive directory moved away (a disk unmounted): nothing is stored and it is
    not made again; the agents keep their batches (503, Retry-After) until it is back."""
    d1 = srv.tokens["d1"]
    assert post(srv, encode_batch(make_batch(seq=0)), d1)[0] == 200
    moved = srv.archive.rename(srv.tmp / "archive.moved")
    body = encode_batch(make_batch(seq=1))
    for _ in range(2):
        status, data, headers = request(srv.url + "/v1/batches", "POST", body, d1)
        assert_error(status, json.loads(data), 503, str(srv.archive), "is missing",
                     "send it again later")
        assert headers["Retry-After"] == "60"
    status, data, _ = request(srv.url + "/health")
    assert status == 503 and "archive directory" in json.loads(data)["error"]
    status, data, _ = request(srv.url + "/metrics")
    doc = json.loads(data)
    assert status == 200 and doc["storage_ok"] == 0 and "free_bytes" not in doc
    assert doc["refused_unavailable"] == 2
    status, text, _ = request(srv.url + "/metrics?format=prometheus")
    assert status == 200 and "acep_collector_storage_ok 0.0" in text.decode()
    assert not srv.archive.exists()  # never made again: it may be a disk not mounted
    assert srv.rows("SELECT batch_id FROM batches") == [("d1/0",)]
    assert "Traceback" not in srv.log()
    assert srv.log().count("uploads are refused (503) until it is back") == 1

    moved.rename(srv.archive)
    assert request(srv.url + "/health")[0] == 200
    status, doc = post(srv, body, d1)
    assert (status, doc["status"]) == (200, "stored")
    assert json.loads(request(srv.url + "/metrics")[1])["storage_ok"] == 1


def test_an_archive_gone_between_the_check_and_the_write_is_503_and_not_made_again(tmp_path):
    import asyncio

    from edge.collector import Collector

    store = open_store(tmp_path / "c.db")
    collector = Collector(store, Archive(tmp_path / "archive"))
    try:
        (tmp_path / "archive").rmdir()
        status, doc = asyncio.run(collector.commit(encode_batch(make_batch()), "d1", None))
        assert_error(status, doc, 503, "archive directory", "is missing")
        assert not (tmp_path / "archive").exists() and store.counts()["batches"] == 0
    finally:
        collector.close()


@pytest.fixture
def small_disk(tmp_path):
    """A 3 MiB tmpfs: a real file system that fills up (mounting needs root)."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mnt)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=True)


def test_a_full_disk_is_507_for_the_batch_that_did_not_fit_and_spoils_nothing(small_disk):
    # no margin: SQLite meets the full disk
    server = CollectorProcess(small_disk, "--min-free", "0", max_body=MAX_BODY)
    server.err = small_disk.parent / "collector.err"
    store = open_store(server.db)
    token = store.add_device("d1")
    store.close()
    (small_disk / "ballast").write_bytes(b"\0" * (1 << 20))  # deleted to make room later
    server.start()
    answers = {}
    try:
        for seq in range(3000):
            body = encode_batch(make_batch(seq=seq, events=make_events(seed=seq, n=200)))
            status, data, headers = request(server.url + "/v1/batches", "POST", body, token)
            answers[seq] = (status, json.loads(data), body)
            assert status in (200, 507), data
            if status == 507 and sum(a[0] == 507 for a in answers.values()) >= 5:
                break
        refused = [seq for seq, a in answers.items() if a[0] == 507]
        assert len(refused) >= 5, "the disk never filled up"
        assert "no space left" in answers[refused[0]][1]["error"]
        stored = [seq for seq, a in answers.items() if a[0] == 200]
        assert set(range(refused[0])) <= set(stored)  # all fitted until the disk was full
        log = server.log()
        assert "not stored: no space left" in log and "Traceback" not in log
        (small_disk / "ballast").unlink()
        for seq in refused:  # the devices' retries, once there is room
            status, doc = post(server, answers[seq][2], token)
            assert (status, doc["status"]) == (200, "stored"), doc
    finally:
        assert server.stop() == 0
    assert server.rows("PRAGMA integrity_check") == [("ok",)]
    want = sum(a[1].get("matches", 0) for a in answers.values() if a[0] == 200)
    want += sum(len(decode_batch(answers[seq][2])) for seq in refused)
    assert server.rows("SELECT count(*) FROM batches")[0][0] == len(answers)
    assert server.rows("SELECT count(*) FROM matches")[0][0] == want
    files = list(server.archive.rglob("*.parquet"))
    assert len(files) == len(answers) and all(pq.read_metadata(f).num_rows for f in files)


# --------------------------------------------------------------------------- overload


def held_upload(srv: CollectorProcess, device: str, length: int) -> socket.socket:
    """An upload announcing ``length`` bytes whose body is not sent yet, once the collector
    has admitted it (it waits for the body)."""
    before = metrics(srv)["uploads_arriving"]
    s = raw(srv, f"POST /v1/batches HTTP/1.1\nHost: x\nAuthorization: Bearer "
                 f"{srv.tokens[device]}\nContent-Type: application/msgpack\n"
                 f"Content-Length: {length}\n", wait_answer=False)
    wait_for(lambda: metrics(srv)["uploads_arriving"] == before + 1, "the upload admitted",
             10.0)
    return s


def arrived_upload(srv: CollectorProcess, device: str, body: bytes, coding: str | None = None
                   ) -> socket.socket:
    """An upload whose body (sent with Content-Encoding ``coding``) has arrived and waits
    to be answered (read the answer on the socket returned)."""
    before = metrics(srv)["uploads_pending"]
    coded = f"Content-Encoding: {coding}\n" if coding else ""
    s = raw(srv, f"POST /v1/batches HTTP/1.1\nHost: x\nAuthorization: Bearer "
                 f"{srv.tokens[device]}\nContent-Type: application/msgpack\n{coded}"
                 f"Content-Length: {len(body)}\n", body, wait_answer=False)
    wait_for(lambda: metrics(srv)["uploads_pending"] == before + 1, "the upload pending",
             10.0)
    return s


@contextlib.contextmanager
def rechecks_stopped(srv: CollectorProcess):
    """The collector's re-check workers stopped (SIGSTOP) meanwhile: a re-check that takes
    long, so the uploads that arrive wait to be answered (the backlog)."""
    with open(f"/proc/{srv.proc.pid}/task/{srv.proc.pid}/children") as fh:
        workers = [int(p) for p in fh.read().split()]
    assert workers
    for pid in workers:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in workers:
            os.kill(pid, signal.SIGCONT)


def test_a_device_s_second_upload_while_its_first_is_processed_is_429_then_stored(srv):
    first, second = (encode_batch(make_batch(seq=s, events=make_events(seed=s)))
                     for s in (0, 1))
    held = held_upload(srv, "d1", len(first))
    status, data, headers = request(srv.url + "/v1/batches", "POST", second, srv.tokens["d1"])
    assert_error(status, json.loads(data), 429, "'d1' has 1 upload(s) being processed",
                 "at most 1 at a time")
    assert 1 <= int(headers["Retry-After"]) <= 60
    other = encode_batch(make_batch("d2", seq=0))
    assert post(srv, other, srv.tokens["d2"])[1]["status"] == "stored"  # not held up
    held.sendall(first)
    assert read_answer(held)[1]["status"] == "stored"
    assert post(srv, second, srv.tokens["d1"])[1]["status"] == "stored"  # the agent's retry
    m = metrics(srv)
    assert (m["refused_device_busy"], m["requests"]["429"], m["uploads_pending"],
            m["pending_bytes"]) == (1, 1, 0, 0)
    assert srv.rows("SELECT count(*) FROM batches")[0][0] == 3
    assert "POST /v1/batches from d1: 429 device 'd1' has 1 upload(s)" in srv.log()


def first_answer(s: socket.socket) -> bytes:
    """The head of the first answer on ``s`` (an interim ``100 Continue`` or a final one)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(1)
        assert chunk, data
        data += chunk
    return data


def expecting(srv: CollectorProcess, token: str, length: int, path="/v1/batches",
              ctype="application/msgpack", expect="100-continue") -> socket.socket:
    """A request whose client waits for ``100 Continue`` before sending its body."""
    return raw(srv, f"POST {path} HTTP/1.1\nHost: x\nAuthorization: Bearer {token}\n"
                    f"Content-Type: {ctype}\nContent-Length: {length}\n"
                    f"Expect: {expect}\n", wait_answer=False)


def test_expect_100_continue_is_answered_only_when_the_collector_will_read_the_body(srv):
    """A client that waits for 100 Continue is refused (401, 413, 415, 429, 417) without
    sending its body, and told to go on only when the collector will read it."""
    body = encode_batch(make_batch())
    d1 = srv.tokens["d1"]
    s = expecting(srv, d1, len(body))
    assert first_answer(s) == b"HTTP/1.1 100 Continue\r\n\r\n"
    s.sendall(body)
    assert read_answer(s)[1]["status"] == "stored"

    def refused(token, status, word, length=None, ctype="application/msgpack",
                expect="100-continue"):
        s = expecting(srv, token, length or len(body), ctype=ctype, expect=expect)
        head = first_answer(s)
        assert head.startswith(b"HTTP/1.1 %d " % status), (status, head)
        got, doc = read_answer(s, head)
        assert got == status and word in doc["error"], (status, doc)

    refused("not-a-token", 401, "token")
    refused(d1, 413, "Content-Length", length=MAX_BODY + 1)
    refused(d1, 415, "msgpack", ctype="application/json")
    refused(d1, 417, "something-else", expect="something-else")
    held = held_upload(srv, "d1", len(body))
    refused(d1, 429, "at most 1")
    held.close()
    wait_for(lambda: metrics(srv)["uploads_arriving"] == 0, "no upload arriving", 10.0)

    status = b'{"outbox_pending": 0}'
    s = expecting(srv, d1, len(status), path="/v1/heartbeat", ctype="application/json")
    assert first_answer(s) == b"HTTP/1.1 100 Continue\r\n\r\n"
    s.sendall(status)
    assert read_answer(s)[0] == 200
    m = metrics(srv)
    assert m["requests"]["429"] == 1 and m["requests"]["417"] == 1
    assert m["bytes_in"] == len(body) + len(status)  # no refused body was read
    assert srv.rows("SELECT count(*) FROM batches")[0][0] == 1


def test_a_gzipped_upload_is_the_same_batch_and_a_zip_bomb_is_413(srv):
    import gzip
    import zlib

    from edge.agent.uplink import GZIP_LEVEL, Uplink

    d1 = srv.tokens["d1"]
    bodies = [encode_batch(make_batch(seq=s, events=make_events(seed=s))) for s in range(3)]

    def send(body: bytes, coding: str):
        status, data, headers = request(srv.url + "/v1/batches", "POST", body, d1,
                                        headers={"Content-Encoding": coding})
        assert headers["Accept-Encoding"] == "gzip, deflate"  # RFC 7694: what it takes
        return status, json.loads(data)

    assert send(gzip.compress(bodies[0]), "gzip")[1]["status"] == "stored"
    assert post(srv, bodies[0], d1)[1]["status"] == "duplicate"  # one batch, however sent
    assert send(zlib.compress(bodies[1]), "deflate")[1]["status"] == "stored"
    assert_error(*send(bodies[2], "br"), 415, "'br'", "takes gzip, deflate")
    assert_error(*send(b"\x1f\x8b\x08\x00" + bodies[2][:200], "gzip"), 400, "not valid gzip")
    bomb = gzip.compress(b"\x00" * (64 * MAX_BODY))  # 16 MiB of zeros in 16 KiB
    assert len(bomb) < MAX_BODY
    assert_error(*send(bomb, "gzip"), 413, f"more than {MAX_BODY} bytes once decoded")
    m = metrics(srv)
    assert m["bytes_in"] == 2 * len(bodies[0]) + len(bodies[1])  # what was decoded whole
    assert m["bytes_in_wire"] == len(gzip.compress(bodies[0])) + len(bodies[0]) + \
        len(zlib.compress(bodies[1]))

    # the agent's uplink sends its first body as it is, then gzipped: the answer said so
    uplink = Uplink(srv.url, d1)
    assert uplink.post_batch(bodies[2]).detail == "stored" and uplink.gzip_taken
    assert uplink.post_batch(bodies[2]).detail == "duplicate"
    sent = len(bodies[2]) + len(gzip.compress(bodies[2], GZIP_LEVEL, mtime=0))
    assert uplink.bytes_on_wire == sent < 2 * len(bodies[2])
    assert metrics(srv)["bytes_in_wire"] == m["bytes_in_wire"] + sent
    assert srv.rows("SELECT count(*) FROM batches")[0][0] == 3


def _peak_mib(pids: list[int]) -> dict[int, int]:
    """The peak resident memory (VmHWM) of each of ``pids``, in MiB."""
    out = {}
    for pid in pids:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                out[pid] = int(line.split()[1]) >> 10
    return out


def _settled_peak_mib(pids: list[int], quiet: float = 0.5, most: float = 20.0
                     ) -> dict[int, int]:
    """:func:`_peak_mib` once no peak grew for ``quiet`` seconds: re-check workers that
    are still importing at start grow by tens of MiB, which is not the request's."""
    peaks, end = _peak_mib(pids), time.monotonic() + most
    while time.monotonic() < end:
        time.sleep(quiet)
        now = _peak_mib(pids)
        if now == peaks:
            break
        peaks = now
    return peaks


def _empty_maps(size: int) -> bytes:
    """A msgpack map of ``size`` bytes whose lists hold empty maps: one byte each."""
    n = (size - 32) // 4
    lists = b"".join(bytes([0xa1]) + key + b"\xdd" + n.to_bytes(4, "big") + b"\x80" * n
                     for key in (b"a", b"b", b"c", b"d"))
    return b"\x84" + lists


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc")
@pytest.mark.parametrize("srv", [("--max-body", str(4 << 20)),
                                 ("--max-body", str(4 << 20), "--recheck-workers", "0")],
                         ids=["workers", "no-workers"], indirect=True)
def test_a_body_of_empty_maps_is_400_at_once_in_bounded_memory(srv):
    """A byte of msgpack is an empty map, a dict of 64 bytes once decoded: 4 MiB of them
    took a re-check worker (or the database thread) to 400 MB and seconds of CPU before the
    answer (16 MiB, the default --max-body: 1.5 GB, 20 s). A batch holds 8 maps and lists
    and 2 per column: the decoder stops at the one after; so does a sketch's (256)."""
    pids = [srv.proc.pid, *_children(srv.proc.pid)]
    before = _settled_peak_mib(pids)
    start = time.monotonic()
    assert_error(*post(srv, _empty_maps(4 << 20), srv.tokens["d1"]), 400,
                 "body: more than 520 maps and lists")
    status, data, _ = request(srv.url + "/v1/sketches/p1", "PUT", _empty_maps(4 << 20),
                              srv.tokens["admin"], "application/octet-stream")
    assert_error(status, json.loads(data), 400, "sketch holds more than 256 maps and lists")
    assert time.monotonic() - start < 3.0
    grown = {pid: peak - before[pid] for pid, peak in _peak_mib(pids).items()}
    assert max(grown.values()) < 64, grown  # MiB: the body's copies, not a dict per byte
    assert post(srv, encode_batch(make_batch()), srv.tokens["d1"])[1]["status"] == "stored"


def one_window(n: int, text: str) -> bytes:
    """A batch of one match (the last three events) whose window holds ``n`` events of
    types a, b, c in turn, one partition: the re-check's worst case."""
    import numpy as np

    from edge.wire import UploadBatch

    tags = np.arange(n, dtype=float)
    return encode_batch(UploadBatch(
        device="d1", seq=0, pattern=PatternRef("p9", text, 1e9, 1), created_at=1.7e9,
        tag_is_time=False, partition=[None], point=tags[-1:], start=tags[-3:-2],
        errors=np.zeros(1, np.int32), trajectory_ptr=np.array([0, 3], np.int64),
        trajectory=np.arange(n - 3, n, dtype=np.int64),
        event_position=np.arange(n, dtype=np.int64), event_tag=tags,
        event_type=(np.arange(n) % 3).astype(np.int32), type_names=["a", "b", "c"],
        columns={"x": tags.copy()}))


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc")
@pytest.mark.parametrize("srv", [("--max-body", str(1 << 20)),
                                 ("--max-body", str(1 << 20), "--recheck-workers", "0")],
                         ids=["workers", "no-workers"], indirect=True)
def test_a_window_too_large_to_re_check_is_stored_unchecked_at_once(srv):
    """The exact re-check multiplies a matrix per pair of components over a partition's
    events: 3,000 events (84 KB) for 'a b+ c' took 50 s of a worker, 30,000 (840 KB) for
    'a+ b+ c' 23 GB until the kernel killed it. Above edge.collector.recheck.MAX_WORK the batch is
    stored with exact null and the reason, at once, in bounded memory."""
    # a first batch warms the process that ingests (imports, Parquet writer): not measured
    status, doc = post(srv, encode_batch(make_batch("d2", seq=0)), srv.tokens["d2"])
    assert status == 200 and doc["status"] == "stored", doc
    pids = [srv.proc.pid, *_children(srv.proc.pid)]
    before = _peak_mib(pids)
    start = time.monotonic()
    status, doc = post(srv, one_window(3000, "a b+ c"), srv.tokens["d1"])
    assert status == 200 and doc["status"] == "stored" and doc["exact"] is None, doc
    assert time.monotonic() - start < 5.0
    grown = {pid: peak - before[pid] for pid, peak in _peak_mib(pids).items()}
    assert max(grown.values()) < 100, grown  # MiB
    (reason,) = srv.rows("SELECT exact_reason FROM matches WHERE exact_reason IS NOT NULL")[0]
    assert reason.startswith("not re-checked: 3000 events of the partition's windows for a "
                             "pattern of 3 components are about 4.0e+09 steps"), reason
    assert metrics(srv)["rechecks_unsupported"] == 1


# one re-check worker: two uploads keep the collector busy, so the next one may be refused
BUSY = pytest.mark.parametrize("srv", [("--max-wait", "0.01", "--recheck-workers", "1")],
                               ids=["max-wait"], indirect=True)


def backlog(srv: CollectorProcess) -> list[socket.socket]:
    """Two big uploads arrived (d1's, admin's) that wait for the stopped re-check."""
    return [arrived_upload(srv, d, encode_batch(make_batch(d, seq=0, events=make_events(n=600))))
            for d in ("d1", "admin")]


@BUSY
def test_an_upload_that_would_wait_over_max_wait_is_503_with_retry_after_before_its_body(
        srv):
    body = encode_batch(make_batch("d2", seq=0))
    with rechecks_stopped(srv):
        waiting = backlog(srv)
        for _ in range(3):
            status, data, headers = request(srv.url + "/v1/batches", "POST", body,
                                            srv.tokens["d2"])
            assert_error(status, json.loads(data), 503, "collector busy", "would wait about",
                         "above --max-wait 0.01 s")
            assert 1 <= int(headers["Retry-After"]) <= 60
        assert beat(srv, b'{"outbox_pending": 1}', srv.tokens["d2"])[0] == 200  # still taken
        m = metrics(srv)
        queued = m["pending_bytes"]
        assert (m["refused_busy"], m["requests"]["503"], m["uploads_pending"],
                m["max_wait_s"], m["device_uploads"]) == (3, 3, 2, 0.01, 1)
        assert queued > 0.01 * 2**20 and m["departure_rate_bytes"] == 0
        assert m["expected_wait_seconds"] == round(queued / 2**20, 3)
        prom = request(srv.url + "/metrics?format=prometheus")[1].decode()
        for line in ("acep_collector_refused_busy_total 3.0",
                     "acep_collector_uploads_pending 2.0",
                     f"acep_collector_pending_bytes {float(queued)}"):
            assert line in prom, prom
    assert [read_answer(s)[1]["status"] for s in waiting] == ["stored", "stored"]
    assert post(srv, body, srv.tokens["d2"])[1]["status"] == "stored"
    assert srv.rows("SELECT count(*) FROM batches")[0][0] == 3
    log = srv.log()
    assert log.count("collector busy: an upload now would wait about") == 1  # per spell
    assert "uploads are admitted again, after 3 refused in" in log


@pytest.mark.parametrize("srv", [("--max-wait", "0.03", "--recheck-workers", "1")],
                         ids=["max-wait"], indirect=True)
def test_a_gzipped_upload_weighs_in_the_backlog_what_the_re_check_decodes(srv):
    """The re-check's work is the decoded batch, gzipped or not: a fleet that gzips its
    bodies once the collector's first answers said it takes gzip (a quarter of the bytes)
    must not look four times as quick to answer, nor its backlog four times as short."""
    import gzip

    bodies = [encode_batch(make_batch(d, seq=0, events=make_events(n=600)))
              for d in ("d1", "admin")]
    body = encode_batch(make_batch("d2", seq=0))
    decoded, sent = sum(map(len, bodies)), sum(len(gzip.compress(b)) for b in bodies)
    # at the first guess of 1 MiB/s: over --max-wait decoded, under it as sent
    assert (sent + len(body)) / 2**20 < 0.03 < decoded / 2**20
    with rechecks_stopped(srv):
        waiting = [arrived_upload(srv, d, gzip.compress(b), "gzip")
                   for d, b in zip(("d1", "admin"), bodies)]
        m = metrics(srv)
        assert (m["uploads_pending"], m["pending_bytes"]) == (2, decoded)
        assert m["expected_wait_seconds"] == round(decoded / 2**20, 3)
        status, data, headers = request(srv.url + "/v1/batches", "POST", body,
                                        srv.tokens["d2"])
        assert_error(status, json.loads(data), 503, "collector busy", "above --max-wait")
    assert [read_answer(s)[1]["status"] for s in waiting] == ["stored", "stored"]
    assert metrics(srv)["pending_bytes"] == 0
    assert post(srv, body, srv.tokens["d2"])[1]["status"] == "stored"


@pytest.mark.parametrize("srv", [("--max-wait", "0.01", "--recheck-workers", "0")],
                         ids=["one-keeps-it-busy"], indirect=True)
def test_a_body_on_its_way_is_no_backlog_and_a_device_gone_gives_its_place_back(srv):
    """A device on a thin link: its upload is admitted, its body on its way holds up no
    other device's upload (the collector has no work with it yet), and when the device
    goes away without it the place is given back, counted as nginx does (499)."""
    held = held_upload(srv, "d1", MAX_BODY)  # 0.25 s at the first guess of 1 MiB/s
    m = metrics(srv)
    assert (m["uploads_arriving"], m["uploads_pending"], m["pending_bytes"]) == (1, 0, 0)
    body = encode_batch(make_batch("d2", seq=0))
    assert post(srv, body, srv.tokens["d2"])[1]["status"] == "stored"  # before: 503
    held.close()  # the device goes away without its body: its place is given back
    wait_for(lambda: metrics(srv)["uploads_arriving"] == 0, "no upload arriving", 10.0)
    assert metrics(srv)["requests"]["499"] == 1  # counted, as nginx does, and said plainly:
    assert f"499 body: the client went away after 0 of {MAX_BODY} bytes" in srv.log()
    assert "Traceback" not in srv.log()
    assert "503" not in metrics(srv)["requests"]


@BUSY
def test_the_agent_s_uploader_retries_a_503_after_its_retry_after_not_its_backoff(
        srv, tmp_path):
    from edge.agent.outbox import Backoff, Outbox
    from edge.agent.uplink import Uplink
    from edge.agent.uploader import Uploader

    body = encode_batch(make_batch("d2", seq=0))
    with Outbox(tmp_path / "outbox.db", backoff=Backoff(60.0, 2.0, 300.0, 0.0)) as box:
        box.put(body, "d2/0")
        uploader = Uploader(box, Uplink(srv.url, srv.tokens["d2"]))
        with rechecks_stopped(srv):
            waiting = backlog(srv)
            sent_at = time.time()
            assert uploader.send_one()
            assert uploader.counts["retried"] == 1 and "HTTP 503" in uploader.last_error
            assert uploader.uplink.bytes_on_wire == 0  # refused before its body was sent
            # the backoff would wait 60 s; the collector said 1 or 2
            assert sent_at + 1 <= uploader.next_attempt_at() <= time.time() + 2
            assert not uploader.send_one()  # held until then
        assert [read_answer(s)[1]["status"] for s in waiting] == ["stored", "stored"]
        before = metrics(srv)["bytes_in_wire"]
        wait_for(lambda: time.time() >= uploader.next_attempt_at(), "the next attempt", 10.0)
        assert uploader.send_one() and uploader.counts["acked"] == 1
    m = metrics(srv)  # the 503 said the collector takes gzip: the retry is gzipped
    assert uploader.uplink.bytes_on_wire == m["bytes_in_wire"] - before < len(body)
    assert ("d2/0",) in srv.rows("SELECT batch_id FROM batches")


# --------------------------------------------------------------------------- slow bodies


# the body limits at a small scale: no byte for 1 s, or below 4000 bytes/s after 1 s, is 408
SLOW = pytest.mark.parametrize("srv", [("--body-idle-timeout", "1", "--body-min-rate", "4000")],
                               ids=["slow-bodies"], indirect=True)


def send_paced(s: socket.socket, body: bytes, rate: float, step: float = 0.1) -> float:
    """Send ``body`` on ``s`` at a steady ``rate`` (bytes/s), a piece every ``step``
    seconds; how long it took."""
    start, sent = time.monotonic(), 0
    while sent < len(body):
        piece = body[sent:sent + max(int(rate * step), 1)]
        s.sendall(piece)
        sent += len(piece)
        time.sleep(max(start + sent / rate - time.monotonic(), 0.0))
    return time.monotonic() - start


def trickle(s: socket.socket, every: float, most: int) -> tuple[int, float, bytes]:
    """Send one byte every ``every`` seconds (``most`` at most) until the collector
    answers; the bytes sent, the seconds from the first to the answer, the answer's start."""
    start, sent = time.monotonic(), 0
    s.settimeout(every)
    try:
        while sent < most:
            s.sendall(b"\x00")
            sent += 1
            try:
                data = s.recv(65536)
                return sent, time.monotonic() - start, data
            except TimeoutError:
                pass
    finally:
        s.settimeout(10)
    raise AssertionError(f"no answer after {sent} bytes in {time.monotonic() - start:.1f} s")


@SLOW
def test_a_steady_body_slower_than_the_idle_timeout_above_the_minimum_rate_is_stored(srv):
    """A device on a thin link: its body takes several times the idle timeout (the grace
    of the minimum rate) at twice the minimum rate, and is stored (before, one total
    limit refused any body that took longer than it: 60 s, 20 kB at 2G rates)."""
    body = encode_batch(make_batch(events=make_events(n=600)))
    assert len(body) > 3 * 8000
    s = held_upload(srv, "d1", len(body))
    took = send_paced(s, body, rate=8000)
    status, doc = read_answer(s)
    assert status == 200 and doc["status"] == "stored", doc
    assert took > 3.0  # three times the idle timeout, the minimum rate's grace included
    assert "408" not in metrics(srv)["requests"]


@SLOW
@pytest.mark.parametrize("every", [3.0, 0.2], ids=["pauses", "never-pauses"])
def test_a_trickle_is_408_after_the_grace_naming_its_rate_and_gives_its_place_back(srv, every):
    """Slowloris: headers, then a byte now and then. The upload was admitted (its device's
    next one is 429 meanwhile); at the end of the grace (the idle timeout) it is far
    behind the minimum rate, whether it pauses longer than the idle timeout or never: 408
    naming its rate, and the device's next upload is admitted and stored."""
    body = encode_batch(make_batch())
    s = held_upload(srv, "d1", len(body))
    status, data, _ = request(srv.url + "/v1/batches", "POST", body, srv.tokens["d1"])
    assert_error(status, json.loads(data), 429, "'d1' has 1 upload(s) being processed")
    sent, took, head = trickle(s, every=every, most=50)
    status, doc = read_answer(s, head)
    assert_error(status, doc, 408, f"of {len(body)} bytes in 1 s,", "bytes/s on average: "
                 "below the collector's minimum of 4000 bytes/s (--body-min-rate)")
    assert 0.8 <= took < 2.5, (sent, took)
    assert metrics(srv)["uploads_arriving"] == 0
    assert post(srv, body, srv.tokens["d1"])[1]["status"] == "stored"
    m = metrics(srv)
    assert m["requests"]["408"] == 1 and m["uploads_pending"] == m["pending_bytes"] == 0
    assert "POST /v1/batches from d1: 408 body: " in srv.log()


@SLOW
def test_a_body_that_stops_is_408_after_the_idle_timeout_and_gives_its_place_back(srv):
    """A device whose link dies half-way, ahead of the minimum rate: 408 once no byte came
    for the idle timeout, and its next upload is admitted."""
    body = encode_batch(make_batch())
    s = held_upload(srv, "d1", len(body))
    half = len(body) // 2
    s.sendall(body[:half])
    start = time.monotonic()
    status, doc = read_answer(s)
    took = time.monotonic() - start
    assert_error(status, doc, 408, "no byte for 1 s (--body-idle-timeout)",
                 f"after {half} of {len(body)} bytes")
    assert 0.8 <= took < 2.5, took
    assert post(srv, body, srv.tokens["d1"])[1]["status"] == "stored"
    assert metrics(srv)["requests"]["408"] == 1
    assert "POST /v1/batches from d1: 408 body: no byte for 1 s" in srv.log()


def closed_within(s: socket.socket, seconds: float) -> float | None:
    """How long until the collector closed ``s`` (None: not within ``seconds``)."""
    start = time.monotonic()
    s.settimeout(0.05)
    while time.monotonic() - start < seconds:
        try:
            if not s.recv(65536):
                return time.monotonic() - start
        except TimeoutError:
            continue
        except ConnectionResetError:
            return time.monotonic() - start
    return None


@pytest.mark.parametrize("srv", [("--idle-timeout", "1", "--body-idle-timeout", "5")],
                         ids=["idle-timeout"], indirect=True)
def test_a_connection_without_a_whole_request_head_is_closed_after_the_idle_timeout(srv):
    """Slowloris: a connection that sends nothing, half a request line, or one header
    line after another, never its end, held a file descriptor an hour (aiohttp's
    keep-alive timer, 3630 s); so did an idle keep-alive connection. Closed after
    --idle-timeout now; a body that takes longer than it is not cut (it has its own
    limits, --body-idle-timeout and --body-min-rate)."""
    def connection(first: bytes) -> socket.socket:
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
        s.sendall(first)
        return s

    silent, half_line = connection(b""), connection(b"POST /v1/batc")
    kept = connection(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    assert kept.recv(65536).startswith(b"HTTP/1.1 200 OK")  # then idle, kept alive
    trickling = connection(b"POST /v1/batches HTTP/1.1\r\nHost: x\r\n")
    start = time.monotonic()
    for k in range(5):  # a header line every 0.4 s: the head never ends
        time.sleep(0.4)
        with contextlib.suppress(OSError):
            trickling.sendall(b"X-Slow-%d: 1\r\n" % k)
    assert closed_within(trickling, 1.0) is not None, "a trickled head is still open"
    assert time.monotonic() - start < 3.0
    for s in (silent, half_line, kept):
        assert closed_within(s, 0.5) is not None
        s.close()
    body = encode_batch(make_batch())
    s = held_upload(srv, "d1", len(body))
    took = send_paced(s, body, rate=len(body) / 2.5)  # 2.5 s: over the idle timeout
    status, doc = read_answer(s)
    assert status == 200 and doc["status"] == "stored" and took > 2.0, (doc, took)
    assert "Traceback" not in srv.log()


@SLOW
def test_the_agent_finishes_an_upload_longer_than_its_timeout_on_a_thin_link(srv):
    """The agent's collector.timeout bounds each wait, not the upload: a body that takes
    three times it over a link above the collector's minimum rate is stored (before, it
    timed out waiting for the answer while the kernel still sent the body); a link that
    stops is given up after the timeout, and the collector gives the upload's place back."""
    from edge.agent.uplink import Uplink

    body = encode_batch(make_batch(events=make_events(n=600)))
    with ThinLink(srv.port, rate=8000) as link:
        uplink = Uplink(f"http://127.0.0.1:{link.port}", srv.tokens["d1"], timeout=1.0)
        start = time.monotonic()
        out = uplink.post_batch(body)
        took = time.monotonic() - start
    assert (out.action, out.detail) == ("ack", "stored"), out
    assert took > 3.0
    other = encode_batch(make_batch(seq=1, events=make_events(seed=1, n=600)))
    with ThinLink(srv.port, rate=8000, stall_after=len(other) // 2) as link:
        uplink = Uplink(f"http://127.0.0.1:{link.port}", srv.tokens["d1"], timeout=1.0)
        start = time.monotonic()
        out = uplink.post_batch(other)
        took = time.monotonic() - start
        assert out.action == "retry" and "the link took no byte of the body for 1 s" in \
            out.detail, out
        assert 1.0 < took < 5.0
        wait_for(lambda: metrics(srv)["uploads_arriving"] == 0, "no upload arriving", 10.0)
    assert metrics(srv)["requests"].get("408", 0) + metrics(srv)["requests"].get("499", 0) == 1
    assert post(srv, other, srv.tokens["d1"])[1]["status"] == "stored"


# --------------------------------------------------------------------------- retention


def test_retain_days_prunes_the_old_days_while_the_collector_serves(srv):
    now = time.time()
    day = 86400.0
    d1 = srv.tokens["d1"]
    for seq, age in enumerate((10, 1)):
        assert post(srv, encode_batch(make_batch(seq=seq, created_at=now - age * day)),
                    d1)[0] == 200
    kept = srv.rows("SELECT COUNT(*) FROM matches WHERE batch_id = 'd1/1'")[0][0]
    pruned = srv.rows("SELECT COUNT(*) FROM matches WHERE batch_id = 'd1/0'")[0][0]
    assert srv.stop() == 0
    srv.extra = ("--retain-days", "3")
    srv.start()
    deadline = time.time() + 30
    while json.loads(request(srv.url + "/metrics")[1])["pruned_batches"] < 1:
        assert time.time() < deadline, srv.log()
        time.sleep(0.05)
    metrics = json.loads(request(srv.url + "/metrics")[1])
    assert (metrics["pruned_matches"], metrics["pruned_archive_files"]) == (pruned, 1)
    assert srv.rows("SELECT batch_id FROM batches") == [("d1/1",)]
    assert srv.rows("SELECT COUNT(*) FROM matches")[0][0] == kept
    assert len(list(srv.archive.rglob("*.parquet"))) == 1
    assert "retention (--retain-days 3): deleted the batches created before" in srv.log()
    status, doc = post(srv, encode_batch(make_batch(seq=1, created_at=now - day)), d1)
    assert (status, doc["status"]) == (200, "duplicate")


def test_compact_merges_the_closed_days_while_the_collector_serves(srv):
    now, d1 = time.time(), srv.tokens["d1"]
    for seq, age in enumerate((2, 2, 2, 0)):
        batch = make_batch(seq=seq, events=make_events(seed=seq), created_at=now - age * 86400)
        assert post(srv, encode_batch(batch), d1)[0] == 200
    assert srv.stop() == 0
    srv.extra = ("--compact",)
    srv.start()
    deadline = time.time() + 30
    while json.loads(request(srv.url + "/metrics")[1])["compaction_written"] < 1:
        assert time.time() < deadline, srv.log()
        time.sleep(0.05)
    assert json.loads(request(srv.url + "/metrics")[1])["compaction_merged"] == 3
    held = dict(srv.rows("SELECT batch_id, archive FROM batches"))
    assert len(set(held.values())) == 2 and "/compact-" in held["d1/0"]
    assert {str(p.relative_to(srv.archive)) for p in srv.archive.rglob("*.parquet")} == \
        set(held.values())
    assert "compaction (days before" in srv.log()


def test_a_retention_pass_keeps_the_days_acep_train_since_reads(tmp_path):
    """``--retain-days N`` keeps the days from N days before today: ``--since Nd``'s."""
    import asyncio
    import datetime as dt

    from edge.collector import ClockBounds, Collector
    from trainer.sources import archive_days

    store = open_store(tmp_path / "c.db")
    store.add_device("d1")
    collector = Collector(store, Archive(tmp_path / "archive"), retain_days=3)
    collector.clock = ClockBounds()  # the batches came in their day, when it was kept
    today = dt.date(2023, 11, 20)
    noon = dt.datetime(2023, 11, 14, 12, tzinfo=dt.UTC).timestamp()
    try:
        for seq in range(7):  # one batch a day, 11-14 .. 11-20
            status, doc = collector.ingest(encode_batch(make_batch(
                seq=seq, events=make_events(seed=seq), created_at=noon + seq * 86400.0)), "d1")
            assert status == 200, doc
        gone = asyncio.run(collector.prune_pass(today=today))
        since, _ = archive_days(str(tmp_path / "archive"), "3d", None, today=today)
        assert since == "2023-11-17" and gone["batches"] == gone["archive_files"] == 3
        days = sorted(p.name for p in (tmp_path / "archive").iterdir())
        assert days == ["date=2023-11-17", "date=2023-11-18", "date=2023-11-19",
                        "date=2023-11-20"]
        assert [r[0] for r in store.query("SELECT seq FROM batches ORDER BY seq")] == [3, 4, 5, 6]
        assert asyncio.run(collector.prune_pass(today=today))["batches"] == 0
    finally:
        collector.close()


def _serve(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "edge.collector", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


def test_a_database_or_archive_that_cannot_be_used_exits_2_in_one_line(tmp_path):
    (tmp_path / "adir").mkdir()
    (tmp_path / "text").write_text("not a database, by far: some plain text\n" * 100)
    archive = str(tmp_path / "a")
    for args, want in (
            (("--db", "/proc/x.db", "--archive", archive), "--db: /proc/x.db: cannot open"),
            (("--db", "/proc/x.db", "--add-device", "d9"), "--db: /proc/x.db: cannot open"),
            (("--db", str(tmp_path / "adir"), "--archive", archive),
             f"--db: {tmp_path / 'adir'}: cannot open"),
            (("--db", str(tmp_path / "text"), "--archive", archive),
             f"--db: {tmp_path / 'text'}: cannot open it as a SQLite database"),
            (("--db", str(tmp_path / "c.db"), "--archive", "/proc/archive"),
             "--archive /proc/archive: cannot write there")):
        done = _serve(*args)
        assert done.returncode == 2, done.stderr
        assert want in done.stderr and len(done.stderr.splitlines()) == 1, done.stderr


def test_an_archive_that_exists_but_cannot_be_written_exits_2_naming_it(tmp_path):
    import os

    archive = tmp_path / "a"
    archive.mkdir(mode=0o555)
    mounted = os.geteuid() == 0  # root writes anywhere but on a read-only file system
    if mounted:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs",
                               str(archive)], capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"cannot mount a read-only tmpfs here: {done.stderr.strip()}")
    try:
        done = _serve("--db", str(tmp_path / "c.db"), "--archive", str(archive))
        assert done.returncode == 2 and "listening" not in done.stdout
        assert f"--archive {archive}: cannot write there (" in done.stderr, done.stderr
        assert len(done.stderr.splitlines()) == 1 and list(archive.iterdir()) == []
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(archive)], check=True)


def test_prune_before_with_an_archive_that_does_not_exist_prunes_nothing(srv):
    assert post(srv, encode_batch(make_batch("d1", 0)), srv.tokens["d1"])[0] == 200
    typo = srv.tmp / "archive-typo"
    done = srv.manage("--archive", str(typo), "--prune-before", "2030-01-01")
    assert done.returncode == 2 and f"--archive {typo}: no such directory" in done.stderr
    assert not typo.exists() and srv.rows("SELECT count(*) FROM batches")[0][0] == 1
    assert list(srv.archive.rglob("*.parquet"))


def test_bad_serving_options_exit_2_naming_them(tmp_path):
    for flag, value, want in (("--retain-days", "0", "--retain-days must be 1 or more"),
                              ("--retain-days", "1000000", "--retain-days must be at most"),
                              ("--port", "99999", "'99999' is not a port (0 to 65535)"),
                              ("--port", "-5", "'-5' is not a port"),
                              ("--min-free", "-1", "--min-free must be 0 or more"),
                              ("--log-level", "loud", "--log-level: invalid choice: 'LOUD'"),
                              ("--max-wait", "-1", "'-1' is not a number of seconds >= 0"),
                              ("--max-wait", "nan", "'nan' is not a number of seconds"),
                              ("--max-wait", "soon", "'soon' is not a number of seconds"),
                              ("--device-uploads", "0", "--device-uploads must be 1 or more"),
                              ("--body-idle-timeout", "0", "--body-idle-timeout must be above 0"),
                              ("--body-idle-timeout", "inf", "'inf' is not a number of seconds"),
                              ("--body-min-rate", "-1",
                               "'-1' is not a number of bytes per second >= 0"),
                              ("--auth-failures", "-1", "--auth-failures must be 0 or more"),
                              ("--auth-failures", "many",
                               "--auth-failures: invalid int value: 'many'"),
                              ("--auth-window", "0", "--auth-window must be above 0"),
                              ("--auth-window", "nan", "'nan' is not a number of seconds")):
        done = subprocess.run([sys.executable, "-m", "edge.collector", "--db",
                               str(tmp_path / "c.db"), "--archive", str(tmp_path / "a"),
                               flag, value], cwd=ROOT, capture_output=True, text=True,
                              timeout=60)
        assert done.returncode == 2 and want in done.stderr, done.stderr
        # refused before anything is made: no database at a path that had none
        assert not (tmp_path / "c.db").exists() and not (tmp_path / "a").exists(), flag
    for argv, want in ((["--max-body", "0"], "--max-body must be positive"),
                       (["--tls-cert", str(tmp_path / "c.pem")], "--tls-key"),
                       (["--sketch-key-file", str(tmp_path / "none.key")],
                        "--sketch-key-file"),
                       (["--mirror", str(tmp_path / "a" / "copy")], "--mirror")):
        done = subprocess.run([sys.executable, "-m", "edge.collector", "--db",
                               str(tmp_path / "c.db"), "--archive", str(tmp_path / "a"),
                               *argv], cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and want in done.stderr, done.stderr
        assert len(done.stderr.splitlines()) == 1, done.stderr
        assert not (tmp_path / "c.db").exists() and not (tmp_path / "a").exists(), argv
    done = subprocess.run([sys.executable, "-m", "edge.collector", "--db",
                           str(tmp_path / "c.db")], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2 and "--archive DIR is needed to serve" in done.stderr
    assert not (tmp_path / "c.db").exists()


# --------------------------------------------------------------------------- compaction


def _batch_rows(archive: Path, store, batch_id: str):
    """The archived rows of one batch, from the file the database says holds it."""
    import pyarrow.compute as pc

    (path,) = store.query("SELECT archive FROM batches WHERE batch_id = ?", (batch_id,))[0]
    table = pq.read_table(archive / path)
    rows = table.filter(pc.equal(table["batch_id"], batch_id))
    return path, sorted(map(repr, rows.to_pylist()))


def test_compaction_merges_closed_days_and_every_batch_stays_where_the_database_says(tmp_path):
    import asyncio
    import datetime as dt

    from edge.collector import Collector

    store = open_store(tmp_path / "c.db")
    for d in ("d1", "d2"):
        store.add_device(d)
    root = tmp_path / "archive"
    collector = Collector(store, Archive(root), compact=True)
    other = PatternRef("p1", "a c", 4.0, 0, (), "o")  # the pattern changed on the device
    noon = dt.datetime(2023, 11, 14, 12, tzinfo=dt.UTC).timestamp()
    wide = [Event(e.type, e.t, {**e.attrs, "y": 1.0}) for e in make_events(seed=99)]
    plan = [("d1", day, {}) for day in (0, 0, 0, 1, 1, 2, 2)] + \
        [("d1", 0, {"ref": other}), ("d1", 0, {"ref": other}), ("d1", 0, {"events": wide}),
         ("d1", 0, {"events": wide})] + [("d2", 0, {}) for _ in range(4)]
    bodies: dict = {}
    try:
        for k, (device, day, kw) in enumerate(plan):
            seq = sum(key[0] == device for key in bodies)
            batch = make_batch(device, seq, **{"events": make_events(seed=k), **kw},
                               created_at=noon + day * 86400 + k)
            bodies[device, seq] = encode_batch(batch)
            assert collector.ingest(bodies[device, seq], device)[0] == 200
        before = {f"{d}/{q}": _batch_rows(root, store, f"{d}/{q}") for d, q in bodies}
        assert len(list(root.rglob("*.parquet"))) == len(plan)

        done = asyncio.run(collector.compact_pass(today=dt.date(2023, 11, 16)))
        # 11-14 d1: 3 plain + 2 of the other definition + 2 with another column; d2: 4;
        # 11-15 d1: 2; today's (11-16) stay as they are
        assert done == {"merged": 13, "written": 5, "leftovers": 0, "failed": 0}
        after = {b: _batch_rows(root, store, b) for b in before}
        assert {b: rows for b, (_, rows) in after.items()} == \
            {b: rows for b, (_, rows) in before.items()}
        names = {b: path.rsplit("/", 1)[1] for b, (path, _) in after.items()}
        assert sum(n.startswith("compact-") for n in names.values()) == 13
        assert [names["d1/5"], names["d1/6"]] == [before["d1/5"][0].rsplit("/", 1)[1],
                                                   before["d1/6"][0].rsplit("/", 1)[1]]
        files = {str(p.relative_to(root)) for p in root.rglob("*.parquet")}
        assert files == {path for path, _ in after.values()}  # each holds batches
        assert len(files) == 5 + 2

        # a batch sent again is a duplicate (nothing rewritten); a late one for a closed
        # day is a new file, merged by the next pass with the day's compacted file
        assert collector.ingest(bodies["d2", 0], "d2")[1]["status"] == "duplicate"
        late = encode_batch(make_batch("d2", 9, created_at=noon + 9))
        assert collector.ingest(late, "d2")[1]["status"] == "stored"
        folder = root / "date=2023-11-14" / "device=d2"
        assert len(list(folder.iterdir())) == 2
        done = asyncio.run(collector.compact_pass(today=dt.date(2023, 11, 16)))
        assert done == {"merged": 2, "written": 1, "leftovers": 0, "failed": 0}
        (only,) = folder.iterdir()
        for b in ("d2/0", "d2/1", "d2/2", "d2/3", "d2/9"):
            path, rows = _batch_rows(root, store, b)
            assert root / path == only and rows == (after[b][1] if b in after else rows)
        assert pq.read_metadata(only).num_rows == sum(
            len(_batch_rows(root, store, f"d2/{q}")[1]) for q in (0, 1, 2, 3, 9))
        assert asyncio.run(collector.compact_pass(today=dt.date(2023, 11, 16))) == \
            {"merged": 0, "written": 0, "leftovers": 0, "failed": 0}
        assert collector.metrics["compaction_merged"] == 15
    finally:
        collector.close()


def test_an_interrupted_compaction_leaves_files_the_next_pass_deletes(tmp_path):
    import asyncio
    import datetime as dt

    from edge.collector import Collector

    store = open_store(tmp_path / "c.db")
    store.add_device("d1")
    root = tmp_path / "archive"
    collector = Collector(store, Archive(root), compact=True)
    noon = dt.datetime(2023, 11, 14, 12, tzinfo=dt.UTC).timestamp()
    try:
        for seq in range(6):
            batch = make_batch("d1", seq, events=make_events(seed=seq), created_at=noon + seq)
            assert collector.ingest(encode_batch(batch), "d1")[0] == 200
        folder = root / "date=2023-11-14" / "device=d1"
        rows = {b: _batch_rows(root, store, b)[1] for b in (f"d1/{s}" for s in range(6))}
        parts = sorted(folder.iterdir())
        # stopped after writing a compacted file, before the database said so
        (unused, _), = collector.archive.compact(parts[:3])
        # stopped after the database moved the batches, before the old files were deleted
        (moved, olds), = collector.archive.compact(parts[3:])
        store.move_archive([([f"date=2023-11-14/device=d1/{p.name}" for p in olds],
                             f"date=2023-11-14/device=d1/{moved.name}")])
        assert len(list(folder.iterdir())) == 8
        done = asyncio.run(collector.compact_pass(today=dt.date(2023, 11, 15)))
        assert done["leftovers"] == 1 + 3 and not unused.exists()
        assert not any(p.exists() for p in olds)
        (left,) = folder.iterdir()  # the three batches still in part files, with the moved
        assert left.name.startswith("compact-")  # three's compacted file, merged into one
        assert {b: _batch_rows(root, store, b)[1] for b in rows} == rows
        # stopped while writing a compacted file: its temporary file goes at the next start
        (folder / f".{left.name}.tmp").write_bytes(b"half a file")
        Archive(root)
        assert list(folder.iterdir()) == [left]
        # a second generation stopped after its write: its list names the files of both
        # (edge/mirror.py needs them), and it is a leftover all the same
        late = make_batch("d1", 9, events=make_events(seed=9), created_at=noon + 9)
        assert collector.ingest(encode_batch(late), "d1")[0] == 200
        (again, _), = collector.archive.compact(sorted(folder.iterdir()))
        assert {left.name, parts[0].name, parts[5].name, f"part-{9:020d}.parquet"} <= \
            set(compacted_names(again))
        done = asyncio.run(collector.compact_pass(today=dt.date(2023, 11, 15)))
        assert (done["leftovers"], done["written"]) == (1, 1) and not again.exists()
        (last,) = folder.iterdir()
        assert {b: _batch_rows(root, store, b)[1] for b in rows} == rows
        assert _batch_rows(root, store, "d1/9")[0].endswith(last.name)
    finally:
        collector.close()


def test_a_folder_with_an_unreadable_file_is_skipped_and_the_others_compacted(tmp_path, caplog):
    import asyncio
    import datetime as dt

    from edge.collector import Collector

    store = open_store(tmp_path / "c.db")
    root = tmp_path / "archive"
    collector = Collector(store, Archive(root), compact=True)
    noon = dt.datetime(2023, 11, 14, 12, tzinfo=dt.UTC).timestamp()
    try:
        for device in ("d1", "d2"):
            for seq in range(3):
                batch = make_batch(device, seq, events=make_events(seed=seq),
                                   created_at=noon + seq)
                assert collector.ingest(encode_batch(batch), device)[0] == 200
        broken = root / "date=2023-11-14" / "device=d1" / "part-00000000000000000001.parquet"
        broken.write_bytes(b"not parquet at all")  # a disk error, a hand edit
        with caplog.at_level("ERROR", logger="acep.collector"):
            done = asyncio.run(collector.compact_pass(today=dt.date(2023, 11, 15)))
        assert done == {"merged": 3, "written": 1, "leftovers": 0, "failed": 1}
        assert "compaction of" in caplog.text and "device=d1 failed" in caplog.text
        assert len(list(broken.parent.iterdir())) == 3  # d1 as it was
        assert len(list((root / "date=2023-11-14" / "device=d2").iterdir())) == 1
        assert collector.metrics["compaction_failed"] == 1
    finally:
        collector.close()
