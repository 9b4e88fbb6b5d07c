"""Online learning under shedding (docs/SHEDDING.md 5): the probes' estimator converges to
each cell's success rate in the unconstrained run, where the update from every node does not.

The reference is the history of the same stream built without a budget (the success rate of
each cell over the unconstrained run's nodes, merged ones censored), the estimator is the
kernel's learned score, and the tolerance is four cluster-robust standard errors of the
sample (a sample block's nodes are not independent) plus 0.01.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from acep import Matcher
from acep.shedding import Budget, ScorePolicy
from bench.shedding.workloads import STEADY, sensors
from history.build import build_history
from history.sketch import Sketch

PATTERN, WINDOW, K, PARTITION = "a b c d e", 10.0, 1, "sensor"
PRIOR = 0.5


@pytest.fixture(scope="module")
def stationary():
    """A sketch of a short training stream, and a long test stream of the same generator
    with its unconstrained rates per cell (in the sketch's bins)."""
    train = build_history(PATTERN, sensors(300, (STEADY,), seed=1), WINDOW, K,
                          partition=PARTITION)
    test = sensors(6000, (STEADY,), seed=2)
    truth = build_history(PATTERN, test, WINDOW, K, bins=train.bins(), partition=PARTITION)
    m = Matcher(PATTERN, WINDOW, K, partition=PARTITION)
    m.match_batch(test)
    m.flush()
    return {"sketch": Sketch.from_graph(train), "bins": train.bins(), "test": test,
            "rate": truth.successes / np.maximum(truth.visits, 1),
            "ops": m.stats["candidates"] / len(test)}


def learn(data, fraction: float, probe: float, activity: float = 0.0):
    """Run the history's rules from a uniform prior score, learning; return the policy and
    the log of the nodes retired."""
    sketch = data["sketch"]
    policy = ScorePolicy(np.full(sketch.n_cells, PRIOR), learning_rate=1e-4, prior_visits=1.0,
                         probe=probe, probe_share=1.0, seed=3, proxy_live=True, ahead=0.5,
                         seed_reserve=1.0, reserve_power=2.0, advance_reserve=0.1, cover=0.5,
                         defer=4, reserve_score=sketch.score, probe_activity=activity)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = Matcher(PATTERN, WINDOW, K, partition=PARTITION, bins=data["bins"], trace=True,
                    budget=Budget(fraction * data["ops"], 1024), policy=policy)
    m.match_batch(data["test"])
    return policy, m.take_node_log()  # before flush: the nodes retired, all learned from


def learned_from(log, probes: bool) -> np.ndarray:
    censored = (log["merged"] == 1) & ~np.isfinite(log["reach"])
    return ~censored & (log["probe"] >= 2 if probes else True)


def cluster_se(log, rows, n_cells: int) -> np.ndarray:
    """Per cell, the standard error of the mean outcome with the sample blocks as clusters."""
    cell, hit = log["cell"][rows], np.isfinite(log["reach"][rows]).astype(float)
    block = log["partition"][rows].astype(np.int64) * 10**9 + \
        np.floor(log["start"][rows] / WINDOW).astype(np.int64)
    se = np.full(n_cells, np.inf)
    for c in np.unique(cell):
        mine = cell == c
        _, group = np.unique(block[mine], return_inverse=True)
        n, g = mine.sum(), group.max() + 1
        resid = np.bincount(group, hit[mine] - hit[mine].mean())
        if g > 1:
            se[c] = np.sqrt(g / (g - 1) * (resid ** 2).sum()) / n
    return se


@pytest.mark.parametrize("activity", [0.0, 1.0])
@pytest.mark.parametrize("fraction", [0.1, 0.25])
def test_probes_learn_the_unconstrained_rate_of_every_visited_cell(stationary, fraction,
                                                                    activity):
    policy, log = learn(stationary, fraction, probe=0.05, activity=activity)
    rows = learned_from(log, probes=True)
    weight = 2.0 ** (log["probe"][rows].astype(int) - 2)  # busy partitions' samples: 2**j
    assert (weight > 1).any() == (activity > 0)
    n = np.bincount(log["cell"][rows], weight, minlength=len(policy.score))
    hits = np.bincount(log["cell"][rows], weight * np.isfinite(log["reach"][rows]),
                       minlength=len(policy.score))
    # the update rule: a weighted running mean from the prior, worth one outcome
    np.testing.assert_allclose(policy.score, (PRIOR + hits) / (1 + n), atol=1e-9)
    np.testing.assert_allclose(policy.visits, n)
    visited = np.bincount(log["cell"][rows], minlength=len(policy.score)) >= 200
    assert visited.sum() >= 5
    error = np.abs(policy.score - stationary["rate"])[visited]
    tolerance = 4 * cluster_se(log, rows, len(n))[visited] + 0.01
    assert (error <= tolerance).all(), (error, tolerance)


@pytest.mark.parametrize("fraction", [0.1, 0.25])
def test_learning_from_every_node_under_shedding_is_biased(stationary, fraction):
    """Without probes a node whose continuation was shed fails: the rates learned are far
    from the unconstrained ones, which is what the probes correct."""
    policy, log = learn(stationary, fraction, probe=0.0)
    visited = policy.visits >= 200
    assert visited.sum() >= 5
    assert np.abs(policy.score - stationary["rate"])[visited].max() > 0.2
