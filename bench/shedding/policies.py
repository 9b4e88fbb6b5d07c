"""The policies of the benchmark, each a row: how to build one fresh for a run."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from acep.events import EventBatch
from acep.shedding import Budget
from history.policies import DEFER, policy_options

SEED = 4
POLICIES = ("keep-first", "random", "oldest-first", "completion", "pspice", "hspice",
            "hybrid", "sampling", "history", "history+rl", "hindsight")
BASELINES = ("keep-first", "random", "oldest-first", "completion", "pspice", "hspice",
             "hybrid", "sampling")
FIELD = ("pspice", "hspice")  # the field's shedders that issue 42's target names
# the drift reference (not a policy row): the static history of a training stream of the
# drifted regime, what retraining would ship
RETRAINED = "history retrained"
# every workload's reference (not a policy row): the static history built and fitted on the
# test stream itself, the best a sketch of this kind can know of that stream in advance
TEST_HISTORY = "history of the test stream"


@dataclass
class Setup:
    """What one run of a policy needs beside the workload: the matcher options."""

    options: dict  # policy=..., bins=...
    sampled_rate: float | None = None  # input-event sampling: the share of events kept


def make(policy: str, state: dict, fraction: float, budget: Budget | None = None) -> Setup:
    """A fresh policy (and the bins it needs) for one run under ``budget`` (the history
    policies take the reserves their sketch fitted nearest it)."""
    if policy == "sampling":
        return Setup({}, state["sampling_rates"][fraction])
    sketch = state.get("sketch")
    if policy == RETRAINED:
        policy, sketch = "history", state["retrained"]["sketch"]
    elif policy == TEST_HISTORY:
        policy, sketch = "history", state["test_history"]["sketch"]
    return Setup(policy_options(policy, sketch=sketch, graph=state.get("graph"),
                                hindsight=state.get("hindsight"), budget=budget, seed=SEED,
                                defer=state.get("defer", DEFER)))


# --------------------------------------------------------------------------- sampling

def sample(batch: EventBatch, rate: float) -> EventBatch:
    """The frequency operator ([M] Ma & Taylor) at a fractional rate: keep event ``i`` when
    ``floor((i + 1) rate) > floor(i rate)``, i.e. evenly spaced, ``rate`` of the events."""
    if rate >= 1.0:
        return batch
    i = np.arange(len(batch), dtype=np.float64)
    keep = np.flatnonzero(np.floor((i + 1) * rate) > np.floor(i * rate))
    return EventBatch(batch.type_codes[keep], batch.type_names, batch.tags[keep],
                      {k: v[keep] for k, v in batch.columns.items()}, 0, batch.source, None,
                      batch.tag_is_time)


def calibrate(ops_per_event: Callable[[float], float], target: float, steps: int = 7) -> float:
    """The largest sampling rate whose ops per (original) event stay within ``target``.

    ``ops_per_event(rate)`` runs the unconstrained matcher on the sampled training stream;
    ops grow faster than the rate, so sampling at the budget fraction would waste budget.
    """
    lo, hi = 0.0, 1.0
    if ops_per_event(1.0) <= target:
        return 1.0
    for _ in range(steps):
        mid = (lo + hi) / 2
        if ops_per_event(mid) <= target:
            lo = mid
        else:
            hi = mid
    return max(lo, 1e-3)
