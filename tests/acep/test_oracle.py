"""Tests of the brute-force ACEP oracle (tests/support/oracle.py) itself: it judges the
engines, so it is checked here against hand-worked cases, the paper's examples, and second
computations that share no code with it (Python's ``re`` for serializations, a min-plus dynamic
program over the AST for errors, a window-free enumeration for matches)."""

from __future__ import annotations

import math
import re
from itertools import combinations, product

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.oracle import (
    bundles_of,
    enumeration_cost,
    is_subsequence,
    min_insertions,
    oracle_matches,
    serializations,
)

from acep.pattern import Alt, Concat, Star, Symbol, parse_regex


def T(text: str) -> tuple:
    """'a b c' -> ('a', 'b', 'c')."""
    return tuple(text.split())


def stream(text: str, **extra) -> list[dict]:
    """'a1 e2 b4' -> events with types and tags (subscripts)."""
    out = []
    for tok in text.split():
        m = re.fullmatch(r"([A-Za-z_]+)(\d+(?:\.\d+)?)", tok)
        out.append({"type": m.group(1), "t": float(m.group(2)), **extra})
    return out


# --------------------------------------------------------------------------- serializations

def test_serializations_paper_example():
    got = serializations(parse_regex("b (c|d) e*"), 4)
    assert got == {T("b c"), T("b d"), T("b c e"), T("b d e"), T("b c e e"), T("b d e e")}
    assert T("b d e e") in got and T("b c") in got  # the paper's two examples


@pytest.mark.parametrize("pattern, max_len, expected", [
    ("a", 0, set()),
    ("a", 1, {"a"}),
    ("a?", 3, {"", "a"}),
    ("a+", 3, {"a", "a a", "a a a"}),
    ("a*", 2, {"", "a", "a a"}),
    ("a{2}", 5, {"a a"}),
    ("a{2,3}", 5, {"a a", "a a a"}),
    ("a{2,}", 4, {"a a", "a a a", "a a a a"}),
    ("(a b){2}", 4, {"a b a b"}),
    ("(a b){2}", 3, set()),
    ("(a|b)*", 2, {"", "a", "b", "a a", "a b", "b a", "b b"}),
    ("(a?)*", 2, {"", "a", "a a"}),
    ("(a? b?){2}", 2, {"", "a", "b", "a b", "a a", "b b", "b a"}),
    ("a (b|c) d b", 4, {"a b d b", "a c d b"}),
    ("a (b|c) d b", 3, set()),
    ("x | y z", 2, {"x", "y z"}),
])
def test_serializations_hand_cases(pattern, max_len, expected):
    assert serializations(parse_regex(pattern), max_len) == {T(s) for s in expected}


# random patterns over a, b, c as text, parsed with the project's parser
_leaf = st.sampled_from(["a", "b", "c"])


def _extend(children):
    group = children.map(lambda s: f"({s})")
    return st.one_of(
        st.lists(group, min_size=2, max_size=3).map(" ".join),
        st.lists(group, min_size=2, max_size=3).map(" | ".join),
        group.map(lambda s: s + "*"),
        group.map(lambda s: s + "+"),
        group.map(lambda s: s + "?"),
        st.tuples(group, st.integers(0, 2), st.integers(1, 2)).map(
            lambda t: f"{t[0]}{{{min(t[1], t[2])},{max(t[1], t[2])}}}"),
        st.tuples(group, st.integers(0, 2)).map(lambda t: f"{t[0]}{{{t[1]},}}"),
    )


patterns = st.recursive(_leaf, _extend, max_leaves=5)


def to_python_regex(node) -> str:
    """The AST as a Python regex over one-letter types (a second, independent reading)."""
    if isinstance(node, Symbol):
        return node.name
    if isinstance(node, Concat):
        return "".join(f"(?:{to_python_regex(i)})" for i in node.items)
    if isinstance(node, Alt):
        return "|".join(f"(?:{to_python_regex(i)})" for i in node.items)
    if isinstance(node, Star):
        return f"(?:{to_python_regex(node.item)})*"
    hi = "" if node.hi is None else str(node.hi)
    return f"(?:{to_python_regex(node.item)}){{{node.lo},{hi}}}"


