"""History graphs built in pieces: one piece per chunk of a stream, added up exactly.

A piece is what one chunk of the stream (:mod:`trainer.chunks`) contributes to the history
of the whole stream ([L16] Definition 4). Pieces are long-format rows
(:func:`piece_schema`) that a Spark job sums with ``groupBy``; :func:`graph_from_parts`
turns the sums into the :class:`HistoryGraph` that ``build_history`` makes in one process,
and :func:`bins_from_counts` chooses the same bins. Why this is exact: docs/DESIGN.md,
"As built: the trainer", Histories in pieces.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgpack
import numpy as np

from acep.shedding import VectorBins

from .build import _kept_edges, traced_run
from .graph import HistoryGraph, compute_bundles

__all__ = ["VISIT", "SUCCESS", "EDGE", "REACH", "POINT", "REM", "GAP", "piece_schema",
           "bin_rows", "piece_rows", "bins_from_counts", "graph_from_parts", "encode_key",
           "decode_key"]

VISIT, SUCCESS, EDGE, REACH, POINT, REM, GAP = range(7)


def piece_schema():
    """kind (int8), key (msgpack bytes of a partition key), a, b (int64), x (double), n."""
    import pyarrow as pa

    return pa.schema([("kind", pa.int8()), ("key", pa.binary()), ("a", pa.int64()),
                      ("b", pa.int64()), ("x", pa.float64()), ("n", pa.int64())])


def encode_key(key) -> bytes:
    return msgpack.packb(key.item() if isinstance(key, np.generic) else key)


def decode_key(data: bytes):
    return msgpack.unpackb(data, raw=False, max_str_len=1 << 16, max_bin_len=0,
                           max_array_len=0, max_map_len=0)


def _rows(kind: int, n: np.ndarray, *, key=None, a=None, b=None, x=None) -> dict:
    m = len(n)
    return {"kind": np.full(m, kind, np.int8),
            "key": key if key is not None else np.full(m, None, object),
            "a": np.zeros(m, np.int64) if a is None else np.asarray(a, np.int64),
            "b": np.zeros(m, np.int64) if b is None else np.asarray(b, np.int64),
            "x": np.zeros(m) if x is None else np.asarray(x, np.float64),
            "n": np.asarray(n, np.int64)}


def _distinct(*cols: np.ndarray) -> tuple[list[np.ndarray], np.ndarray]:
    """The distinct rows of the columns (sorted) and how often each occurs."""
    n = len(cols[0])
    if not n:
        return [c[:0] for c in cols], np.zeros(0, np.int64)
    order = np.lexsort(cols[::-1])
    cols = [c[order] for c in cols]
    change = np.zeros(n, dtype=bool)
    change[0] = True
    for c in cols:
        change[1:] |= c[1:] != c[:-1]
    first = np.flatnonzero(change)
    return [c[first] for c in cols], np.diff(np.append(first, n))


def _table(parts: list[dict]):
    import pyarrow as pa

    schema = piece_schema()
    if not parts:
        return schema.empty_table()
    cols = {name: np.concatenate([p[name] for p in parts]) for name in schema.names}
    return pa.table({name: pa.array(cols[name], schema.field(name).type)
                     for name in schema.names}, schema=schema)


def _owned(log: dict, lo: float, hi: float) -> np.ndarray:
    return (log["start"] >= lo) & (log["start"] < hi)


def bin_rows(pattern: str, events, window: float, k: int, owned: tuple[float, float], *,
             where: Sequence[str] = (), partition: str | None = None, merge: bool = True,
             bad_events: list | None = None):
    """Pass 1 of a chunk: (remaining window, count) and (gap, count) rows of owned nodes."""
    run = traced_run(pattern, events, window, k, where=where, partition=partition,
                     merge=merge, fields=("tag", "start", "gap"), bad_events=bad_events)
    mine = _owned(run.log, *owned)
    rem = window - (run.log["tag"][mine] - run.log["start"][mine])
    gap = run.log["gap"][mine]
    parts = []
    for kind, values in ((REM, rem), (GAP, gap)):
        values = values[np.isfinite(values)]
        v, n = np.unique(values, return_counts=True)
        parts.append(_rows(kind, n, x=v))
    return _table(parts)


def piece_rows(pattern: str, events, window: float, k: int, bins: VectorBins,
               owned: tuple[float, float], *, where: Sequence[str] = (),
               partition: str | None = None, merge: bool = True,
               bad_events: list | None = None):
    """Pass 2 of a chunk: its piece of the history, as rows of :func:`piece_schema`."""
    run = traced_run(pattern, events, window, k, where=where, partition=partition,
                     merge=merge, bins=bins, bad_events=bad_events,
                     fields=("partition", "cell", "prev_cell", "reach", "start"))
    log = run.log
    mine = _owned(log, *owned)
    cell, prev, reach = log["cell"][mine], log["prev_cell"][mine], log["reach"][mine]
    part = log["partition"][mine]
    success = ~np.isnan(reach)
    parts = []
    for kind, cells in ((VISIT, cell), (SUCCESS, cell[success])):
        c, n = np.unique(cells, return_counts=True)
        parts.append(_rows(kind, n, a=c))
    linked = prev >= 0
    (src, dst), n = _distinct(prev[linked], cell[linked])
    parts.append(_rows(EDGE, n, a=src, b=dst))
    keys = np.array([encode_key(x) for x in run.partition_keys], dtype=object)
    (p, x, c), n = _distinct(part[success], reach[success], cell[success])
    parts.append(_rows(REACH, n, key=keys[p], a=c, x=x))
    (p, x), n = _distinct(run.partition.astype(np.int64), run.point)
    parts.append(_rows(POINT, np.ones(len(n), np.int64), key=keys[p], x=x))
    return _table(parts)


# --------------------------------------------------------------------------- bins


def weighted_quantiles(values: np.ndarray, counts: np.ndarray, qs: np.ndarray) -> np.ndarray:
    """``numpy.quantile(np.repeat(values, counts), qs)`` without repeating (linear method)."""
    order = np.argsort(values, kind="stable")
    v, c = np.asarray(values, np.float64)[order], np.asarray(counts, np.int64)[order]
    ends = np.cumsum(c)  # sorted index i holds value v[j] for ends[j-1] <= i < ends[j]
    total = int(ends[-1])
    pos = np.asarray(qs, np.float64) * (total - 1)
    lo = np.floor(pos).astype(np.int64)
    hi = np.minimum(lo + 1, total - 1)
    at = np.searchsorted(ends, lo, side="right")
    above = np.searchsorted(ends, hi, side="right")
    frac = pos - lo
    a, b = v[at], v[above]
    # numpy's _lerp: a + (b - a) * t, and b - (b - a) * (1 - t) when t >= 0.5
    diff = b - a
    out = np.where(frac >= 0.5, b - diff * (1 - frac), a + diff * frac)
    return np.where(a == b, a, out)


def bins_from_counts(rem: tuple[np.ndarray, np.ndarray], gap: tuple[np.ndarray, np.ndarray],
                     n_bins: int = 8) -> VectorBins:
    """``history.build.choose_bins`` from (distinct values, counts) of rem and gap."""
    qs = np.linspace(0.0, 1.0, n_bins + 1)[1:-1]

    def edges(pair):
        values, counts = (np.asarray(p) for p in pair)
        ok = np.isfinite(values) & (counts > 0)
        values, counts = values[ok], counts[ok]
        if not len(values) or n_bins < 2:
            return ()
        return _kept_edges(weighted_quantiles(values, counts, qs), values.min())
    return VectorBins(edges(rem), edges(gap))


# --------------------------------------------------------------------------- assembly


def graph_from_parts(pattern: str, window: float, k: int, n_states: int, bins: VectorBins, *,
                     where: Sequence[str] = (), cells: dict, edges: tuple, points: tuple,
                     reach: tuple, partition_by: str | None = None) -> HistoryGraph:
    """The canonical history from summed pieces (``partition_by``: the attribute the runs
    were partitioned by, as the history records it).

    ``cells``: ``{VISIT: (cell, n), SUCCESS: (cell, n)}``; ``edges``: (src, dst, n);
    ``points``: (key bytes, point) of every distinct match point; ``reach``: (key bytes,
    point, cell, n) summed over chunks.
    """
    rem_edges = np.asarray(bins.rem_edges, np.float64)
    gap_edges = np.asarray(bins.gap_edges, np.float64)
    context = getattr(bins, "context", None)
    n_cells = n_states * (k + 1) * (len(rem_edges) + 1) * (len(gap_edges) + 1) * \
        (1 if context is None else context.n_leaves)

    def dense(pair):
        out = np.zeros(n_cells, np.int64)
        np.add.at(out, np.asarray(pair[0], np.int64), np.asarray(pair[1], np.int64))
        return out

    key_bytes = sorted(set(points[0]),
                       key=lambda b: _key_order(decode_key(b)))
    key_id = {b: i for i, b in enumerate(key_bytes)}
    p_part = np.array([key_id[b] for b in points[0]], np.int64)
    bundles = compute_bundles(p_part, np.asarray(points[1], np.float64), float(window))
    from .graph import _count_pairs, _sum_pairs, bundle_index

    r_part = np.array([key_id.get(b, -1) for b in reach[0]], np.int64)
    r_bundle = bundle_index(bundles["partition"], bundles["first"], bundles["last"], r_part,
                            np.asarray(reach[1], np.float64))
    if np.any(r_bundle < 0):
        raise ValueError("a node reached a point that no chunk reported as a match point")
    nb = max(len(bundles["first"]), 1)
    rc, rb, rn = _sum_pairs(np.asarray(reach[2], np.int64), r_bundle, np.asarray(reach[3]), nb)
    src, dst, count = _sum_pairs(np.asarray(edges[0], np.int64), np.asarray(edges[1], np.int64),
                                 np.asarray(edges[2]), n_cells) if len(edges[0]) else \
        _count_pairs(np.zeros(0, np.int64), np.zeros(0, np.int64), n_cells)
    return HistoryGraph(
        str(pattern), int(k), float(window), int(n_states), rem_edges, gap_edges,
        dense(cells[VISIT]), dense(cells[SUCCESS]), src.astype(np.int32), dst.astype(np.int32),
        count, bundles["partition"], bundles["first"], bundles["last"], bundles["points"],
        rc.astype(np.int32), rb, rn, tuple(where), [decode_key(b) for b in key_bytes],
        partition_by, context=context)


def _key_order(key):
    return (type(key).__name__, key)


def parts_from_rows(table) -> dict:
    """Sum piece rows (a pyarrow table of :func:`piece_schema`) in one process: the
    ``cells``, ``edges``, ``points`` and ``reach`` arguments of :func:`graph_from_parts`."""
    cols = {name: table.column(name).to_numpy(zero_copy_only=False) for name in table.schema.names}
    kind = cols["kind"]

    def grouped(mask, names):
        sel = [cols[n][mask] for n in names]
        if not mask.any():
            return tuple(np.zeros(0, c.dtype) for c in sel) + (np.zeros(0, np.int64),)
        keys: dict = {}
        for row in zip(*(s.tolist() for s in sel), cols["n"][mask].tolist()):
            keys[row[:-1]] = keys.get(row[:-1], 0) + row[-1]
        columns = list(zip(*keys))
        return tuple(np.array(c, dtype=object if isinstance(c[0], bytes) else None)
                     for c in columns) + (np.array(list(keys.values()), np.int64),)

    cells = {v: grouped(kind == v, ["a"]) for v in (VISIT, SUCCESS)}
    edges = grouped(kind == EDGE, ["a", "b"])
    points = grouped(kind == POINT, ["key", "x"])[:2]
    reach = grouped(kind == REACH, ["key", "x", "a"])
    return {"cells": cells, "edges": edges, "points": points, "reach": reach}


def counts_from_rows(table) -> tuple[tuple, tuple]:
    """Pass 1 rows summed: ((rem values, counts), (gap values, counts))."""
    kind = table.column("kind").to_numpy()
    x, n = table.column("x").to_numpy(), table.column("n").to_numpy()
    out = []
    for k in (REM, GAP):
        v, inv = np.unique(x[kind == k], return_inverse=True)
        out.append((v, np.bincount(inv.reshape(-1), weights=n[kind == k],
                                   minlength=len(v)).astype(np.int64)))
    return out[0], out[1]
