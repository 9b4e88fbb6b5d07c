"""The shared-buffer runtime (acep.nfab.shared, EXACT.md 6.2-6.6) and the streaming API,
against the brute-force oracle and the run engine (the naive baseline): every strategy,
merging on and off, verbose and compact output, streams fed in random pieces; the paper's
labels and merge (4.5); pruning; strings, NaN partitions and bad events."""

import math
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.exact import (
    Q1_STREAM,
    Q2_STREAM,
    Z14_FIG3,
    cases,
    fig3,
    fig3_stream,
    query1,
    query2,
    query3,
    with_strategy,
)
from support.exact_oracle import oracle

from acep.events import Event, EventError
from acep.nfab import BufferGroup, Engine
from acep.nfab.ast import Equiv, Strategy
from acep.nfab.query import parse_query
from acep.nfab.runs import match_runs
from acep.nfab.shared import SharedStats, Stream, match_shared

STRATEGIES = list(Strategy)


def _fields(m):
    return (m.positions, m.start, m.end, m.partition, m.values)


def _applies(query, strategy) -> bool:
    """Partition contiguity needs an equivalence test (EXACT.md 2.4 rule 5)."""
    return strategy is not Strategy.PARTITION or any(isinstance(c, Equiv)
                                                     for c in query.conjuncts)


def _expand(records) -> list:
    out = []
    for record in records:
        matches = list(record.expand())
        assert record.count() == len(matches) > 0
        assert all(m.positions[-1][-1] == record.end_position for m in matches)
        assert matches == sorted(matches, key=lambda m: m.positions)
        out.extend(matches)
    assert [r.end_position for r in records] == sorted({r.end_position for r in records})
    return out


def _pieces(events: list, cuts: list[int]) -> list[list]:
    cuts = sorted({min(c, len(events)) for c in cuts})
    bounds = [0, *cuts, len(events)]
    return [events[a:b] for a, b in zip(bounds, bounds[1:])]


def _streamed(query, events, cuts, output="verbose", merge=True) -> list:
    eng = Engine(query, output=output, engine="shared", merge=merge)
    out = []
    for piece in _pieces(events, cuts):
        out.extend(eng.push(piece))
    out.extend(eng.flush())
    return out


def _check(query, events, cuts=(), expected=None):
    """Verbose (merge on and off), compact expanded and streamed in pieces: all equal to
    the oracle's list."""
    expected = [_fields(m) for m in (expected if expected is not None
                                     else oracle(query, events))]
    for merge in (True, False):
        verbose = match_shared(query, events, merge=merge)
        assert [_fields(m) for m in verbose] == expected
        records = match_shared(query, events, output="compact", merge=merge)
        assert all(isinstance(r, BufferGroup) for r in records)
        assert [_fields(m) for m in _expand(records)] == expected
    streamed = _streamed(query, events, list(cuts))
    assert sorted(_fields(m) for m in streamed) == sorted(expected)
    compact = _expand_unordered(_streamed(query, events, list(cuts), "compact"))
    assert sorted(_fields(m) for m in compact) == sorted(expected)


def _expand_unordered(records) -> list:
    """Streamed records: a match is in one record only, but records of one end position
    may come from different pushes (trailing negation finalizes them at different times)."""
    out = [m for r in records for m in r.expand()]
    assert len({m.positions for m in out}) == len(out)
    return out


# --------------------------------------------------------------------------- the oracle


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases(), st.sampled_from(STRATEGIES), st.lists(st.integers(0, 10), max_size=3))
def test_shared_engine_equals_the_oracle_for_every_strategy(case, strategy, cuts):
    query, events = case
    query = with_strategy(query, strategy)
    if _applies(query, strategy):
        _check(query, events, cuts)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases(partition_values=(0, 1, 2), equivalence=True),
       st.sampled_from(STRATEGIES), st.lists(st.integers(0, 10), max_size=4))
def test_shared_engine_routes_by_partition(case, strategy, cuts):
    query, events = case
    _check(with_strategy(query, strategy), events, cuts)


def _random_stream(rng: random.Random, n: int, types: str = "AABBBCD") -> list[Event]:
    events, t = [], 0
    for _ in range(n):
        t += rng.choice((0, 1, 1))
        events.append(Event(rng.choice(types), float(t),
                            {"x": rng.randint(0, 6), "k": rng.randint(0, 2)}))
    return events