@settings(max_examples=150, deadline=None)
@given(patterns, st.integers(0, 5))
def test_serializations_agree_with_python_re(text, max_len):
    node = parse_regex(text)
    rx = re.compile(to_python_regex(node))
    expected = {s for n in range(max_len + 1) for s in product("abc", repeat=n)
                if rx.fullmatch("".join(s))}
    assert serializations(node, max_len) == expected


@settings(max_examples=150, deadline=None)
@given(patterns, st.integers(0, 6))
def test_enumeration_cost_bounds_what_the_enumeration_returns(text, max_len):
    node = parse_regex(text)
    sequences, pairs = enumeration_cost(node, max_len)
    assert len(serializations(node, max_len)) <= sequences <= sum(3**n for n in range(max_len + 1))
    assert pairs >= 0


def test_enumeration_cost_sees_the_blowup_of_nested_quantifiers():
    tame, wild = parse_regex("a b (c | d)"), parse_regex("((a | b | c)* d?){2,}")
    assert enumeration_cost(tame, 13) == (2, 4)  # abc, abd; joined with a, b, c|d
    sequences, pairs = enumeration_cost(wild, 13)
    assert sequences == sum(4 ** n for n in range(14))  # every sequence over a..d
    assert pairs > 10**9


# --------------------------------------------------------------------------- errors

@pytest.mark.parametrize("pattern, seq, k, expected", [
    ("a (b|c) d b", "a b", 2, 2),          # paper, Example 2: add "d b"
    ("a (b|c) d b", "c d b", 2, 1),        # prepend "a"
    ("a (b|c) d b", "a c d b", 0, 0),
    ("a (b|c) d b", "b", 3, 3),
    ("a (b|c) d b", "b", 2, None),         # needs 3 > k
    ("a (b|c) d b", "d a", 9, None),       # no serialization has d before a
    ("a (b|c) d b", "b c", 9, None),       # b|c takes exactly one
    ("a (b|c) d b", "b b", 2, 2),          # a b d b
    ("a (b|c) d b", "", 4, 4),
    ("a (b|c) d b", "", 3, None),
    ("a (b|c) d b", "a b d b b", 9, None),  # too long for any serialization
    ("a b* c", "b b b", 2, 2),
    ("a b* c", "a c", 0, 0),
    ("a b* c", "c a", 9, None),
    ("a{2,3} b", "b", 2, 2),
    ("a{2,3} b", "a a a a b", 9, None),
    ("(a b)+", "b a", 2, 2),               # a b a b
    ("(a b)+", "b b", 2, 2),
    ("(a b)+", "a a a", 3, 3),
    ("x | y z", "z", 1, 1),
    ("a?", "", 0, 0),
])
def test_min_insertions_hand_cases(pattern, seq, k, expected):
    assert min_insertions(T(seq), parse_regex(pattern), k) == expected


def _compose(a: dict, b: dict) -> dict:
    out: dict = {}
    for i, row in a.items():
        for j, c1 in row.items():
            for m, c2 in b.get(j, {}).items():
                if c1 + c2 < out.setdefault(i, {}).get(m, math.inf):
                    out[i][m] = c1 + c2
    return out


def _minimum(a: dict, b: dict) -> dict:
    out = {i: dict(row) for i, row in a.items()}
    for i, row in b.items():
        for j, c in row.items():
            if c < out.setdefault(i, {}).get(j, math.inf):
                out[i][j] = c
    return out


def _closure(a: dict, n: int) -> dict:
    acc = {i: {i: 0} for i in range(n + 1)}
    while True:
        nxt = _minimum(acc, _compose(acc, a))
        if nxt == acc:
            return acc
        acc = nxt


