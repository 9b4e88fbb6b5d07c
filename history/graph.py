"""The history graph H of [L16] Definition 4, built from a traced unconstrained run.

Vertices of type (1) are match vectors, discretised into *cells* (docs/SHEDDING.md section 2):
``cell = ((state * (k + 1) + err) * R + rem_bin) * G + gap_bin``. Each cell carries its visit
count and its success count (nodes that reached a match point). Vertices of type (2) are match
bundles ([L16] Definition 3: maximal runs of one partition's match points, consecutive points
within ``w``). Edges: cell -> cell (a node's prev node was in the first cell), cell -> bundle
(a node at the cell reached a point of the bundle). A cell's *match map* is the set of bundles
it reached, a bitmap over bundle ids.

Everything is columnar numpy: node logs have millions of rows.
"""

from __future__ import annotations

import io
import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from os import PathLike, fspath

import numpy as np

from acep import storage
from acep.shedding import cell_index, cell_parts
from acep.utils import bundle_runs

from . import _format

__all__ = ["HistoryGraph", "HistoryFormatError", "compute_bundles", "bundle_index", "cell_of",
           "decode_cells"]

FORMAT = "acep-history"
VERSION = 2  # 2: sealed with the CRC-32 of the payload; 1 (one plain map) still loads
VERSIONS = (1, 2)
READ_PIECE = 1 << 20  # bytes read at a time from a file that is not a regular one (a pipe)
LOG_FIELDS = ("partition", "cell", "prev_cell", "reach", "merged")


class HistoryFormatError(_format.FormatError):
    """A history file that cannot be loaded; the message names the bad field."""


def _edges(values) -> np.ndarray:
    a = np.asarray(values, dtype=np.float64).reshape(-1)
    if not np.all(np.isfinite(a)) or np.any(np.diff(a) < 0):
        raise ValueError("bin edges must be finite and non-decreasing")
    return a


def _bin_edges(bins) -> tuple[np.ndarray, np.ndarray]:
    """``(rem_edges, gap_edges)`` of an ``acep.shedding.VectorBins`` or of a pair of arrays."""
    if hasattr(bins, "rem_edges"):
        return _edges(bins.rem_edges), _edges(bins.gap_edges)
    rem, gap = bins
    return _edges(rem), _edges(gap)


# one cell formula for the kernel, the engine's VectorBins and the history (SHEDDING.md 2)
cell_of = cell_index
decode_cells = cell_parts


def compute_bundles(partition, point, window: float) -> dict[str, np.ndarray]:
    """Match bundles ([L16] Definition 3) of match points, sorted by (partition, first).

    Returns arrays ``partition`` (int32), ``first``, ``last`` (float64) and ``points`` (int64,
    distinct match points in the bundle). Repeated (partition, point) pairs count once.
    """
    part, first, last, n = bundle_runs(partition, point, window)
    return {"partition": part.astype(np.int32), "first": first, "last": last, "points": n}


def bundle_index(b_part, b_first, b_last, part, point) -> np.ndarray:
    """Index of the bundle holding each (partition, point); -1 where none does.

    Bundles must be sorted by (partition, first). One lexsort of bundles and queries together
    instead of a searchsorted per partition: a bundle sorts before a query at the same point.
    """
    nb = len(b_part)
    if len(part) == 0:
        return np.zeros(0, dtype=np.int64)
    p = np.concatenate([b_part.astype(np.int64), np.asarray(part, np.int64)])
    v = np.concatenate([b_first, np.asarray(point, np.float64)])
    kind = np.concatenate([np.zeros(nb, np.int8), np.ones(len(part), np.int8)])
    order = np.lexsort((kind, v, p))
    before = np.cumsum(kind[order] == 0) - 1  # last bundle at or before each sorted row
    idx = np.empty(len(order), dtype=np.int64)
    idx[order] = before
    found = idx[nb:]
    ok = found >= 0
    safe = np.where(ok, found, 0)
    if nb:
        ok &= (b_part[safe] == part) & (point <= b_last[safe]) & (point >= b_first[safe])
    else:
        ok[:] = False
    return np.where(ok, found, -1)


