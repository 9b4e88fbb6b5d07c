"""The agent as a process following a JSON Lines file (AgentRun), its pattern, events,
config files and sketches, and what an uninterrupted run would match."""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np

import acep
from acep.shedding import Budget
from edge.agent import Agent
from edge.agent.config import parse_config
from edge.wire import WireError, decode_batch
from history.sketch import Sketch
from support.collector import DEVICE, ROOT, SKETCH_KEY, CollectorProcess, query
from support.wait import wait_for

PATTERN = {"id": "abc", "text": "a b c", "window": 5.0, "k": 1, "partition": "id",
           "where": ["c.x >= a.x"]}


def stream(n: int, seed: int, t0: float = 0.0) -> list[dict]:
    """``n`` random events of types a, b, c after time ``t0``, with an id (the partition)
    and a number x."""
    rng = random.Random(seed)
    t, out = t0, []
    for _ in range(n):
        t += rng.random()
        out.append({"type": rng.choice("abc"), "t": round(t, 3), "id": rng.randrange(5),
                    "x": rng.randrange(10)})
    return out


def direct(events: list[dict], budget: Budget | None = None) -> list[tuple]:
    """The matches an uninterrupted followed-file agent emits: no flush at the end."""
    m = acep.Matcher(PATTERN["text"], PATTERN["window"], PATTERN["k"], partition="id",
                     where=PATTERN["where"], budget=budget)
    found = m.match_batch(acep.EventBatch.from_events(events)).to_matches()
    return sorted(((float(x.partition), float(x.point), int(x.errors), tuple(x.events))
                   for x in found), key=repr)


_PR_CAPBSET_DROP, _CAP_DAC_OVERRIDE, _CAP_DAC_READ_SEARCH = 24, 1, 2  # linux/prctl.h


def bound_by_modes() -> dict:
    """Arguments of :class:`subprocess.Popen` under which a file's mode binds the process as
    it binds any user on a device. CI runs as root, whose CAP_DAC_OVERRIDE reads a file of
    mode 000: dropped (with CAP_DAC_READ_SEARCH) from the bounding set before the exec, the
    program run has neither; as another user, nothing to do."""
    if os.geteuid() != 0:
        return {}
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)

    def drop() -> None:
        for cap in (_CAP_DAC_OVERRIDE, _CAP_DAC_READ_SEARCH):
            if libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
                raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")

    return {"preexec_fn": drop}