def cover(node, seq) -> dict:
    """Min-plus DP over the AST: cover[i][j] = least len(s) - (j - i) over strings s the
    node derives that contain seq[i:j] as a subsequence (never enumerates serializations)."""
    n = len(seq)
    if isinstance(node, Symbol):
        out = {i: {i: 1} for i in range(n + 1)}
        for i in range(n):
            if seq[i] == node.name:
                out[i][i + 1] = 0
        return out
    if isinstance(node, Concat):
        acc = {i: {i: 0} for i in range(n + 1)}
        for item in node.items:
            acc = _compose(acc, cover(item, seq))
        return acc
    if isinstance(node, Alt):
        acc: dict = {}
        for item in node.items:
            acc = _minimum(acc, cover(item, seq))
        return acc
    item = cover(node.item, seq)
    if isinstance(node, Star):
        return _closure(item, n)
    acc = {i: {i: 0} for i in range(n + 1)}
    for _ in range(node.lo):
        acc = _compose(acc, item)
    if node.hi is None:
        return _compose(acc, _closure(item, n))
    total, cur = acc, acc
    for _ in range(node.hi - node.lo):
        cur = _compose(cur, item)
        total = _minimum(total, cur)
    return total


def dp_errors(seq, node, k):
    cost = cover(node, tuple(seq)).get(0, {}).get(len(seq))
    return cost if cost is not None and cost <= k else None


@settings(max_examples=300, deadline=None)
@given(patterns, st.lists(st.sampled_from("abc"), max_size=5).map(tuple), st.integers(0, 3))
def test_min_insertions_matches_dynamic_program(text, seq, k):
    node = parse_regex(text)
    assert min_insertions(seq, node, k) == dp_errors(seq, node, k)


@settings(max_examples=200, deadline=None)
@given(patterns, st.lists(st.sampled_from("abc"), max_size=5).map(tuple), st.integers(0, 3))
def test_min_insertions_is_the_least_witness(text, seq, k):
    node = parse_regex(text)
    r = min_insertions(seq, node, k)
    witnesses = [s for s in serializations(node, len(seq) + k) if is_subsequence(seq, s)]
    if r is None:
        assert witnesses == []
    else:
        assert 0 <= r <= k
        assert any(len(s) == len(seq) + r for s in witnesses)
        assert all(len(s) >= len(seq) + r for s in witnesses)


def test_is_subsequence():
    assert is_subsequence(T("b d e"), T("a b c d e f"))
    assert is_subsequence((), T("a"))
    assert not is_subsequence(T("e d"), T("a b c d e f"))
    assert not is_subsequence(T("a a"), T("a b"))


# --------------------------------------------------------------------------- the paper's examples

EXAMPLE2 = "a1 e2 e3 b4 c5 e6 a7 e8 e9 c10 d11 a12 e13 b14 d15"


def test_example_2():
    res = oracle_matches("a (b|c) d b", stream(EXAMPLE2), w=5, k=2)
    matches = res["matches"]
    assert matches[(None, (0, 3))] == 2            # a1 b4, add "d b"
    assert matches[(None, (9, 10, 13))] == 1       # c10 d11 b14, prepend "a"
    assert (None, (0,)) not in matches             # a alone needs 3 > k
    assert (None, (6, 9, 10, 13)) not in matches   # a7 ... b14 spans 7 > w
    assert all(ev_type != "e" for (_, sig) in matches
               for ev_type in (stream(EXAMPLE2)[i]["type"] for i in sig))
    # best per match point, worked by hand: (least error, latest start)
    assert res["points"] == {
        (None, 4.0): (2, 1.0),    # a1 b4
        (None, 5.0): (2, 1.0),    # a1 c5
        (None, 10.0): (2, 7.0),   # a7 c10
        (None, 11.0): (1, 7.0),   # a7 c10 d11
        (None, 14.0): (1, 10.0),  # c10 d11 b14
        (None, 15.0): (1, 12.0),  # a12 b14 d15
    }
    assert res["bundles"] == [(None, 4.0, 15.0, 6)]  # gaps <= 5 everywhere (5 -> 10 inclusive)


def test_example_2_smaller_window_splits_bundles():
    res = oracle_matches("a (b|c) d b", stream(EXAMPLE2), w=3, k=2)
    assert res["points"] == {
        (None, 4.0): (2, 1.0),    # a1 b4 spans exactly 3
        (None, 10.0): (2, 7.0),   # a7 c10
        (None, 11.0): (2, 10.0),  # c10 d11 (a7 c10 d11 spans 4 > 3)
        (None, 14.0): (2, 12.0),  # a12 b14 starts after d11 b14
        (None, 15.0): (1, 12.0),  # a12 b14 d15
    }
    assert res["bundles"] == [(None, 4.0, 4.0, 1), (None, 10.0, 15.0, 4)]