LONG_QUERIES = [
    "PATTERN SEQ(A a, B+ b[], C c) WHERE {S}(a, b[], c) {{ [k] AND b[i].x >= b[i-1].x "
    "AND c.x < max(b[].x) }} WITHIN 10",
    "PATTERN SEQ(A+ a[], B b) WHERE {S}(a[], b) {{ [k] AND a[i].x > avg(a[..i-1].x) "
    "AND b.x <= a[a.len].x + 1 }} WITHIN 12",
    "PATTERN SEQ(A a, ~C n, B+ b[]) WHERE {S}(a, n, b[]) {{ [k] AND b[i].x > min(b[..i-1].x) "
    "AND n.x = a.x AND b[b.len].x > 0 }} WITHIN 8 RETURN sum(b[].x) AS s, b.len AS n",
    "PATTERN SEQ(A a, B b, C c) WHERE {S}(a, b, c) {{ b.x > a.x AND c.x < b.x - 1 AND [k] }} "
    "WITHIN 12 RETURN c.x - a.x AS d",
    "PATTERN SEQ(B+ b[], C c, ~D d) WHERE {S}(b[], c, d) {{ [k] AND "
    "b[i].x <= max(b[..i-1].x) + 1 AND c.x > avg(b[].x) }} WITHIN 6",
    "PATTERN SEQ(A+ a[], B+ b[]) WHERE {S}(a[], b[]) {{ [k] AND a[i].x >= a[i-1].x AND "
    "b[i].x < 5 AND b[1].x >= a[a.len].x - 2 }} WITHIN 7",
]


@pytest.mark.parametrize("strategy", ["strict_contiguity", "partition_contiguity",
                                      "skip_till_next_match"])
@pytest.mark.parametrize("text", LONG_QUERIES)
def test_longer_streams_equal_the_run_engine(text, strategy):
    """9.3 (d): streams too long for the oracle, against the naive baseline; merging on
    and off, and in random pieces."""
    query = parse_query(text.format(S=strategy))
    for seed in range(3):
        rng = random.Random(seed)
        events = _random_stream(rng, 500)
        expected = match_runs(query, events)
        assert match_shared(query, events) == expected
        assert match_shared(query, events, merge=False) == expected
        cuts = sorted(rng.sample(range(1, 500), 6))
        assert sorted(_streamed(query, events, cuts), key=_fields) == \
            sorted(expected, key=_fields)


def test_merging_happens_and_changes_nothing_on_a_long_stream():
    query = parse_query(LONG_QUERIES[0].format(S="skip_till_next_match"))
    events = _random_stream(random.Random(7), 2000)
    on, off = SharedStats(), SharedStats()
    assert match_shared(query, events, stats=on) == match_shared(query, events, merge=False,
                                                                 stats=off)
    assert on.runs_merged > 0 and off.runs_merged == 0
    assert on.max_live_runs <= off.max_live_runs


# --------------------------------------------------------------------------- the papers


def test_a08_figure_3_labels_r1_r2_r3():
    """4.5: R1 = 1.0.0, R2 = 2.0.0 (the label the paper quotes), R3 = 1.0.1.0."""
    records = match_shared(query3(Strategy.NEXT), fig3_stream(), output="compact",
                           merge=False)
    by_end = {r.end_position: r for r in records}
    assert sorted(by_end) == [5, 7]
    assert sorted(by_end[5].labels) == [(1, 0, 0), (2, 0, 0)]
    assert by_end[7].labels == [(1, 0, 1, 0)]
    assert [m.positions for m in by_end[5].expand()] == [((0, 1, 2, 3, 4), (5,)),
                                                          ((2, 3), (5,))]


def test_a08_figure_6_merge_with_max():
    """4.5 / [A08] Fig. 6: with max, the runs of e1 and e3 merge after e4 and still give
    [e1 e2 e4] e6 and [e3 e4] e6."""
    query = query3(Strategy.NEXT, "max")
    on, off = SharedStats(), SharedStats()
    merged = match_shared(query, fig3_stream(), stats=on)
    assert merged == match_shared(query, fig3_stream(), merge=False, stats=off)
    assert [m.positions for m in merged] == [((0, 1, 3), (5,)), ((2, 3), (5,))]
    assert on.runs_merged >= 1 and off.runs_merged == 0


