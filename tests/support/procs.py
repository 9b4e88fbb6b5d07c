"""Processes the tests start: their descendants and whether one still runs."""

from __future__ import annotations

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
