"""history.drift: when a device's finds call for a retrain."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from history.drift import FindsDrop, binomial_cdf


@settings(deadline=None)  # the first example imports scipy.stats
@given(st.integers(0, 60), st.integers(0, 60), st.floats(0.0, 1.0))
def test_binomial_cdf_is_the_sum_of_the_probabilities(k, n, p):
    exact = sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(min(k, n) + 1))
    assert binomial_cdf(k, n, p) == pytest.approx(exact, abs=1e-9)


def test_binomial_cdf_of_large_counts_stays_a_probability():
    assert binomial_cdf(4_000, 10_000, 0.5) < 1e-80
    assert binomial_cdf(5_000, 10_000, 0.5) == pytest.approx(0.5040, abs=1e-3)


def test_binomial_cdf_of_millions_is_fast_and_agrees_with_a_sum_near_the_mean():
    """5,000,000 trials, 2 standard deviations below the mean: the terms beyond 40 of them
    are below 1e-300, so a sum over the band is the whole."""
    n, p = 5_000_000, 0.3
    mean, sd = n * p, math.sqrt(n * p * (1 - p))
    k = int(mean - 2 * sd)
    start = time.process_time()
    got = binomial_cdf(k, n, p)
    assert time.process_time() - start < 0.05
    log_pmf = [math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1)
               + i * math.log(p) + (n - i) * math.log1p(-p)
               for i in range(int(mean - 40 * sd), k + 1)]
    assert got == pytest.approx(math.fsum(math.exp(t) for t in log_pmf), rel=1e-6)
    normal = 0.5 * math.erfc(-(k + 0.5 - mean) / sd / math.sqrt(2))
    assert got == pytest.approx(normal, abs=1e-3)


def alarm_share(reference: float, now: float, trials: int, seed: int) -> float:
    """How often FindsDrop says a period fell, both periods' matches Poisson with these
    means in 100,000 events."""
    rng = np.random.default_rng(seed)
    alarms = 0
    for _ in range(trials):
        trigger = FindsDrop()
        trigger.update(int(rng.poisson(reference)), 100_000)
        alarms += trigger.update(int(rng.poisson(now)), 100_000)
    return alarms / trials


def test_stationary_finds_rarely_call_for_a_retrain():
    assert alarm_share(200, 200, 2_000, 5) <= 0.01  # the level holds at a tenth less


def test_a_fall_of_exactly_the_drop_calls_at_the_level():
    assert alarm_share(1_000, 900, 4_000, 7) <= 0.015  # 0.01 and three standard errors


def test_a_fall_beyond_the_drop_is_found():
    assert alarm_share(300, 150, 500, 6) > 0.99


def test_matches_per_event_count_not_matches():
    trigger = FindsDrop()
    trigger.update(300, 100_000)
    assert not trigger.update(150, 50_000)  # half the events, half the matches: no fall
    assert trigger.update(150, 100_000)


def test_the_first_period_with_events_is_the_reference():
    trigger = FindsDrop()
    assert not trigger.update(0, 0)
    assert trigger.reference is None and trigger.p_value(10, 100) == 1.0
    assert not trigger.update(300, 100_000)
    assert trigger.reference == (300, 100_000)
    assert not trigger.update(0, 0)


def test_update_keeps_the_p_value_it_computed():
    trigger = FindsDrop()
    assert trigger.last_p_value == 1.0
    trigger.update(300, 100_000)
    assert trigger.last_p_value == 1.0  # the reference
    assert trigger.update(150, 100_000)
    assert trigger.last_p_value == trigger.p_value(150, 100_000) < trigger.alpha
    assert not trigger.update(290, 100_000)
    assert trigger.last_p_value == trigger.p_value(290, 100_000) > trigger.alpha
    assert not trigger.update(0, 0)
    assert trigger.last_p_value == 1.0  # no events


def test_a_fall_of_less_than_the_drop_is_no_fall():
    trigger = FindsDrop(drop=0.5)
    trigger.update(10_000, 100_000)
    assert not trigger.update(6_000, 100_000)
    assert trigger.update(4_000, 100_000)


@pytest.mark.parametrize("options", [{"drop": 1.0}, {"drop": -0.1}, {"alpha": 0.0},
                                     {"alpha": 1.0}])
def test_bad_options_are_refused(options):
    with pytest.raises(ValueError, match=next(iter(options))):
        FindsDrop(**options)


@pytest.mark.parametrize("matches,events", [(-1, 10), (11, 10), (0, -1)])
def test_impossible_counts_are_refused(matches, events):
    with pytest.raises(ValueError, match="matches <= events"):
        FindsDrop().update(matches, events)