def test_example_2_exact_matching_has_no_match():
    res = oracle_matches("a (b|c) d b", stream(EXAMPLE2), w=5, k=0)
    assert res == {"matches": {}, "points": {}, "bundles": []}


def test_example_3():
    res = oracle_matches("a (b|c) d b", stream("c1 d2 a3 e4 b5"), w=5, k=2)
    assert res["matches"][(None, (0, 1, 4))] == 1   # red trajectory: c1 d2 b5
    assert res["matches"][(None, (2, 4))] == 2      # blue: a3 b5
    assert res["points"][(None, 5.0)] == (1, 1.0)
    assert res["points"] == {(None, 2.0): (2, 1.0), (None, 5.0): (1, 1.0)}
    assert res["bundles"] == [(None, 2.0, 5.0, 2)]


# --------------------------------------------------------------------------- window, predicates

def test_window_is_inclusive():
    hit = oracle_matches("a b", [{"type": "a", "t": 0.0}, {"type": "b", "t": 5.0}], w=5, k=0)
    assert hit["matches"] == {(None, (0, 1)): 0}
    miss = oracle_matches("a b", [{"type": "a", "t": 0.0}, {"type": "b", "t": 5.5}], w=5, k=0)
    assert miss["matches"] == {}
    assert miss["points"] == {} and miss["bundles"] == []


def test_latest_start_wins_among_equal_errors():
    ev = stream("a1 a2 a3 b4")
    res = oracle_matches("a b", ev, w=5, k=0)
    assert set(res["matches"]) == {(None, (0, 3)), (None, (1, 3)), (None, (2, 3))}
    assert res["points"] == {(None, 4.0): (0, 3.0)}


def test_least_error_beats_later_start():
    res = oracle_matches("a b c", stream("a1 b2 b3 c4"), w=5, k=1)
    assert res["points"][(None, 4.0)] == (0, 1.0)   # a1 b c4 exact, though b3 c4 starts later
    assert res["matches"][(None, (2, 3))] == 1


def _ev(t, typ, **attrs):
    return {"type": typ, "t": float(t), **attrs}


def test_predicate_between_bound_events():
    ev = [_ev(1, "a", price=10), _ev(2, "b", price=0), _ev(3, "d", price=5),
          _ev(4, "d", price=20)]
    res = oracle_matches("a b d", ev, w=10, k=0, where=["d.price > a.price"])
    assert res["matches"] == {(None, (0, 1, 3)): 0}
    unfiltered = oracle_matches("a b d", ev, w=10, k=0)
    assert set(unfiltered["matches"]) == {(None, (0, 1, 2)), (None, (0, 1, 3))}


def test_predicate_checked_at_every_event_of_its_variables():
    # a d d: at the first d the check fails, so σ fails though the last d passes
    ev = [_ev(1, "a", x=10), _ev(2, "d", x=5), _ev(3, "d", x=20)]
    res = oracle_matches("a d+", ev, w=10, k=0, where=["d.x > a.x"])
    assert set(res["matches"]) == {(None, (0, 2))}
    # d bound before a: checked when a arrives, with the latest d
    ev = [_ev(1, "d", x=5), _ev(2, "d", x=20), _ev(3, "a", x=10)]
    res = oracle_matches("d+ a", ev, w=10, k=0, where=["d.x > a.x"])
    assert set(res["matches"]) == {(None, (1, 2)), (None, (0, 1, 2))}
    # only one variable ever bound: the predicate is never checked
    res = oracle_matches("a d", [_ev(1, "a", x=10), _ev(2, "d", x=1)], w=10, k=1,
                         where=["d.x > a.x"])
    assert set(res["matches"]) == {(None, (0,)), (None, (1,))}


