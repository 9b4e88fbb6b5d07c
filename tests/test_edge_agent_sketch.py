"""The agent and the sketches the collector publishes, with the real collector and agent as
processes on loopback: a download that fails at boot is retried until the sketch arrives; a
newly published sketch replaces the learned one (kept only while it derives from the
published sketch); a running agent picks up a new sketch (If-None-Match, 304 otherwise)."""

from __future__ import annotations

import hashlib
import json
import random
import urllib.request

import numpy as np
from test_edge_e2e import PATTERN, SKETCH_KEY, AgentRun, Collector, wait_for

import acep
from history.sketch import Sketch

BUDGET = 'mode = "fixed"\nops_per_event = 0.5\nburst = 8.0'


def stream(n: int, seed: int, t0: float = 0.0) -> list[dict]:
    rng = random.Random(seed)
    t, out = t0, []
    for _ in range(n):
        t += rng.random()
        out.append({"type": rng.choice("abc"), "t": round(t, 3), "id": rng.randrange(5),
                    "x": rng.randrange(10)})
    return out


def sketch_bytes(score: float) -> bytes:
    m = acep.Matcher(PATTERN["text"], PATTERN["window"], PATTERN["k"])
    n_states = m.pattern.automaton.n_states
    n_cells = n_states * 2 * 3 * 2
    return Sketch(PATTERN["text"], tuple(PATTERN["where"]), PATTERN["k"], PATTERN["window"],
                  n_states, np.array([1.0, 3.0]), np.array([0.5]),
                  np.full(n_cells, score, np.float32), np.zeros((n_cells, 4), np.uint32),
                  partition_by=PATTERN["partition"]).to_bytes(SKETCH_KEY)


def publish(c: Collector, admin: str, data: bytes) -> None:
    req = urllib.request.Request(c.url + "/v1/sketches/abc?unchecked=1", data=data,
                                 method="PUT", headers={"Authorization": f"Bearer {admin}"})
    with urllib.request.urlopen(req, timeout=30) as r:
        assert r.status == 200


def sketch_section(tmp, check_interval: float = 3600.0) -> str:
    return ('[sketch]\ndownload = true\npath = "abc.sketch"\nsave_path = "learned.sketch"\n'
            f'key_file = "{tmp / "sketch.key"}"\ncheck_interval = {check_interval}\n')


def etag(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def metrics_lines(run: AgentRun) -> list[dict]:
    path = run.tmp / f"metrics-{run.outbox.name}.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def test_a_download_that_failed_at_boot_is_retried_until_the_sketch_arrives(tmp_path):
    c = Collector(tmp_path)
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
    c = Collector(tmp_path)
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
    c = Collector(tmp_path)
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
