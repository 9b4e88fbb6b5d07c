"""A fast exact re-check for the plain sequence patterns :mod:`edge.collector.recheck` translates.

Under skip-till-any-match a Kleene component makes enumerating the matches exponential.
This module counts them instead, for a query ``SEQ(T0 v0, T1+ v1[], ...)`` whose conjuncts
each read at most their own component and the one before: the count is a product of
matrices, and the first matches are listed by a walk that only enters branches that can
still end at the point. :func:`plan` returns None for another query, and
:func:`check_partition` raises :class:`Fallback` for a window it does not handle; the caller
then runs the general path. The method is in docs/WIRE.md, "Collector (as built)", Exact
re-check, Fast path.
"""

from __future__ import annotations

import json
from bisect import bisect_right
from dataclasses import dataclass

import numpy as np

from acep.events import Event
from acep.nfab.ast import Index, Kind, Ref, Strategy
from acep.nfab.evaluate import Binding, evaluate, truthy

__all__ = ["Fallback", "Plan", "plan", "check_partition", "is_match"]

try:  # the compiled walk of first_matches (setup.py builds it)
    from . import _listing
except ImportError:  # pragma: no cover - a build without a C compiler
    _listing = None

_BIG = float(1 << 62)  # above this an int64 product might have overflowed: use Python ints


class Fallback(Exception):
    """This window needs the general path."""


@dataclass(frozen=True)
class Plan:
    """``types[j]``, ``kleene[j]``, ``vars[j]``; ``pair[j]``: the conjuncts checked on
    (l_(j-1), l_j); ``iter[j]``: the conjuncts each element of Kleene component j passes."""

    types: tuple[str, ...]
    kleene: tuple[bool, ...]
    vars: tuple[str, ...]
    window: float
    pair: tuple[tuple, ...]
    iter: tuple[tuple, ...]

    @property
    def m(self) -> int:
        return len(self.types)


def _refs(expr) -> list:
    """Every identifier of an expression; anything but plain references gives None."""
    out, stack = [], [expr]
    while stack:
        node = stack.pop()
        name = type(node).__name__
        if isinstance(node, Ref):
            out.append(node)
        elif name in ("Agg", "Len"):
            return None
        elif name == "BinOp":
            stack += [node.left, node.right]
        elif name == "UnaryOp":
            stack.append(node.operand)
        elif name == "Call":
            stack += list(node.args)
        elif name != "Const":
            return None
    return out


def plan(query) -> Plan | None:
    """The plan of a translated query, or None when it is outside the fast class."""
    comps = query.components
    if (query.strategy is not Strategy.ANY or query.returns or not comps
            or any(c.kind is Kind.NEG for c in comps)):
        return None
    index = {c.var: j for j, c in enumerate(comps)}
    kleene = tuple(c.kind is Kind.PLUS for c in comps)
    pair: list[list] = [[] for _ in comps]
    iters: list[list] = [[] for _ in comps]
    for conj in query.conjuncts:
        refs = _refs(conj)
        if refs is None or not refs or any(r.var not in index for r in refs):
            return None
        at = max(index[r.var] for r in refs)
        iterating = [r for r in refs if r.index is Index.I]
        for r in refs:
            j = index[r.var]
            if j < at - 1:
                return None  # reads two components back: not a pair
            if r.index is Index.I:
                if j != at or not kleene[j]:
                    return None
            elif r.index is Index.NONE:
                if kleene[j]:
                    return None
            elif r.index is Index.LAST:
                if not kleene[j] or (iterating and j == at):
                    return None
            else:
                return None
        (iters if iterating else pair)[at].append(conj)
    return Plan(tuple(c.type for c in comps), kleene, tuple(c.var for c in comps),
                float(query.window), tuple(map(tuple, pair)), tuple(map(tuple, iters)))


class _NoVector(Exception):
    """An expression that :func:`_vector` does not evaluate on whole columns."""


_COMPARE = {"==": np.equal, "!=": np.not_equal, "<": np.less, "<=": np.less_equal,
            ">": np.greater, ">=": np.greater_equal}


def _truth(v) -> np.ndarray:
    return np.asarray(v) != 0  # the evaluator's truth of a number: NaN is true


