"""Tests of the brute-force oracle of the exact SASE+ semantics (tests/support/exact_oracle.py).

The oracle judges the exact engine, so it is checked here against the paper examples of
``docs/EXACT.md`` section 4 (match sets only; run counts are engine-only), hand-worked cases
for each rule of section 3, and Hypothesis properties that hold by definition.

Queries are built as :mod:`acep.nfab.ast` objects with the small constructors of
``tests/support/exact.py``, so the oracle's tests do not depend on the parser
(``acep.nfab.query`` did not exist when this file was started). The paper queries are also
run once more from their printed text through ``acep.nfab.query.parse_query`` (skipped when
that module is missing), against the same expectations.

Every test runs twice: once judging the oracle, once with the run engine
(``acep.nfab.runs.match_runs``) in its place, as both must agree with the expectations
worked out from docs/EXACT.md independently of either.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.exact import (
    ANY,
    FIG4,
    NEXT,
    PART,
    Q1_STREAM,
    Q2_STREAM,
    Q6_STREAM,
    STRICT,
    Z14_FIG3,
    c,
    cases,
    eq,
    equiv,
    ev,
    fig3,
    fig3_stream,
    fig4,
    first,
    ids,
    it,
    last,
    neg,
    one,
    op,
    plus,
    pre,
    prev,
    q,
    query1,
    query2,
    query3,
    query6,
    r,
    whole,
    with_strategy,
    with_window,
)
from support.exact_oracle import (
    _begin_holds,
    _Env,
    _holds,
    _partition,
    _same_partition,
    _take_holds,
    analyze,
    assignment_count,
    assignments,
    eliminated,
    is_match,
    oracle,
    validate,
)

from acep.events import Event, EventError
from acep.nfab.ast import (
    BinOp,
    Call,
    Kind,
    Len,
    Query,
    Ref,
    UnaryOp,
)
from acep.nfab.runs import match_runs


def _run_engine(query, events, inclusive=True):
    if not inclusive:
        pytest.skip("the engine's window is inclusive (EXACT.md 3.3)")
    return match_runs(query, events)


@pytest.fixture(autouse=True, params=["oracle", "runs"])
def judged(request, monkeypatch):
    """The implementation a test judges: the oracle, or the run engine in its place."""
    if request.param == "runs":
        monkeypatch.setitem(globals(), "oracle", _run_engine)


# --------------------------------------------------------------------------- helpers


def got(query: Query, events, **kw) -> set:
    return {m.positions for m in oracle(query, events, **kw)}


# --------------------------------------------------------------------------- 4.1 [Z14] Fig. 3



def test_z14_fig3_strict():
    assert got(fig3(STRICT), Z14_FIG3) == {ids(2, [3, 4], 5)}


def test_z14_fig3_next():
    assert got(fig3(NEXT), Z14_FIG3) == {ids(1, [3, 4], 5), ids(2, [3, 4], 5)}


def test_z14_fig3_any_is_the_six_filled_runs():
    # rows 6, 7, 10, 13, 14, 17 of the figure
    assert got(fig3(ANY), Z14_FIG3) == {
        ids(1, [3], 5), ids(1, [3, 4], 5), ids(1, [4], 5),
        ids(2, [3], 5), ids(2, [3, 4], 5), ids(2, [4], 5)}


def test_z14_fig3_partition_needs_an_equivalence_test():
    with pytest.raises(ValueError, match="partition"):
        oracle(fig3(PART), Z14_FIG3)


# --------------------------------------------------------------------------- 4.2 [Z14] Fig. 4



def test_z14_fig4_seven_matches_any():
    b1, b2, b3 = 2, 3, 4
    assert got(fig4(ANY), FIG4) == {
        ids(1, [b1, b2, b3], 5), ids(1, [b1, b2], 5), ids(1, [b1, b3], 5), ids(1, [b1], 5),
        ids(1, [b2, b3], 5), ids(1, [b2], 5), ids(1, [b3], 5)}


def test_z14_fig4_one_match_next():
    assert got(fig4(NEXT), FIG4) == {ids(1, [2, 3, 4], 5)}


# --------------------------------------------------------------------------- 4.3 [Z14] Query 6



def _b_values(matches) -> set:
    return {tuple(Q6_STREAM[p].attrs["val"] for p in m.positions[1]) for m in matches}


def test_z14_query6_next_finds_one_sequence():
    ms = oracle(query6(NEXT), Q6_STREAM)
    assert _b_values(ms) == {(0.1, 0.2, 0.25)}


def test_z14_query6_any_finds_the_19_nondecreasing_subsequences():
    expected = {(0.1,), (0.1, 0.15), (0.1, 0.15, 0.19), (0.1, 0.15, 0.19, 0.25),
                (0.1, 0.15, 0.25), (0.1, 0.19), (0.1, 0.19, 0.25), (0.1, 0.2),
                (0.1, 0.2, 0.25), (0.1, 0.25), (0.15,), (0.15, 0.19), (0.15, 0.19, 0.25),
                (0.15, 0.25), (0.19,), (0.19, 0.25), (0.2,), (0.2, 0.25), (0.25,)}
    ms = oracle(query6(ANY), Q6_STREAM)
    assert len(ms) == 19 and _b_values(ms) == expected


# --------------------------------------------------------------------------- 4.4 Query 1



@pytest.mark.parametrize("strategy, compact, expected", [
    (NEXT, False, {ids(1, 6), ids(4, 6), ids(11, 12)}),
    (ANY, False, {ids(1, 6), ids(4, 6), ids(1, 8), ids(4, 8), ids(11, 12)}),
    (STRICT, False, {ids(11, 12)}),
    (PART, True, {ids(4, 6), ids(11, 12)}),
])
def test_a08_query1(strategy, compact, expected):
    assert got(query1(strategy, compact), Q1_STREAM) == expected


def test_a08_query1_compact_form_agrees_where_it_applies():
    for strategy in (NEXT, ANY, STRICT):
        assert got(query1(strategy, True), Q1_STREAM) == got(query1(strategy), Q1_STREAM)


# --------------------------------------------------------------------------- 4.4 Query 2



@pytest.mark.parametrize("strategy, expected", [
    (ANY, {ids(1, [2]), ids(1, [3]), ids(1, [2, 4]), ids(1, [3, 5]), ids(1, [2, 4, 7]),
           ids(1, [3, 5, 7])}),
    (NEXT, {ids(1, [2]), ids(1, [2, 4]), ids(1, [2, 4, 7])}),
    (STRICT, {ids(1, [2])}),
])
def test_a08_query2(strategy, expected):
    assert got(query2(strategy), Q2_STREAM) == expected


# --------------------------------------------------------------------------- 4.4/4.5 Query 3



R1, R2, R3 = ids([1, 2, 3, 4, 5], 6), ids([3, 4], 6), ids([1, 2, 3, 4, 5, 6, 7], 8)


def test_a08_fig3_next_match_is_exactly_r1_r2_r3():
    ms = oracle(query3(NEXT), fig3_stream())
    assert [m.positions for m in ms] == [R1, R2, R3]  # canonical order: by last position
    assert all(m.partition == ("IBM",) for m in ms)
    assert [(m.start, m.end) for m in ms] == [(60, 360), (180, 360), (60, 480)]


@pytest.mark.parametrize("strategy", [STRICT, PART])
def test_a08_query3_strict_and_partition(strategy):
    assert got(query3(strategy), fig3_stream()) == {R1, R3}


def test_a08_query3_any_match_68():
    ms = oracle(query3(ANY), fig3_stream())
    ends = [m.positions[-1][-1] for m in ms]
    assert len(ms) == 68 and ends.count(5) == 18 and ends.count(7) == 50
    assert {R1, R2, R3} <= {m.positions for m in ms}


@pytest.mark.parametrize("strategy, inclusive, expected", [
    (NEXT, True, {R1, R2}), (NEXT, False, {R2}),
    (STRICT, True, {R1}), (STRICT, False, set()),
])
def test_a08_query3_window_boundary(strategy, inclusive, expected):
    stream = fig3_stream(12)  # R1 spans 72 - 12 = 60 min, exactly W
    assert got(query3(strategy), stream, inclusive=inclusive) == expected


@pytest.mark.parametrize("inclusive, count", [(True, 20), (False, 2)])
def test_a08_query3_window_boundary_any(inclusive, count):
    assert len(oracle(query3(ANY), fig3_stream(12), inclusive=inclusive)) == count


def test_a08_query3_with_max():
    stream = fig3_stream()
    assert got(query3(NEXT, "max"), stream) == {ids([1, 2, 4], 6), ids([3, 4], 6)}
    assert got(query3(STRICT, "max"), stream) == set()
    assert got(query3(PART, "max"), stream) == set()
    assert len(oracle(query3(ANY, "max"), stream)) == 19


def test_a08_fig3_wrong_merge_is_not_a_match():
    # [l.202]: merging the buffers of R1 and R2 would yield e1 e2 e3 e4 e6: under next-match
    # e5 is takeable there (120 > avg(100, 120, 120, 121)), so it may not be skipped;
    # under any-match the same σ is a legitimate match
    assert ids([1, 2, 3, 4], 6) in got(query3(ANY), fig3_stream())
    an = analyze(query3(NEXT))
    assert not is_match(an, fig3_stream(), ids([1, 2, 3, 4], 6))
    assert all(is_match(an, fig3_stream(), m) for m in (R1, R2, R3))


# --------------------------------------------------------------------------- section 4, as text

# The same examples written as the paper prints them (2.1, section 4), parsed by
# acep.nfab.query.parse_query (skipped if that module is missing). {S} is the strategy.
TEXT_Q1 = """PATTERN SEQ(Shelf a, ~(Register b), Exit c)
          WHERE   {S}(a, b, c) {{
                      a.tag_id = b.tag_id
                  and a.tag_id = c.tag_id }}
          WITHIN  12 hours"""
TEXT_Q1_PART = """PATTERN SEQ(Shelf a, ~(Register b), Exit c)
          WHERE partition_contiguity(a, b, c) {{ [tag_id] }} WITHIN 12 hours"""
TEXT_Q2 = """PATTERN SEQ(Alert a, Shipment+ b[ ])
          WHERE   {S}(a, b[ ]) {{
                      a.type = 'contaminated'
                  and b[1].from = a.site
                  and b[i].from = b[i-1].to }}
          WITHIN  3 hours"""
TEXT_Q3 = """PATTERN SEQ(Stock+ a[ ], Stock b)
          WHERE   {S}(a[ ], b) {{
                      [symbol]
                  and a[1].volume > 1000
                  and a[i].price > avg(a[..i-1].price)
                  and b.volume < 80%*a[a.LEN].volume }}
          WITHIN  1 hour"""
TEXT_FIG3 = "PATTERN SEQ(A a, B+ b[], C c) WHERE {S}(a, b[], c) {{}} WITHIN 10"
TEXT_FIG4 = ("PATTERN SEQ(A a, B+ b[], C c) WHERE {S}(a, b[], c) {{ [task_id] and "
             "b[i].val >= b[i-1].val }} WITHIN 100")
TEXT_Q6 = ("PATTERN SEQ(ReducerStart a, LoadStd+ b[], ReducerEnd c) WHERE {S}(a, b[], c) {{ "
           "[task_id] and b[i].val >= b[i-1].val }} WITHIN 10 minutes")


@pytest.mark.parametrize("text, strategy, stream, expected", [
    (TEXT_Q1, NEXT, Q1_STREAM, {ids(1, 6), ids(4, 6), ids(11, 12)}),
    (TEXT_Q1, ANY, Q1_STREAM, {ids(1, 6), ids(4, 6), ids(1, 8), ids(4, 8), ids(11, 12)}),
    (TEXT_Q1, STRICT, Q1_STREAM, {ids(11, 12)}),
    (TEXT_Q1_PART, None, Q1_STREAM, {ids(4, 6), ids(11, 12)}),
    (TEXT_Q2, ANY, Q2_STREAM, {ids(1, [2]), ids(1, [3]), ids(1, [2, 4]), ids(1, [3, 5]),
                               ids(1, [2, 4, 7]), ids(1, [3, 5, 7])}),
    (TEXT_Q2, NEXT, Q2_STREAM, {ids(1, [2]), ids(1, [2, 4]), ids(1, [2, 4, 7])}),
    (TEXT_Q2, STRICT, Q2_STREAM, {ids(1, [2])}),
    (TEXT_Q3, NEXT, fig3_stream(), {R1, R2, R3}),
    (TEXT_Q3, STRICT, fig3_stream(), {R1, R3}),
    (TEXT_Q3, PART, fig3_stream(), {R1, R3}),
    (TEXT_Q3, NEXT, fig3_stream(12), {R1, R2}),
    (TEXT_FIG3, STRICT, Z14_FIG3, {ids(2, [3, 4], 5)}),
    (TEXT_FIG3, NEXT, Z14_FIG3, {ids(1, [3, 4], 5), ids(2, [3, 4], 5)}),
    (TEXT_FIG4, NEXT, FIG4, {ids(1, [2, 3, 4], 5)}),
    (TEXT_Q6, NEXT, Q6_STREAM, {ids(1, [2, 3, 6], 7)}),
])
def test_paper_texts_through_the_parser(text, strategy, stream, expected):
    parse_query = pytest.importorskip("acep.nfab.query").parse_query
    query = parse_query(text.format(S=strategy.value if strategy else ""))
    assert got(query, stream) == expected


@pytest.mark.parametrize("text, stream, count", [
    (TEXT_Q3, fig3_stream(), 68), (TEXT_Q3, fig3_stream(12), 20), (TEXT_FIG3, Z14_FIG3, 6),
    (TEXT_FIG4, FIG4, 7), (TEXT_Q6, Q6_STREAM, 19),
])
def test_paper_texts_through_the_parser_any_match_counts(text, stream, count):
    parse_query = pytest.importorskip("acep.nfab.query").parse_query
    assert len(oracle(parse_query(text.format(S="skip_till_any_match")), stream)) == count


# --------------------------------------------------------------------------- 3.4 strict


def test_strict_nothing_may_be_skipped_whatever_its_type():
    query = q(one("A", "a"), one("B", "b"), strategy=STRICT)
    assert got(query, [ev("A", 0), ev("Z", 1), ev("B", 2)]) == set()
    assert got(query, [ev("A", 0), ev("B", 1), ev("Z", 2), ev("B", 3)]) == {((0,), (1,))}


def test_strict_kleene_takes_a_contiguous_block():
    query = q(plus("A", "a"), one("B", "b"), strategy=STRICT)
    assert got(query, [ev("A", 0), ev("A", 1), ev("B", 2)]) == {((0, 1), (2,)), ((1,), (2,))}


# --------------------------------------------------------------------------- 3.4 partition

def _part_query():
    return q(one("A", "a"), one("B", "b"), strategy=PART, where=[equiv("k")])


def test_partition_skips_foreign_and_undefined_partitions():
    stream = [ev("A", 0, k=1), ev("A", 1, k=2), ev("X", 2), ev("B", 3, k=2), ev("B", 4, k=1)]
    # (0, 4) skips k=2, an X with no k (undefined partition) and k=2 again
    assert got(_part_query(), stream) == {((0,), (4,)), ((1,), (3,))}


def test_partition_same_partition_event_of_any_type_breaks_contiguity():
    # A5: an event of a type in no component, but with the partition value, is not skippable
    assert got(_part_query(), [ev("A", 0, k=1), ev("X", 1, k=1), ev("B", 2, k=1)]) == set()
    assert got(_part_query(), [ev("A", 0, k=1), ev("A", 1, k=1), ev("B", 2, k=1)]) == {
        ((1,), (2,))}


def test_partition_number_and_string_are_different_partitions():
    stream = [ev("A", 0, k=1), ev("X", 1, k="1"), ev("B", 2, k=1.0)]
    ms = oracle(_part_query(), stream)
    assert [m.positions for m in ms] == [((0,), (2,))] and ms[0].partition == (1.0,)


def test_partition_kleene_contiguity_inside_the_partition():
    query = q(plus("A", "a"), one("B", "b"), strategy=PART, where=[equiv("k")])
    stream = [ev("A", 0, k=1), ev("A", 1, k=2), ev("A", 2, k=1), ev("B", 3, k=1)]
    assert got(query, stream) == {((0, 2), (3,)), ((2,), (3,))}


# --------------------------------------------------------------------------- 3.5 next-match

def test_next_singleton_must_begin_with_the_first_qualifying_event():
    query = q(one("A", "a"), one("B", "b"), strategy=NEXT, where=[eq(r("a", "x"), r("b", "x"))])
    stream = [ev("A", 0, x=1), ev("B", 1, x=2), ev("B", 2, x=1), ev("B", 3, x=1)]
    assert got(query, stream) == {((0,), (2,))}
    assert got(q(*query.components, where=query.conjuncts), stream) == {((0,), (2,)),
                                                                        ((0,), (3,))}


def test_next_kleene_must_take_every_takeable_event():
    query = q(plus("A", "a"), one("B", "b"), strategy=NEXT,
              where=[op(">", it("a", "x"), prev("a", "x"))])
    stream = [ev("A", 0, x=1), ev("A", 1, x=0), ev("A", 2, x=2), ev("B", 3)]
    assert got(query, stream) == {((0, 2), (3,)), ((1, 2), (3,)), ((2,), (3,))}
    any_query = q(*query.components, where=query.conjuncts)
    assert got(any_query, stream) == got(query, stream) | {((0,), (3,)), ((1,), (3,))}


def test_next_ignore_proceed_nondeterminism():
    # at b[i] the run may ignore an event that only the next component could begin with
    query = q(one("A", "a"), plus("B", "b"), one("C", "c"), strategy=NEXT)
    stream = [ev("A", 0), ev("B", 1), ev("C", 2), ev("C", 3)]
    assert got(query, stream) == {((0,), (1,), (2,)), ((0,), (1,), (3,))}
    # a singleton waiting for its successor may not
    single = q(one("A", "a"), one("C", "c"), strategy=NEXT)
    assert got(single, stream) == {((0,), (2,))}


def test_next_begin_check_includes_pure_take_conjuncts_at_i_1():
    stream = [ev("A", 0), ev("B", 1, x=3), ev("B", 2, x=7)]
    pure = q(one("A", "a"), plus("B", "b"), strategy=NEXT, where=[op(">", it("b", "x"), 5)])
    # B x=3 cannot begin b (pure conjunct at i = 1), so it may be skipped
    assert got(pure, stream) == {((0,), (2,))}
    rel = q(one("A", "a"), plus("B", "b"), strategy=NEXT,
            where=[op("<", it("b", "x"), prev("b", "x"))])
    # relational conjuncts are not part of BEGIN: B x=3 begins b, so it may not be skipped
    assert got(rel, stream) == {((0,), (1,))}


def test_next_close_conjuncts_are_not_part_of_the_skip_rule():
    query = q(plus("A", "a"), one("B", "b"), strategy=NEXT, where=[op(">", last("a", "x"), 2)])
    stream = [ev("A", 0, x=3), ev("A", 1, x=1), ev("B", 2)]
    assert got(query, stream) == set()  # [e0] must take e1; [e0 e1] and [e1] fail CLOSE
    assert got(q(*query.components, where=query.conjuncts), stream) == {((0,), (2,))}


def test_next_begin_sees_close_identifiers_of_earlier_kleene():
    # BEGIN(c) reads a[a.len] of the complete earlier component
    query = q(plus("A", "a"), one("B", "b"), one("C", "c"), strategy=NEXT,
              where=[eq(r("c", "x"), last("a", "x"))])
    stream = [ev("A", 0, x=1), ev("A", 1, x=2), ev("B", 2), ev("C", 3, x=1), ev("C", 4, x=2)]
    # [e0 e1] b: the first C with x = 2 is e4 (e3 may be skipped); [e1] b: same; [e0] must
    # take e1
    assert got(query, stream) == {((0, 1), (2,), (4,)), ((1,), (2,), (4,))}


# --------------------------------------------------------------------------- 3.2 predicates


@pytest.mark.parametrize("conj, expected", [
    (op(">", it("b", "x"), 5), {((0,), (2,))}),                          # pure: i >= 1
    (op(">", it("b", "x"), r("a", "x")), {((0,), (2,))}),                # pure, other variable
    (op(">", it("b", "x"), first("b", "x")), {((0,), (1,)), ((0,), (2,)), ((0,), (1, 2))}),
    (op("<", it("b", "x"), prev("b", "x")), {((0,), (1,)), ((0,), (2,))}),
    (op(">", it("b", "x"), pre("avg", "b", "x")), {((0,), (1,)), ((0,), (2,)), ((0,), (1, 2))}),
])
def test_pure_and_relational_take_conjuncts_at_i_1(conj, expected):
    stream = [ev("A", 0, x=5), ev("B", 1, x=3), ev("B", 2, x=7)]
    assert got(q(one("A", "a"), plus("B", "b"), where=[conj]), stream) == expected


def test_analysis_anchors_and_purity():
    an = analyze(q(one("A", "a"), plus("B", "b"), neg("N", "n"), one("C", "c"), within=9,
                   where=[op(">", it("b", "x"), r("a", "x")),
                          op(">", it("b", "x"), pre("max", "b", "x")),
                          op(">", first("b", "x"), 1), op(">", whole("sum", "b", "x"), 1),
                          eq(r("n", "x"), r("c", "x")), op("<", c(1), c(2)),
                          op("<", r("c", "x"), Len("b")), equiv("k")]))
    got_anchors = [(cj.anchor, cj.pure, cj.equivalence) for cj in an.conjuncts]
    assert got_anchors == [
        (("TAKE", 1), True, False), (("TAKE", 1), False, False), (("BEGIN", 1), False, False),
        (("CLOSE", 1), False, False), (("NEG", "n"), False, False),
        (("BEGIN", 0), False, False), (("BEGIN", 2), False, False),
        # [k] with a singleton first component: b[1].k = a.k, b[i].k = b[1].k, c.k = a.k,
        # n.k = a.k
        (("BEGIN", 1), False, True), (("TAKE", 1), False, True), (("BEGIN", 2), False, True),
        (("NEG", "n"), False, True)]
    assert an.required == {"A": {"x", "k"}, "B": {"x", "k"}, "N": {"x", "k"}, "C": {"x", "k"}}


def test_close_conjuncts_see_the_whole_block():
    stream = [ev("A", 0, x=3), ev("A", 1, x=1), ev("A", 2, x=2), ev("B", 3)]
    comps = (plus("A", "a"), one("B", "b"))
    assert got(q(*comps, where=[op(">", last("a", "x"), 2)]), stream) == {((0,), (3,))}
    assert got(q(*comps, where=[op(">=", Len("a"), 3)]), stream) == {((0, 1, 2), (3,))}
    assert got(q(*comps, where=[op("==", whole("sum", "a", "x"), 5)]), stream) == {
        ((0, 2), (3,))}
    assert got(q(*comps, where=[op("==", whole("count", "a"), 2),
                                op("<", whole("min", "a", "x"), 2)]), stream) == {
        ((0, 1), (3,)), ((1, 2), (3,))}


def _strict_blocks(conj, xs) -> set:
    """The blocks of ``SEQ(A+ a[])`` under strict contiguity on A events with ``x = xs``."""
    stream = [ev("A", k, x=x) for k, x in enumerate(xs)]
    query = q(plus("A", "a"), strategy=STRICT, where=[conj])
    return {m.positions[0] for m in oracle(query, stream)}


def test_prefix_aggregates():
    singles = {(0,), (1,), (2,), (3,)}
    contiguous = singles | {(0, 1), (1, 2), (2, 3), (0, 1, 2), (1, 2, 3), (0, 1, 2, 3)}
    xs = [2, 0, 1, 1]
    # count(a[..i-1]) = i - 1 = a[i].t - a[1].t here (tags are the positions)
    count = op("==", pre("count", "a"), op("-", it("a", "t"), first("a", "t")))
    assert _strict_blocks(count, xs) == contiguous
    assert _strict_blocks(op("==", pre("count", "a"), 1), xs) == singles | {
        (0, 1), (1, 2), (2, 3)}
    assert _strict_blocks(op(">", it("a", "x"), pre("min", "a", "x")), xs) == singles | {
        (1, 2), (1, 2, 3)}
    assert _strict_blocks(op(">", it("a", "x"), pre("max", "a", "x")), xs) == singles | {
        (1, 2)}
    assert _strict_blocks(op(">=", it("a", "x"), pre("sum", "a", "x")), xs) == singles | {
        (1, 2), (2, 3), (1, 2, 3)}
    # avg and min told apart: 1 > avg(0, 2) is false, 1 > min(0, 2) is true
    singles3 = {(0,), (1,), (2,)}
    assert _strict_blocks(op(">", it("a", "x"), pre("min", "a", "x")), [0, 2, 1]) == \
        singles3 | {(0, 1), (0, 1, 2)}
    assert _strict_blocks(op(">", it("a", "x"), pre("avg", "a", "x")), [0, 2, 1]) == \
        singles3 | {(0, 1)}


def test_sum_is_a_left_fold():
    stream = [ev("A", k, x=x) for k, x in enumerate([0.1, 0.2, 0.3])]
    query = q(plus("A", "a"), strategy=STRICT, where=[op(">", whole("sum", "a", "x"), 0.6)],
              returns=[("s", whole("sum", "a", "x")), ("m", whole("avg", "a", "x"))])
    ms = oracle(query, stream)
    # ((0.0 + 0.1) + 0.2) + 0.3 = 0.6000000000000001 > 0.6 (math.fsum would give 0.6)
    assert math.fsum([0.1, 0.2, 0.3]) == 0.6
    assert [m.positions for m in ms] == [((0, 1, 2),)]
    assert ms[0].values == {"s": 0.6000000000000001, "m": 0.6000000000000001 / 3}


def test_constant_conjuncts():
    stream = [ev("A", 0), ev("A", 1)]
    assert got(q(one("A", "a"), where=[op("<", 1, 2)]), stream) == {((0,),), ((1,),)}
    assert got(q(one("A", "a"), where=[op(">", 1, 2)]), stream) == set()


# --------------------------------------------------------------------------- 3.2 values

NAN = float("nan")


@pytest.mark.parametrize("attrs, cond, holds", [
    ({"x": NAN}, op("<", r("a", "x"), 1), False),
    ({"x": NAN}, op(">=", r("a", "x"), 1), False),
    ({"x": NAN}, op("!=", r("a", "x"), 1), True),
    ({"x": NAN}, eq(r("a", "x"), r("a", "x")), False),
    ({"x": NAN}, op("!=", r("a", "x"), r("a", "x")), True),
    ({"x": 1}, op(">", op("/", r("a", "x"), 0), 0), False),          # x / 0 is NaN, not inf
    ({"x": 1}, op("!=", op("/", r("a", "x"), 0), op("/", r("a", "x"), 0)), True),
    ({"x": 1}, op("<", op("%", r("a", "x"), 0), 1), False),
    ({"x": 1}, op(">=", op("%", r("a", "x"), 0), 1), False),
    ({"x": -1}, eq(op("%", r("a", "x"), 3), 2), True),               # Python's float %
    ({"x": 7.5}, eq(op("%", r("a", "x"), -2), -0.5), True),
    ({"x": NAN}, op(">", Call("max", (r("a", "x"), c(1))), 0), False),
    ({"x": NAN}, op("<", Call("min", (c(1), r("a", "x"))), 9), False),
    ({"x": -3}, eq(Call("abs", (r("a", "x"),)), 3), True),
    ({"s": "abc"}, eq(r("a", "s"), "abc"), True),
    ({"s": "abc"}, op("<", r("a", "s"), "abd"), True),
    ({"s": "B"}, op("<", r("a", "s"), "a"), True),                   # code points
    ({"s": "\u00e9"}, op(">", r("a", "s"), "z"), True),
    ({"s": "1"}, eq(r("a", "s"), 1), False),                         # number vs string
    ({"s": "1"}, op("!=", r("a", "s"), 1), True),
    ({"s": "1"}, op("<", r("a", "s"), 1), False),
    ({"s": "1"}, op(">=", r("a", "s"), 1), False),
    ({"s": "1"}, op("<=", 1, r("a", "s")), False),
    ({"f": True}, eq(r("a", "f"), 1), True),                         # bool compared as float
    ({"x": 2}, eq(r("a", "x"), 2.0), True),
    ({"t": 99}, eq(r("a", "t"), 7), True),                           # t is the tag
    ({"type": "ok"}, eq(r("a", "type"), "ok"), True),                # an attribute, not A
    ({"type": "ok"}, eq(r("a", "type"), "A"), False),
    ({"x": 1}, UnaryOp("not", op(">", r("a", "x"), 1)), True),
    ({"x": 1}, op("or", op(">", r("a", "x"), 1), op("==", r("a", "x"), 1)), True),
    ({"x": 1}, op("and", op(">", r("a", "x"), 0), op("<", UnaryOp("-", r("a", "x")), -2)),
     False),
])
def test_values_and_comparisons(attrs, cond, holds):
    stream = [Event("A", 7.0, dict(attrs))]
    assert got(q(one("A", "a"), where=[cond]), stream) == ({((0,),)} if holds else set())


# --------------------------------------------------------------------------- 3.3 window


def test_window_is_inclusive_and_uses_first_and_last():
    stream = [ev("A", 0), ev("B", 5), ev("B", 5.5)]
    query = q(one("A", "a"), one("B", "b"), within=5)
    assert got(query, stream) == {((0,), (1,))}
    assert got(query, stream, inclusive=False) == set()


# --------------------------------------------------------------------------- 3.6 negation


def test_middle_negation():
    query = q(one("A", "a"), neg("N", "n"), one("B", "b"), where=[eq(r("n", "x"), r("a", "x"))])
    stream = [ev("N", 0, x=1), ev("A", 1, x=1), ev("N", 2, x=2), ev("B", 3, x=0),
              ev("N", 4, x=1), ev("B", 5), ev("A", 6, x=1), ev("B", 7)]
    # N x=2 (position 2) has another x; N x=1 at 4 eliminates (1, 5) but not (1, 3);
    # N at 0 is outside every gap
    assert got(query, stream) == {((1,), (3,)), ((6,), (7,))}


def test_middle_negation_is_void_under_strict_contiguity():
    query = q(one("A", "a"), neg("N", "n"), one("B", "b"), strategy=STRICT)
    assert got(query, [ev("A", 0), ev("B", 1), ev("N", 2), ev("B", 3)]) == {((0,), (1,))}


def test_consecutive_negations_test_the_same_gap():
    query = q(one("A", "a"), neg("N", "n"), neg("M", "m"), one("B", "b"))
    assert got(query, [ev("A", 0), ev("M", 1), ev("B", 2)]) == set()
    assert got(query, [ev("A", 0), ev("N", 1), ev("B", 2)]) == set()
    assert got(query, [ev("A", 0), ev("B", 1), ev("M", 2), ev("N", 2)]) == {((0,), (1,))}


def test_negation_between_kleene_neighbours():
    query = q(plus("A", "a"), neg("N", "n"), one("B", "b"))
    stream = [ev("A", 0), ev("N", 1), ev("A", 2), ev("B", 3)]
    # the gap runs from the last a to b: N inside a[] does not eliminate
    assert got(query, stream) == {((0, 2), (3,)), ((2,), (3,))}


def test_leading_negation_window():
    query = q(neg("N", "n"), one("A", "a"), one("B", "b"), within=5)
    # leading: position < first, t(x) >= t(last) - W (inclusive)
    assert got(query, [ev("N", 0), ev("A", 3), ev("B", 5)]) == set()
    assert got(query, [ev("N", 0), ev("A", 4), ev("B", 6)]) == {((1,), (2,))}
    assert got(query, [ev("N", 0), ev("A", 1), ev("B", 4)], inclusive=False) == set()
    assert got(query, [ev("N", 0), ev("A", 3), ev("B", 5)], inclusive=False) == {((1,), (2,))}
    # an N after first(σ) is no leading negation, even at the same tag
    assert got(query, [ev("A", 0), ev("N", 0), ev("B", 1)]) == {((0,), (2,))}


def test_trailing_negation_window():
    query = q(one("A", "a"), one("B", "b"), neg("N", "n"), within=5)
    # trailing: position > last, t(x) <= t(first) + W (inclusive)
    assert got(query, [ev("A", 0), ev("B", 2), ev("N", 5)]) == set()
    assert got(query, [ev("A", 0), ev("B", 2), ev("N", 6)]) == {((0,), (1,))}
    assert got(query, [ev("A", 0), ev("B", 2), ev("N", 5)], inclusive=False) == {((0,), (1,))}
    # before last(σ) it is no trailing negation
    assert got(query, [ev("A", 0), ev("N", 1), ev("B", 2)]) == {((0,), (2,))}


def test_trailing_negation_with_condition_on_a_trailing_kleene():
    query = q(one("A", "a"), plus("B", "b"), neg("N", "n"), within=10,
              where=[op(">", r("n", "x"), whole("max", "b", "x"))])
    stream = [ev("A", 0), ev("B", 1, x=1), ev("B", 2, x=5), ev("N", 3, x=3)]
    assert got(query, stream) == {((0,), (2,)), ((0,), (1, 2))}


def test_edge_negation_needs_a_window():
    with pytest.raises(ValueError, match="WITHIN"):
        oracle(q(one("A", "a"), neg("N", "n")), [ev("A", 0)])


# --------------------------------------------------------------------------- 2.5 equivalence


def test_equivalence_with_kleene_first_component():
    query = q(plus("A", "a"), one("B", "b"), where=[equiv("k")])
    stream = [ev("A", 0, k=1), ev("A", 1, k=2), ev("A", 2, k=1), ev("B", 3, k=1)]
    ms = oracle(query, stream)
    assert {m.positions for m in ms} == {((0,), (3,)), ((2,), (3,)), ((0, 2), (3,))}
    assert {m.partition for m in ms} == {(1.0,)}


def test_equivalence_reaches_negated_components():
    query = q(one("A", "a"), neg("N", "n"), one("B", "b"), where=[equiv("k")])
    assert got(query, [ev("A", 0, k=1), ev("N", 1, k=2), ev("B", 2, k=1)]) == {((0,), (2,))}
    assert got(query, [ev("A", 0, k=1), ev("N", 1, k=1), ev("B", 2, k=1)]) == set()


def test_several_equivalence_attributes_make_one_key():
    stream = [ev("A", 0, k=1, j="u"), ev("B", 1, k=1, j="v"), ev("B", 2, k=1, j="u")]
    for where in ([equiv("k", "j")], [equiv("k"), equiv("j")]):
        ms = oracle(q(one("A", "a"), one("B", "b"), where=where), stream)
        assert [(m.positions, m.partition) for m in ms] == [(((0,), (2,)), (1.0, "u"))]


def test_equivalence_equals_its_expansion():
    expanded = [eq(first("b", "k"), r("a", "k")), eq(it("b", "k"), first("b", "k")),
                eq(r("c", "k"), r("a", "k"))]
    comps = (one("A", "a"), plus("B", "b"), one("C", "c"))
    stream = [ev("A", 0, k=1), ev("B", 1, k=1), ev("B", 2, k=2), ev("B", 3, k=1),
              ev("C", 4, k=2), ev("C", 5, k=1)]
    for strategy in (ANY, NEXT, STRICT):
        a = got(q(*comps, strategy=strategy, where=[equiv("k")]), stream)
        b = got(q(*comps, strategy=strategy, where=expanded), stream)
        assert a == b
    assert got(q(*comps, where=[equiv("k")]), stream) == {
        ((0,), (1,), (5,)), ((0,), (3,), (5,)), ((0,), (1, 3), (5,))}


# --------------------------------------------------------------------------- 3.7 identity


def test_labelled_sequences_are_distinct_matches():
    query = q(plus("A", "a"), plus("A", "b"))
    stream = [ev("A", 0), ev("A", 1), ev("A", 2)]
    ms = oracle(query, stream)
    positions = [m.positions for m in ms]
    assert len(positions) == len(set(positions)) == 5
    assert {((0,), (1, 2)), ((0, 1), (2,))} <= set(positions)
    assert positions == sorted(positions, key=lambda p: (p[-1][-1], p))
    assert got(q(plus("A", "a"), plus("A", "b"), strategy=STRICT), stream) == {
        ((0,), (1,)), ((1,), (2,)), ((0,), (1, 2)), ((0, 1), (2,))}


def test_canonical_order():
    query = q(one("A", "a"), one("B", "b"))
    stream = [ev("A", 0), ev("A", 1), ev("B", 2), ev("B", 3)]
    assert [m.positions for m in oracle(query, stream)] == [
        ((0,), (2,)), ((1,), (2,)), ((0,), (3,)), ((1,), (3,))]


def test_return_values():
    query = q(one("Shelf", "a"), plus("Item", "b"), one("Exit", "c"),
              where=[equiv("tag_id")], strategy=NEXT,
              returns=[("a.tag_id", r("a", "tag_id")), ("dwell", op("-", r("c", "t"), r("a", "t"))),
                       ("avg", whole("avg", "b", "w")), ("n", Len("b")),
                       ("first", first("b", "w")), ("last", last("b", "w")),
                       ("big", op(">", whole("max", "b", "w"), 2))])
    stream = [ev("Shelf", 10, tag_id=7), ev("Item", 11, tag_id=7, w=1),
              ev("Item", 12, tag_id=7, w=4), ev("Exit", 70, tag_id=7)]
    ms = oracle(query, stream)
    assert len(ms) == 1
    m = ms[0]
    assert m.positions == ((0,), (1, 2), (3,)) and (m.start, m.end) == (10.0, 70.0)
    assert m.partition == (7.0,)
    assert m.values == {"a.tag_id": 7.0, "dwell": 60.0, "avg": 2.5, "n": 2.0, "first": 1.0,
                        "last": 4.0, "big": True}
    assert oracle(q(one("Shelf", "a")), stream)[0].values is None
    assert oracle(q(one("Shelf", "a")), stream)[0].partition is None


# --------------------------------------------------------------------------- section 1


def test_tags_must_not_decrease():
    with pytest.raises(EventError) as err:
        oracle(q(one("A", "a")), [ev("A", 1), ev("Z", 2), ev("Z", 1.5), ev("A", 3)])
    assert err.value.position == 2 and err.value.field == "t"
    assert "event 2" in str(err.value)
    # equal tags are fine and keep input order
    assert got(q(one("A", "a"), one("B", "b")), [ev("B", 1), ev("A", 1), ev("B", 1)]) == {
        ((1,), (2,))}


def test_missing_attribute_of_a_component_type():
    query = q(one("A", "a"), one("B", "b"), where=[op("<", r("a", "x"), r("b", "y"))])
    with pytest.raises(EventError) as err:
        oracle(query, [ev("A", 0, x=1), ev("B", 1, y=2), ev("B", 2, x=2)])
    assert err.value.position == 2 and err.value.field == "y"
    assert "field 'y'" in str(err.value)
    # events of other types are never read
    assert got(query, [ev("A", 0, x=1), ev("Z", 1), ev("B", 2, y=2)]) == {((0,), (2,))}


def test_missing_attribute_read_by_return_or_negation_or_equivalence():
    with pytest.raises(EventError) as err:
        oracle(q(one("A", "a"), returns=[("v", r("a", "v"))]), [ev("A", 0)])
    assert (err.value.position, err.value.field) == (0, "v")
    negq = q(one("A", "a"), neg("N", "n"), one("B", "b"), where=[eq(r("n", "x"), 1)])
    with pytest.raises(EventError) as err:  # validated before anything is enumerated
        oracle(negq, [ev("N", 0), ev("A", 1), ev("B", 2)])
    assert (err.value.position, err.value.field) == (0, "x")
    with pytest.raises(EventError) as err:  # every equivalence attribute, even unread
        oracle(q(one("A", "a"), where=[equiv("k")]), [ev("A", 0, k=1), ev("A", 1)])
    assert (err.value.position, err.value.field) == (1, "k")


def test_integers_beyond_2_53_stay_exact():
    """EXACT.md 1 and 3.2 (found by tests/acep/test_exact_fuzz.py: the oracle made every int a
    float, so it put two ids that one double rounds to one value in one partition)."""
    big = 2**53
    query = q(one("A", "a"), one("B", "b"), where=[equiv("k")])
    events = [ev("A", 0, k=big + 3), ev("B", 1, k=big + 4), ev("B", 2, k=big + 3)]
    assert float(big + 3) == float(big + 4)
    [m] = oracle(query, events)
    assert m.positions == ((0,), (2,)) and m.partition == (big + 3,)
    assert type(m.partition[0]) is int
    # 2**53 itself is a float; compared exactly with the int beyond it
    assert got(q(one("A", "a"), one("B", "b"), where=[eq(r("a", "k"), r("b", "k"))]),
               [ev("A", 0, k=big), ev("B", 1, k=big + 1), ev("B", 2, k=float(big))]) == {
        ((0,), (2,))}
    summed = q(one("A", "a"), returns=[("s", op("+", r("a", "k"), 1.0))])
    assert oracle(summed, [ev("A", 0, k=big + 3)])[0].values == {"s": float(big + 4)}


def test_t_is_never_a_required_attribute():
    query = q(one("A", "a"), one("B", "b"), where=[op("<", r("a", "t"), r("b", "t"))])
    assert got(query, [ev("A", 0), ev("B", 0), ev("B", 1)]) == {((0,), (2,))}


# --------------------------------------------------------------------------- properties



PROP = settings(max_examples=150, deadline=None,
                suppress_health_check=[HealthCheck.too_slow])


@PROP
@given(cases())
def test_property_strategies_nest(case):
    """9.3 (c): strict ⊆ next ⊆ any; with [attr] also strict ⊆ partition ⊆ next (a
    skipped event outside the partition fails the equivalence part of take/begin)."""
    query, events = case
    res = {s: got(with_strategy(query, s), events) for s in (STRICT, NEXT, ANY)}
    assert res[STRICT] <= res[NEXT] <= res[ANY]
    if analyze(query).equiv_attrs:
        part = got(with_strategy(query, PART), events)
        assert res[STRICT] <= part <= res[NEXT]


@PROP
@given(cases(), st.sampled_from([STRICT, NEXT, ANY]))
def test_property_strict_matches_are_contiguous_and_in_window(case, strategy):
    query, events = case
    query = with_strategy(query, strategy)
    ms = oracle(query, events)
    assert len({m.positions for m in ms}) == len(ms)
    assert [m.positions for m in ms] == sorted((m.positions for m in ms),
                                               key=lambda p: (p[-1][-1], p))
    for m in ms:
        flat = [p for b in m.positions for p in b]
        if strategy is STRICT:
            assert flat == list(range(flat[0], flat[-1] + 1))
        if query.window is not None:
            assert m.end - m.start <= query.window
        assert all(events[p].type == comp.type
                   for comp, b in zip(query.positive, m.positions) for p in b)


@PROP
@given(cases(), st.sampled_from([STRICT, NEXT, ANY, PART]), st.integers(1, 4))
def test_property_raising_the_window_never_removes_matches(case, strategy, extra):
    """Without leading/trailing negation the window bounds only the span (3.3), so a larger
    W (or none) keeps every match. (An edge negation's window grows too, see 3.6.)"""
    query, events = case
    kinds = [comp.kind for comp in query.components]
    if kinds[0] is Kind.NEG or kinds[-1] is Kind.NEG or query.window is None:
        return
    if strategy is PART and not analyze(query).equiv_attrs:
        strategy = NEXT
    query = with_strategy(query, strategy)
    small = got(query, events)
    assert small <= got(with_window(query, query.window + extra), events)
    assert small <= got(with_window(query, None), events)


def _without_negation(query: Query) -> Query:
    negs = {comp.var for comp in query.components if comp.kind is Kind.NEG}
    comps = tuple(comp for comp in query.components if comp.kind is not Kind.NEG)

    def mentions(e):
        return isinstance(e, Ref) and e.var in negs or (
            isinstance(e, BinOp) and (mentions(e.left) or mentions(e.right)))

    where = tuple(e for e in query.conjuncts if not mentions(e))
    return Query(comps, query.strategy, where, query.window, query.returns)


@PROP
@given(cases(), st.sampled_from([STRICT, NEXT, ANY, PART]))
def test_property_negation_never_adds_matches(case, strategy):
    query, events = case
    if strategy is PART and not analyze(query).equiv_attrs:
        strategy = ANY
    query = with_strategy(query, strategy)
    assert got(query, events) <= got(_without_negation(query), events)


@PROP
@given(cases(partition_values=(7,), negation=False, equivalence=True),
       st.sampled_from([NEXT, ANY]))
def test_property_single_partition_makes_partition_contiguity_strict(case, other):
    """When every event carries the same partition value, nothing may be skipped under
    partition contiguity (3.4): it equals strict contiguity."""
    query, events = case
    assert got(with_strategy(query, PART), events) == got(with_strategy(query, STRICT), events)
    assert got(with_strategy(query, STRICT), events) <= got(with_strategy(query, other), events)


@PROP
@given(cases(partition_values=(0, 1, 2), equivalence=True))
def test_property_any_match_with_equivalence_is_a_union_over_partitions(case):
    """Under any-match with [k], every positive and negated event of a match shares the
    first event's k, and nothing else is constrained: the matches on the stream are the
    union of the matches on each partition's substream, with positions mapped back."""
    query, events = case
    query = with_strategy(query, ANY)
    whole_stream = oracle(query, events)
    union = []
    for value in sorted({e.attrs["k"] for e in events}):
        where = [p for p, e in enumerate(events) if e.attrs["k"] == value]
        for m in oracle(query, [events[p] for p in where]):
            union.append((tuple(tuple(where[p] for p in b) for b in m.positions),
                          m.partition, m.start, m.end))
    assert sorted((m.positions, m.partition, m.start, m.end) for m in whole_stream) == sorted(
        union)


@PROP
@given(cases(equivalence=True), st.sampled_from([STRICT, NEXT, ANY]))
def test_property_equivalence_equals_explicit_expansion(case, strategy):
    """2.5: outside partition contiguity, [k] means exactly its expanded equalities."""
    query, events = case
    an = analyze(query)
    if not an.equiv_attrs:
        return
    explicit = tuple(cj.expr for cj in an.conjuncts)
    plain = Query(query.components, strategy, explicit, query.window, query.returns)
    assert got(with_strategy(query, strategy), events) == got(plain, events)


@PROP
@given(cases(), st.sampled_from([STRICT, NEXT, ANY]))
def test_property_conjunct_order_does_not_matter(case, strategy):
    query, events = case
    query = with_strategy(query, strategy)
    flipped = Query(query.components, strategy, tuple(reversed(query.conjuncts)),
                    query.window, query.returns)
    assert got(query, events) == got(flipped, events)


@PROP
@given(cases(negation=False))
def test_property_matches_pass_the_per_candidate_check(case):
    """Every oracle match passes the per-candidate check, and under any-match so does the
    same σ with its window removed (the window is the only span-dependent test left)."""
    query, events = case
    query = with_strategy(query, ANY)
    an = analyze(query)
    for m in oracle(query, events):
        assert is_match(an, events, m.positions)
        assert is_match(analyze(with_window(query, None)), events, m.positions)


# --------------------------------------------------------------------------- run reference

def _runs_reference(query: Query, events: list[Event]) -> list:
    """A second, operational definition (EXACT.md 5.1-5.6 and 6.1, explicit runs, no
    sharing): each run is (state, blocks); begin/take/ignore edges per 5.2-5.3, window on
    every edge (5.4), proceed only with the peek as one atomic proceed+begin move (5.5), a
    trailing Kleene emits after each begin/take whose CLOSE conjuncts hold (5.6); negation
    filters afterwards (5.7). It reuses the oracle's evaluator and its BEGIN_j/TAKE_j
    formulas, so it checks the declarative skip rule of 3.5 against the automaton, not
    the evaluator."""
    an = analyze(query)
    validate(an, events)
    k, w, strategy = len(an.positive), query.window, query.strategy
    found: set = set()

    def frozen(blocks):
        return tuple(tuple(b) for b in blocks)

    def close_ok(blocks, j):
        env = {an.positive[c].var: [events[p] for p in blocks[c]] for c in range(j + 1)}
        return all(_holds(cj.expr, _Env(env)) for cj in an.at("CLOSE", j))

    def begin_ok(blocks, j, x):
        return _begin_holds(an, events, frozen(blocks) + ((x,),), j, x)

    def take_ok(blocks, j, x):
        return _take_holds(an, events, frozen(blocks[:j]) + (tuple(blocks[j]) + (x,),), j, x)

    def ignore_ok(blocks, x, edge_ok):
        if strategy is STRICT:
            return False
        if strategy is PART:
            return not _same_partition(_partition(an, events[x]),
                                       _partition(an, events[blocks[0][0]]))
        return strategy is ANY or not edge_ok

    def begun(blocks, j):
        """The runs after component j has begun with its first element."""
        if an.kleene(j):
            if j == k - 1 and close_ok(blocks, j):
                found.add(frozen(blocks))
            return [((j, "take"), blocks)]
        if j == k - 1:
            found.add(frozen(blocks))
            return []
        return [((j + 1, "begin"), blocks)]

    runs: list = []
    for x in range(len(events)):
        new = []
        for (j, phase), blocks in runs:
            if w is not None and events[x].t - events[blocks[0][0]].t > w:
                continue  # WIN fails on every edge: the run dies
            if phase == "begin":
                ok = begin_ok(blocks, j, x)
                if ok:
                    new.extend(begun(blocks + [[x]], j))
            else:
                ok = take_ok(blocks, j, x)
                if ok:
                    grown = blocks[:j] + [blocks[j] + [x]]
                    if j == k - 1 and close_ok(grown, j):
                        found.add(frozen(grown))
                    new.append(((j, "take"), grown))
                if j < k - 1 and close_ok(blocks, j) and begin_ok(blocks, j + 1, x):
                    new.extend(begun(blocks + [[x]], j + 1))  # proceed+begin
            if ignore_ok(blocks, x, ok):
                new.append(((j, phase), blocks))
        if begin_ok([], 0, x):
            new.extend(begun([[x]], 0))
        runs = new
    return sorted((s for s in found if not eliminated(an, events, s)),
                  key=lambda p: (p[-1][-1], p))


@PROP
@given(cases(), st.sampled_from([STRICT, PART, NEXT, ANY]))
def test_property_declarative_semantics_equal_the_runs(case, strategy):
    """3.5: the declarative check is equivalent to the NFA^b with peeking and atomic
    proceed+begin; so is every other strategy's rule to its ignore edge (5.3)."""
    query, events = case
    if strategy is PART and not analyze(query).equiv_attrs:
        strategy = NEXT
    query = with_strategy(query, strategy)
    assert [m.positions for m in oracle(query, events)] == _runs_reference(query, events)


@pytest.mark.parametrize("query, stream", [
    (fig3(NEXT), Z14_FIG3), (fig3(ANY), Z14_FIG3), (query3(NEXT), fig3_stream()),
    (query3(ANY), fig3_stream()), (query3(NEXT, "max"), fig3_stream()),
    (query2(NEXT), Q2_STREAM), (query1(NEXT), Q1_STREAM), (query6(NEXT), Q6_STREAM),
])
def test_paper_examples_equal_the_runs(query, stream):
    assert [m.positions for m in oracle(query, stream)] == _runs_reference(query, stream)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from("ABC"), max_size=12), st.lists(
    st.tuples(st.booleans(), st.sampled_from("AB")), min_size=1, max_size=3))
def test_assignment_count_is_the_number_of_candidates_listed(types, shape):
    """The count that keeps generated cases small (support/exact_cases.py) is exact."""
    positive = [(plus if kleene else one)(t, f"v{j}") for j, (kleene, t) in enumerate(shape)]
    query = q(*positive)
    events = [ev(t, i) for i, t in enumerate(types)]
    assert assignment_count(analyze(query).positive, events) == \
        sum(1 for _ in assignments(analyze(query), events))
