"""Collector ingest rate: real upload batches POSTed on loopback by concurrent clients.

The batches are the agent's own (its outbox after the memory run: ``batch_from_matches``
over a real matcher run, encoded, one per chunk of events with matches). The collector runs
as ``python -m edge.collector`` on 127.0.0.1 (its default two re-check worker processes);
``clients`` threads each keep one HTTP connection and POST their share (one device's
token, so ``--device-uploads`` is ``clients``). The rate is
matches stored per second of wall time from the first request to the last answer. The
exact re-check cannot be switched off in the collector, so the same batches are also run
through the collector's ingest steps in this process, one at a time (one commit per batch,
no worker processes), to say how much of the time each step (decode, re-check, archive,
database) takes.
"""

from __future__ import annotations

import http.client
import sqlite3
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

from .procs import Collector, add_device, agent_config
from .streams import write_stream


def outbox_bodies(outbox: Path, max_matches: int | None) -> list[bytes]:
    """The batch bodies of an agent's outbox, in order, up to about ``max_matches``."""
    from edge.wire import decode

    db = sqlite3.connect(outbox)
    bodies, total = [], 0
    for (body,) in db.execute("SELECT body FROM pending ORDER BY n"):
        if max_matches is not None and total >= max_matches:
            break
        bodies.append(bytes(body))
        total += len(decode(body))
    db.close()
    return bodies


def agent_bodies(work: Path, data_path: str | None, quick: bool, events: int,
                 batch_events: int = 1000) -> tuple[list[bytes], dict]:
    """The real agent (no budget, outbox only) over the first ``events`` of the stream
    (:func:`streams.write_stream`), closing a batch every ``batch_events`` events: its
    outbox's batch bodies, and the stream's description."""
    from edge.agent import Agent
    from edge.agent.config import load_config

    stream = work / "stream.jsonl"
    described = write_stream(stream, data_path, quick, events)
    Agent(load_config(agent_config(work / "agent", stream, batch_events=batch_events))).run()
    return outbox_bodies(work / "agent" / "outbox.db", None), described


def post_all(url: str, token: str, bodies: list[bytes], clients: int) -> dict:
    """POST every body (split round-robin over ``clients`` threads); the answers counted."""
    shares = [bodies[i::clients] for i in range(clients)]
    results: list[dict] = [{} for _ in range(clients)]
    threads = [threading.Thread(target=_client, args=(url, token, share, out))
               for share, out in zip(shares, results)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - started
    total = {"seconds": seconds, "stored": 0, "duplicate": 0, "failed": 0, "matches": 0,
             "bytes": sum(len(b) for b in bodies)}
    for r in results:
        for key in ("stored", "duplicate", "failed", "matches"):
            total[key] += r.get(key, 0)
    return total


def _client(url: str, token: str, bodies: list[bytes], out: dict) -> None:
    import json

    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=120)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/msgpack"}
    for body in bodies:
        conn.request("POST", "/v1/batches", body=body, headers=headers)
        answer = conn.getresponse()
        doc = json.loads(answer.read() or b"{}")
        if answer.status != 200:
            out["failed"] = out.get("failed", 0) + 1
            continue
        out[doc["status"]] = out.get(doc["status"], 0) + 1
        out["matches"] = out.get("matches", 0) + int(doc.get("matches", 0))
    conn.close()


def ingest_rate(bodies: list[bytes], work: Path, clients: int, repeats: int = 3) -> dict:
    """Matches/s fresh collectors store from ``bodies`` posted by ``clients`` threads:
    ``repeats`` runs (a new database and archive each), the figures of the median run and
    every run's rate (one run lasts about a second, so a busy moment on the machine moves
    it a lot)."""
    runs = [_one_rate(bodies, work / f"run-{i}", clients) for i in range(repeats)]
    ranked = sorted(runs, key=lambda r: r["matches_per_s"])
    return {**ranked[len(ranked) // 2], "repeats": repeats,
            "runs_matches_per_s": [r["matches_per_s"] for r in runs]}


def _one_rate(bodies: list[bytes], work: Path, clients: int) -> dict:
    db, archive = work / "collector.db", work / "archive"
    token = add_device(db)
    # the clients share one device's token: let them upload side by side
    collector = Collector(db, archive, options=("--device-uploads", str(clients)))
    collector.start()
    try:
        posted = post_all(collector.url, token, bodies, clients)
    finally:
        collector.stop()
    rows = sqlite3.connect(db).execute("SELECT count(*), sum(exact) FROM matches").fetchone()
    return {"clients": clients, "recheck_workers": 2, "batches": len(bodies), **posted,
            "matches_in_db": rows[0], "exact_in_db": rows[1] or 0,
            "matches_per_s": rows[0] / posted["seconds"],
            "batches_per_s": len(bodies) / posted["seconds"],
            "mean_batch_matches": rows[0] / max(len(bodies), 1),
            "mean_batch_bytes": posted["bytes"] / max(len(bodies), 1)}


def ingest_steps(bodies: list[bytes]) -> dict:
    """Seconds of each step of the collector's ingest over ``bodies``, in this process."""
    from edge.collector.archive import Archive
    from edge.collector.recheck import recheck_batch
    from edge.collector.store import open_store
    from edge.wire import decode

    steps = {"decode": 0.0, "recheck": 0.0, "archive": 0.0, "database": 0.0}
    matches = 0
    with tempfile.TemporaryDirectory(prefix="acep-ingest-") as tmp:
        store, archive = open_store(Path(tmp) / "steps.db"), Archive(Path(tmp) / "archive")
        for body in bodies:
            t0 = time.perf_counter()
            batch = decode(body)
            t1 = time.perf_counter()
            checks = recheck_batch(batch)
            t2 = time.perf_counter()
            path = archive.write(batch)
            t3 = time.perf_counter()
            store.store_batch(batch, checks, nbytes=len(body), archive=str(path))
            t4 = time.perf_counter()
            for name, a, b in (("decode", t0, t1), ("recheck", t1, t2), ("archive", t2, t3),
                               ("database", t3, t4)):
                steps[name] += b - a
            matches += len(batch)
        store.close()
    total = sum(steps.values())
    return {"matches": matches, "seconds": steps, "total_seconds": total,
            "share": {k: v / total for k, v in steps.items()},
            "matches_per_s_all_steps": matches / total,
            "matches_per_s_without_recheck": matches / (total - steps["recheck"])}

