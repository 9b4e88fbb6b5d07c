"""End to end: the real collector (``python -m edge.collector``) and the real agent
(``python -m edge.agent``) as subprocesses on loopback. The agent follows a JSON Lines file that
the test appends to; the collector's SQLite must then hold exactly the matches of a direct
``acep.Matcher`` run, the Parquet archive the events of their windows, each match its exact
flag. Faults (issue 5): the collector SIGKILLed and restarted while the agent keeps running,
the agent SIGKILLed mid-batch and restarted, duplicate deliveries, a tampered sketch served by
the collector. After each: nothing accepted is lost or duplicated.

Every wait polls with a deadline; no fixed sleep is relied on for correctness.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from support.cli import run_acep
from support.collector import (
    DEVICE,
    ROOT,
    SKETCH_KEY,
    CollectorProcess,
    device_series,
    query,
    serving,
)
from support.e2e import (
    PATTERN,
    AgentRun,
    direct,
    sketch_bytes,
    stream,
)
from support.wait import WAIT, eventually, wait_for

from acep import EventBatch
from acep.events import partition_key, read_events
from acep.nfab import match as exact_match
from acep.shedding import Budget

# --------------------------------------------------------------------------- processes


@pytest.fixture
def collector(tmp_path):
    c = CollectorProcess(tmp_path)
    token = c.add(DEVICE)
    c.start()
    c.token = token
    yield c
    if c.proc is not None and c.proc.poll() is None:
        c.kill()


def assert_nothing_lost_or_duplicated(c: CollectorProcess, run: AgentRun, budget=None) -> None:
    seqs = c.seqs()
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), "a batch missing or stored twice"
    stored = c.matches()
    assert len(stored) == len(set(stored)), "a match is stored twice"
    expect = direct(run.written, budget)
    assert len(expect) > 50
    assert stored == expect


# --------------------------------------------------------------------------- the happy path


def test_agent_to_collector_matches_archive_and_exact_flags(tmp_path, collector):
    """A followed file in five appends under a fixed budget: the database holds the direct
    matcher's matches (same budget), the archive the events of their windows, each match
    its exact flag; metrics agree."""
    events = stream(3000, seed=11)
    budget = Budget(0.5, 8)
    run = AgentRun(tmp_path, collector.url, collector.token,
                   budget='mode = "fixed"\nops_per_event = 0.5\nburst = 8.0')
    run.start()
    for i in range(0, len(events), 600):
        run.append(events[i:i + 600])
        wait_for(lambda: run.alive() or run.state("consumed") == len(run.written),
                 "the agent to consume the appended events")
    wait_for(lambda: run.caught_up(collector), "every batch stored")
    final = run.stop()
    assert_nothing_lost_or_duplicated(collector, run, budget)
    assert final["events_in"] == len(events) and final["shed"] > 0
    assert final["policy"] == "oldest-first" and final["batches_rejected"] == 0
    assert final["batches_sent"] == final["batches_put"] == len(collector.seqs())

    # each stored match carries its exact flag: with k = 1, exactly the matches without
    # errors are exact matches of SEQ(a, b, c) with c.x >= a.x
    rows = query(collector.db, "SELECT errors, exact, exact_count, exact_reason, batch_id, "
                               "trajectory FROM matches")
    assert rows and all(ex is not None and reason is None for _, ex, _, reason, _, _ in rows)
    assert all(ex == (err == 0) for err, ex, _, _, _, _ in rows)
    assert all(n >= ex for _, ex, n, _, _, _ in rows)
    for _, ex, _, _, _, traj in rows:
        if ex:
            a, b, c = (events[i] for i in json.loads(traj))
            assert [a["type"], b["type"], c["type"]] == ["a", "b", "c"] and c["x"] >= a["x"]

    # the archive holds the windows' events: every trajectory position of a batch, with the
    # event's own tag, type and attributes
    files = sorted(collector.archive.rglob("*.parquet"))
    assert files and all(f"device={DEVICE}" in str(f) for f in files)
    table = pa.concat_tables([pq.read_table(f) for f in files])
    archived = {}
    for bid, pos, tag, typ, x in zip(*(table.column(n).to_pylist()
                                       for n in ("batch_id", "position", "tag", "type", "x"))):
        e = events[pos]
        assert (tag, typ, x) == (e["t"], e["type"], e["x"])
        archived.setdefault(bid, set()).add(pos)
    assert set(archived) == {b for (b,) in query(collector.db, "SELECT batch_id FROM batches")}
    for _, _, _, _, bid, traj in rows:
        assert set(json.loads(traj)) <= archived[bid]

    metrics = json.loads(urllib.request.urlopen(collector.url + "/metrics", timeout=10).read())
    assert metrics["batches_stored"] == len(collector.seqs())
    assert metrics["matches_stored"] == len(rows)
    assert metrics["exact_matches"] == sum(ex for _, ex, _, _, _, _ in rows)
    assert collector.stop() == 0


BIG = 2**53  # above it a float64 rounds integers: two such ids are two partitions


def mixed_stream(n: int, seed: int) -> list[dict]:
    """:func:`stream` whose ``id`` is 3 or 7 (sometimes written 7.0) in its first 100 events
    (a numeric column in the agent's first batches), then also "7", two ids a float rounds
    to one and "x" (a column of objects)."""
    out = stream(n, seed)
    rng = random.Random(seed)
    for i, e in enumerate(out):
        keys = [3, 7, 7.0] if i < 100 else [3, 7, 7.0, "7", "7", BIG, BIG + 1, "x"]
        e["id"] = rng.choice(keys)
    return out


def kinds(key) -> tuple[str, object]:
    """A partition key by kind and value, 7.0 as 7 (one partition, README)."""
    key = partition_key(key)
    return type(key).__name__, key


def test_partitions_of_mixed_kinds_are_stored_and_rechecked_as_acep_match_reports_them(
        tmp_path, collector):
    """README, acep match: 7 and 7.0 are one partition, "7" is another, and ids beyond 2**53
    stay exact. The collector stores each match under the partition ``acep match`` prints,
    of the same kind whether its batch's column was numeric or mixed, and re-checks each
    partition on its own events: the exact engine with ``[id]`` over the whole stream finds
    the same exact matches (no ``a b c`` across 7 and "7" is counted)."""
    events = mixed_stream(600, seed=29)
    run = AgentRun(tmp_path, collector.url, collector.token, follow=False)
    run.append(events)
    assert run.start().wait(WAIT * 2) == 0, run.log()
    assert run.last_metrics()["outbox_pending"] == 0, run.log()

    p = PATTERN
    out = run_acep("match", "-p", p["text"], "-w", p["window"], "-k", p["k"], "--partition", "id",
                   "--where", p["where"][0], run.events_path, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    printed = sorted((kinds(m["partition"]), float(m["point"]), m["errors"], m["positions"])
                     for m in map(json.loads, out.stdout.splitlines()))
    rows = query(collector.db, "SELECT partition, point, errors, trajectory, exact, "
                               "exact_count, exact_reason FROM matches")
    stored = sorted((kinds(json.loads(pt)), at, err, json.loads(tr))
                    for pt, at, err, tr, *_ in rows)
    assert stored == printed
    assert {k for k, *_ in stored} == {kinds(k) for k in (3, 7, "7", BIG, BIG + 1, "x")}
    assert all(type(json.loads(pt)) is type(partition_key(events[json.loads(tr)[0]]["id"]))
               for pt, _, _, tr, *_ in rows)  # the JSON's own kind: 7, never "7"

    exact = exact_match(
        "PATTERN SEQ(a v0, b v1, c v2) WHERE skip_till_any_match(v0, v1, v2) "
        f"{{ [id] and {p['where'][0].replace('a.', 'v0.').replace('c.', 'v2.')} }} "
        f"WITHIN {p['window']}", EventBatch.concat(list(read_events(run.events_path))))
    ends: dict = {}
    for m in exact:
        ends.setdefault((kinds(m.partition[0]), m.end), []).append(
            tuple(x for comp in m.positions for x in comp))
    assert exact and any(k[0][1] == "7" for k in ends)
    for pt, at, _, tr, ex, count, reason in rows:
        found = ends.get((kinds(json.loads(pt)), at), [])
        assert (ex, count, reason) == (tuple(json.loads(tr)) in found, len(found), None)

    # the archive (one type per Parquet column) keeps a mixed column as text, its numbers
    # as acep prints them; a batch of numbers alone keeps numbers
    kinds_seen = set()
    for f in sorted(collector.archive.rglob("*.parquet")):
        table = pq.read_table(f)
        text = pa.types.is_string(table.schema.field("id").type)
        kinds_seen.add(text)
        for pos, value in zip(table.column("position").to_pylist(),
                              table.column("id").to_pylist()):
            key = partition_key(events[pos]["id"])
            assert value == (str(key) if text else float(key))
    assert kinds_seen == {False, True}


def test_heartbeats_show_a_device_that_is_up_with_nothing_to_upload(tmp_path, collector):
    run = AgentRun(tmp_path, collector.url, collector.token, heartbeat=0.5)
    run.start()

    def status():
        run.alive()
        rows = query(collector.db, "SELECT last_seen, status FROM devices WHERE device_id = ?",
                     (DEVICE,))
        return rows[0] if rows[0][1] is not None else None

    seen, doc = wait_for(status, "a heartbeat with nothing to upload")
    assert collector.seqs() == []  # no batch: the heartbeat alone says the device is up
    assert json.loads(doc)["device"] == DEVICE and json.loads(doc)["consumed"] == 0
    run.append(stream(300, seed=4))
    wait_for(lambda: json.loads(status()[1])["consumed"] == 300, "a heartbeat after events")
    assert "stopped" not in json.loads(status()[1])
    final = run.stop()
    assert final["heartbeats"] >= 2
    listed = collector.manage("--list-devices")
    (device,) = [json.loads(line) for line in listed.stdout.splitlines()]
    assert device["last_seen"] > seen  # the last heartbeat: the final metrics, at the stop
    assert device["status"] == {**final, "stopped": True}
    # the finds the rule of when to retrain reads: every event read and match found, once
    assert query(collector.db, "SELECT SUM(events), SUM(matches) FROM finds WHERE device = ?",
                 (DEVICE,)) == [(300, final["matches"])] and final["matches"] > 0


def test_the_fleet_s_metrics_say_whose_uploads_fail_and_since_when(tmp_path):
    """An agent's uploads refused (503) while its heartbeats get through: before, /metrics
    had nothing to alert on but a backlog of 1000 batches, which a quiet device takes days
    to reach. Now its heartbeats say since when its uploads fail, the collector exports it
    (acep_device_upload_failing, ..._since_timestamp_seconds), and both end with the first
    batch acknowledged."""
    with serving(tmp_path) as c:
        run = AgentRun(tmp_path, c.url, c.token, heartbeat=0.3)
        run.start()
        run.append(stream(300, seed=43))
        wait_for(lambda: run.alive() or run.caught_up(c), "every batch stored")
        wait_for(lambda: device_series(c).get("acep_device_upload_failing") == 0,
                 "a heartbeat after the batches")
        c.archive.rename(c.archive.with_name("archive-unmounted"))  # uploads: 503
        run.append([{**e, "t": e["t"] + 1000} for e in stream(300, seed=44)])
        seen = wait_for(lambda: device_series(c).get("acep_device_upload_failing") == 1
                        and device_series(c), "the collector's /metrics to say it")
        since = seen["acep_device_upload_failing_since_timestamp_seconds"]
        line = wait_for(lambda: run.alive() or run.last_metrics()["upload_failing_since"]
                        and run.last_metrics(), "a metrics line saying it")
        assert line["upload_failing_since"] == since
        assert line["upload_error"].startswith("HTTP 503: ")
        c.archive.with_name("archive-unmounted").rename(c.archive)
        wait_for(lambda: run.alive() or run.caught_up(c), "every batch stored")
        seen = wait_for(lambda: device_series(c).get("acep_device_upload_failing") == 0
                        and device_series(c), "the end of it in /metrics")
        assert "acep_device_upload_failing_since_timestamp_seconds" not in seen
        final = run.stop()
        assert final["upload_failing_since"] is None and final["upload_error"] is None


# The agent with its clock set off by the seconds in a file (re-read every 0.1 s): time.time
# is what the agent dates its batches and metrics by, and a container cannot set its clock.
OFF_CLOCK = """
import runpy, sys, time
offset_file, real, seen = sys.argv.pop(1), time.time, {"at": -1.0, "offset": 0.0}
def off_clock():
    if time.monotonic() - seen["at"] > 0.1:
        with open(offset_file) as fh:
            seen["offset"], seen["at"] = float(fh.read()), time.monotonic()
    return real() + seen["offset"]
time.time = off_clock
runpy.run_module("edge.agent", run_name="__main__", alter_sys=True)
"""


def test_an_agent_whose_clock_is_off_says_so_once_per_streak_from_the_answers(tmp_path):
    """Before, only acep agent --check compared the clocks: an agent whose clock drifted (or
    a Raspberry Pi whose clock NTP never set) dated its batches wrong without a word. Now the
    agent reads the collector's time from the answers it gets anyway (Date, a heartbeat's
    time: no request of its own), says clock_ahead_s in its metrics, and warns once per
    streak beyond CLOCK_SLACK (60 s), its end at info level. Its heartbeats go on when the
    clock is set back: their interval was counted on that clock, so none went for the two
    hours it had been ahead."""
    with serving(tmp_path, "--access-log") as c:
        run = AgentRun(tmp_path, c.url, c.token, heartbeat=0.3)
        offset = tmp_path / "clock-offset"
        offset.write_text("7200")
        with open(tmp_path / "agent.err", "a") as err:
            run.proc = subprocess.Popen(
                [sys.executable, "-c", OFF_CLOCK, str(offset), "--config", str(run.cfg)],
                cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err,
                env={**os.environ, "PYTHONPATH": str(ROOT)})
        try:
            def ahead(near: float) -> bool:
                run.alive()
                metrics = tmp_path / f"metrics-{run.outbox.name}.jsonl"
                value = run.last_metrics().get("clock_ahead_s") if metrics.exists() else None
                return value is not None and abs(value - near) < 5

            run.append(stream(300, seed=41))
            wait_for(lambda: ahead(7200) and c.seqs(), "batches and the offset measured")
            offset.write_text("0")
            wait_for(lambda: ahead(0), "the clock set")
            offset.write_text("-7200")
            wait_for(lambda: ahead(-7200), "the clock set back")
            final = run.stop()
        finally:
            if run.proc.poll() is None:
                run.proc.kill()
        assert abs(final["clock_ahead_s"] + 7200) < 5
        said = [line.split(" edge.agent: ", 1)[1] for line in run.log().splitlines()
                if "this device's clock is" in line]
        assert said == [
            "this device's clock is 2.0 hours ahead of the collector's (more than 60 s): "
            "batches are dated by it, and the collector's retention goes by their date (it "
            "refuses those too far ahead or too old); set the clock (NTP)",
            said[1], said[0].replace("2.0 hours ahead of", "2.0 hours behind")], said
        assert re.fullmatch(r"this device's clock is within 30 s of the collector's again "
                            r"\(\d s (ahead|behind)\)", said[1]), said[1]
        assert " WARNING " in run.log() and "GET /health" not in c.log()  # no request of its own
        assert "POST /v1/batches" in c.log()  # the access log is on


# --------------------------------------------------------------------------- faults


def test_collector_sigkilled_and_restarted_while_the_agent_runs(tmp_path, collector):
    events = stream(3000, seed=12)
    run = AgentRun(tmp_path, collector.url, collector.token)
    run.start()
    rng = random.Random(5)
    chunks = [events[i:i + 500] for i in range(0, len(events), 500)]
    run.append(chunks[0])
    for chunk in chunks[1:]:
        half = len(chunk) // 2
        stored = len(collector.seqs())  # counted before the append: no race with the agent
        run.append(chunk[:half])  # the agent is busy with these while the collector dies
        wait_for(lambda s=stored: run.alive() or len(collector.seqs()) > s,
                 "a batch stored before the kill")
        time.sleep(rng.uniform(0, 0.1))
        collector.kill()
        # down: the agent goes on matching new events and keeps its batches in the outbox
        failures = run.log().count("failed")
        run.append(chunk[half:])
        wait_for(lambda: run.alive() or run.state("consumed") == len(run.written),
                 "the agent to consume while the collector is down")
        eventually(lambda n=failures: run.log().count("failed") > n, 2.0)  # an upload was tried
        run.alive()
        collector.start()
    assert collector.starts == len(chunks)
    wait_for(lambda: run.alive() or run.caught_up(collector), "the agent to catch up")
    final = run.stop()
    assert_nothing_lost_or_duplicated(collector, run)
    assert final["batches_rejected"] == final["batches_dropped"] == 0
    assert "failed" in run.log() and "retry in" in run.log()  # it did retry with backoff


def test_a_collector_out_of_space_holds_every_upload_for_its_retry_after(tmp_path, collector):
    """A collector short of space answers 507 with Retry-After: the agent then waits that
    long (at most outbox.backoff_max, 0.5 s here) before it sends any batch, instead of
    sending each pending batch in turn to be refused; nothing is lost once there is room."""
    collector.stop()
    collector.extra = ("--min-free", str(1 << 40))
    collector.start()
    run = AgentRun(tmp_path, collector.url, collector.token)
    run.append(stream(3000, seed=21))
    run.start()
    wait_for(lambda: run.alive() or run.pending() >= 20, "20 batches waiting")

    def refused() -> int:
        metrics = urllib.request.urlopen(collector.url + "/metrics", timeout=10).read()
        return json.loads(metrics)["requests"].get("507", 0)

    first, started = refused(), time.time()
    time.sleep(3.0)
    sent, seconds = refused() - first, time.time() - started
    assert run.pending() >= 20 and 1 <= sent <= seconds / 0.5 + 2, (sent, seconds)
    assert "HTTP 507" in run.log()
    collector.stop()
    collector.extra = ()
    collector.start()
    wait_for(lambda: run.alive() or run.caught_up(collector), "the agent to catch up")
    run.stop()
    assert_nothing_lost_or_duplicated(collector, run)


def test_agent_sigkilled_mid_batch_and_restarted(tmp_path, collector):
    events = stream(3500, seed=13)
    run = AgentRun(tmp_path, collector.url, collector.token)
    rng = random.Random(6)
    kills = mid_stream = 0
    for i in range(0, 3000, 500):
        before = run.state("consumed")
        run.append(events[i:i + 500])
        run.start()
        wait_for(lambda b=before: run.alive() or run.state("consumed") > b,
                 "the (re)started agent to commit progress")
        time.sleep(rng.uniform(0, 0.1))
        run.alive()
        run.proc.send_signal(signal.SIGKILL)
        run.proc.wait(30)
        kills += 1
        mid_stream += run.state("consumed") < len(run.written)
    assert kills == 6 and mid_stream >= 1, "no kill landed mid-stream"
    run.append(events[3000:])  # the last restart always has new events, however fast the last run
    left = len(run.written) - run.state("consumed")
    restarted = time.time()
    run.start()
    wait_for(lambda: run.alive() or run.caught_up(collector), "the agent to catch up")
    final = run.stop()
    assert final["events_in"] == left  # it resumes where the killed run committed
    assert_nothing_lost_or_duplicated(collector, run)
    # the fleet sees the restart: the last start's time, from its heartbeats
    (status,) = query(collector.db, "SELECT status FROM devices WHERE device_id = ?", (DEVICE,))
    assert json.loads(status[0])["started_at"] == final["started_at"] > restarted


def test_duplicate_deliveries_store_nothing_new(tmp_path, collector):
    """Batches delivered twice (re-POSTed by hand, and re-sent by an agent whose outbox was
    restored from a copy) answer "duplicate" and add no row."""
    events = stream(1500, seed=14)
    offline = AgentRun(tmp_path, None, None)  # no collector yet: the batches stay pending
    offline.append(events)
    assert offline.start(once=True).wait(60) == 0, offline.log()
    bodies = query(offline.outbox, "SELECT batch_id, body FROM pending ORDER BY n")
    assert len(bodies) > 3
    shutil.copy(offline.outbox, tmp_path / "copy.db")

    run = AgentRun(tmp_path, collector.url, collector.token)  # the same outbox, online
    run.written = list(events)
    assert run.start(once=True).wait(60) == 0, run.log()
    assert run.caught_up(collector)
    counts = collector.counts()
    assert counts[0] == len(bodies)

    for bid, body in bodies:
        req = urllib.request.Request(collector.url + "/v1/batches", data=body, method="POST",
                                     headers={"Authorization": f"Bearer {collector.token}",
                                              "Content-Type": "application/msgpack"})
        with urllib.request.urlopen(req, timeout=30) as r:
            answer = json.loads(r.read())
        assert (r.status, answer["status"], answer["batch_id"]) == (200, "duplicate", bid)
    assert collector.counts() == counts

    restored = AgentRun(tmp_path, collector.url, collector.token, outbox="copy.db")
    restored.written = list(events)
    assert restored.start(once=True).wait(60) == 0, restored.log()
    assert restored.pending() == 0
    assert restored.last_metrics()["batches_sent"] == len(bodies)
    assert collector.counts() == counts
    assert_nothing_lost_or_duplicated(collector, run)
    metrics = json.loads(urllib.request.urlopen(collector.url + "/metrics", timeout=10).read())
    assert metrics["batches_stored"] == len(bodies)
    assert metrics["batches_duplicate"] == 2 * len(bodies)


def test_tampered_sketch_from_the_collector_falls_back(tmp_path, collector):
    """The collector refuses a tampered sketch on PUT; one written straight into its database
    is served, and the agent refuses it, logs why and matches with the fallback policy."""
    admin = collector.add("ops", "--add-admin")
    good = sketch_bytes(0.5)
    bad = bytearray(good)
    bad[len(bad) // 2] ^= 0xFF

    def put(data: bytes) -> int:
        req = urllib.request.Request(collector.url + "/v1/sketches/abc", data=bytes(data),
                                     method="PUT", headers={"Authorization": f"Bearer {admin}"})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code

    assert put(bad) == 400
    assert query(collector.db, "SELECT COUNT(*) FROM sketches")[0][0] == 0
    from edge.collector.store import open_store

    store = open_store(f"sqlite:///{collector.db}")
    store.put_sketch("abc", bytes(bad))  # behind the collector's back
    store.close()

    sketch = ('[sketch]\ndownload = true\npath = "abc.sketch"\n'
              f'key_file = "{tmp_path / "sketch.key"}"\n')
    budget = 'mode = "fixed"\nops_per_event = 0.5\nburst = 8.0'
    run = AgentRun(tmp_path, collector.url, collector.token, budget=budget, sketch=sketch)
    run.append(stream(1000, seed=15))
    assert run.start(once=True).wait(60) == 0, run.log()
    assert "sketch refused" in run.log() and "fallback policy oldest-first" in run.log()
    final = run.last_metrics()
    assert final["policy"] == "oldest-first" and "sketch refused" in final["policy_error"]
    # the sketch checks fail as long as this sketch is the one published: before, only a
    # check after the start said it, so the fleet's /metrics showed nothing wrong
    from history.sketch import key_id

    digest = hashlib.sha256(bytes(bad)).hexdigest()
    assert final["sketch_error"] == f"the sketch published as {digest[:16]} is refused: " \
                                    "signature check failed: the sketch is damaged or was " \
                                    "changed after signing (it was signed with this key, " \
                                    f"{key_id(SKETCH_KEY)})"
    assert final["sketch_failing_since"] <= final["time"]
    assert device_series(collector)["acep_device_sketch_failing"] == 1
    assert run.caught_up(collector)
    assert_nothing_lost_or_duplicated(collector, run, Budget(0.5, 8))

    # the good sketch, published through the API, is used (by an agent with no events yet)
    assert put(good) == 200
    (tmp_path / "good").mkdir()
    ok = AgentRun(tmp_path / "good", collector.url, collector.token, budget=budget,
                  sketch=sketch)
    assert ok.start(once=True).wait(60) == 0, ok.log()
    assert ok.last_metrics()["policy"] == "history"
    assert ok.last_metrics()["sketch_error"] is None
    assert device_series(collector)["acep_device_sketch_failing"] == 0


def test_example_agent_toml_against_the_collector(tmp_path, collector):
    """``examples/agent.toml`` (wall-clock budget) with the token and port filled in: every
    batch the agent put is stored once, with the matches the agent counted."""
    text = (ROOT / "examples" / "agent.toml").read_text()
    assert 'token = "replace-me"' in text and "http://127.0.0.1:8750" in text
    (tmp_path / "agent.toml").write_text(
        text.replace("replace-me", collector.token)
        .replace("http://127.0.0.1:8750", collector.url).replace('"pi-01"', f'"{DEVICE}"'))
    events = stream(2000, seed=16)
    (tmp_path / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    proc = subprocess.run([sys.executable, "-m", "edge.agent", "--config",
                           str(tmp_path / "agent.toml"), "--once"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    final = json.loads((tmp_path / "agent-metrics.jsonl").read_text().splitlines()[-1])
    assert final["events_in"] == len(events) and final["outbox_pending"] == 0
    assert "cost_per_op_ns" in final  # the wall-clock budget ran
    seqs = collector.seqs()
    assert seqs == list(range(seqs[0], final["seq"])) and len(seqs) == final["batches_sent"] > 0
    stored = collector.matches()
    assert len(stored) == len(set(stored)) == final["matches"] > 0


# --------------------------------------------------------------------------- refusals


def _log_lines(run: AgentRun, words: str) -> list[str]:
    return [line for line in run.log().splitlines() if words in line]


@pytest.mark.parametrize("status", [401, 403])
def test_a_wrong_token_keeps_every_batch_until_it_is_fixed(tmp_path, collector, status):
    """401 (unknown token) and 403 (another device's token) are the operator's problem: the
    batches stay pending, it is logged once, uploads back off, and the metrics name it; with
    the right token the next run delivers all of them."""
    token = "replace-me" if status == 401 else collector.add("pi-other")
    run = AgentRun(tmp_path, collector.url, token, drain=2.0)
    run.append(stream(1500, seed=21))
    assert run.start(once=True).wait(60) == 0, run.log()
    final = run.last_metrics()
    assert final["batches_put"] > 3 and run.pending() == final["batches_put"]
    assert final["batches_rejected"] == final["outbox_dead"] == final["batches_sent"] == 0
    assert final["uploads_unauthorized"] >= 2
    assert final["upload_error"].startswith(f"HTTP {status}")
    assert len(_log_lines(run, "refused this device's credentials")) == 1
    assert len(_log_lines(run, "not acknowledged by the collector")) == 1
    refused = json.loads(urllib.request.urlopen(collector.url + "/metrics", timeout=10).read())
    # backed off: far fewer attempts than batches times attempts
    assert refused["requests"][str(status)] == final["uploads_unauthorized"] < 40

    run.cfg.write_text(run.cfg.read_text().replace(f'token = "{token}"',
                                                   f'token = "{collector.token}"'))
    assert run.start(once=True).wait(60) == 0, run.log()
    assert run.caught_up(collector)
    assert run.last_metrics()["batches_sent"] == final["batches_put"]
    assert_nothing_lost_or_duplicated(collector, run)


def test_a_fresh_outbox_under_a_known_device_id_collides_with_nothing(tmp_path, collector):
    """A reflashed device (same id, new outbox) uploads after the old one: every batch of
    both is stored, none is refused as a reused batch id."""
    (tmp_path / "old").mkdir()
    (tmp_path / "new").mkdir()
    first = AgentRun(tmp_path / "old", collector.url, collector.token, follow=False)
    first.append(stream(1500, seed=22))
    assert first.start().wait(60) == 0, first.log()
    old = first.last_metrics()
    old_seqs = collector.seqs()
    assert len(old_seqs) == old["batches_sent"] > 0

    second = AgentRun(tmp_path / "new", collector.url, collector.token, follow=False)
    second.append(stream(1500, seed=23))
    assert second.start().wait(60) == 0, second.log()
    new = second.last_metrics()
    assert new["batches_sent"] == new["batches_put"] > 0
    assert new["batches_rejected"] == new["outbox_dead"] == new["outbox_pending"] == 0
    new_seqs = sorted(set(collector.seqs()) - set(old_seqs))
    assert len(new_seqs) == new["batches_put"] and new_seqs[0] > old_seqs[-1]
    assert collector.counts() == (old["batches_put"] + new["batches_put"],
                                  old["matches"] + new["matches"])


def test_refused_batches_are_dead_letters_with_their_reason(tmp_path, collector):
    """A 409 (a batch id stored with another body) and a 400 (not a valid batch) keep the
    body as a dead letter, counted and listed; the other batches are delivered."""
    from edge.agent.outbox import Outbox
    from edge.wire import decode_batch

    (tmp_path / "a").mkdir()
    first = AgentRun(tmp_path / "a", collector.url, collector.token, follow=False)
    first.append(stream(1500, seed=24))
    assert first.start().wait(60) == 0, first.log()
    taken = collector.seqs()[-2:]

    run = AgentRun(tmp_path, collector.url, collector.token, follow=False)
    with Outbox(run.outbox) as box:  # an outbox restored from an old backup: reused seqs
        box.save_state({"seq": taken[0]})
        box.put(b"\x81\xa3foo\x01", f"{DEVICE}/1")  # a map the reader refuses
    run.append(stream(1500, seed=25))
    assert run.start().wait(60) == 0, run.log()
    final = run.last_metrics()
    assert final["batches_rejected"] == final["outbox_dead"] == 3
    assert final["batches_sent"] == final["batches_put"] - 2
    assert final["outbox_pending"] == 0
    with Outbox(run.outbox) as box:
        dead = {d.batch_id: d for d in box.dead_letters()}
        assert set(dead) == {f"{DEVICE}/1", *(f"{DEVICE}/{s}" for s in taken)}
        assert dead[f"{DEVICE}/1"].reason.startswith("HTTP 400")
        for s in taken:
            assert dead[f"{DEVICE}/{s}"].reason.startswith("HTTP 409")
            assert "already stored with another body" in dead[f"{DEVICE}/{s}"].reason
            body = box.dead_body(f"{DEVICE}/{s}")
            assert decode_batch(body).batch_id == f"{DEVICE}/{s}"  # the whole body, intact
    assert len(_log_lines(run, "kept as a dead letter")) == 3


def test_batches_dated_by_a_wrong_clock_are_dead_letters_until_requeued_redated(tmp_path):
    """A device that made batches while its clock said 1970 (a Raspberry Pi before NTP):
    a collector with --retain-days refuses them (its next pass would delete them), the
    agent keeps them as dead letters with the reason, delivers the rest, and ``acep outbox
    requeue --redate`` dates them now: the next run delivers them, archived under today."""
    from support.collector import make_batch

    from edge.agent.outbox import Outbox
    from edge.wire import decode_batch, encode_batch

    with serving(tmp_path, "--retain-days", "30") as c:
        token = c.token
        run = AgentRun(tmp_path, c.url, token, follow=False)
        made = {f"{DEVICE}/{s}": encode_batch(make_batch(DEVICE, s, created_at=60.0 * s))
                for s in (1000, 1001)}
        with Outbox(run.outbox) as box:
            for bid, body in made.items():
                box.put(body, bid)
        run.append(stream(600, seed=27))
        assert run.start().wait(60) == 0, run.log()
        final = run.last_metrics()
        assert final["outbox_dead"] == 2 and final["outbox_pending"] == 0
        assert final["batches_sent"] == final["batches_put"] > 0
        assert final["batches_rejected"] == 2
        with Outbox(run.outbox) as box:
            reasons = {d.batch_id: d.reason for d in box.dead_letters()}
        assert set(reasons) == set(made)
        assert all("is before" in r and "--retain-days 30" in r for r in reasons.values())

        out = run_acep("outbox", run.outbox, "requeue", "--redate", cwd=ROOT, timeout=60)
        assert (out.returncode, out.stdout) == (0, "requeued 2 dead letters dated now\n")
        pending = dict(query(run.outbox, "SELECT batch_id, body FROM pending"))
        assert set(pending) == set(made)
        for bid, body in made.items():  # dated now; the events and matches as they were
            old, new = decode_batch(body), decode_batch(pending[bid])
            assert old.created_at < 1e5 and abs(new.created_at - time.time()) < 60
            assert new.event_tag.tolist() == old.event_tag.tolist()
            assert new.point.tolist() == old.point.tolist() and new.pattern == old.pattern
        assert run.start().wait(60) == 0, run.log()
        assert run.last_metrics()["outbox_dead"] == 0
        assert {1000, 1001} <= set(c.seqs())
        today = time.strftime("%Y-%m-%d", time.gmtime())
        for seq in (1000, 1001):
            files = list(c.archive.glob(f"date=*/device={DEVICE}/*{seq}*"))
            assert [f.parent.parent.name for f in files] == [f"date={today}"], files


def test_a_finite_run_delivers_what_it_queued_before_it_exits(tmp_path, collector):
    """follow = false without --once: the run ends with every batch acknowledged."""
    run = AgentRun(tmp_path, collector.url, collector.token, follow=False)
    run.append(stream(3000, seed=26))
    assert run.start().wait(60) == 0, run.log()
    final = run.last_metrics()
    assert final["batches_put"] > 5
    assert final["outbox_pending"] == 0 and final["batches_sent"] == final["batches_put"]
    assert len(collector.seqs()) == final["batches_put"]
