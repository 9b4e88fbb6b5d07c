"""Processes of the edge benchmark: measured workers, the collector, agent configs."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from .streams import pattern_table

ROOT = Path(__file__).resolve().parents[2]
DEVICE = "pi-bench"
_FIELDS = ("VmRSS", "RssAnon", "RssFile")


def env() -> dict:
    """The environment of child processes: this checkout first on the import path."""
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": str(ROOT) + (os.pathsep + path if path else "")}


def measured(args: list[str], sample_s: float = 0.1) -> dict:
    """Run ``python -m bench.edge.worker ARGS``; its JSON line (with its own ``VmHWM``) plus
    the peaks of /proc samples of its resident memory: all, anonymous, file-backed."""
    proc = subprocess.Popen([sys.executable, "-m", "bench.edge.worker", *args], cwd=ROOT,
                            env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    peaks = {f: 0 for f in _FIELDS}
    done = threading.Event()
    sampler = threading.Thread(target=_sample, args=(proc.pid, peaks, done, sample_s),
                               daemon=True)
    sampler.start()
    out = proc.stdout.read()
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    done.set()
    sampler.join()
    if proc.returncode != 0:
        raise RuntimeError(f"worker {args[0]} failed ({proc.returncode}): "
                           f"{err.decode()[-2000:]}")
    doc = json.loads(out.decode().strip().splitlines()[-1])
    # wait4's ru_maxrss includes this (parent) process's peak at fork: kept for reference
    doc["wait4_maxrss_mib"] = usage.ru_maxrss / 1024
    doc["sampled_peak_mib"] = {f.lower(): peaks[f] / 1024 for f in _FIELDS}
    return doc


def _sample(pid: int, peaks: dict, done: threading.Event, every: float) -> None:
    while not done.is_set():
        try:
            text = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            return
        for field in _FIELDS:
            found = re.search(rf"^{field}:\s+(\d+)", text, re.M)
            if found:
                peaks[field] = max(peaks[field], int(found.group(1)))
        done.wait(every)


# --------------------------------------------------------------------------- agent


def agent_config(folder: Path, events: Path, url: str | None = None, token: str = "",
                 batch_events: int = 1000, sample: float = 0.0) -> Path:
    """An agent.toml in ``folder``: the benchmark pattern over ``events`` (not followed),
    no budget, an outbox in ``folder``; uploads to ``url`` when given; with ``sample`` above
    0, ``[sample] share = sample`` (seed 0) besides the match windows."""
    folder.mkdir(parents=True, exist_ok=True)
    text = f'[device]\nid = "{DEVICE}"\n'
    if url is not None:
        text += f'token = "{token}"\n[collector]\nurl = "{url}"\ntimeout = 5.0\n'
    text += (pattern_table() +
             f'[source]\nkind = "file"\npath = "{events}"\nfollow = false\n'
             f'batch_events = {batch_events}\nbatch_seconds = 1.0\npoll_seconds = 0.05\n'
             '[budget]\nmode = "none"\n'
             f'[outbox]\npath = "{folder / "outbox.db"}"\nmax_rows = 1000000\n'
             'max_bytes = 4294967296\nbackoff_base = 0.05\nbackoff_max = 0.5\n'
             f'[metrics]\npath = "{folder / "metrics.jsonl"}"\ninterval = 3600\n')
    if sample > 0:
        text += f"[sample]\nshare = {sample!r}\nseed = 0\n"
    path = folder / "agent.toml"
    path.write_text(text)
    return path


def spawn_agent(config: Path, once: bool = False) -> subprocess.Popen:
    """``python -m edge.agent --config CONFIG`` as the user runs it."""
    args = [sys.executable, "-m", "edge.agent", "--config", str(config), "--log-level", "ERROR"]
    return subprocess.Popen(args + (["--once"] if once else []), cwd=ROOT, env=env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


# --------------------------------------------------------------------------- collector


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def add_device(db: Path) -> str:
    """Register :data:`DEVICE` with the collector's database; its token."""
    done = subprocess.run([sys.executable, "-m", "edge.collector", "--db", str(db),
                           "--add-device", DEVICE], cwd=ROOT, env=env(), check=True,
                          capture_output=True, text=True)
    return done.stdout.strip().split()[-1]


class Collector:
    """``python -m edge.collector`` on loopback at a fixed port (kept across restarts)."""

    def __init__(self, db: Path, archive: Path, port: int | None = None,
                 options: tuple[str, ...] = ()):
        self.db, self.archive, self.options = db, archive, tuple(options)
        self.port = port or free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> None:
        args = [sys.executable, "-m", "edge.collector", "--db", str(self.db), "--archive",
                str(self.archive), "--host", "127.0.0.1", "--port", str(self.port),
                *self.options]
        deadline = time.monotonic() + timeout
        while True:
            self.proc = subprocess.Popen(args, cwd=ROOT, env=env(), stdout=subprocess.PIPE,
                                         stderr=subprocess.DEVNULL, text=True)
            line = self.proc.stdout.readline()
            if "listening" in line:
                return
            self.proc.wait(10)  # e.g. the port is not free yet after a kill
            if time.monotonic() > deadline:
                raise RuntimeError(f"the collector did not start: {line!r}")
            time.sleep(0.2)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
