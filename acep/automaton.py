"""Thompson's automaton for a pattern ([L16] Section 2 and Figure 1).

The construction follows Figure 1 exactly; ``{n,m}``, ``+`` and ``?`` expand into copies.
:meth:`Automaton.skip_cost` precomputes the fewest errors of moving between any two states
without consuming an event (Algorithm 1's ``propagate``). The construction, the L-states
and ε-states and the costs are in docs/DESIGN.md, "As built: the ACEP engine", Automaton.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from .pattern import Alt, Concat, Node, Repeat, Star, Symbol, parse_regex, symbols

UNREACHABLE = np.iinfo(np.int32).max // 4


@dataclass
class Automaton:
    """Thompson's automaton: states 0..n-1, ``label[q]`` = type id for L-states, -1 for ε."""

    types: list[str]
    label: list[int] = field(default_factory=list)
    post: list[list[int]] = field(default_factory=list)
    start: int = 0
    final: int = 0

    @property
    def n_states(self) -> int:
        return len(self.label)

    def is_l_state(self, q: int) -> bool:
        return self.label[q] >= 0

    def pre(self, q: int) -> list[int]:
        return [p for p in range(self.n_states) if q in self.post[p]]

    def l_states(self, type_id: int | None = None) -> list[int]:
        return [q for q in range(self.n_states)
                if self.label[q] >= 0 and (type_id is None or self.label[q] == type_id)]

    def skip_cost(self) -> np.ndarray:
        """``cost[p, q]``: fewest errors to move a node from p to q without consuming events.

        Entering an L-state along its letter edge without its event costs one error;
        ε edges cost nothing. Unreachable pairs hold ``UNREACHABLE``.
        """
        n = self.n_states
        cost = np.full((n, n), UNREACHABLE, dtype=np.int64)
        for source in range(n):
            cost[source] = self._zero_one_bfs(source)
        return cost

    def _zero_one_bfs(self, source: int) -> np.ndarray:
        dist = np.full(self.n_states, UNREACHABLE, dtype=np.int64)
        dist[source] = 0
        queue = deque([source])
        while queue:
            p = queue.popleft()
            for q in self.post[p]:
                step = 1 if self.label[q] >= 0 else 0
                if dist[p] + step < dist[q]:
                    dist[q] = dist[p] + step
                    (queue.appendleft if step == 0 else queue.append)(q)
        return dist

    def letter_source(self) -> list[int]:
        """``pre(σ)`` for each L-state σ (-1 for ε-states): the source of its letter edge."""
        source = [-1] * self.n_states
        for p in range(self.n_states):
            for q in self.post[p]:
                if self.label[q] >= 0:
                    source[q] = p
        return source


class _Builder:
    def __init__(self, types: list[str]):
        self.type_id = {name: i for i, name in enumerate(types)}
        self.label: list[int] = []
        self.post: list[list[int]] = []

    def state(self, label: int = -1) -> int:
        self.label.append(label)
        self.post.append([])
        return len(self.label) - 1

    def build(self, node: Node) -> tuple[int, int]:
        """Return (start, final) of the sub-automaton of ``node``."""
        if isinstance(node, Symbol):
            start, final = self.state(), self.state(self.type_id[node.name])
            self.post[start].append(final)
            return start, final
        if isinstance(node, Concat) and not node.items:  # ε, from expanding x?
            s = self.state()
            return s, s
        if isinstance(node, Concat):
            start, final = self.build(node.items[0])
            for item in node.items[1:]:
                final = self._append(final, item)
            return start, final
        if isinstance(node, Alt):
            start, final = self.state(), self.state()
            for item in node.items:
                s, f = self.build(item)
                self.post[start].append(s)
                self.post[f].append(final)
            return start, final
        if isinstance(node, Star):
            start, final = self.state(), self.state()
            s, f = self.build(node.item)
            self.post[start] += [s, final]
            self.post[f] += [s, final]
            return start, final
        return self.build(_expand_repeat(node))

    def _append(self, final: int, item: Node) -> int:
        """Concatenate ``item`` after ``final``: item's start state merges into ``final``."""
        s, f = self.build(item)
        # A sub-automaton's start state has no incoming edge, so merging it only moves
        # its outgoing edges (Figure 1b).
        self.post[final].extend(self.post[s])
        self.post[s] = []
        self._retire(s)
        return f

    def _retire(self, s: int) -> None:
        self.label[s] = -2  # removed; renumbered in finish()

    def finish(self, start: int, final: int, types: list[str]) -> Automaton:
        keep = [q for q in range(len(self.label)) if self.label[q] != -2]
        new_id = {q: i for i, q in enumerate(keep)}
        return Automaton(
            types=types,
            label=[self.label[q] for q in keep],
            post=[[new_id[t] for t in self.post[q]] for q in keep],
            start=new_id[start],
            final=new_id[final],
        )


def _expand_repeat(node: Repeat) -> Node:
    required = [node.item] * node.lo
    if node.hi is None:
        tail = [Star(node.item)]
    else:
        tail = [Alt((node.item, Concat(()))) for _ in range(node.hi - node.lo)]
    items = tuple(required + tail)
    return items[0] if len(items) == 1 else Concat(items)


def build_automaton(pattern: Node | str, types: list[str] | None = None) -> Automaton:
    """Build Thompson's automaton; ``types`` fixes the type-id order (default: pattern order)."""
    node = parse_regex(pattern) if isinstance(pattern, str) else pattern
    types = list(types) if types is not None else symbols(node)
    missing = [t for t in symbols(node) if t not in types]
    if missing:
        raise ValueError(f"pattern types {missing} are not in the given type list")
    builder = _Builder(types)
    start, final = builder.build(node)
    return builder.finish(start, final, types)
