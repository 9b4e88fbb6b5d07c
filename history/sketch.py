"""The sketch: a fixed-size, signed stand-in for a history graph that a device reads in O(1).

Per cell it holds a smoothed success rate (from [L16] Definition 4's visits and
successes), ``H`` min-hash values of the cell's match map and a proxy class, so the engine
keeps one candidate per class first ([L16] Section 3.2, "we only need to keep one match
node"). Optional fields carry the fitted reserves (:mod:`history.fit`) and the partition
attribute. The fields, the signed msgpack envelope and its ``key_id`` are specified in
docs/SHEDDING.md section 6, "Sketch". Device side: imports only numpy, msgpack and
``acep.storage``.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from acep import storage

from . import _format

__all__ = ["Sketch", "SketchError", "cell_scores", "minhash_signatures", "proxy_classes",
           "read_key", "key_id", "oversized"]

FORMAT = "acep-sketch"
VERSION = 2  # 2: the per-cell 'need' table
SIGNATURE = "HMAC-SHA256"
MAX_BYTES = 1 << 20
KEY_ID_BYTES = 8
KEY_NOT_RECORDED = ("the sketch records no key fingerprint: written before acep recorded "
                    "them, re-sign it to record one")
MAX_CONTAINERS = 256  # maps and lists of a sketch document (17 now; room for fields to come)
EMPTY = np.uint32(0xFFFFFFFF)
MAX_SLACK = 1.0  # cover slack in windows, the range HistoryPolicy takes


class SketchError(_format.FormatError):
    """A sketch that is refused: damaged or changed, signed with another key, oversized,
    wrong version or malformed."""


def _mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: a bijective 64-bit mix (uint64 arithmetic wraps on purpose)."""
    x = x.astype(np.uint64, copy=True)
    x ^= x >> np.uint64(30)
    x *= np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(27)
    x *= np.uint64(0x94D049BB133111EB)
    x ^= x >> np.uint64(31)
    return x