def test_predicates_are_separate_conjuncts():
    ev = [_ev(1, "a", x=1), _ev(2, "b", x=2), _ev(3, "c", x=0)]
    # b.x > a.x holds at b; c.x > b.x fails at c: only sequences without c, or without b
    res = oracle_matches("a b c", ev, w=10, k=2, where=["b.x > a.x and c.x > b.x"])
    sigmas = {sig for (_, sig) in res["matches"]}
    assert (0, 1) in sigmas and (0, 2) in sigmas and (1, 2) not in sigmas
    assert (0, 1, 2) not in sigmas


def test_predicate_arithmetic_nan_and_functions():
    ev = [_ev(1, "a", x=3.0, y=0.0), _ev(2, "b", x=-4.0, y=2.0)]

    def ok(pred):
        return bool(oracle_matches("a b", ev, w=10, k=0, where=[pred])["matches"])

    assert not ok("a.x / a.y > 0")           # 3 / 0 is NaN; NaN comparisons are false,
    assert not ok("a.x / a.y < 0")
    assert ok("a.x / a.y != 0")              # but != (IEEE 754, as in C and Python)
    assert not ok("a.x / a.y <= 0") and not ok("a.x / a.y == 0")
    assert not ok("a.x / a.y * 0 + 1 >= 1")  # NaN propagates through arithmetic
    assert ok("b.x / a.x < 0")
    assert ok("not (a.x / a.y > 0)")
    assert ok("a.x / b.y == 1.5")
    assert ok("abs(b.x) > a.x and min(a.x, b.x) == b.x and max(a.x, b.x) == 3")
    assert ok("b.x * -1 - a.x == 1 or a.x > 100")
    assert not ok("b.x + a.x > 0")


# --------------------------------------------------------------------------- partitions, bundles

def test_partitions_are_matched_separately():
    ev = [_ev(1, "a", sym="X"), _ev(2, "a", sym="Y"), _ev(3, "b", sym="Y"),
          _ev(4, "b", sym="X"), _ev(5, "b", sym="Z")]
    res = oracle_matches("a b", ev, w=10, k=0, where=["[sym]"])
    assert res["matches"] == {("X", (0, 3)): 0, ("Y", (1, 2)): 0}
    assert res["points"] == {("X", 4.0): (0, 1.0), ("Y", 3.0): (0, 2.0)}
    assert res["bundles"] == [("X", 4.0, 4.0, 1), ("Y", 3.0, 3.0, 1)]
    # without the equivalence test, cross-symbol pairs match too
    assert (None, (0, 2)) in oracle_matches("a b", ev, w=10, k=0)["matches"]


def test_partition_with_predicate():
    ev = [_ev(1, "a", sym="X", p=1), _ev(2, "a", sym="Y", p=9), _ev(3, "b", sym="X", p=5),
          _ev(4, "b", sym="Y", p=5)]
    res = oracle_matches("a b", ev, w=10, k=0, where=["[sym] and b.p > a.p"])
    assert res["matches"] == {("X", (0, 2)): 0}


def test_bundles_of():
    pts = {(None, 1.0): (0, 1.0), (None, 3.0): (0, 1.0), (None, 9.0): (1, 8.0),
           (None, 10.0): (0, 9.0), (None, 20.0): (0, 20.0)}
    assert bundles_of(pts, 2) == [(None, 1.0, 3.0, 2), (None, 9.0, 10.0, 2),
                                  (None, 20.0, 20.0, 1)]
    assert bundles_of(pts, 10) == [(None, 1.0, 20.0, 5)]
    assert bundles_of(pts, 1.9) == [(None, 1.0, 1.0, 1), (None, 3.0, 3.0, 1),
                                    (None, 9.0, 10.0, 2), (None, 20.0, 20.0, 1)]
    two = {("A", 1.0): 0, ("B", 2.0): 0, ("A", 2.5): 0, ("B", 9.0): 0}
    assert bundles_of(two, 2) == [("A", 1.0, 2.5, 2), ("B", 2.0, 2.0, 1), ("B", 9.0, 9.0, 1)]
    assert bundles_of({}, 5) == []


# --------------------------------------------------------------------------- properties

