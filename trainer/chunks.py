"""The chunking rule: split a stream by equivalence key and by overlapping time chunks.

Chunk ``c`` *owns* the tags ``[origin + c*L, origin + (c+1)*L)`` and *reads* the events
with tags in ``[own_lo - before, own_hi + after)``. A job keeps from chunk ``c`` only what
starts in the part it owns, so each result is counted once, and the overlap makes sure a
chunk sees everything such a result depends on:

- ACEP histories (:mod:`history.pieces`): a match node that starts at ``s`` depends only on
  the events in ``[s, s + w]`` (its own, and those of the nodes that dominate it, which
  start no earlier) -- so ``before = 0``, ``after = w``.
- Exact NFA^b matches (:mod:`trainer.exact`): a match starting at ``s`` ends by ``s + W``,
  and a leading negation looks back to ``t_last - W`` (docs/EXACT.md 3.6) -- so
  ``before = after = W``.

``L`` is at least ``before + after`` (at least the window when both are 0), so an event
lies in at most three chunks' read ranges. The equivalence key is hashed into
``key_groups`` groups; a (key group, chunk) pair is one unit of work.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["ChunkPlan", "choose_plan"]


@dataclass(frozen=True)
class ChunkPlan:
    origin: float
    length: float  # L
    before: float
    after: float
    n_chunks: int
    key_groups: int = 1

    def owned(self, chunk: int) -> tuple[float, float]:
        lo = self.origin + chunk * self.length
        return lo, lo + self.length

    def read_range(self, chunk: int) -> tuple[float, float]:
        lo, hi = self.owned(chunk)
        return lo - self.before, hi + self.after

    def chunks_of(self, tags: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(row index, chunk) pairs: every chunk whose read range holds each tag."""
        tags = np.asarray(tags, dtype=np.float64)
        home = self.home(tags)
        rows, chunks = [], []
        reach = int(math.ceil(max(self.before, self.after) / self.length)) if self.length else 0
        for d in range(-reach, reach + 1):
            c = home + d
            lo = self.origin + c * self.length - self.before
            hi = self.origin + (c + 1) * self.length + self.after
            inside = (c >= 0) & (c < self.n_chunks) & (tags >= lo) & (tags < hi)
            rows.append(np.flatnonzero(inside))
            chunks.append(c[inside])
        rows_a, chunks_a = np.concatenate(rows), np.concatenate(chunks)
        order = np.lexsort((chunks_a, rows_a))
        return rows_a[order], chunks_a[order]

    def home(self, tags: np.ndarray) -> np.ndarray:
        """The chunk that owns each tag (clipped to the plan's chunks)."""
        if self.n_chunks == 1:
            return np.zeros(len(tags), dtype=np.int64)
        c = np.floor((np.asarray(tags, np.float64) - self.origin) / self.length)
        return np.clip(c, 0, self.n_chunks - 1).astype(np.int64)

    def spark_chunks(self, tag_col):
        """A Spark column: the array of chunks whose read range holds ``tag_col``."""
        from pyspark.sql import functions as F

        if self.n_chunks == 1:
            return F.array(F.lit(0).cast("long"))
        home = F.least(F.greatest(F.floor((tag_col - F.lit(self.origin)) / F.lit(self.length)),
                                  F.lit(0)), F.lit(self.n_chunks - 1)).cast("long")
        reach = int(math.ceil(max(self.before, self.after) / self.length))
        items = []
        for d in range(-reach, reach + 1):
            c = home + F.lit(d)
            lo = F.lit(self.origin) + c * F.lit(self.length) - F.lit(self.before)
            hi = F.lit(self.origin) + (c + 1) * F.lit(self.length) + F.lit(self.after)
            inside = (c >= 0) & (c < self.n_chunks) & (tag_col >= lo) & (tag_col < hi)
            items.append(F.when(inside, c))
        return F.filter(F.array(*items), lambda x: x.isNotNull())


def choose_plan(t_min: float, t_max: float, window: float, *, before: float, after: float,
                parallelism: int, chunk: float | None = None,
                key_groups: int | None = None) -> ChunkPlan:
    """A plan for tags in ``[t_min, t_max]``.

    By default about ``4 * parallelism`` units of work: time chunks of at least
    ``20 * max(window, before + after)`` (so the overlap costs at most about 5%), then key
    groups to make up the rest when the stream is too short to cut into that many chunks.
    ``chunk`` (a length) and ``key_groups`` override the choice.
    """
    if not (np.isfinite(t_min) and np.isfinite(t_max)) or t_max < t_min:
        raise ValueError(f"no events to plan (tags {t_min}..{t_max})")
    floor = max(window, before + after)
    span = t_max - t_min
    target = max(1, 4 * parallelism)
    if chunk is not None:
        if chunk <= 0:
            raise ValueError(f"chunk length must be positive, got {chunk}")
        length = max(float(chunk), floor)
    elif floor <= 0 or span <= 0:
        length = max(span, 1.0)
    else:
        length = max(span / target, 20 * floor)
    if floor <= 0 and chunk is None:
        n_chunks = 1
    else:
        n_chunks = max(1, int(math.floor(span / length)) + 1) if length > 0 else 1
    if key_groups is None:
        key_groups = max(1, int(math.ceil(target / n_chunks)))
    if key_groups < 1:
        raise ValueError(f"key groups must be at least 1, got {key_groups}")
    return ChunkPlan(float(t_min), float(length), float(before), float(after), n_chunks,
                     int(key_groups))