def _hash_salts(hashes: int, seed: int) -> np.ndarray:
    golden = np.arange(1, hashes + 1, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    return _mix64(golden ^ np.full(hashes, seed & 0xFFFFFFFFFFFFFFFF, dtype=np.uint64))


def cell_scores(visits: np.ndarray, successes: np.ndarray, prior: float = 1.0) -> np.ndarray:
    """Success rates ``(successes + prior * p0) / (visits + prior)`` (float32) with ``p0`` the
    overall success rate, so rarely visited cells stay near it and unvisited ones get it."""
    visits, successes = np.asarray(visits), np.asarray(successes)
    total = int(visits.sum())
    p0 = successes.sum() / total if total else 0.0
    score = (successes + prior * p0) / (visits + prior) if prior > 0 else \
        np.where(visits > 0, successes / np.maximum(visits, 1), p0)
    return np.asarray(score, dtype=np.float32)


def minhash_signatures(cells: np.ndarray, items: np.ndarray, n_cells: int, hashes: int = 16,
                       seed: int = 0) -> np.ndarray:
    """``uint32[n_cells, hashes]``: per cell the minimum of ``hashes`` hash functions over its
    set of items (the pairs ``(cells[i], items[i])``); ``0xFFFFFFFF`` for empty sets."""
    out = np.full((n_cells, hashes), EMPTY, dtype=np.uint32)
    cells = np.asarray(cells, dtype=np.int64)
    if len(cells) == 0:
        return out
    items = np.asarray(items, dtype=np.int64).astype(np.uint64)
    order = np.argsort(cells, kind="stable")
    cells, items = cells[order], items[order]
    starts = np.flatnonzero(np.r_[True, cells[1:] != cells[:-1]])
    salts = _hash_salts(hashes, seed)
    for j in range(hashes):  # H passes over the edges; memory stays O(edges)
        h = (_mix64(items ^ salts[j]) >> np.uint64(32)).astype(np.uint32)
        h = np.minimum(h, EMPTY - np.uint32(1))  # a real item never hashes to the empty mark
        out[cells[starts], j] = np.minimum.reduceat(h, starts)
    return out


def proxy_classes(minhash: np.ndarray, band: int) -> np.ndarray:
    """int64 class per row: a hash of the first ``band`` min-hash values (-1: empty set)."""
    minhash = np.asarray(minhash, dtype=np.uint32)
    acc = np.full(len(minhash), 0x243F6A8885A308D3, dtype=np.uint64)
    for j in range(band):
        acc = _mix64(acc ^ minhash[:, j].astype(np.uint64))
    classes = (acc >> np.uint64(1)).astype(np.int64)
    classes[minhash[:, 0] == EMPTY] = -1
    return classes


def completion_need(graph, score: np.ndarray, iterations: int = 64) -> np.ndarray:
    """float32 per cell: the window a successful trajectory typically still needs from the
    cell, ``mid(c) - T(c)``, where ``mid`` is the middle of the cell's remaining-window bin
    and ``T(c)`` the remaining window expected at its match point: the average of the
    children's ``T`` over the cell->cell edges, each weighted by its count times the child's
    ``score`` (the children that go on to a match), and ``mid(c)`` for a cell without children.
    A fixed-point iteration from ``T = mid`` (at most ``iterations`` rounds, stopping when
    nothing changes), so it is deterministic. The policy uses it to tell whether a live node
    still has window enough to stand in for a candidate (``ScorePolicy(live_need=...)``)."""
    n = graph.n_cells
    cells = np.arange(n, dtype=np.int64)
    n_gap = (len(graph.gap_edges) + 1) * getattr(graph, "n_ctx", 1)
    n_rem = len(graph.rem_edges) + 1
    rem_bin = (cells // n_gap) % n_rem
    edges = np.r_[0.0, np.asarray(graph.rem_edges, dtype=np.float64), float(graph.window)]
    edges = np.maximum.accumulate(np.clip(edges, 0.0, float(graph.window)))
    mid = (edges[rem_bin] + edges[rem_bin + 1]) / 2.0
    src = np.asarray(graph.edge_src, dtype=np.int64)
    dst = np.asarray(graph.edge_dst, dtype=np.int64)
    weight = np.asarray(graph.edge_count, dtype=np.float64) * \
        np.clip(np.asarray(score, dtype=np.float64), 0.0, 1.0)[dst]
    total = np.bincount(src, weights=weight, minlength=n)
    has = total > 0
    left = mid.copy()
    for _ in range(iterations):
        nxt = np.bincount(src, weights=weight * left[dst], minlength=n)
        nxt = np.where(has, nxt / np.where(has, total, 1.0), mid)
        if np.array_equal(nxt, left):
            break
        left = nxt
    return np.clip(mid - left, 0.0, float(graph.window)).astype(np.float32)


def _fitted_fields(doc: dict, n_cells: int):
    """``ops_per_event``, ``fitted_ratios``, ``fitted``, ``fitted_slack`` of a payload (absent:
    none fitted; ``fitted_slack`` absent: None, the default slack for every ratio)."""
    err = SketchError
    if "fitted" not in doc and "fitted_ratios" not in doc:
        if "fitted_slack" in doc:
            raise err("field 'fitted_slack': without fitted tables")
        return 0.0, None, None, None
    ops = float(_format.field(doc, "ops_per_event", (int, float), err))
    if not np.isfinite(ops) or ops < 0:
        raise err("field 'ops_per_event': not finite or negative")
    ratios = _format.unpack_array(doc, "fitted_ratios", err, dtype="<f8", ndim=1)
    if not np.all(np.isfinite(ratios)) or np.any(ratios <= 0) or np.any(np.diff(ratios) <= 0):
        raise err("field 'fitted_ratios': not positive, finite and strictly increasing")
    fitted = _format.unpack_array(doc, "fitted", err, dtype="<f4", ndim=2)
    if fitted.shape != (len(ratios), n_cells):
        raise err(f"field 'fitted': shape {fitted.shape} for {len(ratios)} ratios and "
                  f"{n_cells} cells")
    if not np.all(np.isfinite(fitted)):
        raise err("field 'fitted': not finite")
    if len(ratios) and ops == 0:
        raise err("field 'ops_per_event': 0 with fitted tables (no ratio to compare with)")
    slack = None
    if "fitted_slack" in doc:
        slack = _format.unpack_array(doc, "fitted_slack", err, dtype="<f8", ndim=1)
        if slack.shape != ratios.shape:
            raise err(f"field 'fitted_slack': {len(slack)} entries for {len(ratios)} ratios")
        if not np.all(np.isfinite(slack)) or np.any(slack < 0) or np.any(slack > MAX_SLACK):
            raise err(f"field 'fitted_slack': not finite or outside [0, {MAX_SLACK:g}]")
    return ops, ratios, fitted, slack


def bundle_span(graph) -> float:
    """The mean length of the history's bundles in windows, ``(last - first) / window``
    (0 without bundles or window). Long bundles mean a point found is usually followed by
    more points of the same bundle, so the policy's ``cover_slack`` grows with it."""
    first = np.asarray(graph.bundle_first, dtype=np.float64)
    if len(first) == 0 or not graph.window > 0:
        return 0.0
    return float(np.mean(np.asarray(graph.bundle_last, dtype=np.float64) - first)
                 / graph.window)


@dataclass
class Sketch:
    """Fixed-size sketch of a :class:`history.graph.HistoryGraph` (``n_cells``, ``H``).

    What a device loads: per match-vector cell a score (how often it led to a bundle) and
    min-hashes of the bundles it reached, signed with HMAC-SHA256 by the fleet's key.
    Make one with :meth:`from_graph`, write it with :meth:`save`, read it with :meth:`load`
    (a wrong key or a changed file raises :class:`history.SketchError`).

    Parameters
    ----------
    pattern, where, k, window, partition_by, partition_recorded
        The pattern definition the history was built for.
    n_states, rem_edges, gap_edges
        The automaton's states and the bins of the match vectors.
    score, minhash, band, seed
        The cell scores, the min-hash signatures and their banding.
    need, bundle_span, ops_per_event
        Window left per cell, mean bundle length in windows, and operations per event of
        the unconstrained run.
    fitted_ratios, fitted, fitted_slack
        Reserve tables and cover slacks fitted to budget ratios (docs/SHEDDING.md 10), if
        any (``fitted_slack`` None: :attr:`default_cover_slack` for every ratio).

    Examples
    --------
    >>> import os, secrets, tempfile
    >>> from acep.demo import DEMO, demo_events
    >>> from history import build_history
    >>> graph = build_history(DEMO["pattern"], demo_events(), DEMO["window"], DEMO["k"],
    ...                       where=DEMO["where"], partition="origin")
    >>> from history import Sketch
    >>> key = secrets.token_hex(32).encode()
    >>> path = os.path.join(tempfile.mkdtemp(), "delays.sketch")
    >>> size = Sketch.from_graph(graph).save(path, key=key)
    >>> sketch = Sketch.load(path, key=key)
    >>> sketch.pattern, sketch.n_cells == graph.n_cells
    ('ontime late late+ verylate', True)
    """

    pattern: str
    where: tuple[str, ...]
    k: int
    window: float
    n_states: int
    rem_edges: np.ndarray
    gap_edges: np.ndarray
    score: np.ndarray        # float32[n_cells]
    minhash: np.ndarray      # uint32[n_cells, H]
    band: int = 2
    seed: int = 0
    need: np.ndarray | None = None  # float32[n_cells], completion_need (zeros if None)
    bundle_span: float = 0.0  # mean (last - first) / window of the history's bundles
    ops_per_event: float = 0.0  # the training stream's unconstrained operations per event
    fitted_ratios: np.ndarray | None = None  # float64[F], increasing budget ratios
    fitted: np.ndarray | None = None  # float32[F, n_cells], reserve scores per ratio
    partition_by: str | None = None  # the history's partition attribute (None: one partition)
    partition_recorded: bool = True  # False: read from a sketch written before it was recorded
    context: object = None  # an acep.shedding.ContextTree: its leaves split every cell
    fitted_slack: np.ndarray | None = None  # float64[F], the cover slack fitted per ratio

    def __post_init__(self):
        self.proxy_class = proxy_classes(self.minhash, self.band)
        self.signed_with: str | None = None  # from_bytes: its verified key's fingerprint
        self.key_recorded = True  # from_bytes: False when the envelope has no key_id
        if self.need is None:
            self.need = np.zeros(len(self.score), dtype=np.float32)
        if self.fitted is None:
            self.fitted_ratios = np.zeros(0, dtype=np.float64)
            self.fitted = np.zeros((0, len(self.score)), dtype=np.float32)
            self.fitted_slack = None
        if self.fitted_slack is None:
            self.fitted_slack = np.full(len(self.fitted_ratios), self.default_cover_slack)
        if len(self.fitted_slack) != len(self.fitted_ratios):
            raise ValueError(f"{len(self.fitted_slack)} fitted slacks for "
                             f"{len(self.fitted_ratios)} fitted ratios")

    def mismatch(self, pattern: str, k: int, window: float, where: Sequence[str] = (),
                 partition_by: str | None = None) -> str | None:
        """Why a matcher with these settings cannot use this sketch (None: it can).

        A cell means the same thing only for the pattern, ``k``, window and predicates the
        history was built with, and a score is a rate per partition: a sketch trained per
        airport says little about nodes of one stream-wide partition. ``partition_by`` is
        the matcher's resolved partition attribute (``Matcher.partition``); it is checked
        only when the sketch records one."""
        mine = (self.pattern, self.k, float(self.window), tuple(self.where))
        if mine != (pattern, int(k), float(window), tuple(where)):
            return (f"it is for pattern {self.pattern!r} (k={self.k}, window={self.window:g}, "
                    f"where={list(self.where)}), not {pattern!r} (k={k}, window={window:g}, "
                    f"where={list(where)})")
        if self.partition_recorded and partition_by != self.partition_by:
            return (f"it was trained {_partitioned(self.partition_by)}, and this run is "
                    f"{_partitioned(partition_by)}")
        return None

    def reserve_score(self, ops_per_event: float | None) -> np.ndarray | None:
        """The fitted reserve table for a budget of ``ops_per_event`` operations per event:
        the one whose ratio is nearest (in log scale) to ``ops_per_event / self.ops_per_event``,
        or None (no budget, no fitted table, or no training operations to compare with)."""
        nearest = self._nearest_fitted(ops_per_event)
        return None if nearest is None else self.fitted[nearest]

    def cover_slack(self, ops_per_event: float | None) -> float:
        """The policy's cover slack for a budget of ``ops_per_event`` operations per event:
        the one fitted with the table :meth:`reserve_score` gives, or
        :attr:`default_cover_slack` (no budget or no fitted table)."""
        nearest = self._nearest_fitted(ops_per_event)
        return self.default_cover_slack if nearest is None else \
            float(self.fitted_slack[nearest])

    @property
    def default_cover_slack(self) -> float:
        """``min(1, bundle_span)``: where bundles are long, a window opened soon after a
        point found almost always completes in the same bundle."""
        return min(1.0, max(0.0, float(self.bundle_span)))

    def fitted_ratio(self, ops_per_event: float | None) -> float | None:
        """The ratio of the table :meth:`reserve_score` gives for that budget (or None)."""
        nearest = self._nearest_fitted(ops_per_event)
        return None if nearest is None else float(self.fitted_ratios[nearest])

    def _nearest_fitted(self, ops_per_event: float | None) -> int | None:
        if ops_per_event is None or not len(self.fitted_ratios) or not self.ops_per_event > 0:
            return None
        ratio = max(float(ops_per_event), 1e-12) / self.ops_per_event
        return int(np.argmin(np.abs(np.log(self.fitted_ratios) - np.log(ratio))))

    def with_fitted(self, ratio: float, table: np.ndarray, ops_per_event: float,
                    slack: float | None = None) -> Sketch:
        """A copy with ``table`` as the reserve scores fitted for budget ``ratio`` and
        ``slack`` as its cover slack (None: :attr:`default_cover_slack`), replacing what was
        fitted for the same ratio, and the training stream's ``ops_per_event``."""
        from dataclasses import replace

        table = np.asarray(table, dtype=np.float32)
        if table.shape != (self.n_cells,) or not np.all(np.isfinite(table)):
            raise ValueError(f"a fitted table needs {self.n_cells} finite entries")
        if not (ratio > 0 and np.isfinite(ratio)) or not ops_per_event > 0:
            raise ValueError("ratio and ops_per_event must be positive")
        slack = self.default_cover_slack if slack is None else float(slack)
        if not 0.0 <= slack <= MAX_SLACK:
            raise ValueError(f"a cover slack must be in [0, {MAX_SLACK:g}], got {slack!r}")
        keep = self.fitted_ratios != ratio
        ratios = np.r_[self.fitted_ratios[keep], float(ratio)]
        tables = np.vstack([self.fitted[keep], table[None, :]])
        slacks = np.r_[self.fitted_slack[keep], slack]
        order = np.argsort(ratios)
        return replace(self, ops_per_event=float(ops_per_event), fitted_ratios=ratios[order],
                       fitted=tables[order], fitted_slack=slacks[order])

    @property
    def n_cells(self) -> int:
        return len(self.score)

    @property
    def n_ctx(self) -> int:
        """Context leaves per (state, err, rem bin, gap bin): 1 without a context tree."""
        return 1 if self.context is None else self.context.n_leaves

    @property
    def hashes(self) -> int:
        return self.minhash.shape[1]

    @property
    def key_note(self) -> str:
        """What follows the key that verified it where that is shown: ``""``, or for a
        sketch that records no key fingerprint ``"; "`` and :data:`KEY_NOT_RECORDED`."""
        return "" if self.key_recorded else f"; {KEY_NOT_RECORDED}"

    @classmethod
    def from_graph(cls, graph, hashes: int = 16, band: int = 2, seed: int = 0,
                   prior: float = 1.0) -> Sketch:
        """Scores are :func:`cell_scores` of the graph's visits and successes."""
        if not 1 <= band <= hashes:
            raise ValueError(f"band must be in 1..hashes ({hashes}), got {band}")
        score = cell_scores(graph.visits, graph.successes, prior)
        minhash = minhash_signatures(graph.reach_cell, graph.reach_bundle, graph.n_cells,
                                     hashes, seed)
        return cls(graph.pattern, tuple(graph.where), graph.k, graph.window, graph.n_states,
                   graph.rem_edges.copy(), graph.gap_edges.copy(), score, minhash, band, seed,
                   completion_need(graph, score), bundle_span(graph),
                   partition_by=graph.partition_by,
                   partition_recorded=graph.partition_recorded, context=graph.context)

    def bins(self):
        """The ``acep.shedding.VectorBins`` a matcher needs to use this sketch's cells."""
        from acep.shedding import VectorBins

        return VectorBins(tuple(self.rem_edges), tuple(self.gap_edges), self.context)

    def jaccard(self, a, b) -> np.ndarray:
        """Estimated Jaccard similarity of the match maps of cells ``a`` and ``b``."""
        sa, sb = self.minhash[np.asarray(a)], self.minhash[np.asarray(b)]
        both_empty = (sa[..., 0] == EMPTY) & (sb[..., 0] == EMPTY)
        return np.where(both_empty, 0.0, (sa == sb).mean(axis=-1))

    # ------------------------------------------------------------------ bytes

    def _payload(self) -> bytes:
        pa = _format.pack_array
        fitted = {} if not len(self.fitted_ratios) else {
            "ops_per_event": float(self.ops_per_event),
            "fitted_ratios": pa(np.asarray(self.fitted_ratios, dtype=np.float64)),
            "fitted": pa(np.asarray(self.fitted, dtype=np.float32)),
            "fitted_slack": pa(np.asarray(self.fitted_slack, dtype=np.float64))}
        return _format.dumps({
            "format": FORMAT, "version": VERSION, "pattern": self.pattern,
            "where": list(self.where), "k": self.k, "window": float(self.window),
            "n_states": self.n_states, "band": self.band, "seed": self.seed,
            "rem_edges": pa(self.rem_edges), "gap_edges": pa(self.gap_edges),
            "score": pa(self.score.astype(np.float32)),
            "minhash": pa(self.minhash.astype(np.uint32)),
            "need": pa(self.need.astype(np.float32)),
            "bundle_span": float(self.bundle_span), **fitted,
            **({"partition_by": self.partition_by} if self.partition_recorded else {}),
            **_format.context_field(self.context),
        })

    def to_bytes(self, key: bytes) -> bytes:
        """The signed sketch (HMAC-SHA256 with ``key``, and the key's fingerprint)."""
        key, payload = _check_key(key), self._payload()
        return _format.dumps({"format": FORMAT, "version": VERSION, "signature": SIGNATURE,
                              "key_id": _key_id(key), "payload": payload,
                              "mac": _mac(key, payload)})

    @property
    def nbytes(self) -> int:
        """Size of the signed sketch in bytes (what a device downloads and keeps)."""
        return len(self.to_bytes(b"size"))

    @classmethod
    def from_bytes(cls, data: bytes, key: bytes, max_bytes: int = MAX_BYTES, *,
                   key_from: str | None = None) -> Sketch:
        """Verify and decode; any problem raises :class:`SketchError` naming it. ``key_from``
        names where ``key`` came from (``"--key-file"``, ``"sketch.key_file"``) in the
        message that says the sketch was signed with another key."""
        err = SketchError
        outer = _format.loads(data, err, "sketch", max_bytes, MAX_CONTAINERS)
        _format.check_header(outer, FORMAT, VERSION, err)
        if outer.get("signature") != SIGNATURE:
            raise err(f"field 'signature': {outer.get('signature')!r}, expected {SIGNATURE!r}")
        payload, mac = outer.get("payload"), outer.get("mac")
        if not isinstance(payload, bytes) or not isinstance(mac, bytes):
            raise err("fields 'payload', 'mac': not bytes")
        signer, key = _envelope_key_id(outer), _check_key(key)
        if not hmac.compare_digest(mac, _mac(key, payload)):
            raise err(_refused_mac(signer, _key_id(key), key_from))
        doc = _format.loads(payload, err, "sketch payload", max_bytes, MAX_CONTAINERS)
        _format.check_header(doc, FORMAT, VERSION, err)
        sketch = cls._from_doc(doc)
        sketch.signed_with, sketch.key_recorded = _key_id(key).hex(), signer is not None
        return sketch

    @classmethod
    def _from_doc(cls, doc: dict) -> Sketch:
        err = SketchError
        f = _format.field
        k, n_states = f(doc, "k", int, err), f(doc, "n_states", int, err)
        band, seed = f(doc, "band", int, err), f(doc, "seed", int, err)
        window = float(f(doc, "window", (int, float), err))
        pattern = f(doc, "pattern", str, err)
        where = doc.get("where")
        if not isinstance(where, list) or not all(isinstance(w, str) for w in where):
            raise err("field 'where': not a list of strings")
        if not 0 <= k <= 64 or n_states < 1 or not np.isfinite(window) or window < 0:
            raise err("fields 'k', 'n_states', 'window': out of range")
        rem = _format.unpack_array(doc, "rem_edges", err, dtype="<f8", ndim=1)
        gap = _format.unpack_array(doc, "gap_edges", err, dtype="<f8", ndim=1)
        for name, edges in (("rem_edges", rem), ("gap_edges", gap)):
            if not np.all(np.isfinite(edges)) or np.any(np.diff(edges) <= 0):
                raise err(f"field {name!r}: not finite and strictly increasing")
        context = _format.optional_context(doc, err)
        n_ctx = 1 if context is None else context.n_leaves
        n_cells = n_states * (k + 1) * (len(rem) + 1) * (len(gap) + 1) * n_ctx
        score = _format.unpack_array(doc, "score", err, dtype="<f4", ndim=1)
        minhash = _format.unpack_array(doc, "minhash", err, dtype="<u4", ndim=2)
        if len(score) != n_cells:
            raise err(f"field 'score': {len(score)} entries for {n_cells} cells")
        if not np.all(np.isfinite(score)):
            raise err("field 'score': not finite")
        if minhash.shape[0] != n_cells or minhash.shape[1] < 1:
            raise err(f"field 'minhash': shape {minhash.shape} for {n_cells} cells")
        if not 1 <= band <= minhash.shape[1]:
            raise err(f"field 'band': {band} outside 1..{minhash.shape[1]}")
        need = _format.unpack_array(doc, "need", err, dtype="<f4", ndim=1)
        if len(need) != n_cells:
            raise err(f"field 'need': {len(need)} entries for {n_cells} cells")
        if not np.all(np.isfinite(need)) or np.any(need < 0) or np.any(need > window * (1 + 1e-6)):
            raise err("field 'need': not finite or outside [0, window]")
        span = float(f(doc, "bundle_span", (int, float), err))
        if not np.isfinite(span) or not 0.0 <= span <= 1e9:
            raise err("field 'bundle_span': not finite or outside [0, 1e9]")
        ops, ratios, fitted, slack = _fitted_fields(doc, n_cells)
        partition_by, recorded = _format.optional_name(doc, "partition_by", err)
        return cls(pattern, tuple(where), k, window, n_states, rem, gap, score, minhash, band,
                   seed, need, span, ops, ratios, fitted, partition_by, recorded, context,
                   slack)

    def save(self, path, key: bytes) -> int:
        """Write the signed sketch file, whole or not at all; returns its size in bytes."""
        return storage.write_durably(path, self.to_bytes(key))

    @classmethod
    def load(cls, path, key: bytes, max_bytes: int | None = MAX_BYTES, *,
             key_from: str | None = None) -> Sketch:
        """The sketch in file ``path``; a refused one raises :class:`SketchError` naming it.
        ``max_bytes=None``: a file of any size (one the user named, not one downloaded);
        ``key_from`` as for :meth:`from_bytes`."""
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            limit = max(size, MAX_BYTES) if max_bytes is None else max_bytes
            data = fh.read(limit + 1)
        try:
            if len(data) > limit:  # say the file's size, not the bytes read to find out
                raise SketchError(f"sketch is {max(size, len(data)):,} bytes, above the limit "
                                  f"of {limit:,} bytes")
            return cls.from_bytes(data, key, limit, key_from=key_from)
        except SketchError as exc:
            raise SketchError(f"{os.fspath(path)}: {exc}") from None

    # ------------------------------------------------------------------ accuracy

    def error_against(self, graph, pairs: int = 4000, seed: int = 0) -> dict:
        """Measured error of this sketch against the exact graph it stands for.

        Jaccard: estimates vs exact match-map Jaccard over ``pairs`` cell pairs with non-empty
        maps, half drawn uniformly, half *related* (two cells that reached a common bundle,
        the pairs the proxy classes are about). Score: |score - success rate| over visited
        cells (plain and visit-weighted means). Proxy: how often related pairs share a class
        vs how often unrelated pairs do.
        """
        if graph.n_cells != self.n_cells:
            raise ValueError(f"graph has {graph.n_cells} cells, sketch {self.n_cells}")
        rng = np.random.default_rng(seed)
        mapped = np.flatnonzero(graph.map_sizes() > 0)
        out = {"bytes": self.nbytes, "cells": self.n_cells, "hashes": self.hashes,
               "mapped_cells": len(mapped), "bundles": graph.n_bundles}
        rate = graph.success_rate()
        seen = graph.visits > 0
        diff = np.abs(self.score[seen].astype(np.float64) - rate[seen])
        out["score_mae"] = float(diff.mean()) if diff.size else 0.0
        out["score_max"] = float(diff.max()) if diff.size else 0.0
        out["score_mae_weighted"] = float(np.average(diff, weights=graph.visits[seen])) \
            if diff.size else 0.0
        if len(mapped) < 2:
            out.update(pairs=0, jaccard_mae=0.0, jaccard_mae_related=0.0, jaccard_max=0.0)
            return out
        half = pairs // 2
        a1 = rng.choice(mapped, half)
        b1 = rng.choice(mapped, half)
        e = rng.integers(0, len(graph.reach_cell), pairs - half)  # a cell -> bundle edge ...
        a2 = graph.reach_cell[e].astype(np.int64)
        by_bundle = np.argsort(graph.reach_bundle, kind="stable")  # ... and a cell of its bundle
        lo = np.searchsorted(graph.reach_bundle[by_bundle], graph.reach_bundle[e], "left")
        hi = np.searchsorted(graph.reach_bundle[by_bundle], graph.reach_bundle[e], "right")
        b2 = graph.reach_cell[by_bundle[lo + (rng.random(len(e)) * (hi - lo)).astype(np.int64)]]
        a = np.concatenate([a1, a2])
        b = np.concatenate([b1, b2.astype(np.int64)])
        exact = _exact_jaccard(graph, a, b)
        est = self.jaccard(a, b)
        d = np.abs(est - exact)
        same = self.proxy_class[a] == self.proxy_class[b]
        out.update(pairs=int(len(a)), jaccard_mae=float(d.mean()),
                   jaccard_mae_related=float(d[half:].mean()), jaccard_max=float(d.max()),
                   jaccard_mean_related=float(exact[half:].mean()),
                   proxy_shared_related=float(same[half:][a2 != b2].mean())
                   if np.any(a2 != b2) else 0.0,
                   proxy_shared_random=float(same[:half][a1 != b1].mean())
                   if np.any(a1 != b1) else 0.0)
        return out


def _exact_jaccard(graph, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    cells = np.unique(np.concatenate([a, b]))
    maps = graph.match_maps(cells)
    ra, rb = np.searchsorted(cells, a), np.searchsorted(cells, b)
    inter = np.unpackbits(maps[ra] & maps[rb], axis=1).sum(axis=1)
    union = np.unpackbits(maps[ra] | maps[rb], axis=1).sum(axis=1)
    return np.where(union > 0, inter / np.maximum(union, 1), 0.0)


def _partitioned(attribute: str | None) -> str:
    return "without a partition" if attribute is None else f"partitioned by {attribute!r}"


def read_key(path: str, what: str = "signing key") -> bytes:
    """The secret in the file ``path`` without surrounding whitespace (a trailing newline);
    an ``OSError`` naming the file when it cannot be read or holds nothing."""
    try:
        with open(path, "rb") as f:
            key = f.read().strip()
    except OSError as exc:
        raise OSError(f"{path}: cannot read the {what} file ({exc.strerror or exc})") from None
    if not key:
        raise OSError(f"{path}: the {what} file is empty")
    return key


def _check_key(key: bytes) -> bytes:
    if not isinstance(key, (bytes, bytearray)) or len(key) == 0:
        raise SketchError("the signing key must be non-empty bytes")
    return bytes(key)


def key_id(key: bytes) -> str:
    """The fingerprint of a signing key, as sketches record it and messages show it: 16 hex
    digits, the first 8 bytes of HMAC-SHA256(key, "acep-sketch key id"). It names the key
    without revealing it (no more than a sketch's MAC does)."""
    return _key_id(_check_key(key)).hex()


def _key_id(key: bytes) -> bytes:
    return hmac.new(key, b"acep-sketch key id", hashlib.sha256).digest()[:KEY_ID_BYTES]


def _envelope_key_id(outer: dict) -> bytes | None:
    """The envelope's ``key_id`` (None: a sketch written before it was recorded)."""
    if "key_id" not in outer:
        return None
    value = outer["key_id"]
    if not isinstance(value, bytes) or len(value) != KEY_ID_BYTES:
        found = f"{len(value)} bytes" if isinstance(value, bytes) else \
            "nil" if value is None else type(value).__name__
        raise SketchError(f"field 'key_id': {found} where the signing key's fingerprint "
                          f"({KEY_ID_BYTES} bytes) is expected")
    return value


def _refused_mac(signer: bytes | None, mine: bytes, key_from: str | None) -> str:
    """Why the MAC did not verify, as far as the envelope's ``key_id`` tells."""
    this_key = f"this key is {mine.hex()}" + (f" ({key_from})" if key_from else "")
    if signer is None:
        return ("signature check failed: the sketch is damaged or was changed after signing, "
                "or it was signed with another key (it records no key fingerprint: written "
                f"before acep recorded them); {this_key}")
    if signer != mine:
        return (f"signature check failed: the sketch was signed with another key, "
                f"{signer.hex()}; {this_key}")
    return ("signature check failed: the sketch is damaged or was changed after signing "
            f"(it was signed with this key, {mine.hex()})")


def _mac(key: bytes, payload: bytes) -> bytes:
    header = f"{FORMAT}/{VERSION}\0".encode()
    return hmac.new(key, header + payload, hashlib.sha256).digest()


def oversized(size: int, cells: int) -> str | None:
    """Why a sketch of ``size`` bytes will not reach an agent on its defaults: it downloads
    and loads at most ``sketch.max_bytes`` (:data:`MAX_BYTES` unless its config says more);
    None when it fits."""
    if size <= MAX_BYTES:
        return None
    return (f"the sketch ({size:,} bytes, {cells:,} cells) is above the {MAX_BYTES:,} bytes "
            "an agent takes by default: raise sketch.max_bytes in its config, or give fewer "
            "--bins or a smaller -k")
