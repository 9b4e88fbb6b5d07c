"""The exact engines' bound on what they hold (``Engine(max_entries=...)``, ``acep exact
--max-entries``): a query whose matches multiply (skip-till-any-match over a Kleene
component) stops with ExactLimitError instead of taking the machine's memory, and a bound
that is not reached changes nothing (checked against the brute-force oracle)."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.cli import run_acep
from support.exact import cases, with_strategy
from support.exact_oracle import oracle

from acep.events import Event
from acep.nfab import Engine, ExactLimitError
from acep.nfab.ast import Equiv, Strategy

EXPLODING = "PATTERN SEQ(A a, B+ b[], C c) WITHIN 100\n"
RESIDUAL = "PATTERN SEQ(A a, B+ b[], C c) WHERE b[i].x > avg(b[..i-1].x) WITHIN 100\n"


def _kleene_rows(n: int) -> list[dict]:
    """A, n rising B, C: 2^n - 1 matches under skip-till-any-match."""
    return ([{"type": "A", "t": 0, "x": 0}] + [{"type": "B", "t": i, "x": i}
                                              for i in range(1, n + 1)]
            + [{"type": "C", "t": n + 1, "x": 0}])


def _kleene(n: int) -> list[Event]:
    return [Event(r["type"], r["t"], {"x": r["x"]}) for r in _kleene_rows(n)]


def _fields(m):
    return (m.positions, m.start, m.end, m.partition, m.values)


# --------------------------------------------------------------------------- the API

@pytest.mark.parametrize("engine", ["runs", "shared", "postpone"])
@pytest.mark.parametrize("output", ["verbose", "compact"])
def test_matches_that_multiply_stop_at_the_bound(engine, output):
    """2^40 matches end at the C: each engine stops near the bound, at once."""
    eng = Engine(EXPLODING, output=output, engine=engine, max_entries=1000)
    if engine == "postpone" and output == "compact":
        records = eng.run(_kleene(40))  # one collapsed record: counted, not enumerated
        assert [r.count() for r in records] == [2 ** 40 - 1]
        return
    with pytest.raises(ExactLimitError) as info:
        eng.run(_kleene(40))
    assert isinstance(info.value, MemoryError)
    assert "more than 1,000 partial and complete matches" in str(info.value)
    assert "(max_entries)" in str(info.value) and info.value.position <= 41


@pytest.mark.parametrize("method", ["count", "expand"])
def test_a_postponed_record_does_not_enumerate_past_the_bound(method):
    """With a conjunct left to check, count() enumerates, and expand() builds its list."""
    (record,) = Engine(RESIDUAL, output="compact", engine="postpone", max_entries=1000).run(
        _kleene(40))
    with pytest.raises(ExactLimitError, match="compact record"):
        list(getattr(record, method)()) if method == "expand" else record.count()
    (small,) = Engine(RESIDUAL, output="compact", engine="postpone", max_entries=1000).run(
        _kleene(9))
    assert small.count() == 2 ** 9 - 1 == len(list(small.expand()))


def test_runs_without_a_window_stop_at_the_bound_of_the_shared_engine():
    """Merged runs hold one member per partial match: the bound counts the members."""
    q = "PATTERN SEQ(A a, B+ b[], C c) WHERE skip_till_any_match() AND a.x < 1"
    with pytest.raises(ExactLimitError):
        Engine(q, engine="shared", max_entries=500).run(_kleene(12))
    assert len(Engine(q, engine="shared", max_entries=10 ** 5).run(_kleene(12))) == 2 ** 12 - 1


def test_streaming_keeps_the_bound_across_pushes():
    eng = Engine(EXPLODING, engine="shared", max_entries=300)
    rows = _kleene(20)
    eng.push(rows[:5])
    with pytest.raises(ExactLimitError):
        eng.push(rows[5:])


@pytest.mark.parametrize("bad", [0, -1, True, 2.5, "10"])
def test_the_bound_is_a_whole_number_at_least_one(bad):
    with pytest.raises(ValueError, match="max_entries"):
        Engine(EXPLODING, max_entries=bad)


def _engines(query):
    yield "runs", {}
    yield "shared", {"merge": True}
    yield "shared", {"merge": False}
    if query.strategy is Strategy.ANY:
        yield "postpone", {}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases(), st.sampled_from(list(Strategy)), st.integers(1, 40))
def test_a_bound_either_stops_the_engine_or_changes_nothing(case, strategy, limit):
    """Oracle agreement under a bound: every engine and output either raises or returns the
    oracle's matches; verbose output holds every match, so fewer entries always raise."""
    query, events = case
    query = with_strategy(query, strategy)
    if strategy is Strategy.PARTITION and not any(isinstance(c, Equiv)
                                                  for c in query.conjuncts):
        return
    expected = [_fields(m) for m in oracle(query, events)]
    for engine, options in _engines(query):
        for output in ("verbose", "compact"):
            eng = Engine(query, output=output, engine=engine, max_entries=limit, **options)
            try:
                found = eng.run(events)
                if output == "compact":
                    found = sorted((m for r in found for m in r.expand()),
                                   key=lambda m: (m.positions[-1][-1], m.positions))
            except ExactLimitError:
                continue
            assert [_fields(m) for m in found] == expected, (engine, output)
            if output == "verbose":
                assert len(expected) <= limit, engine


# --------------------------------------------------------------------------- acep exact

def _files(tmp_path, query: str, n: int):
    q = tmp_path / "q.sase"
    q.write_text(query)
    events = tmp_path / "events.jsonl"
    events.write_text("".join(json.dumps(r) + "\n" for r in _kleene_rows(n)))
    return q, events


@pytest.mark.parametrize("engine, output", [
    ("runs", "verbose"), ("shared", "verbose"), ("postpone", "verbose"), ("runs", "compact"),
    ("shared", "compact")])
def test_acep_exact_stops_at_max_entries_with_one_line(tmp_path, engine, output):
    q, events = _files(tmp_path, EXPLODING, 40)
    r = run_acep("exact", q, events, "--engine", engine, "--output", output,
                 "--max-entries", 2000)
    assert r.returncode == 1 and r.stdout == "" and "Traceback" not in r.stderr, r.stderr
    (line,) = r.stderr.splitlines()
    assert line.startswith(f"acep: error: {events}, line ")
    assert "more than 2,000 partial and complete matches at once (--max-entries)" in line


def test_acep_exact_compact_count_stops_at_max_entries(tmp_path):
    q, events = _files(tmp_path, RESIDUAL, 40)
    r = run_acep("exact", q, events, "--output", "compact", "--max-entries", 2000)
    assert r.returncode == 1 and r.stdout == "" and "Traceback" not in r.stderr, r.stderr
    (line,) = r.stderr.splitlines()
    assert f"{events}, line 42:" in line and "counting one compact record's matches" in line


def test_acep_exact_under_the_bound_prints_every_match(tmp_path):
    q, events = _files(tmp_path, EXPLODING, 8)
    for extra in ((), ("--max-entries", 1000)):
        r = run_acep("exact", q, events, "--engine", "runs", *extra)
        assert r.returncode == 0, r.stderr
        assert len(r.stdout.splitlines()) == 2 ** 8 - 1


def test_acep_exact_max_entries_is_a_whole_number(tmp_path):
    q, events = _files(tmp_path, EXPLODING, 3)
    r = run_acep("exact", q, events, "--max-entries", 0)
    assert r.returncode == 2 and "--max-entries" in r.stderr and ">= 1" in r.stderr