@pytest.mark.parametrize("strategy", [Strategy.STRICT, Strategy.NEXT, Strategy.ANY])
def test_z14_figure_3(strategy):
    _check(fig3(strategy), Z14_FIG3)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a08_queries_1_and_2(strategy):
    partition = strategy is Strategy.PARTITION
    _check(query1(strategy, compact=partition), Q1_STREAM, cuts=[3, 7])
    if not partition:
        _check(query2(strategy), Q2_STREAM, cuts=[1, 5])


# --------------------------------------------------------------------------- streaming


def test_streaming_positions_go_on_and_flush_starts_a_new_stream():
    text = "PATTERN SEQ(A a, B b) WHERE skip_till_next_match(a, b) { [k] } WITHIN 5"
    events = [Event(t, float(i), {"k": 1}) for i, t in enumerate("ABAB")]
    eng = Engine(text)
    assert [m.positions for m in eng.push(events[:1])] == []
    assert [m.positions for m in eng.push(events[1:3])] == [((0,), (1,))]
    assert [m.positions for m in eng.push(events[3:])] == [((2,), (3,))]
    assert eng.flush() == []
    assert [m.positions for m in eng.push(events[:2])] == [((0,), (1,))]  # a new stream
    assert eng.stats["events"] == 6


def test_trailing_negation_waits_for_its_window():
    text = ("PATTERN SEQ(A a, B b, ~C c) WHERE skip_till_next_match(a, b, c) { [k] } "
            "WITHIN 5")
    a, b = Event("A", 0.0, {"k": 1}), Event("B", 1.0, {"k": 1})
    eng = Engine(text)
    assert eng.push([a, b]) == []                      # a C may still come until t = 5
    assert eng.push([Event("D", 5.0, {"k": 1})]) == []  # t = 5: still inside the window
    assert [m.positions for m in eng.push([Event("D", 5.5, {"k": 1})])] == [((0,), (1,))]
    eng = Engine(text)
    assert eng.push([a, b, Event("C", 4.0, {"k": 1})]) == [] and eng.flush() == []
    eng = Engine(text)
    eng.push([a, b])
    assert [m.positions for m in eng.flush()] == [((0,), (1,))]


@pytest.mark.parametrize("engine", ["runs", "postpone"])
def test_streaming_with_the_finite_window_engines_matches_at_flush(engine):
    text = "PATTERN SEQ(A a, B+ b[]) WHERE skip_till_any_match(a, b[]) { [k] } WITHIN 5"
    events = _random_stream(random.Random(3), 40, "AB")
    eng = Engine(text, engine=engine)
    assert eng.push(events[:20]) == [] and eng.push(events[20:]) == []
    assert eng.flush() == Engine(text, engine=engine).run(events)


# --------------------------------------------------------------------------- pruning


def test_pruning_keeps_live_runs_bounded_on_a_long_stream():
    """6.5: every event starts a run in a partition of its own that never sees another
    event; such runs are swept once the tag has moved on by W (a sweep every W tags keeps
    at most the runs of the last 2W tags, one per tag here)."""
    text = ("PATTERN SEQ(A a, B+ b[]) WHERE skip_till_next_match(a, b[]) { [k] AND "
            "b[i].x > 100 } WITHIN 10")
    stream = Stream(parse_query(text))
    rng = random.Random(1)
    for chunk in range(30):
        events = [Event("A", float(chunk * 100 + i), {"k": rng.randint(0, 10 ** 6), "x": 0})
                  for i in range(100)]
        stream.push(events)
        assert stream.nlive <= 2 * 10 + 1
        assert sum(len(runs) for runs in stream.live.values()) == stream.nlive
    assert stream.stats.runs_created == 3000


# --------------------------------------------------------------------------- values


def test_string_attributes_switch_to_exact_comparisons():
    """A number and a string are never equal nor ordered (3.2): the generated formulas
    leave the native operators once a string has been seen."""
    text = ("PATTERN SEQ(A a, B+ b[]) WHERE skip_till_next_match(a, b[]) { [k] AND "
            "b[i].x >= a.x } WITHIN 20")
    rng = random.Random(5)
    events = _random_stream(rng, 300, "AB")
    for e in events[150:]:
        if rng.random() < 0.3:
            e.attrs["x"] = rng.choice(["a", "b", "zz"])
    query = parse_query(text)
    expected = match_runs(query, events)
    assert match_shared(query, events) == expected
    assert sorted(_streamed(query, events, [100, 150, 200]), key=_fields) == \
        sorted(expected, key=_fields)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_nan_and_missing_partition_values(strategy):
    text = (f"PATTERN SEQ(A a, B+ b[], C c) WHERE {strategy.value}(a, b[], c) "
            "{ [k] AND b[i].x >= 1 } WITHIN 8")
    rng = random.Random(11)
    events = _random_stream(rng, 300, "ABCD")
    for e in events:
        roll = rng.random()
        if roll < 0.1:
            e.attrs["k"] = math.nan
        elif roll < 0.15 and e.type == "D":
            del e.attrs["k"]  # no partition: only for a type no component has
    query = parse_query(text)
    assert match_shared(query, events) == match_runs(query, events)