def _vector(expr, values):
    """``expr`` on arrays of numbers (``values(var, attr)``), as ``acep.nfab.evaluate``
    computes it on one binding: float arithmetic, comparisons false with NaN except
    ``!=``, min/max NaN if either is, a truth value 1.0 or 0.0 in arithmetic (Python's
    True and False). Division and text raise :class:`_NoVector`."""
    if isinstance(expr, Ref):
        return values(expr.var, expr.attr)
    name = type(expr).__name__
    if name == "Const":
        if isinstance(expr.value, str) or isinstance(expr.value, bool):
            raise _NoVector
        return float(expr.value)
    if name == "UnaryOp":
        v = _vector(expr.operand, values)
        if expr.op == "not":
            return (~_truth(v)).astype(float)
        if expr.op == "-":
            return -v
        raise _NoVector
    if name == "Call":
        args = [_vector(a, values) for a in expr.args]
        if expr.func == "abs" and len(args) == 1:
            return np.abs(args[0])
        if expr.func in ("min", "max") and args:
            out = args[0]
            for a in args[1:]:
                out = (np.minimum if expr.func == "min" else np.maximum)(out, a)
            return out
        raise _NoVector
    if name == "BinOp":
        op = expr.op
        if op in ("and", "or"):
            left = _truth(_vector(expr.left, values))
            right = _truth(_vector(expr.right, values))
            return (left & right if op == "and" else left | right).astype(float)
        x, y = _vector(expr.left, values), _vector(expr.right, values)
        if op in _COMPARE:
            return _COMPARE[op](x, y).astype(float)
        if op == "+":
            return x + y
        if op == "-":
            return x - y
        if op == "*":
            return x * y
    raise _NoVector


def _holds(conjuncts, bound: dict, var: str | None = None, i: int = 0) -> bool:
    b = Binding(bound, var, i)
    for c in conjuncts:
        if not truthy(evaluate(c, b)):
            return False
    return True


