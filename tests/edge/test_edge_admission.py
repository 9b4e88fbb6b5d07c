"""The collector's admission of uploads (edge.collector.admission) on a clock the test moves: the
per-device limit, the expected wait against --max-wait, the departure rate it is measured
by, and, on random sequences of uploads, against a plain recount of every rule."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edge.collector.admission import MAX_RETRY_AFTER, PRIOR_RATE, Admission

MIB = 1 << 20


def take(adm: Admission, device: str, nbytes: int):
    """``admit``, and for an upload admitted its body arriving at once (a fast link)."""
    refused = adm.admit(device, nbytes)
    if refused is None:
        adm.arrived(nbytes)
    return refused


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_one_upload_per_device_at_a_time_the_second_is_429_until_the_first_is_answered():
    adm = Admission(max_wait=5.0)
    assert take(adm, "pi-1", 1000) is None
    refused = take(adm, "pi-1", 1000)
    assert refused.status == 429 and refused.retry_after >= 1
    assert "'pi-1' has 1 upload(s) being processed" in refused.reason
    assert take(adm, "pi-2", 1000) is None  # another device is not held up
    adm.done("pi-1", 1000)
    assert take(adm, "pi-1", 1000) is None
    assert Admission(per_device=2).admit("x", 1) is None


def test_before_any_measurement_the_prior_rate_admits_max_wait_seconds_of_bytes():
    adm = Admission(max_wait=5.0)
    admitted = [take(adm, f"d{i}", MIB) for i in range(7)]
    assert admitted[:5] == [None] * 5  # 5 MiB at 1 MiB/s: 5 s
    assert [r.status for r in admitted[5:]] == [503, 503]
    assert "would wait about 6.0 s (above --max-wait 5 s)" in admitted[5].reason
    assert adm.pending == 5 and adm.backlog == 5 * MIB
    assert adm.gauges()["expected_wait_seconds"] == 5.0


def test_fewer_uploads_than_keep_the_collector_busy_are_admitted_whatever_the_wait():
    adm = Admission(max_wait=1.0, saturated=2)
    assert take(adm, "big", 100 * MIB) is None
    assert take(adm, "small", 1) is None  # one pending: the other worker would be idle
    assert take(adm, "third", 1).status == 503
    adm.done("big", 100 * MIB)
    assert take(adm, "third", 1) is None


def test_max_wait_zero_admits_any_backlog_and_keeps_the_device_limit():
    adm = Admission(max_wait=0)
    assert all(take(adm, f"d{i}", 10 * MIB) is None for i in range(50))
    assert take(adm, "d0", 1).status == 429


def test_the_departure_rate_is_measured_over_the_time_the_collector_is_saturated():
    clock = Clock()
    adm = Admission(max_wait=5.0, saturated=3, clock=clock)
    for d in ("a", "b"):  # two pending: below saturation, departures say nothing
        take(adm, d, MIB)
    clock.now += 10
    adm.done("a", MIB)
    assert adm.rate is None
    for d in ("a", "c", "d"):  # saturated from the second of these (t = 110)
        take(adm, d, MIB)
    clock.now += 0.5
    adm.done("b", MIB)  # 1 MiB in 0.5 s
    assert adm.rate == pytest.approx(2 * MIB)
    clock.now += 0.25
    adm.done("a", MIB)  # 1 MiB in 0.25 s: the moving average takes a quarter of it
    rate = 0.75 * 2 * MIB + 0.25 * 4 * MIB
    assert adm.rate == pytest.approx(rate)
    assert adm.expected_wait() == pytest.approx(adm.backlog / adm.rate)
    clock.now += 100  # two pending (c, d): not saturated, the clock of the sample stops
    take(adm, "e", MIB)
    clock.now += 0.5
    adm.done("c", MIB)  # 1 MiB in 0.5 s of saturation, not in 100.5 s
    assert adm.rate == pytest.approx(0.75 * rate + 0.25 * 2 * MIB)


def test_a_sample_needs_a_mebibyte_and_a_quarter_second_of_saturation():
    clock = Clock()
    adm = Admission(saturated=2, clock=clock)
    for d in "abcd":
        take(adm, d, MIB // 4)
    clock.now += 1.0
    for d in "abc":  # 3/4 MiB in 1 s, then one pending: the sample waits
        adm.done(d, MIB // 4)
    assert adm.rate is None
    clock.now += 50
    take(adm, "e", MIB // 4)  # saturated again
    clock.now += 1.0
    adm.done("d", MIB // 4)  # 1 MiB in 2 s of saturation
    assert adm.rate == pytest.approx(MIB / 2)


def test_answers_without_a_re_check_leave_the_backlog_but_not_in_the_departure_rate():
    clock = Clock()
    adm = Admission(saturated=1, clock=clock)
    for d in "abcd":
        take(adm, d, MIB)
    clock.now += 0.5
    adm.done("a", MIB, worked=False)  # a resent duplicate, answered from its digest
    adm.done("b", MIB, worked=False)
    assert adm.rate is None and adm.backlog == 2 * MIB
    clock.now += 0.5
    adm.done("c", MIB)  # the re-check did 1 MiB in 1 s, not 3 MiB
    assert adm.rate == pytest.approx(MIB)


def test_retry_after_of_a_503_is_the_wait_stretched_by_one_to_two_and_capped():
    adm = Admission(max_wait=1.0, saturated=1, rng=random.Random(7))
    take(adm, "a", 3 * MIB)
    # before the rate is measured the wait is a guess (3 s at the prior): 1 to 2 s
    assert {take(adm, f"d{i}", 0).retry_after for i in range(50)} == {1, 2}
    adm.rate = float(MIB)  # as measured: 3 s
    seen = {take(adm, f"d{i}", 0).retry_after for i in range(200)}
    assert seen <= set(range(3, 7)) and len(seen) == 4  # spread, not one instant
    adm.rate = 0.001
    assert take(adm, "b", 0).retry_after == MAX_RETRY_AFTER


@pytest.mark.parametrize("kw", [{"max_wait": -1}, {"max_wait": math.nan},
                                {"max_wait": math.inf}, {"per_device": 0}])
def test_bad_settings_are_refused_by_name(kw):
    with pytest.raises(ValueError, match=next(iter(kw))):
        Admission(**kw)


# --------------------------------------------------------------------------- oracle

_ops = st.lists(st.tuples(st.sampled_from(["admit", "arrive", "done", "tick"]),
                          st.integers(0, 4), st.integers(0, 3 * MIB)), max_size=80)


@settings(max_examples=300, deadline=None)
@given(ops=_ops, max_wait=st.sampled_from([0.0, 0.5, 2.0, 5.0]),
       per_device=st.integers(1, 3), saturated=st.integers(1, 4))
def test_admission_agrees_with_a_recount_of_its_rules(ops, max_wait, per_device, saturated):
    clock = Clock()
    adm = Admission(max_wait, per_device, saturated=saturated, clock=clock,
                    rng=random.Random(0))
    # [device, bytes once its body arrived (None before)] of every upload not yet answered
    live: list[list] = []
    for op, dev_no, size in ops:
        device = f"d{dev_no}"
        arrived = [n for _, n in live if n is not None]
        on_way = [u for u in live if u[1] is None]
        if op == "tick":
            clock.now += size / MIB
        elif op == "arrive" and on_way:
            upload = on_way[dev_no % len(on_way)]
            adm.arrived(size)
            upload[1] = size
        elif op == "done" and live:
            device, nbytes = live.pop(dev_no % len(live))
            adm.done(device, nbytes, worked=size % 2 == 0)
        elif op == "admit":
            mine = sum(d == device for d, _ in live)
            wait = (sum(arrived) + size) / (adm.rate or PRIOR_RATE)
            refused = adm.admit(device, size)
            if mine >= per_device:
                assert refused is not None and refused.status == 429
            elif max_wait and len(arrived) >= saturated and wait > max_wait:
                assert refused is not None and refused.status == 503
                guess = wait if adm.rate is not None else 1.0
                assert min(max(round(guess), 1), MAX_RETRY_AFTER) <= refused.retry_after \
                    <= min(max(round(2 * guess), 1), MAX_RETRY_AFTER)
            else:
                assert refused is None
                live.append([device, None])
        assert adm.pending == sum(n is not None for _, n in live)
        assert adm.arriving == sum(n is None for _, n in live)
        assert adm.backlog == sum(n for _, n in live if n is not None)
        assert all(adm.uploads[d] <= per_device for d in adm.uploads)
        assert adm.rate is None or adm.rate > 0
