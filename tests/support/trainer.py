"""Events, an archive written as devices and the collector write it, and the single
process history the Spark trainer must reproduce."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np

from acep import EventBatch, Matcher
from acep.matcher import _select as select_matches
from edge.collector.archive import Archive
from edge.wire import PatternRef, batch_from_matches
from history.build import build_history
from history.graph import HistoryGraph
from trainer.train import PatternSpec

PATTERN = PatternSpec("a b+ c", 5.0, 1, ("c.v > a.v",), "p")


def events(n: int, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    tags = np.cumsum(rng.choice([0, 0, 1, 1, 2, 5], n))
    return [{"type": str(rng.choice(list("abcd"))), "t": float(t),
             "p": str(rng.choice(["x", "y", "z"])), "v": float(rng.integers(0, 5))}
            for t in tags]


def single_process(rows: list[dict], pattern: PatternSpec = PATTERN, partition: str = "p",
                   bins=None) -> HistoryGraph:
    batch = EventBatch.from_events(rows)
    return build_history(pattern.text, batch, pattern.window, pattern.k,
                         where=list(pattern.where), partition=partition, bins=bins).canonical()


def archive_from_devices(root: Path, streams: dict[str, list[dict]]) -> None:
    """Upload batches as an agent would, windows overlapping between consecutive batches."""

    ref = PatternRef("abc", PATTERN.text, PATTERN.window, PATTERN.k, PATTERN.where,
                     PATTERN.partition)
    archive = Archive(root)
    for device, rows in streams.items():
        batch = EventBatch.from_events(rows)
        found = Matcher(PATTERN.text, PATTERN.window, PATTERN.k, where=list(PATTERN.where),
                        partition="p").match(batch)
        half = len(found) // 2
        for seq, sel in enumerate((np.arange(0, half + 3), np.arange(half - 3, len(found)))):
            archive.write(batch_from_matches(select_matches(found, sel), batch, device=device,
                                             seq=seq, pattern=ref, created_at=1.7e9))


OLD = PatternRef("abc", "a b c", 4.0, 1, (), None)
NEW = PatternRef("abc", "a c", 4.0, 0, (), None)
DAY = 86400.0


def upload(root: Path, device: str, seq: int, ref: PatternRef, created_at: float,
           positions, rng, types=None, values=None) -> None:
    """Write the archive file of one batch, as the collector does (random events unless
    ``types`` and ``values`` are given)."""
    positions = np.asarray(positions, np.int64)
    n = len(positions)
    types = rng.integers(0, 3, n) if types is None else types
    values = rng.integers(0, 5, n) if values is None else values
    Archive(root).write(SimpleNamespace(
        event_position=positions, type_names=["a", "b", "c"],
        event_type=np.asarray(types, np.int32), event_tag=positions.astype(float),
        columns={"v": np.asarray(values, float)},
        pattern=ref, created_at=created_at, device=device, seq=seq, batch_id=f"{device}/{seq}",
        tag_is_time=False))
