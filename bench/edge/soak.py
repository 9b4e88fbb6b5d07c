"""Soak: kill/restart cycles of a real agent (and sometimes the collector) with SIGKILL.

Each cycle starts ``python -m edge.agent`` on the soak stream (a file, not followed, uploads
to a loopback collector), waits until it has committed progress beyond the previous cycle
(or has ended), lets it run a random 0-``max_run`` seconds more and kills it with SIGKILL.
In a random third of the cycles the collector is killed with SIGKILL too, at a random point
before the agent, and restarted on the same port. At the end the agent is run with
``--once`` until its outbox is empty, and the database is compared with a direct matcher
run over the same file: every expected match stored exactly once (losses = expected rows
missing, duplicates = rows stored more than once), batch sequence numbers without a gap.
"""

from __future__ import annotations

import json
import random
import signal
import sqlite3
import time
from collections import Counter
from pathlib import Path

from .procs import Collector, add_device, agent_config, spawn_agent
from .streams import PATTERN


def consumed(outbox: Path) -> tuple[int, bool]:
    """(events consumed, finished) as the agent last committed them."""
    if not outbox.exists():
        return 0, False
    db = sqlite3.connect(outbox, timeout=30)
    try:
        rows = dict(db.execute("SELECT name, value FROM state").fetchall())
    except sqlite3.OperationalError:  # the tables are not created yet
        rows = {}
    finally:
        db.close()
    return int(json.loads(rows.get("consumed", "0"))), bool(json.loads(
        rows.get("finished", "false")))


def pending(outbox: Path) -> int:
    db = sqlite3.connect(outbox, timeout=30)
    try:
        return db.execute("SELECT count(*) FROM pending").fetchone()[0]
    finally:
        db.close()


def soak(events: Path, n_events: int, work: Path, cycles: int, seed: int = 0,
         max_run: float = 0.3, collector_share: float = 1 / 3) -> dict:
    """Run the cycles and the final check; the counts as a dict."""
    rng = random.Random(seed)
    db = work / "collector.db"
    token = add_device(db)
    collector = Collector(db, work / "archive")
    collector.start()
    cfg = agent_config(work / "agent", events, collector.url, token)
    outbox = work / "agent" / "outbox.db"
    started = time.perf_counter()
    counts = Counter()
    try:
        for _ in range(cycles):
            _cycle(cfg, outbox, collector, rng, max_run, collector_share, counts)
        drained = _drain(cfg, outbox, collector, n_events)
    finally:
        collector.stop()
    seconds = time.perf_counter() - started
    return {"cycles": cycles, "events": n_events, "seconds": seconds, **dict(counts),
            "drain_runs": drained, **check(db, events)}


def _cycle(cfg: Path, outbox: Path, collector: Collector, rng: random.Random,
           max_run: float, collector_share: float, counts: Counter) -> None:
    before, _ = consumed(outbox)
    proc = spawn_agent(cfg)
    deadline = time.monotonic() + 60
    while proc.poll() is None and time.monotonic() < deadline:
        now, finished = consumed(outbox)
        if now > before or finished:
            break
        time.sleep(0.01)
    run = rng.uniform(0.0, max_run)
    if rng.random() < collector_share:
        time.sleep(rng.uniform(0.0, run))
        collector.kill()
        counts["collector_kills"] += 1
    else:
        time.sleep(run)
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
        counts["agent_kills"] += 1
        after, finished = consumed(outbox)
        counts["agent_kills_mid_stream"] += int(not finished)
    else:
        counts["agent_exited_before_kill"] += 1
    proc.wait(30)
    if collector.proc is None or collector.proc.poll() is not None:
        collector.start()


def _drain(cfg: Path, outbox: Path, collector: Collector, n_events: int) -> int:
    """Run the agent with ``--once`` until the stream is done and the outbox empty."""
    for runs in range(1, 31):
        proc = spawn_agent(cfg, once=True)
        proc.wait(600)
        now, finished = consumed(outbox)
        if finished and now == n_events and pending(outbox) == 0:
            return runs
        time.sleep(0.5)
    raise RuntimeError(f"the outbox did not drain: {pending(outbox)} batches pending, "
                       f"{consumed(outbox)} consumed")


def expected_matches(events: Path) -> Counter:
    """Every match of a direct, uninterrupted matcher run over ``events``."""
    import acep
    from acep.events import read_events

    m = acep.Matcher(PATTERN["text"], PATTERN["window"], PATTERN["k"], where=PATTERN["where"],
                     partition=PATTERN["partition"])
    found = Counter()
    for batch in read_events(events, batch_size=1 << 16):
        found.update(_keys(m.match_batch(batch)))
    found.update(_keys(m.flush()))
    return found


def _keys(mb) -> list[tuple]:
    ptr, traj = mb.trajectory_ptr.tolist(), mb.trajectory.tolist()
    return [(str(mb.partition[i]), float(mb.point[i]), int(mb.errors[i]),
             tuple(traj[ptr[i]:ptr[i + 1]])) for i in range(len(mb))]


def check(db_path: Path, events: Path) -> dict:
    """Losses and duplicates of the database against a direct matcher run."""
    db = sqlite3.connect(db_path)
    got = Counter((json.loads(p), float(pt), int(e), tuple(json.loads(t)))
                  for p, pt, e, t in db.execute(
                      "SELECT partition, point, errors, trajectory FROM matches"))
    seqs = sorted(s for (s,) in db.execute("SELECT seq FROM batches"))
    exact = db.execute("SELECT count(*) FROM matches WHERE exact = 1").fetchone()[0]
    db.close()
    want = expected_matches(events)
    return {"matches_expected": sum(want.values()), "matches_stored": sum(got.values()),
            "losses": sum((want - got).values()),
            "duplicates": sum(c - 1 for c in got.values() if c > 1),
            "unexpected": sum((got - want).values()),
            "batches": len(seqs),
            # a new outbox numbers its batches from the clock (WIRE.md): contiguous from there
            "seq_gaps": int(bool(seqs) and seqs != list(range(seqs[0], seqs[0] + len(seqs)))),
            "exact_stored": exact}
