"""The basic run engine (acep.nfab.runs, EXACT.md 6.1) against the brute-force oracle."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.exact import cases, fig3_stream, query3, with_strategy
from support.exact_oracle import oracle

from acep.events import Event, EventError
from acep.nfab.ast import Strategy
from acep.nfab.query import parse_query
from acep.nfab.runs import RunStats, match_runs

STRATEGIES = list(Strategy)


def _same(query, events):
    expected = oracle(query, events)
    got = match_runs(query, events)
    assert [m.positions for m in got] == [m.positions for m in expected]
    for g, e in zip(got, expected):
        assert (g.start, g.end, g.partition, g.values) == (e.start, e.end, e.partition,
                                                           e.values)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases(), st.sampled_from(STRATEGIES))
def test_runs_equal_the_oracle_for_every_strategy(case, strategy):
    query, events = case
    query = with_strategy(query, strategy)
    if strategy is Strategy.PARTITION and not any(type(c).__name__ == "Equiv"
                                                  for c in query.conjuncts):
        return  # partition contiguity needs an equivalence test (EXACT.md 2.4 rule 5)
    _same(query, events)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a08_figure_3_stream_query_3(strategy):
    _same(query3(strategy), fig3_stream())


def test_a08_figure_1_query_3_through_the_parser_gives_r1_r2_r3():
    query = parse_query("""PATTERN SEQ(Stock+ a[ ], Stock b)
        WHERE skip_till_next_match(a[ ], b) {
            [symbol] and a[1].volume > 1000
            and a[i].price > avg(a[..i-1].price)
            and b.volume < 80%*a[a.LEN].volume }
        WITHIN 1 hour""")
    stream = fig3_stream()
    found = match_runs(query, stream)
    assert [m.positions for m in found] == [m.positions for m in oracle(query, stream)]
    assert len(found) == 3


def test_run_counts_and_bad_events():
    stats = RunStats()
    query = parse_query("PATTERN SEQ(A+ a[], B b) WHERE skip_till_any_match(a[i].x > 0)")
    events = [Event("A", float(i), {"x": 1.0}) for i in range(4)] + [Event("B", 5.0, {})]
    found = match_runs(query, events, stats)
    assert len(found) == 15  # every non-empty subset of the four A's, then B
    assert stats.runs_created >= len(found)
    with pytest.raises(EventError) as info:
        match_runs(query, [Event("A", 2.0, {"x": 1.0}), Event("A", 1.0, {"x": 1.0})])
    assert info.value.position == 1 and info.value.field == "t"
    with pytest.raises(EventError) as info:
        match_runs(query, [Event("A", 1.0, {})])
    assert info.value.field == "x"



FIG3 = [Event(t, float(s), {}) for t, s in [("A", 1), ("A", 2), ("B", 5), ("B", 6), ("C", 7)]]


@pytest.mark.parametrize("strategy, matches, runs", [
    ("strict_contiguity", 1, 2), ("skip_till_next_match", 2, 4), ("skip_till_any_match", 6, 14)])
def test_z14_figure_3_runs_per_strategy(strategy, matches, runs):
    """[Z14] Figure 3: 2 runs (S1), 4 (S2, two of them matching), 14 runs / 6 matches (S3)."""
    query = parse_query(f"PATTERN SEQ(A a, B+ b[], C c) WHERE {strategy}(a, b[], c) {{}} "
                        "WITHIN 10")
    stats = RunStats()
    assert len(match_runs(query, FIG3, stats)) == matches
    assert stats.runs_created == runs


def test_z14_figure_4_fifteen_runs_seven_matches():
    """[Z14] Figure 4: "Using the original plan, there are 15 runs" for 7 matches."""
    events = [Event("A", 1.0, {"task_id": 1})]
    events += [Event("B", t, {"task_id": 1, "val": v}) for t, v in ((4.0, 6), (5.0, 7), (6.0, 9))]
    events += [Event("C", 7.0, {"task_id": 1})]
    query = parse_query("PATTERN SEQ(A a, B+ b[], C c) WHERE skip_till_any_match(a, b[], c) "
                        "{ [task_id] and b[i].val >= b[i-1].val } WITHIN 100")
    stats = RunStats()
    assert len(match_runs(query, events, stats)) == 7
    assert stats.runs_created == 15
