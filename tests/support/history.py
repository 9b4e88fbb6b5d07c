"""A hand-made node log and its history graph, and random event streams for the history
tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from acep import EventBatch
from history.graph import HistoryGraph

NAN = float("nan")
BINS = ([5.0], [2.0])  # R = G = 2
K, N_STATES, W = 1, 3, 10.0  # n_cells = 3 * 2 * 2 * 2 = 24


def node_log(rows):
    part, cell, prev, reach, merged = zip(*rows) if rows else ([],) * 5
    return {"partition": np.array(part, np.int32), "cell": np.array(cell, np.int32),
            "prev_cell": np.array(prev, np.int32), "reach": np.array(reach, np.float64),
            "merged": np.array(merged, np.uint8)}


HAND_LOG = node_log([
    (0, 5, -1, 3.0, 0),   # seed node, reached the bundle [3, 5] of partition 0
    (0, 9, 5, 3.0, 0),
    (0, 9, 5, NAN, 0),    # expired without a match: a visit, not a success
    (0, 9, 5, NAN, 1),    # merged, reached nothing: censored, not a visit
    (0, 9, 9, 20.0, 1),   # merged but reached a point: a visit and a success
    (1, 5, -1, 4.0, 0),
    (1, 23, 5, NAN, 0),
])
HAND_MATCHES = {"partition": np.array([0, 0, 0, 1, 0]), "point": np.array([3., 5., 20., 4., 5.])}


def hand_graph(**kw):
    return HistoryGraph.from_node_log(HAND_LOG, HAND_MATCHES, W, K, BINS, "a b", N_STATES, **kw)


def flip(data: bytes, at: int, mask: int) -> bytes:
    damaged = bytearray(data)
    damaged[at] ^= mask
    return bytes(damaged)


V1_FILE = Path(__file__).parents[1] / "data" / "flights-2000-v1.history"


def random_events(n, seed, types="abcdx"):
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.integers(0, 3, n)).astype(float)
    return [{"type": str(ty), "t": float(tt), "g": str(g), "x": float(x)}
            for ty, tt, g, x in zip(rng.choice(list(types), n), t, rng.choice(["P", "Q"], n),
                                    rng.normal(size=n))]


def random_batch(seed, n=1500):
    return EventBatch.from_events(random_events(n, seed, types="abcdx"))
