"""edge.collector.fastcheck (the counting re-check) against the general path (the NFA^b engine) on
many random small windows: the same exact flags, counts, listed matches (in the same order)
and truncation, whenever the engine path does not give up at its enumeration limit."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import acep
from acep import EventBatch
from acep.events import Event
from acep.matcher import MatchBatch
from edge.collector import fastcheck
from edge.collector.recheck import MAX_EXACT_PER_POINT, _query, recheck_batch, translate
from edge.wire import PatternRef, batch_from_matches, decode_batch, encode_batch

TYPES = "abc"


def _batch(text, window, k, where, events, partition=None):
    ref = PatternRef("p", text, window, k, tuple(where), partition)
    batch = EventBatch.from_events(events)
    m = acep.Matcher(text, window=window, k=k, where=list(where), partition=partition)
    found = MatchBatch.concat([m.match_batch(batch), m.flush()])
    up = batch_from_matches(found, batch, device="d1", seq=0, pattern=ref, created_at=0.0)
    return decode_batch(encode_batch(up))


@st.composite
def patterns(draw):
    n = draw(st.integers(1, 4))
    comps = [(draw(st.sampled_from(TYPES)), draw(st.booleans())) for _ in range(n)]
    text = " ".join(t + ("+" if plus else "") for t, plus in comps)
    counts = {t: sum(1 for u, _ in comps if u == t) for t, _ in comps}
    where = []
    once = [j for j, (t, _) in enumerate(comps) if counts[t] == 1]
    for _ in range(draw(st.integers(0, 2))):
        if not once:
            break
        j = draw(st.sampled_from(once))
        op = draw(st.sampled_from([">", ">=", "<", "!=", "="]))
        kind = draw(st.integers(0, 3))
        if kind == 3 and j and (j - 1) in once:  # division: the evaluator, pair by pair
            where.append(f"{comps[j][0]}.x / {comps[j - 1][0]}.x {op} 1")
        elif kind in (0, 3) or j == 0 or (j - 1) not in once:  # against a constant
            where.append(f"{comps[j][0]}.x {op} {draw(st.integers(0, 4))}")
        elif kind == 1:  # against the component before it (a pair)
            where.append(f"{comps[j][0]}.x {op} {comps[j - 1][0]}.x + "
                         f"{draw(st.integers(-2, 2))}")
        else:  # arithmetic on the tag and a function
            where.append(f"abs({comps[j][0]}.x - {comps[j - 1][0]}.x) <= "
                         f"{draw(st.integers(0, 3))}")
    return text, where


@st.composite
def streams(draw):
    n = draw(st.integers(1, 16))
    t, out = 0.0, []
    for _ in range(n):
        t += draw(st.sampled_from([0.0, 1.0, 1.0, 2.0]))
        out.append(Event(draw(st.sampled_from(TYPES)), t,
                         {"x": float(draw(st.integers(0, 5))), "o": draw(st.sampled_from("pq"))}))
    return out


def _same(fast, slow):
    assert len(fast) == len(slow)
    compared = 0
    for f, s in zip(fast, slow):
        if s.exact is None:  # the engine gave up (limit) or could not run
            if "too large" in (s.reason or ""):
                continue
            assert f.exact is None and f.reason == s.reason
            continue
        assert (f.exact, f.exact_count, f.truncated) == (s.exact, s.exact_count, s.truncated)
        if s.exact_count <= 100_000:  # above, the engine lists none: the fast path does
            assert f.exact_matches == s.exact_matches
        compared += 1
    return compared


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(patterns(), streams(), st.sampled_from([0.0, 2.0, 4.0, 7.0]), st.integers(0, 2),
       st.booleans())
def test_fast_path_equals_the_engine(pattern, events, window, k, partitioned):
    text, where = pattern
    up = _batch(text, window, k, where, events, "o" if partitioned else None)
    assert fastcheck.plan(_query(translate(text, window, where))) is not None
    _same(recheck_batch(up, fast=True), recheck_batch(up, fast=False))


def test_fast_path_covers_the_benchmark_pattern_and_kleene_lists():
    q = _query(translate("ontime late+ verylate", 3600,
                         ["verylate.delay > late.delay + 30"]))
    assert fastcheck.plan(q) is not None
    # two components back, or a text-only pattern with an aggregate: the engine's job
    assert fastcheck.plan(_query(translate("a b c", 5, ["c.x > a.x"]))) is None
    # many Kleene elements: counted exactly (Python ints past 2^62) and 100 listed in order
    events = [Event("a", 0.0, {"x": 0.0})] + [Event("b", float(i), {"x": float(i)})
                                              for i in range(1, 71)] + [
        Event("c", 71.0, {"x": 100.0})]
    up = _batch("a b+ c", 100.0, 0, [], events)
    fast = [c for c, p in zip(recheck_batch(up), up.point) if p == 71.0][0]
    assert fast.exact and fast.exact_count == 2 ** 70 - 1 and fast.truncated
    assert len(fast.exact_matches) == MAX_EXACT_PER_POINT
    assert fast.exact_matches[:3] == [[[0], [1], [71]], [[0], [1, 2], [71]],
                                      [[0], [1, 2, 3], [71]]]


@pytest.mark.parametrize("seed", range(5))
def test_fast_path_on_larger_random_windows(seed):
    rng = np.random.default_rng(seed)
    events = []
    t = 0.0
    for _ in range(300):
        t += float(rng.choice([0.0, 1.0, 2.0]))
        events.append(Event(str(rng.choice(list(TYPES))), t,
                            {"x": float(rng.integers(0, 6)), "o": str(rng.choice(["p", "q"]))}))
    for text, where in [("a b+ c", ["c.x > b.x + 1"]), ("a+ b", []), ("a b", ["b.x >= a.x"])]:
        up = _batch(text, 6.0, 1, where, events, "o")
        assert _same(recheck_batch(up, fast=True), recheck_batch(up, fast=False)) > 0


# ------------------------------------------------------------------ the compiled walk


def test_compiled_walk_is_built_where_ci_requires_it():
    if os.environ.get("ACEP_REQUIRE_COMPILED"):
        assert fastcheck._listing is not None


def _compact(matches) -> list[str]:
    return [json.dumps(m, separators=(",", ":")) for m in matches]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(patterns(), streams(), st.sampled_from([0.0, 2.0, 4.0, 7.0]),
       st.sampled_from([1, 2, 5, 100]), st.booleans())
def test_compiled_walk_lists_what_the_python_walk_lists(pattern, events, window, limit,
                                                        relabel):
    """Every end event, a few limits, local positions or large stream positions as labels:
    the compiled walk's JSON texts are the Python walk's matches, in the same order."""
    if fastcheck._listing is None:
        pytest.skip("edge.collector._listing is not built")
    text, where = pattern
    p = fastcheck.plan(_query(translate(text, window, where)))
    try:
        win = fastcheck._Window(p, events)
    except fastcheck.Fallback:
        return
    labels = [10 ** 12 + 7 * i for i in range(len(events))] if relabel else None
    for end in win.cands[-1].tolist():
        want = win.first_matches(end, limit, labels)
        assert win.first_matches_json(end, limit, labels) == _compact(want)
        assert len(want) <= limit


def test_compiled_walk_falls_back_for_labels_that_are_not_integers():
    events = [Event("a", 0.0), Event("b", 1.0), Event("c", 2.0)]
    p = fastcheck.plan(_query(translate("a b+ c", 5.0, [])))
    win = fastcheck._Window(p, events)
    assert win.first_matches_json(2, 10, ["x", "y", "z"]) == ['[["x"],["y"],["z"]]']


# ------------------------------------------------------------------ the column evaluator

_VALUES = [0.0, -0.0, 1.0, -2.5, 3.0, float("nan"), float("inf"), float("-inf"), 1e308]


@st.composite
def expressions(draw, depth=3):
    from acep.nfab.ast import BinOp, Call, Const, Index, Ref, UnaryOp

    if depth == 0 or draw(st.integers(0, 3)) == 0:
        if draw(st.booleans()):
            return Const(draw(st.sampled_from(_VALUES)))
        var = draw(st.sampled_from(["v0", "v1"]))
        return Ref(var, Index.NONE, "x")
    kind = draw(st.integers(0, 3))
    sub = expressions(depth - 1)
    if kind == 0:
        op = draw(st.sampled_from(["+", "-", "*", "==", "!=", "<", "<=", ">", ">=",
                                   "and", "or"]))
        return BinOp(op, draw(sub), draw(sub))
    if kind == 1:
        return UnaryOp(draw(st.sampled_from(["-", "not"])), draw(sub))
    if kind == 2:
        return Call("abs", (draw(sub),))
    return Call(draw(st.sampled_from(["min", "max"])), (draw(sub), draw(sub)))


@settings(max_examples=300, deadline=None)
@given(expressions(), st.lists(st.sampled_from(_VALUES), min_size=1, max_size=4),
       st.lists(st.sampled_from(_VALUES), min_size=1, max_size=4))
def test_column_evaluator_equals_the_engines_on_every_pair(expr, xs, ys):
    from acep.nfab.evaluate import Binding, evaluate, truthy

    cols = {"v0": np.array(xs).reshape(-1, 1), "v1": np.array(ys).reshape(1, -1)}
    with np.errstate(all="ignore"):
        got = np.broadcast_to(fastcheck._truth(fastcheck._vector(
            expr, lambda var, attr: cols[var])), (len(xs), len(ys)))
    for a, x in enumerate(xs):
        for b, y in enumerate(ys):
            bound = {"v0": [Event("a", 0.0, {"x": x})], "v1": [Event("b", 1.0, {"x": y})]}
            try:
                want = truthy(evaluate(expr, Binding(bound)))
            except (OverflowError, ValueError):
                continue  # Python raises where numpy gives inf or NaN: not comparable
            assert bool(got[a, b]) == want, (expr, x, y)