class AgentRun:
    """A directory with ``agent.toml``, the followed events file and the agent's outbox."""

    def __init__(self, tmp: Path, url: str | None, token: str | None, *,
                 budget: str = 'mode = "none"', sketch: str = "", outbox: str = "outbox.db",
                 follow: bool = True, drain: float | None = None,
                 heartbeat: float | None = None):
        self.tmp, self.events_path = tmp, tmp / "events.jsonl"
        self.outbox = tmp / outbox
        self.events_path.touch()
        self.written: list[dict] = []
        self.proc: subprocess.Popen | None = None
        self.cfg = tmp / f"agent-{outbox}.toml"
        collector = "" if url is None else f'[collector]\nurl = "{url}"\ntimeout = 5.0\n'
        if url is not None and drain is not None:
            collector += f"drain_timeout = {drain}\n"
        if url is not None and heartbeat is not None:
            collector += f"heartbeat = {heartbeat}\n"
        token_line = "" if token is None else f'token = "{token}"\n'
        p = PATTERN
        self.cfg.write_text(
            f'[device]\nid = "{DEVICE}"\n{token_line}{collector}'
            f'[pattern]\nid = "{p["id"]}"\ntext = "{p["text"]}"\nwindow = {p["window"]}\n'
            f'k = {p["k"]}\npartition = "{p["partition"]}"\nwhere = {json.dumps(p["where"])}\n'
            f'[source]\nkind = "file"\npath = "events.jsonl"\nfollow = {str(follow).lower()}\n'
            f'batch_events = 50\nbatch_seconds = 0.1\npoll_seconds = 0.02\n'
            f'[budget]\n{budget}\n{sketch}'
            f'[outbox]\npath = "{outbox}"\nbackoff_base = 0.05\nbackoff_max = 0.5\n'
            f'[metrics]\npath = "metrics-{outbox}.jsonl"\ninterval = 1\n')

    def append(self, events: list[dict]) -> None:
        with open(self.events_path, "a") as fh:
            fh.write("".join(json.dumps(e) + "\n" for e in events))
        self.written.extend(events)

    def start(self, once: bool = False, **popen) -> subprocess.Popen:
        """The agent as a process (``popen``: more arguments of :class:`subprocess.Popen`)."""
        with open(self.tmp / "agent.err", "a") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "edge.agent", "--config", str(self.cfg)]
                + (["--once"] if once else []),
                cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err,
                env={**os.environ, "PYTHONPATH": str(ROOT)}, **popen)
        return self.proc

    def log(self) -> str:
        return (self.tmp / "agent.err").read_text()

    def alive(self) -> None:
        assert self.proc.poll() is None, self.log()

    def state(self, name: str, default=0):
        row = query(self.outbox, "SELECT value FROM state WHERE name = ?", (name,))
        return json.loads(row[0][0]) if row else default

    def pending(self) -> int:
        row = query(self.outbox, "SELECT COUNT(*) FROM pending")
        return row[0][0] if row else -1

    def caught_up(self, collector: CollectorProcess) -> bool:
        """Every event consumed, every batch acknowledged and in the collector's database."""
        seqs = collector.seqs()
        return (self.state("consumed") == len(self.written) and self.pending() == 0
                and (not seqs or seqs == list(range(seqs[0], self.state("seq")))))

    def stop(self) -> dict:
        self.proc.send_signal(signal.SIGTERM)
        assert self.proc.wait(60) == 0, self.log()
        return self.last_metrics()

    def last_metrics(self) -> dict:
        lines = (self.tmp / f"metrics-{self.outbox.name}.jsonl").read_text().splitlines()
        return json.loads(lines[-1])


BUDGET = 'mode = "fixed"\nops_per_event = 0.5\nburst = 8.0'


def sketch_bytes(score: float) -> bytes:
    """A sketch of PATTERN whose every cell scores ``score``, signed with SKETCH_KEY."""
    m = acep.Matcher(PATTERN["text"], PATTERN["window"], PATTERN["k"])
    n_states = m.pattern.automaton.n_states
    n_cells = n_states * 2 * 3 * 2
    return Sketch(PATTERN["text"], tuple(PATTERN["where"]), PATTERN["k"], PATTERN["window"],
                  n_states, np.array([1.0, 3.0]), np.array([0.5]),
                  np.full(n_cells, score, np.float32), np.zeros((n_cells, 4), np.uint32),
                  partition_by=PATTERN["partition"]).to_bytes(SKETCH_KEY)


def sketch_section(tmp, check_interval: float = 3600.0) -> str:
    """The ``[sketch]`` section of an agent that downloads pattern abc's sketch."""
    return ('[sketch]\ndownload = true\npath = "abc.sketch"\nsave_path = "learned.sketch"\n'
            f'key_file = "{tmp / "sketch.key"}"\ncheck_interval = {check_interval}\n')


def metrics_lines(run: AgentRun) -> list[dict]:
    """The metrics lines the agent of ``run`` wrote so far."""
    path = run.tmp / f"metrics-{run.outbox.name}.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def chunks_until(run: AgentRun, done, what: str):
    """Append events (a chunk lets the agent take a new sketch) until ``done()``."""
    t = [1000.0]

    def step():
        t[0] += 300
        run.append(stream(50, seed=int(t[0]), t0=t[0]))
        run.alive()
        return done()

    return wait_for(step, what, every=0.3)


def write_events(path: Path, events: list[dict]) -> None:
    """Write ``events`` as JSON Lines."""
    path.write_text("".join(json.dumps(e) + "\n" for e in events))