class _Window:
    """The per-partition matrices: ``valid[j][x, y]`` (l_(j-1) = x, l_j = y is allowed),
    ``elig[j][x, z]`` (z may be a middle element of Kleene j after x), the counts
    ``count[j]`` (rows: first element, columns: l_j) and the backward reachability
    ``reach[j][y, e]`` (from l_j = y some completion ends at e)."""

    def __init__(self, p: Plan, events: list[Event]):
        self.p, self.events = p, events
        tags = np.array([e.t for e in events], dtype=float)
        if len(tags) > 1 and np.any(np.diff(tags) < 0):
            raise Fallback("tags go back")
        self.tags = tags
        self._names = self._labels = None
        self._flat = self._flat_labels = None
        by_type: dict[str, list[int]] = {}
        for i, e in enumerate(events):
            by_type.setdefault(e.type, []).append(i)
        self.cands = [np.array(by_type.get(ty, ()), dtype=np.int64) for ty in p.types]
        try:
            self._build()
        except Fallback:
            raise
        except Exception as exc:  # a predicate that raises: let the engine say why
            raise Fallback(f"{type(exc).__name__}: {exc}") from None

    # ------------------------------------------------------------------ matrices

    def _bound(self, j: int, x: int | None, y: int) -> dict:
        ev, p = self.events, self.p
        out = {p.vars[j]: [ev[y]]}
        if x is not None:
            out[p.vars[j - 1]] = [ev[x]]
        return out

    def _pairs(self, j: int, conjuncts, valid: np.ndarray, var: str | None = None
               ) -> np.ndarray:
        """Where ``conjuncts`` hold for (x = l_(j-1), y: cands[j]) (rows x, columns y; for
        j = 0 the rows repeat); ``var``: the Kleene variable whose element y is. Computed on
        whole columns of attribute values when every value read is a number and the
        conjuncts use no division (the same IEEE arithmetic and comparisons as the engine's
        evaluator), else pair by pair on ``valid`` with the engine's evaluator."""
        p, ev = self.p, self.events
        cy = self.cands[j]
        cx = self.cands[j - 1] if j else None
        try:
            cache: dict = {}

            def values(v: str, attr: str) -> np.ndarray:
                key = (v, attr)
                if key not in cache:
                    if v == p.vars[j]:
                        idx, shape = cy, (1, -1)
                    elif j and v == p.vars[j - 1]:
                        idx, shape = cx, (-1, 1)
                    else:
                        raise _NoVector
                    col = [ev[i].t if attr == "t" else ev[i].attrs[attr] for i in idx.tolist()]
                    if not all(type(x) in (float, int) for x in col):
                        raise _NoVector  # text, a bool, or an unusual number: the engine
                    cache[key] = np.array(col, dtype=float).reshape(shape)
                return cache[key]

            with np.errstate(all="ignore"):
                out = np.ones(valid.shape, dtype=bool)
                for c in conjuncts:
                    out &= np.broadcast_to(_truth(_vector(c, values)), valid.shape)
            return out
        except (_NoVector, KeyError):
            pass
        out = np.zeros(valid.shape, dtype=bool)
        for a, b in zip(*np.nonzero(valid)):
            x = None if j == 0 else int(cx[a])
            out[a, b] = _holds(conjuncts, self._bound(j, x, int(cy[b])), var,
                               1 if var else 0)
        return out

    def _build(self) -> None:
        p, w, tags = self.p, self.p.window, self.tags
        self.valid, self.elig, self.weight = [], [], []
        exact = True  # int64 without overflow
        for j in range(p.m):
            cy = self.cands[j]
            ny = len(cy)
            if j == 0:  # "x" is the first element f (rows), y the last (columns)
                cx = cy
                before = cx[:, None] <= cy[None, :] if p.kleene[0] else \
                    np.eye(ny, dtype=bool)
            else:
                cx = self.cands[j - 1]
                before = cx[:, None] < cy[None, :]
            near = tags[cy][None, :] - tags[cx][:, None] <= w
            valid = before & near
            nx = len(cx)
            elig = np.zeros((nx, ny), dtype=bool)
            if p.kleene[j]:
                var, it = p.vars[j], p.iter[j]
                if j == 0:  # the conjuncts read v0[i] alone: one flag per event
                    ok = np.array([not it or _holds(it, self._bound(0, None, int(y)), var, 1)
                                   for y in cy.tolist()], dtype=bool)
                    elig = np.broadcast_to(ok, (nx, ny)).copy()
                    valid &= ok[:, None] & ok[None, :]
                else:
                    elig = valid & self._pairs(j, it, valid, var) if it else valid.copy()
                    valid &= elig
            if p.pair[j]:
                valid &= self._pairs(j, p.pair[j], valid)
            if p.kleene[j]:
                # middles strictly between x and y: eligible z with x < z < y
                strictly = (cx[:, None] < cy[None, :]) if j else \
                    np.ones((nx, ny), dtype=bool)
                between = np.cumsum(elig & strictly, axis=1) - (elig & strictly)
                if j == 0:  # between f (row) and y: eligible z in (f, y)
                    upto = np.cumsum(elig[0]) if nx else np.zeros(0, np.int64)
                    between = upto[None, :] - upto[:, None] - elig[0][None, :]
                    between = np.maximum(between, 0)
                counts = np.where(valid, between, 0)
                if counts.size and counts.max() >= 62:
                    exact = False
                weight = np.where(valid, np.left_shift(1, np.minimum(counts, 62)), 0)
            else:
                weight = valid.astype(np.int64)
                counts = None
            self.valid.append(valid)
            self.elig.append(elig)
            self.weight.append((weight, counts))
        self._products(exact)

    def _products(self, exact: bool) -> None:
        p, w, tags = self.p, self.p.window, self.tags
        first = self.cands[0]
        as_float = [wt.astype(float) if c is None else np.where(wt > 0, np.exp2(c), 0.0)
                    for wt, c in self.weight]
        total = as_float[0]
        for j in range(1, p.m):
            total = total @ as_float[j]
        ends = self.cands[-1]
        inside = tags[ends][None, :] - tags[first][:, None] <= w
        sums = np.where(inside, total, 0.0).sum(axis=0)
        if exact and (not total.size or (total.max() < _BIG and sums.max() < _BIG)):
            m = self.weight[0][0]
            for j in range(1, p.m):
                m = m @ self.weight[j][0]
        else:  # Python ints
            def big(j):
                wt, c = self.weight[j]
                if c is None:
                    return wt.astype(object)
                out = np.zeros(wt.shape, dtype=object)
                for a, b in zip(*np.nonzero(wt)):
                    out[a, b] = 1 << int(c[a, b])
                return out
            m = big(0)
            for j in range(1, p.m):
                m = m.dot(big(j))
        self.by_end = {int(e): int(v) for e, v in
                       zip(ends.tolist(), (np.where(inside, m, 0)).sum(axis=0).tolist())}
        # reach[j][y, e]: from l_j = y (column index of cands[j]) some completion ends at e
        reach = [None] * p.m
        r = np.eye(len(ends), dtype=float)
        reach[p.m - 1] = r
        for j in range(p.m - 1, 0, -1):
            r = np.minimum((as_float[j] > 0).astype(float) @ r, 1.0)
            reach[j - 1] = r
        self.reach = reach

    # ------------------------------------------------------------------ listing

    def first_matches(self, end: int, limit: int, labels: list | None = None) -> list:
        """Up to ``limit`` matches ending at event ``end``, in canonical order, each a list
        of blocks (lists of ``labels[position]``; default the local positions; blocks are
        shared between matches and must not be changed): lexicographic in the blocks, so a
        Kleene block stops before it grows, and each choice is tried in stream order. Only
        branches from which ``reach`` says ``end`` can still be reached are entered.

        This is the Python walk: the fallback of :meth:`first_matches_json` and the
        reference its compiled walk is tested against."""
        p, m = self.p, self.p.m
        ce = int(np.searchsorted(self.cands[-1], end))
        floor = self.tags[end] - p.window
        if self._names is None or self._labels is not labels:
            self._cand_lists = [c.tolist() for c in self.cands]
            self._names = self._cand_lists if labels is None else \
                [[labels[i] for i in c] for c in self._cand_lists]
            self._labels = labels
        cands, names = self._cand_lists, self._names
        out: list = []
        blocks: list[list] = []
        # a last singleton component is the end itself: l_(m-2) = row b may precede it
        single_end = m > 1 and not p.kleene[m - 1]
        end_ok = self.valid[m - 1][:, ce].tolist() if single_end else None
        end_block = [names[m - 1][ce]]

        def finish(j: int, b: int) -> None:
            """l_j is cands[j][b]: go on with component j + 1 (or emit)."""
            if j == m - 1:
                out.append(blocks[:])
            elif single_end and j == m - 2:
                if end_ok[b]:
                    blocks.append(end_block)
                    out.append(blocks[:])
                    blocks.pop()
            else:
                level(j + 1, b)

        def level(j: int, a: int | None) -> None:
            cj = cands[j]
            if j == 0:
                ok_last = np.diag(self.valid[0]) & (self.reach[0][:, ce] > 0)
            elif j == m - 1 and not p.kleene[j]:  # the end itself, if the pair allows it
                if self.valid[j][a, ce]:
                    blocks.append([names[j][ce]])
                    out.append(blocks[:])
                    blocks.pop()
                return
            else:
                ok_last = self.valid[j][a] & (self.reach[j][:, ce] > 0)
            if not p.kleene[j]:
                for b in np.flatnonzero(ok_last).tolist():
                    if j == 0 and self.tags[cj[b]] < floor:
                        continue
                    blocks.append([names[j][b]])
                    finish(j, b)
                    blocks.pop()
                    if len(out) >= limit:
                        return
                return
            elig = self.elig[j][0 if j == 0 else a]
            # a block whose latest element is z can still be finished iff l_j = z is
            # allowed or an eligible later element can; `grows`: those worth adding
            ok, el = ok_last.tolist(), elig.tolist()
            grows: list[int] = []
            later = False
            for z in range(len(cj) - 1, -1, -1):
                if ok[z] or later:
                    if el[z]:
                        later = True
                        grows.append(z)
            grows.reverse()
            if j == 0:  # the block's first element is the match's first: in the window
                firsts = [z for z in grows if self.tags[cj[z]] >= floor]
            else:
                x = cands[j - 1][a]
                firsts = [z for z in grows if cj[z] > x]
            valid0 = self.valid[0]
            for f in firsts:
                grow(j, [f], ok, grows, valid0)
                if len(out) >= limit:
                    return

        def grow(j: int, block: list[int], ok: list, grows: list[int], valid0) -> None:
            cur = block[-1]
            if ok[cur] and (j > 0 or valid0[block[0], cur]):
                nj = names[j]
                blocks.append([nj[b] for b in block])
                finish(j, cur)
                blocks.pop()
                if len(out) >= limit:
                    return
            for z in grows[bisect_right(grows, cur):]:
                block.append(z)
                grow(j, block, ok, grows, valid0)
                block.pop()
                if len(out) >= limit:
                    return

        level(0, None)
        return out

    def first_matches_json(self, end: int, limit: int, labels: list | None = None
                           ) -> list[str]:
        """:meth:`first_matches`, each match as compact JSON text (``[[7],[9,12],[15]]``).
        The walk runs in the compiled :mod:`edge.collector._listing` when it is built and the labels
        are integers (stream positions), which writes the text directly."""
        if _listing is not None and (self._flat is None or self._flat_labels is not labels):
            self._flat, self._flat_labels = self._flatten(labels), labels
        f = self._flat
        if _listing is None or f is None:
            return [_compact(m) for m in self.first_matches(end, limit, labels)]
        ce = int(np.searchsorted(self.cands[-1], end))
        reach = np.concatenate([r[:, ce] > 0 for r in self.reach]).view(np.uint8)
        return _listing.first_matches(f["kleene"], f["co"], f["cand"], f["names"], self.tags,
                                      f["valid"], f["elig"], f["vo"], reach, ce,
                                      float(self.tags[end] - self.p.window), int(limit),
                                      f["ok"], f["grows"], f["block"])

    def _flatten(self, labels: list | None) -> dict | None:
        """The flat arrays :func:`edge.collector._listing.first_matches` walks (None when the labels
        are not all integers)."""
        sizes = [len(c) for c in self.cands]
        cand = np.concatenate(self.cands).astype(np.int64)
        names = cand
        if labels is not None:
            if not all(type(x) is int for x in labels):
                return None
            names = np.array(labels, dtype=np.int64)[cand]
        valid = np.concatenate([v.ravel() for v in self.valid]).view(np.uint8)
        elig = np.concatenate([e.ravel() for e in self.elig]).view(np.uint8)
        vo = np.cumsum([0] + [v.size for v in self.valid], dtype=np.int64)
        total = int(sum(sizes))
        return {"kleene": np.array(self.p.kleene, dtype=np.uint8),
                "co": np.cumsum([0] + sizes, dtype=np.int64), "cand": cand,
                "names": np.ascontiguousarray(names, dtype=np.int64),
                "valid": np.ascontiguousarray(valid), "elig": np.ascontiguousarray(elig),
                "vo": vo, "ok": np.zeros(total, np.uint8), "grows": np.zeros(total, np.int64),
                "block": np.zeros(total, np.int64)}


