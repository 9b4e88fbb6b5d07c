"""The chunking rule: split a stream by equivalence key and by overlapping time chunks.

Chunk ``c`` owns the tags ``[origin + c*L, origin + (c+1)*L)`` and reads the events with
tags in ``[own_lo - before, own_hi + after)``. A job keeps from chunk ``c`` only what starts
in the part it owns. ACEP histories (:mod:`history.pieces`) use ``before = 0, after = w``;
exact matches (:mod:`trainer.exact`) use ``before = after = W``. Why this is exact, and the
rule for ``L``: docs/DESIGN.md, "As built: the trainer", Chunking rule.
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
        """The tags chunk ``chunk`` owns; the first and last chunks are open-ended."""
        lo = self.origin + chunk * self.length if chunk > 0 else -math.inf
        hi = self.origin + (chunk + 1) * self.length if chunk < self.n_chunks - 1 else math.inf
        return lo, hi

    def read_range(self, chunk: int) -> tuple[float, float]:
        lo, hi = self.owned(chunk)
        return lo - self.before, hi + self.after

    def home(self, tags: np.ndarray) -> np.ndarray:
        """The chunk that owns each tag."""
        c = np.floor((np.asarray(tags, np.float64) - self.origin) / self.length)
        return np.clip(c, 0, self.n_chunks - 1).astype(np.int64)

    def chunks_of(self, tags: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(row index, chunk) pairs, sorted: every chunk whose read range holds each tag."""
        tags = np.asarray(tags, dtype=np.float64)
        home = self.home(tags)
        rows, chunks = [], []
        for d in self._offsets():
            c = home + d
            lo, hi = self._bounds(c, np)
            inside = (c >= 0) & (c < self.n_chunks) & (tags >= lo) & (tags < hi)
            rows.append(np.flatnonzero(inside))
            chunks.append(c[inside])
        rows_a, chunks_a = np.concatenate(rows), np.concatenate(chunks)
        order = np.lexsort((chunks_a, rows_a))
        return rows_a[order], chunks_a[order]

    def spark_chunks(self, tag_col):
        """A Spark column: the array of chunks whose read range holds ``tag_col``."""
        from pyspark.sql import functions as F

        home = F.least(F.greatest(F.floor((tag_col - F.lit(self.origin)) / F.lit(self.length)),
                                  F.lit(0)), F.lit(self.n_chunks - 1)).cast("long")
        items = []
        for d in self._offsets():
            c = home + F.lit(d)
            lo, hi = self._bounds(c, None)
            inside = (c >= 0) & (c < self.n_chunks) & (tag_col >= lo) & (tag_col < hi)
            items.append(F.when(inside, c))
        return F.filter(F.array(*items), lambda x: x.isNotNull())

    def _offsets(self) -> range:
        reach = int(math.ceil(max(self.before, self.after) / self.length))
        return range(-reach, reach + 1)

    def _bounds(self, c, xp):
        """Read range of chunk(s) ``c``: numpy arrays (xp=np) or Spark columns (xp=None)."""
        lo = self.origin + c * self.length - self.before
        hi = self.origin + (c + 1) * self.length + self.after
        if xp is np:
            return np.where(c <= 0, -np.inf, lo), np.where(c >= self.n_chunks - 1, np.inf, hi)
        from pyspark.sql import functions as F

        return (F.when(c <= 0, F.lit(-math.inf)).otherwise(lo),
                F.when(c >= self.n_chunks - 1, F.lit(math.inf)).otherwise(hi))


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
    n_chunks = 1 if floor <= 0 and chunk is None else max(1, int(math.ceil(span / length)))
    if key_groups is None:
        key_groups = max(1, int(math.ceil(target / n_chunks)))
    if key_groups < 1:
        raise ValueError(f"key groups must be at least 1, got {key_groups}")
    return ChunkPlan(float(t_min), float(length), float(before), float(after), n_chunks,
                     int(key_groups))
