"""Postponing's compact output: :class:`CollapsedMatch`, one record per (main run, end event)
that expands to its matches or counts them (``docs/EXACT.md`` 8).
"""

from __future__ import annotations

from collections.abc import Iterator

from ..runs import ExactMatch, check_held
from .filters import _EMPTY
from .search import Candidate, _Context, _MainRun, _search

# --------------------------------------------------------------------------- compact (8)

class CollapsedMatch:
    """[Z14]'s collapsed result for one (main run, end event) (EXACT.md 8).

    ``start_position``, ``end_position``: the first and the last event of every match in it.
    ``candidates``: per positive component, the :class:`Candidate` entries ``(position,
    roles)`` the search may pick (the last component's end at ``end_position``).
    ``residual``: ids ``(component, role, n)`` of the conjuncts that some candidate still
    has to check (``(j, "close", n)`` for CLOSE conjuncts). ``negation``: whether negation
    is checked at the leaves. ``expand()`` yields the matches (RETURN evaluated then) in
    canonical order; ``count()`` counts them, without enumerating when there is neither a
    residual nor negation.
    """

    __slots__ = ("start_position", "end_position", "_ctx", "_run", "_ranges", "_count",
                 "_residual")

    def __init__(self, start_position: int, end_position: int, ctx: _Context, run: _MainRun,
                 ranges: tuple):
        self.start_position, self.end_position = start_position, end_position
        self._ctx, self._run, self._ranges = ctx, run, ranges
        self._count: int | None = None
        self._residual: frozenset | None = None

    @property
    def candidates(self) -> tuple[tuple[Candidate, ...], ...]:
        return tuple(tuple(cands[lo:hi]) for cands, (lo, hi) in zip(self._run.cands,
                                                                     self._ranges))

    @property
    def residual(self) -> frozenset:
        if self._residual is None:
            out = set(self._ctx.plan.close_ids)
            for cum, cands, (lo, hi) in zip(self._run.cum, self._run.cands, self._ranges):
                if lo == 0:
                    out |= cum[hi - 1]
                else:
                    for c in cands[lo:hi]:
                        out |= (c._bu or _EMPTY) | (c._tu or _EMPTY)
            self._residual = frozenset(out)
        return self._residual

    @property
    def negation(self) -> bool:
        return bool(self._ctx.plan.cq.negations)

    def expand(self) -> Iterator[ExactMatch]:
        """The matches of the record, in canonical order; RETURN is evaluated here. The
        search runs when the iteration starts."""
        chosen: list[tuple] = []
        limit = self._ctx.max_entries

        def emit(positions):
            chosen.append(positions)
            if limit is not None and len(chosen) > limit:
                check_held(len(chosen), limit, self.end_position, " (expanding one compact record)")

        _search(self._ctx, self._run, self._ranges, self.end_position, emit)
        finish = self._ctx.machine.finish
        for positions in chosen:
            match = finish(positions)
            if match is not None:
                yield match

    def count(self) -> int:
        """The number of matches: a DP over the candidate lists without residual and
        negation, an enumeration (without RETURN) otherwise."""
        if self._count is None:
            if not self.residual and not self.negation:
                self._count = self._dp()
            else:
                found = [0]
                eliminated = self._ctx.eliminated if self.negation else None
                limit = self._ctx.max_entries

                def emit(positions):
                    if eliminated is None or not eliminated(positions):
                        found[0] += 1
                        if limit is not None and found[0] > limit:
                            check_held(found[0], limit, self.end_position,
                                       " (counting one compact record's matches)")

                _search(self._ctx, self._run, self._ranges, self.end_position, emit)
                self._count = found[0]
        return self._count

    def _dp(self) -> int:
        """Structurally valid choices (8): ``f_j(q)`` = the ways to fill components ``0..j``
        with ``q`` the last element of ``j``; begin from any ``f_{j-1}(p)``, ``p < q``; take
        from any ``f_j(p)``, ``p < q``."""
        previous: list[tuple[int, int]] = []   # (position, f) of component j - 1
        for j, (lo, hi) in enumerate(self._ranges):
            cands = self._run.cands[j]
            current: list[tuple[int, int]] = []
            before, pointer, own = 0, 0, 0
            for c in cands[lo:hi]:
                while pointer < len(previous) and previous[pointer][0] < c.position:
                    before += previous[pointer][1]
                    pointer += 1
                f = 0
                if c._b is not None:
                    f += 1 if j == 0 else before
                if c._t is not None:
                    f += own
                own += f
                current.append((c.position, f))
            previous = current
        return previous[-1][1] if previous and previous[-1][0] == self.end_position else 0

    def __repr__(self) -> str:
        sizes = [hi - lo for lo, hi in self._ranges]
        return (f"CollapsedMatch(start={self.start_position}, end={self.end_position}, "
                f"candidates={sizes}, residual={sorted(self.residual)}, "
                f"negation={self.negation})")