@st.composite
def streams(draw, types="abce", max_events=7, partitions=None):
    n = draw(st.integers(0, max_events))
    t, out = 0.0, []
    for _ in range(n):
        t += draw(st.sampled_from([0.0, 1.0, 1.0, 2.0, 3.5]))
        ev = {"type": draw(st.sampled_from(types)), "t": t, "x": draw(st.integers(0, 3))}
        if partitions:
            ev["g"] = draw(st.sampled_from(partitions))
        out.append(ev)
    return out


def _brute_force(pattern, events, w, k, check=None):
    """Every subset of positions, no window pre-filter, no length cap, DP errors."""
    node = parse_regex(pattern)
    out = {}
    for m in range(1, len(events) + 1):
        for sig in combinations(range(len(events)), m):
            if events[sig[-1]]["t"] - events[sig[0]]["t"] > w:
                continue
            e = dp_errors([events[i]["type"] for i in sig], node, k)
            if e is not None and (check is None or check([events[i] for i in sig])):
                out[(None, sig)] = e
    return out


def _b_greater_than_a(sigma_events):
    bound = {}
    for ev in sigma_events:
        bound[ev["type"]] = ev
        if ev["type"] in ("a", "b") and "a" in bound and "b" in bound:
            if not bound["b"]["x"] > bound["a"]["x"]:
                return False
    return True


@settings(max_examples=120, deadline=None)
@given(patterns, streams(), st.sampled_from([0, 1, 2, 3.5]), st.integers(0, 2), st.booleans())
def test_matches_equal_window_free_brute_force(pattern, events, w, k, with_predicate):
    where = ["b.x > a.x"] if with_predicate else []
    res = oracle_matches(pattern, events, w, k, where=where)
    expected = _brute_force(pattern, events, w, k,
                            _b_greater_than_a if with_predicate else None)
    assert res["matches"] == expected
    points: dict = {}
    for (_, sig), e in expected.items():
        key = (None, events[sig[-1]]["t"])
        cand = (e, events[sig[0]]["t"])
        if key not in points or (e, -cand[1]) < (points[key][0], -points[key][1]):
            points[key] = cand
    assert res["points"] == points


@settings(max_examples=80, deadline=None)
@given(patterns, streams(partitions=["P", "Q"]), st.sampled_from([1, 2, 3.5]),
       st.integers(0, 2))
def test_partitioned_result_is_union_of_substreams(pattern, events, w, k):
    res = oracle_matches(pattern, events, w, k, where=["[g]"])
    expected: dict = {}
    for g in ("P", "Q"):
        idx = [i for i, ev in enumerate(events) if ev["g"] == g]
        sub = oracle_matches(pattern, [events[i] for i in idx], w, k)
        for (_, sig), e in sub["matches"].items():
            expected[(g, tuple(idx[i] for i in sig))] = e
    assert res["matches"] == expected
    assert {p for (p, _) in res["points"]} <= {"P", "Q"}
    assert res["bundles"] == bundles_of(res["points"], w)


@settings(max_examples=60, deadline=None)
@given(patterns, streams(), st.sampled_from([1, 2]), st.integers(0, 1))
def test_more_errors_or_wider_window_only_add_matches(pattern, events, w, k):
    base = oracle_matches(pattern, events, w, k)["matches"]
    for bigger in (oracle_matches(pattern, events, w, k + 1)["matches"],
                   oracle_matches(pattern, events, w + 1, k)["matches"]):
        assert all(bigger.get(key) == e for key, e in base.items())


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["A", "B"]), st.integers(0, 30)), max_size=12),
       st.integers(0, 6))
def test_bundles_partition_points_with_gaps_above_w(pairs, w):
    pts = {(p, float(t)): None for p, t in pairs}
    bundles = bundles_of(pts, w)
    assert sum(n for (_, _, _, n) in bundles) == len(pts)
    for part in ("A", "B"):
        mine = [b for b in bundles if b[0] == part]
        ts = sorted(t for (p, t) in pts if p == part)
        for (_, first, last, n) in mine:
            inside = [t for t in ts if first <= t <= last]
            assert len(inside) == n and inside[0] == first and inside[-1] == last
            assert all(b - a <= w for a, b in zip(inside, inside[1:]))
        for (_, _, last1, _), (_, first2, _, _) in zip(mine, mine[1:]):
            assert first2 - last1 > w
