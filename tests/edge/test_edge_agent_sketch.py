"""The agent and the sketches the collector publishes, with the real collector and agent as
processes on loopback: a download that fails at boot is retried until the sketch arrives; a
newly published sketch replaces the learned one (kept only while it derives from the
published sketch); a running agent picks up a new sketch (If-None-Match, 304 otherwise); a
key file the agent cannot read is tried again at each check until it can, and the fleet's
/metrics says which devices' checks fail meanwhile."""

from __future__ import annotations

import hashlib
import json
import time
import urllib.request
from pathlib import Path

from support.collector import SKETCH_KEY, CollectorProcess, device_series, publish
from support.e2e import (
    BUDGET,
    AgentRun,
    bound_by_modes,
    chunks_until,
    metrics_lines,
    sketch_bytes,
    sketch_section,
    stream,
)
from support.wait import wait_for


def etag(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_a_download_that_failed_at_boot_is_retried_until_the_sketch_arrives(tmp_path):
    c = CollectorProcess(tmp_path)
    token, admin = c.add("pi-e2e"), c.add("ops", "--add-admin")
    c.start()
    try:
        publish(c, admin, sketch_bytes(0.5))
        c.kill()  # the collector is down when the device boots
        run = AgentRun(tmp_path, c.url, token, budget=BUDGET, sketch=sketch_section(tmp_path))
        run.append(stream(200, seed=21))
        run.start()
        wait_for(lambda: run.state("consumed") == 200, "the agent to run")
        assert "using the fallback policy oldest-first until it succeeds" in run.log()
        t = [1000.0]

        def metrics_written():
            t[0] += 300
            run.append(stream(50, seed=int(t[0]), t0=t[0]))
            return metrics_lines(run)

        first = wait_for(metrics_written, "a metrics line", every=0.3)[-1]
        assert first["policy"] == "oldest-first"
        assert "sketch download failed" in first["policy_error"]
        c.start()  # the network is up

        def switched():
            t[0] += 300
            run.append(stream(50, seed=int(t[0]), t0=t[0]))  # a chunk lets the swap happen
            run.alive()
            return "using the sketch published as" in run.log()

        wait_for(switched, "the agent to use the sketch", every=0.3)
        final = run.stop()
        assert final["policy"] == "history" and final["policy_error"] is None
        assert final["sketch_updates"] == 1
        assert (tmp_path / "abc.sketch").read_bytes() == sketch_bytes(0.5)
    finally:
        if c.proc is not None and c.proc.poll() is None:
            c.kill()


def test_a_newly_published_sketch_replaces_the_learned_one(tmp_path):
    c = CollectorProcess(tmp_path)
    token, admin = c.add("pi-e2e"), c.add("ops", "--add-admin")
    c.start()
    try:
        a, b = sketch_bytes(0.5), sketch_bytes(0.7)
        publish(c, admin, a)
        run = AgentRun(tmp_path, c.url, token, budget=BUDGET, sketch=sketch_section(tmp_path))
        run.append(stream(600, seed=22))
        assert run.start(once=True).wait(60) == 0, run.log()
        learned = tmp_path / "learned.sketch"
        assert (tmp_path / "learned.sketch.origin").read_text() == etag(a)
        assert run.last_metrics()["policy"] == "history"

        # nothing new published: the learned sketch is kept
        assert run.start(once=True).wait(60) == 0, run.log()
        assert run.log().count("loaded the learned sketch") == 1

        publish(c, admin, b)
        learned_from_a = learned.read_bytes()
        assert run.start(once=True).wait(60) == 0, run.log()
        assert "not from the sketch now published" in run.log()
        assert (tmp_path / "learned.sketch.origin").read_text() == etag(b)
        assert (tmp_path / "abc.sketch").read_bytes() == b
        assert learned.read_bytes() != learned_from_a
    finally:
        c.kill()


def test_a_running_agent_checks_for_a_new_sketch(tmp_path):
    c = CollectorProcess(tmp_path)
    token, admin = c.add("pi-e2e"), c.add("ops", "--add-admin")
    c.start()
    try:
        a, b = sketch_bytes(0.5), sketch_bytes(0.9)
        publish(c, admin, a)
        run = AgentRun(tmp_path, c.url, token, budget=BUDGET,
                       sketch=sketch_section(tmp_path, check_interval=0.2))
        run.append(stream(300, seed=23))
        run.start()
        wait_for(lambda: run.state("consumed") == 300, "the run")

        def not_modified():
            doc = json.loads(urllib.request.urlopen(c.url + "/metrics", timeout=10).read())
            return doc["requests"].get("304", 0) > 0

        wait_for(not_modified, "a 304 to the agent's check")
        t = [1000.0]

        def metrics_written():
            t[0] += 300
            run.append(stream(50, seed=int(t[0]), t0=t[0]))
            return metrics_lines(run)

        before = wait_for(metrics_written, "a metrics line", every=0.3)[-1]
        assert before["policy"] == "history" and before["sketch_updates"] == 0
        publish(c, admin, b)

        def updated():
            t[0] += 300
            run.append(stream(50, seed=int(t[0]), t0=t[0]))
            run.alive()
            return "using the sketch published as" in run.log()

        wait_for(updated, "the new sketch to be used", every=0.3)
        final = run.stop()
        assert final["policy"] == "history" and final["sketch_updates"] == 1
        assert (tmp_path / "learned.sketch.origin").read_text() == etag(b)
        # the counters go on across the new matcher
        assert final["candidates"] > before["candidates"] and final["shed"] >= before["shed"]
    finally:
        c.kill()


def own_key(tmp: Path) -> Path:
    """The agent's copy of the fleet's sketch key, in a file of its own (the collector
    reads sketch.key)."""
    key = tmp / "agent.key"
    key.write_bytes(SKETCH_KEY + b"\n")
    key.chmod(0o600)
    return key


def with_key(section: str, tmp: Path, key: Path) -> str:
    return section.replace(str(tmp / "sketch.key"), str(key))


def test_a_key_file_that_cannot_be_read_is_tried_again_until_it_can(tmp_path):
    """Before, an agent that could not read its sketch.key_file at start (its mode) ran
    oldest-first, its first check (an hour later) refused the published sketch for the key,
    and every check after was a 304: it never tried the key again until another sketch was
    published. Now each check reads the keys first and fails with the outbox's backoff,
    sketch_error names the file and why, the fleet's /metrics says the device's checks fail
    and since when, and the first check that reads the key takes the sketch (not an hour
    later: check_interval is 3600)."""
    c = CollectorProcess(tmp_path)
    token, admin = c.add("pi-e2e"), c.add("ops", "--add-admin")
    c.start()
    try:
        publish(c, admin, sketch_bytes(0.5))
        key = own_key(tmp_path)
        key.chmod(0)
        run = AgentRun(tmp_path, c.url, token, budget=BUDGET, heartbeat=0.2,
                       sketch=with_key(sketch_section(tmp_path), tmp_path, key))
        run.append(stream(200, seed=31))
        started = time.time()
        run.start(**bound_by_modes())
        said = (f"cannot verify sketches: sketch.key_file: {key}: cannot read the key file "
                "(Permission denied)")
        line = wait_for(lambda: [m for m in metrics_lines(run) if m["consumed"] == 200],
                        "a metrics line after the events")[-1]
        assert (line["sketch_error"], line["policy"]) == (said, "oldest-first")
        assert started <= line["sketch_failing_since"] <= line["time"]
        seen = wait_for(lambda: device_series(c).get("acep_device_sketch_failing") == 1
                        and device_series(c), "the collector's /metrics to say it")
        assert seen["acep_device_sketch_failing_since_timestamp_seconds"] == \
            line["sketch_failing_since"]
        assert seen["acep_device_metrics_failing"] == seen["acep_device_upload_failing"] == 0

        key.chmod(0o600)
        chunks_until(run, lambda: "using the sketch published as" in run.log(),
                     "the sketch to be taken")
        assert time.time() - started < 600  # at a check of the backoff, not of the interval
        final = run.stop()
        assert final["policy"] == "history" and final["sketch_updates"] == 1
        assert final["sketch_error"] is None and final["sketch_failing_since"] is None
        assert final["policy_error"] is None
        log = run.log()
        assert log.count("cannot read the key file") == 1, log  # once for the streak
        assert "the sketch checks try again with backoff (up to 0.5s apart) until it can " \
               "be read" in log
        assert "the sketch key files can be read again" in log
        assert device_series(c)["acep_device_sketch_failing"] == 0
    finally:
        c.kill()


def test_a_sketch_published_while_the_key_cannot_be_read_is_taken_once_it_can(tmp_path):
    """Before, a sketch published while the running agent could not read its key file was
    refused for good (sketch_error: "is refused"), as if the sketch were bad: every check
    after was a 304 until another sketch was published. Now it is the key's failure,
    retried with backoff, and the sketch is taken once the key can be read."""
    c = CollectorProcess(tmp_path)
    token, admin = c.add("pi-e2e"), c.add("ops", "--add-admin")
    c.start()
    try:
        a, b = sketch_bytes(0.5), sketch_bytes(0.9)
        publish(c, admin, a)
        key = own_key(tmp_path)
        run = AgentRun(tmp_path, c.url, token, budget=BUDGET, sketch=with_key(
            sketch_section(tmp_path, check_interval=0.2), tmp_path, key))
        run.append(stream(300, seed=32))
        run.start(**bound_by_modes())
        wait_for(lambda: run.state("consumed") == 300, "the run")
        key.chmod(0)
        publish(c, admin, b)
        said = (f"cannot verify sketches: sketch.key_file: {key}: cannot read the key file "
                "(Permission denied)")
        chunks_until(run, lambda: any(m["sketch_error"] == said for m in metrics_lines(run)),
                     "sketch_error to name the key file")
        assert "using the sketch published as" not in run.log()
        key.chmod(0o600)
        chunks_until(run, lambda: f"using the sketch published as {etag(b)[:16]}" in run.log(),
                     "the new sketch to be taken")
        final = run.stop()
        assert final["policy"] == "history" and final["sketch_error"] is None
        assert "is refused" not in run.log()
        assert (tmp_path / "abc.sketch").read_bytes() == b
    finally:
        c.kill()
