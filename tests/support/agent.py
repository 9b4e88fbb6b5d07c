"""The agent run in process over an iterator source: its pattern, events and config."""

from __future__ import annotations

import random
from pathlib import Path

PATTERN = {"id": "abc", "text": "a b c", "window": 5.0, "k": 1, "partition": "id"}


def stream(n: int, seed: int = 1) -> list[dict]:
    """``n`` random events of types a, b, c with an id (the partition)."""
    rng = random.Random(seed)
    t, out = 0.0, []
    for _ in range(n):
        t += rng.random()
        out.append({"type": rng.choice("abc"), "t": round(t, 3), "id": rng.randrange(6)})
    return out


def config(tmp: Path, **sections) -> dict:
    """An agent's config of an iterator source, its files in ``tmp``; ``sections`` add to
    or override its sections' keys."""
    doc = {"device": {"id": "dev-1"}, "pattern": dict(PATTERN),
           "source": {"kind": "iterator", "batch_events": 97},
           "outbox": {"path": str(tmp / "outbox.db")},
           "metrics": {"path": str(tmp / "metrics.jsonl"), "interval": 3600}}
    for name, value in sections.items():
        doc[name] = {**doc.get(name, {}), **value}
    return doc