def _count_pairs(a, b, n_b: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Distinct (a, b) pairs with their multiplicities, sorted by (a, b)."""
    key = np.asarray(a, np.int64) * n_b + np.asarray(b, np.int64)
    uniq, counts = np.unique(key, return_counts=True)
    return uniq // n_b, uniq % n_b, counts.astype(np.int64)


def _sum_pairs(a, b, counts, n_b: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    key = np.asarray(a, np.int64) * n_b + np.asarray(b, np.int64)
    uniq, inverse = np.unique(key, return_inverse=True)
    total = np.bincount(inverse.reshape(-1), weights=counts, minlength=len(uniq))
    return uniq // n_b, uniq % n_b, np.rint(total).astype(np.int64)


def _plain(key):
    return key.item() if isinstance(key, np.generic) else key


@dataclass
class HistoryGraph:
    """History H ([L16] Definition 4) over discretised match vectors.

    Cell arrays have ``n_cells`` entries; edges are sparse COO triples sorted by source;
    bundle ``i`` has id ``i`` (``merge`` renumbers the other graph's bundles after these).
    ``partition_keys[p]`` is the key of kernel partition id ``p`` (bundles keep ids).
    ``partition_by`` is the attribute the run was partitioned by (None: one partition), as
    the matcher resolved it (``partition=`` or the equivalence test ``[attr]``); a history
    file written before it was recorded loads with ``partition_recorded`` False.

    A history is made by :func:`history.build_history` (one process), ``acep train``
    (Spark) or :meth:`load`, not field by field.

    Parameters
    ----------
    pattern, k, window, where, partition_by
        The pattern definition the history was built for.
    n_states, rem_edges, gap_edges
        The automaton's states and the bins of the remaining window and of the gap.
    visits, successes
        Per cell: the match nodes counted, and those that led to a bundle.
    edge_src, edge_dst, edge_count
        The edges between cells (COO, sorted by source).
    bundle_partition, bundle_first, bundle_last, bundle_points
        Per bundle: its partition id, first and last match point, and number of points.
    reach_cell, reach_bundle, reach_count
        Which bundles each cell reached, and how often (the match maps).
    partition_keys, partition_recorded
        The partition keys by id, and whether ``partition_by`` was recorded.

    Examples
    --------
    >>> from acep.demo import DEMO, demo_events
    >>> from history import build_history
    >>> graph = build_history(DEMO["pattern"], demo_events(), DEMO["window"], DEMO["k"],
    ...                       where=DEMO["where"], partition="origin")
    >>> graph.n_bundles, graph.n_cells, int(graph.visits.sum()) > 0
    (215, 1024, True)
    """

    pattern: str
    k: int
    window: float
    n_states: int
    rem_edges: np.ndarray
    gap_edges: np.ndarray
    visits: np.ndarray
    successes: np.ndarray
    edge_src: np.ndarray
    edge_dst: np.ndarray
    edge_count: np.ndarray
    bundle_partition: np.ndarray
    bundle_first: np.ndarray
    bundle_last: np.ndarray
    bundle_points: np.ndarray
    reach_cell: np.ndarray
    reach_bundle: np.ndarray
    reach_count: np.ndarray
    where: tuple[str, ...] = ()
    partition_keys: list = field(default_factory=list)
    partition_by: str | None = None
    partition_recorded: bool = True
    context: object = None  # an acep.shedding.ContextTree: its leaves split every cell

    # ------------------------------------------------------------------ shape

    @property
    def n_rem(self) -> int:
        return len(self.rem_edges) + 1

    @property
    def n_gap(self) -> int:
        return len(self.gap_edges) + 1

    @property
    def n_ctx(self) -> int:
        """Context leaves per (state, err, rem bin, gap bin): 1 without a context tree."""
        return 1 if self.context is None else self.context.n_leaves

    @property
    def shape(self) -> tuple[int, int, int, int]:
        """(n_states, k + 1, R, G x C): cell arrays reshape to it (C context leaves)."""
        return (self.n_states, self.k + 1, self.n_rem, self.n_gap * self.n_ctx)

    @property
    def n_cells(self) -> int:
        return int(np.prod(self.shape))

    @property
    def n_bundles(self) -> int:
        return len(self.bundle_first)

    @property
    def bundle_id(self) -> np.ndarray:
        return np.arange(self.n_bundles, dtype=np.int64)

    def bins(self):
        """The ``acep.shedding.VectorBins`` to run a matcher with this history's cells."""
        from acep.shedding import VectorBins

        return VectorBins(self.rem_edges.copy(), self.gap_edges.copy(), self.context)

    # ------------------------------------------------------------------ building

    @classmethod
    def from_node_log(cls, log: Mapping[str, np.ndarray], matches, window: float, k: int,
                      bins, pattern: str, n_states: int, *, where: Sequence[str] = (),
                      partition_keys: Sequence | None = None,
                      partition_by: str | None = None) -> HistoryGraph:
        """Build H from an unconstrained run's node log and matches.

        ``log`` needs the fields ``partition, cell, prev_cell, reach, merged`` of
        docs/SHEDDING.md section 4 (other fields are ignored). ``matches`` is the run's
        ``MatchBatch`` (its partition keys are mapped to kernel ids through
        ``partition_keys``, i.e. ``Matcher.partition_keys()``) or a mapping with int
        ``partition`` ids and ``point``; ``partition_by``: the attribute the run was
        partitioned by (``Matcher.partition``). A node is a visit unless it was merged and reached
        nothing (its outcome is censored); it is a success when ``reach`` is not NaN.
        """
        rem_edges, gap_edges = _bin_edges(bins)
        context = getattr(bins, "context", None)
        k, n_states = int(k), int(n_states)
        n_ctx = 1 if context is None else context.n_leaves
        shape = (n_states, k + 1, len(rem_edges) + 1, (len(gap_edges) + 1) * n_ctx)
        n_cells = int(np.prod(shape))
        cols = _log_columns(log)
        cell, prev, reach = cols["cell"], cols["prev_cell"], cols["reach"]
        counted = ~((cols["merged"] != 0) & np.isnan(reach))
        if np.any(cell[counted] < 0) or np.any(cell >= n_cells) or np.any(prev >= n_cells):
            bad = "missing (-1: run the matcher with bins=)" if np.any(cell[counted] < 0) \
                else f"outside 0..{n_cells - 1} for these bins and k"
            raise ValueError(f"node log field 'cell': cells {bad}")
        success = ~np.isnan(reach)
        visits = np.bincount(cell[counted], minlength=n_cells).astype(np.int64)
        successes = np.bincount(cell[success], minlength=n_cells).astype(np.int64)
        linked = counted & (prev >= 0)
        src, dst, count = _count_pairs(prev[linked], cell[linked], n_cells)

        keys = list(partition_keys) if partition_keys is not None else None
        m_part, m_point = _match_points(matches, keys)
        b = compute_bundles(m_part, m_point, float(window))
        part = cols["partition"][success]
        bundle = bundle_index(b["partition"], b["first"], b["last"], part, reach[success])
        if np.any(bundle < 0):
            i = int(np.flatnonzero(bundle < 0)[0])
            raise ValueError(f"node log field 'reach': point {reach[success][i]:g} of partition "
                             f"id {int(part[i])} is not a match point of the run's matches")
        r_cell, r_bundle, r_count = _count_pairs(cell[success], bundle, max(len(b["first"]), 1))
        if keys is None:
            top = max(int(cols["partition"].max(initial=-1)), int(m_part.max(initial=-1)))
            keys = list(range(top + 1))
        return cls(str(pattern), k, float(window), n_states, rem_edges, gap_edges, visits,
                   successes, src.astype(np.int32), dst.astype(np.int32), count,
                   b["partition"], b["first"], b["last"], b["points"],
                   r_cell.astype(np.int32), r_bundle, r_count, tuple(where),
                   [_plain(x) for x in keys], partition_by, context=context)

    # ------------------------------------------------------------------ combining

    def compatible(self, other: HistoryGraph) -> str | None:
        """None if the two histories share cells; else the name of the differing setting."""
        for name in ("pattern", "where", "k", "window", "n_states"):
            if getattr(self, name) != getattr(other, name):
                return name
        for name in ("rem_edges", "gap_edges"):
            if not np.array_equal(getattr(self, name), getattr(other, name)):
                return name
        if self.context != other.context:
            return "context"
        if self.partition_recorded and other.partition_recorded and \
                self.partition_by != other.partition_by:
            return "partition_by"
        return None

    def _partition_fields(self, other: HistoryGraph | None = None) -> dict:
        """``partition_by`` and ``partition_recorded`` for a graph made from this one (and
        ``other``): a recorded attribute wins over an unrecorded one."""
        source = self if self.partition_recorded or other is None else other
        return {"partition_by": source.partition_by,
                "partition_recorded": source.partition_recorded, "context": self.context}

    def merge(self, other: HistoryGraph) -> HistoryGraph:
        """The history of the union of two runs over disjoint data (counts add up).

        Bundles never merge across the two (disjoint data): ``other``'s bundle ids are
        renumbered after this graph's, and its partition ids mapped through the keys.
        """
        bad = self.compatible(other)
        if bad is not None:
            raise ValueError(f"cannot merge histories with different {bad!r}")
        keys = list(self.partition_keys)
        index = {_key_id(x): i for i, x in enumerate(keys)}
        remap = np.empty(len(other.partition_keys), dtype=np.int32)
        for i, key in enumerate(other.partition_keys):
            if _key_id(key) not in index:
                index[_key_id(key)] = len(keys)
                keys.append(key)
            remap[i] = index[_key_id(key)]
        n = self.n_cells
        src, dst, count = _sum_pairs(np.concatenate([self.edge_src, other.edge_src]),
                                     np.concatenate([self.edge_dst, other.edge_dst]),
                                     np.concatenate([self.edge_count, other.edge_count]), n)
        nb = self.n_bundles + other.n_bundles
        r_cell, r_bundle, r_count = _sum_pairs(
            np.concatenate([self.reach_cell, other.reach_cell]),
            np.concatenate([self.reach_bundle, other.reach_bundle + self.n_bundles]),
            np.concatenate([self.reach_count, other.reach_count]), max(nb, 1))
        other_part = remap[other.bundle_partition] if other.n_bundles else \
            np.zeros(0, np.int32)
        return HistoryGraph(
            self.pattern, self.k, self.window, self.n_states, self.rem_edges.copy(),
            self.gap_edges.copy(), self.visits + other.visits, self.successes + other.successes,
            src.astype(np.int32), dst.astype(np.int32), count,
            np.concatenate([self.bundle_partition, other_part]).astype(np.int32),
            np.concatenate([self.bundle_first, other.bundle_first]),
            np.concatenate([self.bundle_last, other.bundle_last]),
            np.concatenate([self.bundle_points, other.bundle_points]),
            r_cell.astype(np.int32), r_bundle, r_count, self.where, keys,
            **self._partition_fields(other))

    def canonical(self) -> HistoryGraph:
        """The same history in canonical order: partition keys sorted (by type name, then
        value), bundles by (key, first point), and only the keys of bundles kept. Two runs
        over the same events give byte-equal canonical graphs whatever order they met the
        partitions in."""
        used = np.unique(self.bundle_partition)
        order = sorted(used.tolist(), key=lambda i: _key_id(self.partition_keys[i]))
        new_id = np.full(len(self.partition_keys), -1, dtype=np.int32)
        new_id[order] = np.arange(len(order), dtype=np.int32)
        part = new_id[self.bundle_partition] if self.n_bundles else self.bundle_partition
        b_order = np.lexsort((self.bundle_first, part))
        b_new = np.empty(self.n_bundles, dtype=np.int64)
        b_new[b_order] = np.arange(self.n_bundles)
        r_bundle = b_new[self.reach_bundle] if len(self.reach_bundle) else self.reach_bundle
        r = np.lexsort((r_bundle, self.reach_cell))
        return HistoryGraph(
            self.pattern, self.k, self.window, self.n_states, self.rem_edges.copy(),
            self.gap_edges.copy(), self.visits.copy(), self.successes.copy(),
            self.edge_src.copy(), self.edge_dst.copy(), self.edge_count.copy(),
            part[b_order].astype(np.int32), self.bundle_first[b_order],
            self.bundle_last[b_order], self.bundle_points[b_order],
            self.reach_cell[r], r_bundle[r].astype(np.int64), self.reach_count[r], self.where,
            [_plain(self.partition_keys[i]) for i in order], **self._partition_fields())

    # ------------------------------------------------------------------ queries

    def success_rate(self) -> np.ndarray:
        """successes / visits per cell (NaN for cells never visited)."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.visits > 0, self.successes / np.maximum(self.visits, 1), np.nan)

    def match_map(self, cell: int) -> np.ndarray:
        """Bundle ids reachable from one cell (sorted)."""
        lo, hi = np.searchsorted(self.reach_cell, [cell, cell + 1])
        return np.sort(self.reach_bundle[lo:hi])

    def match_maps(self, cells: np.ndarray | None = None) -> np.ndarray:
        """Match maps as bitmaps: ``uint8[len(cells), ceil(n_bundles / 8)]``, bundle ``b`` is
        bit ``7 - b % 8`` of byte ``b // 8`` (``np.unpackbits`` order)."""
        cells = np.arange(self.n_cells) if cells is None else np.asarray(cells, np.int64)
        row_of = np.full(self.n_cells, -1, dtype=np.int64)
        row_of[cells] = np.arange(len(cells))
        out = np.zeros((len(cells), (self.n_bundles + 7) // 8), dtype=np.uint8)
        rows = row_of[self.reach_cell]
        keep = rows >= 0
        b = self.reach_bundle[keep]
        np.bitwise_or.at(out, (rows[keep], b >> 3), (0x80 >> (b & 7)).astype(np.uint8))
        return out

    def map_sizes(self) -> np.ndarray:
        """Number of bundles in each cell's match map."""
        return np.bincount(self.reach_cell, minlength=self.n_cells).astype(np.int64)

    def decode(self, cells) -> tuple[np.ndarray, ...]:
        """``(state, err, rem_bin, gap_bin)`` of cells."""
        return decode_cells(cells, self.k, self.n_rem, self.n_gap, self.n_ctx)

    def bin_range(self, which: str, b: int) -> tuple[float, float]:
        """The [low, high) interval of a remaining-window (``"rem"``) or gap bin, within [0, w]."""
        edges = self.rem_edges if which == "rem" else self.gap_edges
        lo = edges[b - 1] if b > 0 else 0.0
        hi = edges[b] if b < len(edges) else self.window
        return float(max(lo, 0.0)), float(min(hi, self.window))

    def top_vectors(self, n: int = 10, by: str = "visits") -> list[dict]:
        """The ``n`` most visited (``by="visits"``), most successful (``"successes"``) or
        highest success-rate (``"rate"``, ties by visits) cells, decoded to match vectors."""
        rate = np.nan_to_num(self.success_rate(), nan=-1.0)
        if by == "visits":
            order = np.lexsort((-self.successes, -self.visits))
        elif by == "successes":
            order = np.lexsort((-self.visits, -self.successes))
        elif by == "rate":
            order = np.lexsort((-self.visits, -rate))
        else:
            raise ValueError(f"by must be 'visits', 'successes' or 'rate', got {by!r}")
        order = order[self.visits[order] > 0][:n]
        state, err, rem, gap = self.decode(order)
        sizes = self.map_sizes()
        return [{"cell": int(c), "state": int(s), "err": int(e), "rem_bin": int(r),
                 "rem": self.bin_range("rem", int(r)), "gap_bin": int(g),
                 "gap": self.bin_range("gap", int(g)), "visits": int(self.visits[c]),
                 "successes": int(self.successes[c]), "rate": float(rate[c]),
                 "bundles": int(sizes[c])}
                for c, s, e, r, g in zip(order, state, err, rem, gap)]

    # ------------------------------------------------------------------ files

    def to_bytes(self) -> bytes:
        pa = _format.pack_array
        return _format.sealed(FORMAT, VERSION, {
            "format": FORMAT, "version": VERSION, "pattern": self.pattern,
            "where": list(self.where), "k": self.k, "window": float(self.window),
            "n_states": self.n_states, "partition_keys": self.partition_keys,
            **({"partition_by": self.partition_by} if self.partition_recorded else {}),
            **_format.context_field(self.context),
            **{name: pa(getattr(self, name)) for name, _ in _ARRAYS},
        })

    @classmethod
    def from_bytes(cls, data: bytes, max_bytes: int = 1 << 30) -> HistoryGraph:
        """Decode and validate a saved history (version 2 once its checksum matches, or 1);
        :class:`HistoryFormatError` names bad fields."""
        err = HistoryFormatError
        doc = _format.loads_envelope(data, err, "history", max_bytes)
        if _format.check_header(doc, FORMAT, VERSIONS, err) == 2:
            doc = _format.loads(_format.unsealed(doc, err), err, "history payload", max_bytes)
            _format.check_header(doc, FORMAT, VERSION, err)
        return cls._from_doc(doc)

    @classmethod
    def _from_doc(cls, doc: dict) -> HistoryGraph:
        err = HistoryFormatError
        pattern = _format.field(doc, "pattern", str, err)
        k = _format.field(doc, "k", int, err)
        window = float(_format.field(doc, "window", (int, float), err))
        n_states = _format.field(doc, "n_states", int, err)
        where = doc.get("where")
        if not isinstance(where, list) or not all(isinstance(w, str) for w in where):
            raise err("field 'where': not a list of strings")
        keys = doc.get("partition_keys")
        if not isinstance(keys, list) or not all(
                x is None or isinstance(x, (str, int, float)) for x in keys):
            raise err("field 'partition_keys': not a list of strings, numbers or nulls")
        if not 0 <= k <= 64 or n_states < 1 or not np.isfinite(window) or window < 0:
            raise err("fields 'k', 'n_states', 'window': out of range")
        partition_by, recorded = _format.optional_name(doc, "partition_by", err)
        context = _format.optional_context(doc, err)
        arrays = {name: _format.take_array(doc, name, err, dtype=dtype, ndim=1)
                  for name, dtype in _ARRAYS}
        g = cls(pattern, k, window, n_states, where=tuple(where), partition_keys=keys,
                partition_by=partition_by, partition_recorded=recorded, context=context,
                **arrays)
        problem = g._invalid()
        if problem:
            raise err(problem)
        return g

    def save(self, path: str | PathLike) -> int:
        """Write the history file, whole or not at all; returns its size in bytes."""
        return storage.write_durably(path, self.to_bytes())

    @classmethod
    def load(cls, path: str | PathLike, max_bytes: int = 1 << 30) -> HistoryGraph:
        """The history in file ``path``; a refused one raises :class:`HistoryFormatError`
        naming the file and the problem."""
        with open(path, "rb") as f:
            data = _read_most(f, max_bytes)
        try:
            return cls.from_bytes(data, max_bytes)
        except HistoryFormatError as exc:
            raise HistoryFormatError(f"{fspath(path)}: {exc}") from None

    def _invalid(self) -> str | None:
        """The first inconsistency between fields, named; None when the graph is sound."""
        n, nb = self.n_cells, self.n_bundles
        for name in ("rem_edges", "gap_edges"):
            a = getattr(self, name)
            if not np.all(np.isfinite(a)) or np.any(np.diff(a) < 0):
                return f"field {name!r}: not finite and non-decreasing"
        if n > 1 << 31:
            return "fields 'n_states', 'k', 'rem_edges', 'gap_edges': too many cells"
        for name in ("visits", "successes"):
            if len(getattr(self, name)) != n:
                return f"field {name!r}: {len(getattr(self, name))} entries for {n} cells"
        if np.any(self.successes < 0) or np.any(self.successes > self.visits):
            return "field 'successes': negative or above 'visits'"
        groups = (("edge_src", "edge_dst", "edge_count"),
                  ("bundle_partition", "bundle_first", "bundle_last", "bundle_points"),
                  ("reach_cell", "reach_bundle", "reach_count"))
        for group in groups:
            lengths = {len(getattr(self, name)) for name in group}
            if len(lengths) != 1:
                return f"fields {', '.join(group)}: different lengths"
        for name, hi in (("edge_src", n), ("edge_dst", n), ("reach_cell", n),
                         ("reach_bundle", nb), ("bundle_partition", len(self.partition_keys))):
            a = getattr(self, name)
            if len(a) and (a.min() < 0 or a.max() >= hi):
                return f"field {name!r}: values outside 0..{hi - 1}"
        if np.any(np.diff(self.reach_cell) < 0):
            return "field 'reach_cell': not sorted"
        if np.any(self.edge_count <= 0) or np.any(self.reach_count <= 0):
            return "fields 'edge_count', 'reach_count': counts must be positive"
        if np.any(self.bundle_last < self.bundle_first):
            return "field 'bundle_last': a bundle ends before it starts"
        return None


_ARRAYS = (("rem_edges", "<f8"), ("gap_edges", "<f8"), ("visits", "<i8"),
           ("successes", "<i8"), ("edge_src", "<i4"), ("edge_dst", "<i4"),
           ("edge_count", "<i8"), ("bundle_partition", "<i4"), ("bundle_first", "<f8"),
           ("bundle_last", "<f8"), ("bundle_points", "<i8"), ("reach_cell", "<i4"),
           ("reach_bundle", "<i8"), ("reach_count", "<i8"))


def _read_most(f, max_bytes: int) -> bytes:
    """The file's bytes, at most ``max_bytes + 1``. A regular file is read by its size,
    another (a pipe) in pieces: a read of ``max_bytes + 1`` makes a buffer that large
    first (1 GiB for any history)."""
    info = os.fstat(f.fileno())
    if not stat.S_ISREG(info.st_mode):
        return _read_pieces(f, max_bytes + 1)
    if info.st_size > max_bytes:
        return f.read(max_bytes + 1)
    data = f.read(info.st_size + 1)
    if len(data) > info.st_size:  # it grew since: the rest, as far as the limit
        data += f.read(max_bytes + 1 - len(data))
    return data


def _read_pieces(f, limit: int) -> bytes:
    """Up to ``limit`` bytes of ``f``, read :data:`READ_PIECE` bytes at a time; held in one
    growing buffer, whose bytes are returned without a copy."""
    out = io.BytesIO()
    while out.tell() < limit:
        piece = f.read(min(READ_PIECE, limit - out.tell()))
        if not piece:
            break
        out.write(piece)
    return out.getvalue()


def _key_id(key):
    """A partition key as a dict key: numpy scalars as Python values, typed (1 != "1")."""
    key = _plain(key)
    return (type(key).__name__, key)


def _log_columns(log: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    missing = [name for name in LOG_FIELDS if name not in log]
    if missing:
        raise ValueError(f"node log lacks field(s) {', '.join(missing)}")
    cols = {"partition": np.asarray(log["partition"], np.int64),
            "cell": np.asarray(log["cell"], np.int64),
            "prev_cell": np.asarray(log["prev_cell"], np.int64),
            "reach": np.asarray(log["reach"], np.float64),
            "merged": np.asarray(log["merged"], np.uint8)}
    lengths = {name: len(c) for name, c in cols.items()}
    if len(set(lengths.values())) > 1:
        raise ValueError(f"node log fields have different lengths: {lengths}")
    return cols


def _match_points(matches, keys: list | None) -> tuple[np.ndarray, np.ndarray]:
    """(kernel partition id, point) of every match."""
    point = np.asarray(matches["point"] if isinstance(matches, Mapping) else matches.point,
                       dtype=np.float64)
    part = matches["partition"] if isinstance(matches, Mapping) else matches.partition
    part = np.asarray(part)
    if part.dtype.kind in "iu":
        return part.astype(np.int64), point
    if keys is None:
        raise ValueError("matches carry partition keys: pass partition_keys= "
                         "(Matcher.partition_keys()) to map them to kernel ids")
    index = {_key_id(x): i for i, x in enumerate(keys)}
    try:
        ids = np.array([index[_key_id(x)] for x in part], dtype=np.int64)
    except KeyError as exc:
        raise ValueError(f"match partition {exc.args[0][1]!r} is not among partition_keys") \
            from None
    return ids, point
