"""Fit a sketch's reserves to a budget on the training stream (docs/SHEDDING.md section 10).

A sketch's scores are success rates of an *unconstrained* run ([L16] Definition 4), but the
policy's reserves decide which cells may spend a scarce credit, and under shedding a cell's
worth is not its unconstrained rate: a noise start that a later motif completes (k errors,
a long window) is merged away in the unconstrained run and worth a bundle when the motif's
own start was shed. How much that matters depends on the budget. So, for a budget ratio
``f`` of the training stream's unconstrained operations per event, :func:`fit_budgets`

1. runs the history policy at ``f`` over the training stream with the node log on and
   measures each cell's success rate *under that shedding* (cells seen at least
   ``min_visits`` times; the others keep the sketch's score);
2. makes three candidate reserve tables: the sketch's scores (``history``), the measured
   rates (``measured``), and the measured order with the sketch's values (``order``: the
   cells are re-ranked, the overall level of the reserves, which the budget sets, is kept);
3. replays the training stream at ``f`` with each (the run of step 1 is the history's
   replay) and keeps the one that finds the most bundles (ties: the earlier in that list),
   stored in the sketch as the table for ``f``.

One step of policy iteration with a model choice on the training data: nothing of the test
period is used. A device gives :class:`history.HistoryPolicy` its budget and gets the table
fitted nearest it. Runs the full matcher three times per ratio: a trainer's job, not a
device's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from acep import EventBatch, MatchBatch, Matcher
from acep.shedding import Budget

from .build import _key_id
from .graph import bundle_index, compute_bundles
from .policies import HistoryPolicy
from .sketch import Sketch

__all__ = ["fit_budgets", "CANDIDATES"]

CANDIDATES = ("history", "measured", "order")
CHUNK = 1 << 16


def fit_budgets(sketch: Sketch, events: EventBatch, ratios: Sequence[float], *,
                partition: str | None = None, burst: float = 1024.0, min_visits: int = 50,
                seed: int = 0) -> tuple[Sketch, dict]:
    """The sketch with a reserve table fitted for each budget ratio, and a report.

    ``events``: the training stream (the one the sketch's history was built from, or any
    stream of the same kind); ``partition``: its partition column, as for the history;
    ``burst``: the bucket depth the devices run with, in events. The report maps each ratio
    to ``{"chosen": name, "bundle_recall": {name: recall on events}}`` and gives the
    training stream's ``ops_per_event`` and ``bundles``.
    """
    ratios = [float(r) for r in ratios]
    if not all(np.isfinite(r) and r > 0 for r in ratios):
        raise ValueError(f"budget ratios must be positive numbers, got {ratios!r}")
    if min_visits < 1:
        raise ValueError(f"min_visits must be >= 1, got {min_visits!r}")
    args = {"pattern": sketch.pattern, "window": sketch.window, "k": sketch.k,
            "where": list(sketch.where), "partition": partition}
    matches, stats = _run(args, events)
    ops_per_event = stats["candidates"] / max(len(events), 1)
    if not ops_per_event > 0:
        raise ValueError("the training stream has no operations to fit a budget to")
    truth = _BundleTruth(matches, sketch.window)
    plain = replace(sketch, ops_per_event=0.0, fitted_ratios=None, fitted=None)
    report = {"ops_per_event": ops_per_event, "bundles": truth.n, "ratios": {}}
    for ratio in ratios:
        budget = Budget(ratio * ops_per_event, burst)
        tables, found = _candidates(plain, args, events, budget, min_visits, seed)
        recall = {"history": truth.recall(found)}  # the measuring run is the history's replay
        for name in ("measured", "order"):
            trial = plain.with_fitted(ratio, tables[name], ops_per_event)
            found, _ = _run(args, events, budget=budget, seed=seed, sketch=trial)
            recall[name] = truth.recall(found)
        chosen = max(CANDIDATES, key=lambda n: (recall[n], -CANDIDATES.index(n)))
        sketch = sketch.with_fitted(ratio, tables[chosen], ops_per_event)
        report["ratios"][ratio] = {"chosen": chosen, "bundle_recall": recall}
    return sketch, report


def _run(args: dict, events: EventBatch, budget: Budget | None = None, seed: int = 0,
         sketch: Sketch | None = None, on_chunk=None):
    """One pass over ``events`` (unconstrained, or the static history policy at ``budget``)."""
    options = {}
    if sketch is not None:
        policy = HistoryPolicy(sketch, learning_rate=0.0, explore=0.0, seed=seed,
                               budget=budget)
        options = {"budget": budget, "policy": policy, "bins": policy.bins,
                   "trace": on_chunk is not None}
    m = Matcher(**args, **options)
    found = []
    for i in range(0, len(events), CHUNK):
        found.append(m.match_batch(events.slice(i, min(i + CHUNK, len(events)))))
        if on_chunk is not None:
            on_chunk(m.take_node_log())
    found.append(m.flush())
    if on_chunk is not None:
        on_chunk(m.take_node_log())
    return MatchBatch.concat(found), dict(m.stats)


def _candidates(sketch: Sketch, args: dict, events: EventBatch, budget: Budget,
                min_visits: int, seed: int) -> tuple[dict[str, np.ndarray], MatchBatch]:
    """The candidate reserve tables for one budget (module docstring, step 2), and the
    matches of the run that measured them (the plain history policy at ``budget``)."""
    visits = np.zeros(sketch.n_cells, dtype=np.int64)
    successes = np.zeros(sketch.n_cells, dtype=np.int64)

    def count(log):
        settled = ~((log["merged"] != 0) & np.isnan(log["reach"]))  # merged: censored
        cell, reached = log["cell"][settled], ~np.isnan(log["reach"][settled])
        visits[:] += np.bincount(cell, minlength=sketch.n_cells)
        successes[:] += np.bincount(cell[reached], minlength=sketch.n_cells)

    found, _ = _run(args, events, budget=budget, seed=seed, sketch=sketch, on_chunk=count)
    base = sketch.score.astype(np.float64)
    seen = np.flatnonzero(visits >= min_visits)
    measured, order = base.copy(), base.copy()
    rate = successes[seen] / visits[seen]
    measured[seen] = rate
    order[seen[np.argsort(rate, kind="stable")]] = np.sort(base[seen])
    return {"history": base, "measured": measured, "order": order}, found


class _BundleTruth:
    """The bundles of an unconstrained run, to score another run's bundle recall."""

    def __init__(self, matches, window: float):
        self.keys: dict = {}
        part = np.array([self.keys.setdefault(_key_id(k), len(self.keys))
                         for k in matches.partition.tolist()], dtype=np.int64)
        self.bundles = compute_bundles(part, matches.point, window)
        self.n = len(self.bundles["partition"])

    def recall(self, found) -> float:
        part = np.array([self.keys.get(_key_id(k), -1) for k in found.partition.tolist()],
                        dtype=np.int64)
        ok = part >= 0
        b = self.bundles
        idx = bundle_index(b["partition"], b["first"], b["last"], part[ok],
                           np.asarray(found.point, dtype=np.float64)[ok])
        return len(np.unique(idx[idx >= 0])) / max(self.n, 1)