def is_match(p: Plan, events: list[Event]) -> bool:
    """Whether ``events`` (a trajectory, in order) is itself a match using all of them."""
    n = len(events)
    if n < p.m or not events or events[-1].t - events[0].t > p.window:
        return False

    def split(j: int, start: int, bound: dict) -> bool:
        if j == p.m:
            return start == n
        left = p.m - j - 1  # events the later components need at least
        sizes = range(1, n - start - left + 1) if p.kleene[j] else (1,)
        var = p.vars[j]
        for size in sizes:
            block = events[start:start + size]
            if len(block) < size or any(e.type != p.types[j] for e in block):
                break
            here = {**bound, var: block}
            if p.kleene[j] and p.iter[j] and not all(
                    _holds(p.iter[j], here, var, i + 1) for i in range(size)):
                continue
            if p.pair[j] and not _holds(p.pair[j], here):
                continue
            if split(j + 1, start + size, here):
                return True
        return False

    return split(0, 0, {})


def check_partition(p: Plan, events: list[Event], points: list[float], limit: int,
                    labels: list | None = None) -> dict[float, tuple[int, list[str]]]:
    """{point: (count, up to ``limit`` matches ending at an event with that tag, each as
    the JSON text of its blocks of ``labels[local position]``)} for one partition's window
    events."""
    win = _Window(p, events)
    ends = win.cands[-1]
    end_tags = win.tags[ends]
    out = {}
    for point in points:
        if point in out:
            continue
        lo, hi = np.searchsorted(end_tags, [point, point], side="left")[0], \
            np.searchsorted(end_tags, point, side="right")
        at = ends[lo:hi].tolist()
        count = sum(win.by_end.get(e, 0) for e in at)
        found: list[str] = []
        for e in at:
            if len(found) >= limit or not win.by_end.get(e):
                continue
            found.extend(win.first_matches_json(e, limit - len(found), labels))
        out[point] = (count, found)
    return out


def _compact(value) -> str:
    return json.dumps(value, separators=(",", ":"))