# --------------------------------------------------------------------------- errors


def test_bad_events_name_position_and_field_after_the_good_prefix():
    text = "PATTERN SEQ(A a, B b) WHERE skip_till_next_match(a, b) { a.x < b.x }"
    good = [Event("A", 0.0, {"x": 1}), Event("B", 1.0, {"x": 2})]
    with pytest.raises(EventError) as info:
        Engine(text).run(good + [Event("A", 0.5, {"x": 1})])
    assert (info.value.position, info.value.field) == (2, "t")
    with pytest.raises(EventError) as info:
        Engine(text).run(good + [Event("B", 2.0, {})])
    assert (info.value.position, info.value.field) == (2, "x")
    assert [m.positions for m in info.value.matches] == [((0,), (1,))]
    eng = Engine(text)
    eng.push(good)
    with pytest.raises(EventError) as info:  # positions count over the whole stream
        eng.push([Event("A", 3.0, {"x": 1}), Event("B", 2.0, {"x": 5})])
    assert (info.value.position, info.value.field) == (3, "t")
    with pytest.raises(EventError) as info:  # a tag error before a missing attribute
        Engine(text).run([Event("A", 1.0, {"x": 1}), Event("B", 0.0, {})])
    assert info.value.field == "t"


# --------------------------------------------------------------------------- coverage

FEATURE_QUERIES = {  # (Kleene, negation, aggregate) -> query; every one with [k]
    (False, False, False): "SEQ(A a, B b) WHERE {S}(a, b) {{ [k] AND b.x >= a.x }} WITHIN 6",
    (False, True, False): "SEQ(A a, ~C n, B b) WHERE {S}(a, n, b) {{ [k] AND n.x = a.x }} "
                          "WITHIN 6",
    (True, False, False): "SEQ(A a, B+ b[]) WHERE {S}(a, b[]) {{ [k] AND "
                          "b[i].x >= b[i-1].x }} WITHIN 6",
    (True, False, True): "SEQ(A+ a[], B b) WHERE {S}(a[], b) {{ [k] AND "
                         "a[i].x >= avg(a[..i-1].x) AND b.x < max(a[].x) + 1 }} WITHIN 6",
    (True, True, False): "SEQ(A a, B+ b[], ~C n) WHERE {S}(a, b[], n) {{ [k] AND "
                         "b[i].x != 0 }} WITHIN 5",
    (True, True, True): "SEQ(~C n, A a, B+ b[]) WHERE {S}(n, a, b[]) {{ [k] AND "
                        "b[i].x > min(b[..i-1].x) AND n.x >= a.x }} WITHIN 6 "
                        "RETURN sum(b[].x) AS s",
}


def test_every_strategy_and_feature_combination_is_covered_with_matches():
    """9.1: seeded small streams for each (strategy x Kleene/negation/aggregate) combination,
    each against the oracle (verbose, compact, merge off, streamed); at least 8 cases with
    matches per combination, so no combination passes by having nothing to compare."""
    with_matches = {}
    for features, text in FEATURE_QUERIES.items():
        for strategy in STRATEGIES:
            query = parse_query("PATTERN " + text.format(S=strategy.value))
            for seed in range(30):
                rng = random.Random(seed)
                events, t = [], 0
                for _ in range(9):
                    t += rng.choice((0, 1, 1, 2))
                    events.append(Event(rng.choice("AABBC"), float(t),
                                        {"x": rng.randint(0, 3), "k": rng.randint(0, 1)}))
                expected = oracle(query, events)
                _check(query, events, cuts=[rng.randint(0, 9)], expected=expected)
                key = (strategy, features)
                with_matches[key] = with_matches.get(key, 0) + bool(expected)
    assert len(with_matches) == len(STRATEGIES) * len(FEATURE_QUERIES)
    assert min(with_matches.values()) >= 8, with_matches