def agent_doc(tmp: Path, url: str | None = None, token: str | None = None) -> dict:
    """The config of an agent reading ``tmp/events.jsonl`` once, uploading to ``url`` if
    given."""
    doc = {"device": {"id": DEVICE}, "pattern": dict(PATTERN),
           "source": {"kind": "file", "path": str(tmp / "events.jsonl"), "follow": False,
                      "batch_events": 97},
           "outbox": {"path": str(tmp / "outbox.db"), "backoff_base": 0.05,
                      "backoff_max": 0.2},
           "metrics": {"path": str(tmp / "metrics.jsonl"), "interval": 3600}}
    if url is not None:
        doc["device"]["token"] = token
        doc["collector"] = {"url": url, "timeout": 10}
    return doc


def write_toml(path: Path, doc: dict) -> Path:
    """``doc`` as an agent.toml (its values are strings, numbers, booleans and lists)."""
    path.write_text("\n".join(f"[{name}]\n" + "\n".join(f"{k} = {json.dumps(v)}"
                                                        for k, v in sec.items())
                              for name, sec in doc.items()) + "\n")
    return path


def run_once(doc: dict) -> dict:
    """Run the agent of config ``doc`` in process until its input ends; its summary."""
    return Agent(parse_config(doc)).run(once=True)


def flip_a_bit(db_path: Path) -> tuple[str, bytes]:
    """Flip one bit of a stored body, as a failing SD card does, such that it still decodes
    (a wrong value, not garbage): the batch id and its body before."""
    with sqlite3.connect(db_path) as db:
        bid, body = db.execute("SELECT batch_id, body FROM pending ORDER BY n "
                               "LIMIT 1 OFFSET 1").fetchone()
    flip_bit_of(db_path, bid)
    return bid, bytes(body)


def flip_bit_of(db_path: Path, bid: str) -> None:
    """Flip one bit of batch ``bid``'s stored body such that it still decodes."""
    db = sqlite3.connect(db_path)
    try:
        (body,) = db.execute("SELECT body FROM pending WHERE batch_id = ?", (bid,)).fetchone()
        for i in range(len(body) - 1, 0, -1):
            bad = bytearray(body)
            bad[i] ^= 0x01
            try:
                if decode_batch(bytes(bad)).batch_id == bid:
                    break
            except (WireError, ValueError):
                continue
        db.execute("UPDATE pending SET body = ? WHERE batch_id = ?", (bytes(bad), bid))
        db.commit()
    finally:
        db.close()


def write_config(d: Path, url: str | None, token: str, *, source: str = "events.jsonl",
                 sketch: str | None = "abc.sketch", download: bool = False) -> Path:
    """A device directory like an install's: agent.toml, the token and the sketch key in
    files only their owner reads, the events file and (if named) a signed sketch."""
    d.mkdir(parents=True, exist_ok=True)
    (d / "token").write_text(token + "\n")
    (d / "sketch.key").write_bytes(SKETCH_KEY + b"\n")
    for name in ("token", "sketch.key"):
        os.chmod(d / name, 0o600)
    p = PATTERN
    collector = "" if url is None else f'[collector]\nurl = "{url}"\ntimeout = 5.0\n'
    section = "" if sketch is None and not download else (
        "[sketch]\n" + (f'path = "{sketch}"\n' if sketch else "")
        + f"download = {str(download).lower()}\n"
        + 'key_file = "sketch.key"\nsave_path = "learned.sketch"\n')
    cfg = d / "agent.toml"
    cfg.write_text(
        f'[device]\nid = "{DEVICE}"\ntoken_file = "token"\n{collector}'
        f'[pattern]\nid = "{p["id"]}"\ntext = "{p["text"]}"\nwindow = {p["window"]}\n'
        f'k = {p["k"]}\npartition = "{p["partition"]}"\nwhere = {p["where"]!r}\n'
        f'[source]\npath = "{source}"\n'
        '[budget]\nmode = "fixed"\nops_per_event = 0.5\n'
        f'{section}[outbox]\npath = "outbox.db"\n[metrics]\npath = "metrics.jsonl"\n'
        .replace("'", '"'))
    os.chmod(cfg, 0o600)
    with open(d / "events.jsonl", "w") as fh:
        fh.writelines(f'{{"type": "{e["type"]}", "t": {e["t"]}, "id": {e["id"]}, '
                      f'"x": {e["x"]}}}\n' for e in stream(50, 3))
    if sketch:
        (d / sketch).write_bytes(sketch_bytes(0.5))
    return cfg
