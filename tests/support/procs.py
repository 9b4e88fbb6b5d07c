"""Processes the tests start: their descendants, whether one still runs, and the URL a
collector prints when it listens."""

from __future__ import annotations

import time
from pathlib import Path


def descendants(pid: int) -> set[int]:
    """Every process below ``pid`` (children, theirs...), from /proc."""
    found, todo = set(), [pid]
    while todo:
        for task in Path(f"/proc/{todo.pop()}/task").glob("*/children"):
            try:
                kids = {int(c) for c in task.read_text().split()}
            except OSError:
                continue
            todo += kids - found
            found |= kids
    return found


def alive(pid: int) -> bool:
    """``pid`` runs (it exists and is not a zombie)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_url(out: Path, proc) -> str:
    """The URL in the first line of a collector's standard output ``out`` (its ``listening
    on http://...``), once it is there; fails when ``proc`` exits or a minute passes."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the collector exited"
        text = out.read_text()
        if "listening on http://" in text:
            return text.splitlines()[0].strip().rsplit(" ", 1)[1]
        time.sleep(0.05)
    raise AssertionError("the collector did not start")
