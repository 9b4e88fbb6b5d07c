"""The SASE+ query parser (docs/EXACT.md, section 2): the paper queries, the static rules of
2.4 with the clause and position of each error, and a printed-then-parsed round trip."""

from __future__ import annotations

import argparse
import dataclasses
import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from acep import pattern as acep_pattern
from acep.nfab import ast
from acep.nfab.query import (
    QueryError,
    _tokenize,
    format_expr,
    format_query,
    load_query,
    parse_query,
)
from acep.pattern import PatternError


def plain(node):
    """``node`` with every position set to 0 and the query text dropped."""
    if isinstance(node, tuple):
        return tuple(plain(n) for n in node)
    if not dataclasses.is_dataclass(node):
        return node
    changes = {f.name: plain(getattr(node, f.name)) for f in dataclasses.fields(node)}
    if "pos" in changes:
        changes["pos"] = 0
    if isinstance(node, ast.Query):
        changes["text"] = ""
    return dataclasses.replace(node, **changes)


def expr(text: str, components: str = "A a, B b, C+ k[ ], ~N n, D d"):
    """The single conjunct of ``WHERE text`` over ``components``, positions dropped."""
    (conjunct,) = parse_query(f"PATTERN SEQ({components}) WHERE {text}").conjuncts
    return plain(conjunct)


def R(var, attr, index=ast.Index.NONE):  # noqa: N802 - reads like the AST
    return ast.Ref(var, index, attr)


def C(value):  # noqa: N802
    return ast.Const(value)


# --------------------------------------------------------------------------- [A08] Fig. 1

QUERY_1 = """PATTERN SEQ(Shelf a, ~(Register b), Exit c)
          WHERE   skip_till_next_match(a, b, c) {
                      a.tag_id = b.tag_id
                  and a.tag_id = c.tag_id }
          WITHIN  12 hours"""

QUERY_2 = """PATTERN SEQ(Alert a, Shipment+ b[ ])
          WHERE   skip_till_any_match(a, b[ ]) {
                      a.type = 'contaminated'
                  and b[1].from = a.site
                  and b[i].from = b[i-1].to }
          WITHIN  3 hours"""

QUERY_3 = """PATTERN SEQ(Stock+ a[ ], Stock b)
          WHERE   skip_till_next_match(a[ ], b) {
                      [symbol]
                  and a[1].volume > 1000
                  and a[i].price > avg(a[..i-1].price)
                  and b.volume < 80%*a[a.LEN].volume }
          WITHIN  1 hour"""


def test_a08_query_1():
    q = parse_query(QUERY_1)
    assert plain(q.components) == (ast.Component(ast.Kind.ONE, "Shelf", "a"),
                                   ast.Component(ast.Kind.NEG, "Register", "b"),
                                   ast.Component(ast.Kind.ONE, "Exit", "c"))
    assert q.strategy is ast.Strategy.NEXT
    assert plain(q.conjuncts) == (ast.BinOp("==", R("a", "tag_id"), R("b", "tag_id")),
                                  ast.BinOp("==", R("a", "tag_id"), R("c", "tag_id")))
    assert q.window == 12 * 3600 and q.returns == () and q.text == QUERY_1
    assert [c.var for c in q.positive] == ["a", "c"]
    assert q.components[1].pos == QUERY_1.index("~(Register")


def test_a08_query_2_type_is_an_attribute_and_kleene_indices():
    q = parse_query(QUERY_2)
    assert plain(q.components) == (ast.Component(ast.Kind.ONE, "Alert", "a"),
                                   ast.Component(ast.Kind.PLUS, "Shipment", "b"))
    assert q.strategy is ast.Strategy.ANY and q.window == 3 * 3600
    assert plain(q.conjuncts) == (
        ast.BinOp("==", R("a", "type"), C("contaminated")),
        ast.BinOp("==", R("b", "from", ast.Index.FIRST), R("a", "site")),
        ast.BinOp("==", R("b", "from", ast.Index.I), R("b", "to", ast.Index.PREV)),
    )


def test_a08_query_3_equivalence_aggregate_and_percent():
    q = parse_query(QUERY_3)
    assert plain(q.components) == (ast.Component(ast.Kind.PLUS, "Stock", "a"),
                                   ast.Component(ast.Kind.ONE, "Stock", "b"))
    assert q.strategy is ast.Strategy.NEXT and q.window == 3600
    assert plain(q.conjuncts) == (
        ast.Equiv(("symbol",)),
        ast.BinOp(">", R("a", "volume", ast.Index.FIRST), C(1000.0)),
        ast.BinOp(">", R("a", "price", ast.Index.I),
                  ast.Agg("avg", "a", ast.Range.PREFIX, "price")),
        ast.BinOp("<", R("b", "volume"), ast.BinOp("*", C(0.8), R("a", "volume", ast.Index.LAST))),
    )
    equiv, _, iterated, _ = q.conjuncts
    assert equiv.pos == QUERY_3.index("[symbol]")
    assert iterated.left.pos == QUERY_3.index("a[i]")
    assert iterated.right.pos == QUERY_3.index("avg(")


# --------------------------------------------------------------------------- [Z14], the issue

def test_z14_query_1_returns_aggregates_named_by_their_text():
    q = parse_query("""PATTERN SEQ(JobStart a, Mapper+ b[ ], JobEnd c)
WHERE a.job_id = b[i].job_id and a.job_id = c.job_id
WITHIN 1 day
RETURN avg(b[ ].period), max(b[ ].period)""")
    assert q.strategy is ast.Strategy.ANY and q.window == 86400
    assert plain(q.conjuncts) == (ast.BinOp("==", R("a", "job_id"), R("b", "job_id", ast.Index.I)),
                                  ast.BinOp("==", R("a", "job_id"), R("c", "job_id")))
    assert plain(q.returns) == (
        ast.ReturnItem(ast.Agg("avg", "b", ast.Range.ALL, "period"), "avg(b[ ].period)"),
        ast.ReturnItem(ast.Agg("max", "b", ast.Range.ALL, "period"), "max(b[ ].period)"),
    )


def test_z14_query_2_last_element_against_the_whole_array():
    q = parse_query("""PATTERN SEQ(ReducerStart a, DataPull+ b[ ])
WHERE [task_id] and b[b.len].period > 2 * avg(b[ ].period)
WITHIN 10 minutes
RETURN a.task_id, a.period""")
    assert q.window == 600
    assert plain(q.conjuncts) == (
        ast.Equiv(("task_id",)),
        ast.BinOp(">", R("b", "period", ast.Index.LAST),
              ast.BinOp("*", C(2.0), ast.Agg("avg", "b", ast.Range.ALL, "period"))),
    )
    assert [r.name for r in q.returns] == ["a.task_id", "a.period"]
    assert plain(q.returns[1].expr) == R("a", "period")


def test_z14_query_3_one_dot_dot_range_is_the_prefix():
    q = parse_query("""PATTERN SEQ(ReducerStart a, LoadStd+ b[ ], ReducerEnd c)
WHERE [task_id] and b[i].val >= max(b[1..i-1].val)
WITHIN 10 minutes
RETURN a.task_id""")
    assert plain(q.conjuncts[1]) == ast.BinOp(">=", R("b", "val", ast.Index.I),
                                          ast.Agg("max", "b", ast.Range.PREFIX, "val"))
    assert [c.kind for c in q.components] == [ast.Kind.ONE, ast.Kind.PLUS, ast.Kind.ONE]


def test_the_issue_wrapping_form_with_conjuncts_after_it():
    text = """PATTERN SEQ(Shelf a, ~Register b, Exit c)
WHERE skip_till_any_match([tag_id]) AND c.t - a.t > 60
WITHIN 12 hours
RETURN a.tag_id, c.t - a.t AS dwell"""
    q = parse_query(text)
    assert q.components[1] == ast.Component(ast.Kind.NEG, "Register", "b", text.index("~Register"))
    assert q.strategy is ast.Strategy.ANY and q.window == 43200
    dwell = ast.BinOp("-", R("c", "t"), R("a", "t"))
    assert plain(q.conjuncts) == (ast.Equiv(("tag_id",)), ast.BinOp(">", dwell, C(60.0)))
    assert plain(q.returns) == (ast.ReturnItem(R("a", "tag_id"), "a.tag_id"),
                                ast.ReturnItem(dwell, "dwell"))


def test_strategy_forms_and_where_the_conjuncts_go():
    head = "PATTERN SEQ(A a, B b) WHERE "
    paper = parse_query(head + "strict_contiguity(b, a) { a.x > 1 } AND b.y < 2 AND b.z = 3")
    assert paper.strategy is ast.Strategy.STRICT
    assert plain(paper.conjuncts) == (ast.BinOp(">", R("a", "x"), C(1.0)),
                                      ast.BinOp("<", R("b", "y"), C(2.0)),
                                      ast.BinOp("==", R("b", "z"), C(3.0)))
    empty = parse_query(head + "skip_till_next_match(a, b) { } AND a.x > 1")
    assert empty.strategy is ast.Strategy.NEXT and len(empty.conjuncts) == 1
    bare = parse_query(head + "partition_contiguity([k] and a.x > 1)")
    assert bare.strategy is ast.Strategy.PARTITION
    assert plain(bare.conjuncts) == (ast.Equiv(("k",)), ast.BinOp(">", R("a", "x"), C(1.0)))
    assert parse_query(head + "skip_till_next_match()").conjuncts == ()
    assert parse_query("PATTERN SEQ(A a)").strategy is ast.Strategy.ANY
    assert parse_query(head + "a.x > 1").strategy is ast.Strategy.ANY


def test_the_paper_form_accepts_a_kleene_variable_without_brackets():
    q = parse_query("PATTERN SEQ(A+ a[ ], B b) WHERE skip_till_next_match(b, a) { }")
    assert q.strategy is ast.Strategy.NEXT


def test_conjuncts_split_at_top_level_and_only():
    q = parse_query("PATTERN SEQ(A a, B b) WHERE a.x > 1 AND (b.y < 2 OR b.z = 3) "
                    "AND NOT a.w = 'q'")
    assert [type(c).__name__ for c in q.conjuncts] == ["BinOp", "BinOp", "UnaryOp"]
    assert q.conjuncts[1].op == "or" and q.conjuncts[2].op == "not"
    (single,) = parse_query("PATTERN SEQ(A a, B b) WHERE a.x > 1 AND b.y < 2 OR b.z = 3"
                            ).conjuncts
    assert single.op == "or" and single.left.op == "and"


def test_every_reference_form():
    assert expr("k[1].x = k[i].y") == ast.BinOp("==", R("k", "x", ast.Index.FIRST),
                                                R("k", "y", ast.Index.I))
    assert expr("k[i - 1].x < k[1].y") == ast.BinOp("<", R("k", "x", ast.Index.PREV),
                                                R("k", "y", ast.Index.FIRST))
    assert expr("k[k.len].x > a.x") == ast.BinOp(">", R("k", "x", ast.Index.LAST), R("a", "x"))
    assert expr("k.len >= k.LEN") == ast.BinOp(">=", ast.Len("k"), ast.Len("k"))
    assert expr("k[i].x > count(k[..i-1])") == ast.BinOp(
        ">", R("k", "x", ast.Index.I), ast.Agg("count", "k", ast.Range.PREFIX, None))
    assert expr("count(k[ ]) = sum(k[].x)") == ast.BinOp(
        "==", ast.Agg("count", "k", ast.Range.ALL, None), ast.Agg("sum", "k", ast.Range.ALL, "x"))
    assert expr("k[i].x > min(k[1..i-1].x)") == ast.BinOp(
        ">", R("k", "x", ast.Index.I), ast.Agg("min", "k", ast.Range.PREFIX, "x"))
    assert expr("[x, y]") == ast.Equiv(("x", "y"))
    assert expr("a.t < d.t") == ast.BinOp("<", R("a", "t"), R("d", "t"))


def test_scalar_min_max_abs_beside_the_aggregates():
    assert expr("max(k[1].x, a.x) > 0") == ast.BinOp(
        ">", ast.Call("max", (R("k", "x", ast.Index.FIRST), R("a", "x"))), C(0.0))
    assert expr("MIN(k[ ].x) > ABS(a.x - 1)") == ast.BinOp(
        ">", ast.Agg("min", "k", ast.Range.ALL, "x"),
        ast.Call("abs", (ast.BinOp("-", R("a", "x"), C(1.0)),)))


def test_comparison_spellings_and_unary_operators():
    assert expr("a.x <> 1") == ast.BinOp("!=", R("a", "x"), C(1.0))
    assert expr("a.x == -b.y") == ast.BinOp("==", R("a", "x"), ast.UnaryOp("-", R("b", "y")))
    assert expr("a.s = \"it's\"") == ast.BinOp("==", R("a", "s"), C("it's"))


# --------------------------------------------------------------------------- lexical details

def test_keywords_are_case_insensitive_and_names_are_not():
    lower = """pattern seq(Stock+ a[ ], Stock b)
        where SKIP_TILL_NEXT_MATCH(a[ ], b) { [symbol] and a[i].price > Avg(a[..I-1].price)
              And (b.volume < 80%*a[a.len].volume oR NoT b.x = 1) }
        within 1 HOURS return COUNT(a[]) As n"""
    upper = """PATTERN SEQ(Stock+ a[ ], Stock b)
        WHERE skip_till_next_match(a[ ], b) { [symbol] AND a[i].price > avg(a[..i-1].price)
              AND (b.volume < 80%*a[a.LEN].volume OR NOT b.x = 1) }
        WITHIN 1 hour RETURN count(a[]) AS n"""
    assert plain(parse_query(lower)) == plain(parse_query(upper))
    q = parse_query("PATTERN SEQ(A a, B A) WHERE a.X = A.x")
    assert plain(q.conjuncts) == (ast.BinOp("==", R("a", "X"), R("A", "x")),)


def test_comments_are_whitespace():
    commented = QUERY_1.replace("and a.tag_id = c.tag_id }",
                                "and a.tag_id = c.tag_id /* equivalently, [tag_id] */ }")
    commented = "/* Query 1 */\n" + commented.replace("Exit c)", "Exit/**/c) /* a\nb */")
    assert plain(parse_query(commented)) == plain(parse_query(QUERY_1))


@pytest.mark.parametrize("text, parsed", [
    ("b.x < 80%*a.x", ast.BinOp("<", R("b", "x"), ast.BinOp("*", C(0.8), R("a", "x")))),
    ("a.x % 500 == 0", ast.BinOp("==", ast.BinOp("%", R("a", "x"), C(500.0)), C(0.0))),
    ("a.x > 50%", ast.BinOp(">", R("a", "x"), C(0.5))),
    ("a.x < 12.5% OR a.y", ast.BinOp("or", ast.BinOp("<", R("a", "x"), C(0.125)), R("a", "y"))),
    ("10 % (3) = 1", ast.BinOp("==", ast.BinOp("%", C(10.0), C(3.0)), C(1.0))),
    ("10 %-3 = 1", ast.BinOp("==", ast.BinOp("%", C(10.0), ast.UnaryOp("-", C(3.0))), C(1.0))),
    ("a.x = 33.3% * 3", ast.BinOp("==", R("a", "x"), ast.BinOp("*", C(0.333), C(3.0)))),
    ("a.x = 10 %+3", ast.BinOp("==", R("a", "x"), ast.BinOp("%", C(10.0), C(3.0)))),
])
def test_percent_after_a_number_else_modulo(text, parsed):
    assert expr(text) == parsed


def test_percent_before_a_keyword_and_at_the_end_of_a_clause():
    q = parse_query("PATTERN SEQ(A a) WHERE a.x < 80% AND a.y > 5% WITHIN 1 s RETURN 2% AS p")
    assert plain(q.conjuncts) == (ast.BinOp("<", R("a", "x"), C(0.8)),
                                  ast.BinOp(">", R("a", "y"), C(0.05)))
    assert plain(q.returns) == (ast.ReturnItem(C(0.02), "p"),)


def test_dot_dot_ranges_tokenize_without_changing_acep_patterns():
    assert [t.text for t in _tokenize("b[1..i-1] 1.5 2. .5")] == [
        "b", "[", "1", "..", "i", "-", "1", "]", "1.5", "2.", ".5", ""]
    assert [t.text for t in acep_pattern.tokenize("1..i")][:2] == ["1.", "."]
    assert acep_pattern.parse_expression("a.x > 1.5") == acep_pattern.BinOp(
        ">", acep_pattern.Attr("a", "x", 0), acep_pattern.Const(1.5))
    assert expr("k[i].x > max(k[1..i-1].x)") == expr("k[i].x > max(k[..i-1].x)")


@pytest.mark.parametrize("within, seconds", [
    ("12 hours", 43200), ("10 minutes", 600), ("1 day", 86400), ("90 s", 90),
    ("250 ms", 0.25), ("5", 5), ("2 m", 120), ("1.5h", 5400), ("3 Days", 259200),
    ("1 millisecond", 0.001), ("0.1 SEC", 0.1),
])
def test_within_units_in_seconds(within, seconds):
    assert parse_query(f"PATTERN SEQ(A a) WITHIN {within}").window == seconds


def test_the_cli_keeps_its_unit_table():
    from acep.arguments import WITHIN_UNITS as _UNITS
    from acep.arguments import parse_window
    from acep.units import UNITS, WITHIN_UNITS

    assert _UNITS is WITHIN_UNITS and UNITS["m"] == 60
    assert parse_window("2m") == 120 and parse_window("500ms") == 0.5
    with pytest.raises(argparse.ArgumentTypeError, match="too large a window"):
        parse_window("9" * 400 + "d")  # beyond the largest float: an option error


# --------------------------------------------------------------------------- errors (2.4)

def where(body: str, components: str = "A a, B+ b[ ], ~N n, C c") -> str:
    return f"PATTERN SEQ({components}) WHERE {body}"


# (query with § at the expected position, clause, message fragment)
RULE_VIOLATIONS = [
    # rule 1: components and variables
    ("PATTERN SEQ(§~A a, ~B b)", "PATTERN", "at least one positive"),
    ("PATTERN SEQ(A a, B §a)", "PATTERN", "declared twice"),
    ("PATTERN SEQ(A a, B+ b§, C c)", "PATTERN", "write B+ b[ ]"),
    ("PATTERN SEQ(A a§[ ])", "PATTERN", "write A+ a[ ]"),
    ("PATTERN SEQ(A §Len)", "PATTERN", "keyword"),
    ("PATTERN SEQ(A §i)", "PATTERN", "keyword"),
    (where("§b.x > 1"), "WHERE", "read through b[1], b[i]"),
    (where("a§[1].x > 1"), "WHERE", "a is not a Kleene variable"),
    (where("§a.len > 1"), "WHERE", "a.len: a is not a Kleene variable"),
    (where("avg(§c[ ].x) > 1"), "WHERE", "c is not one"),
    (where("§z.x > 1"), "WHERE", "unknown variable 'z'"),
    # rule 2: iterator forms
    (where("§c.x > b[i].x"), "WHERE", "may only refer to earlier components"),
    (where("b[i].x > avg(b[..i-1].x) + §c.x"), "WHERE", "earlier components"),
    (where("b[i].x > §b.len", "A+ a[ ], B+ b[ ]"), "WHERE", "may not mix"),
    (where("§b[b.len].x < b[i].x"), "WHERE", "may not mix"),
    (where("b[i].x > §avg(b[].x)"), "WHERE", "may not mix"),
    (where("a[i].x > §b[i].x", "A+ a[ ], B+ b[ ]"), "WHERE", "only one Kleene variable"),
    ("PATTERN SEQ(A+ a[ ]) RETURN §a[i].x", "RETURN", "iterator forms"),
    ("PATTERN SEQ(A+ a[ ]) RETURN 1 + §avg(a[..i-1].x)", "RETURN", "iterator forms"),
    # rule 3: indices and ranges
    (where("b[§a.len].x > 1", "A+ a[ ], B+ b[ ]"), "WHERE", "must name the same array"),
    (where("b[§2].x > 1"), "WHERE", "an index is 1, i, i-1 or b.len"),
    (where("b[i-§2].x > 1"), "WHERE", "an index is 1, i, i-1"),
    (where("b[i].x > max(b[§..i].x)"), "WHERE", "a range is empty"),
    (where("b[i].x > max(b[§2..i-1].x)"), "WHERE", "a range is empty"),
    (where("avg(b[§i].x) > 1"), "WHERE", "not an index"),
    (where("b[§..i-1].x > 1"), "WHERE", "only read by an aggregate"),
    (where("b[§1..i-1].x > 1"), "WHERE", "only read by an aggregate"),
    # rule 4: negation
    (where("n.x = §m.x", "A a, ~N n, ~M m, C c"), "WHERE", "only one negated variable"),
    (where("n.x > §b[i].x"), "WHERE", "may not use iterator forms"),
    ("PATTERN SEQ(A a, ~(B§+ b[ ]), C c)", "PATTERN", "may not be Kleene"),
    ("PATTERN SEQ(A a, !B§+ b[ ], C c)", "PATTERN", "may not be Kleene"),
    # rule 5: the strategy
    (where("skip_till_next_match(a, b, n§) { }"), "WHERE", "missing: c"),
    (where("skip_till_next_match(a, §a, b, n, c) { }"), "WHERE", "names a twice"),
    (where("skip_till_next_match(a, b, n, §z) { }"), "WHERE", "unknown variable"),
    (where("skip_till_next_match(a§[ ], b, n, c) { }"), "WHERE", "a is not a Kleene"),
    (where("§partition_contiguity(a.x > 1)"), "WHERE", "needs an equivalence test"),
    (where("a.x > 1 AND §skip_till_any_match(a.y > 1)"), "WHERE", "may only open"),
    # rule 6: equivalence tests
    (where("a.x > 1 OR §[k]"), "WHERE", "conjunct of its own"),
    (where("NOT §[k, j]"), "WHERE", "conjunct of its own"),
    ("PATTERN SEQ(A a) RETURN §[k]", "RETURN", "only be a WHERE conjunct"),
    # rule 7: edge negations need WITHIN
    ("PATTERN SEQ(A a, §~B b)", "PATTERN", "trailing negation ~B b needs WITHIN"),
    ("PATTERN SEQ(§~B b, A a) RETURN a.x", "PATTERN", "leading negation"),
    # rule 8: RETURN names
    ("PATTERN SEQ(A a) RETURN a.x AS n, a.y AS §n", "RETURN", "named 'n'"),
    ("PATTERN SEQ(A a) RETURN a.x, §a.x", "RETURN", "named 'a.x'"),
    ("PATTERN SEQ(A a, ~B b, C c) RETURN §b.x", "RETURN", "never binds it"),
]

SYNTAX_ERRORS = [
    ("§SEQ(A a)", "PATTERN", "starts with PATTERN"),
    ("§", "PATTERN", "starts with PATTERN"),
    ("PATTERN SEQ(§)", "PATTERN", "expected an event type"),
    ("PATTERN SEQ(A a §B b)", "PATTERN", "expected ',' or ')'"),
    ("PATTERN SEQ(A a) WHERE a.x §$ 1", "WHERE", "unexpected character '$'"),
    ("PATTERN SEQ(A a) WHERE a.x = §'open", "WHERE", "unterminated string"),
    ("PATTERN SEQ(A a) §/* open", "PATTERN", "unterminated comment"),
    ("PATTERN SEQ(A a) WHERE 1 < a.x §< 2", "WHERE", "chained comparisons"),
    ("PATTERN SEQ(A a) WHERE §WITHIN 5", "WHERE", "empty WHERE"),
    ("PATTERN SEQ(A a) WHERE a.x > 1 §a.y", "WHERE", "expected an operator, AND"),
    ("PATTERN SEQ(A a) WHERE a.x > §AND", "WHERE", "expected a value"),
    ("PATTERN SEQ(A a) WHERE §foo(a.x) > 1", "WHERE", "unknown function 'foo'"),
    ("PATTERN SEQ(A a) WHERE a.x > 1 AND §foo(a.x)", "WHERE", "unknown function 'foo'"),
    ("PATTERN SEQ(A a) WHERE §skip_till_nxt_match(a) { a.x > 1 }", "WHERE",
     "unknown strategy 'skip_till_nxt_match' (known: strict_contiguity, "
     "partition_contiguity, skip_till_next_match, skip_till_any_match)"),
    ("PATTERN SEQ(A a) WHERE §skip_till_any([x]) AND a.x > 1", "WHERE",
     "unknown strategy 'skip_till_any'"),
    ("PATTERN SEQ(A a) WHERE §strict([x]) WITHIN 5", "WHERE", "unknown strategy 'strict'"),
    ("PATTERN SEQ(A a) WHERE §foo(a.x)", "WHERE", "unknown strategy 'foo'"),
    ("PATTERN SEQ(A a) WHERE a.x >§\n", "WHERE", "expected a value, found end of input"),
    ("PATTERN SEQ(A a§  \n\n", "PATTERN", "expected ',' or ')'"),
    ("PATTERN SEQ(A a) WHERE §abs(a.x, 1) > 0", "WHERE", "abs() takes 1"),
    ("PATTERN SEQ(A a) WHERE a §> 0", "WHERE", "expected '.' and an attribute"),
    ("PATTERN SEQ(A+ a[ ]) WHERE count(a[ ]§.x) > 0", "WHERE", "count() takes no attribute"),
    ("PATTERN SEQ(A+ a[ ]) WHERE avg(a[ ]§) > 0", "WHERE", "expected '.' and an attribute"),
    ("PATTERN SEQ(A+ a[ ]) WHERE a[1].§len > 0", "WHERE", "'len' is a keyword"),
    ("PATTERN SEQ(A a) WHERE skip_till_any_match(a.x > 1§ ", "WHERE", "to close"),
    ("PATTERN SEQ(A a) WHERE skip_till_any_match() §a.x", "WHERE", "after the strategy"),
    ("PATTERN SEQ(A a) WITHIN §hours", "WITHIN", "expected a number"),
    ("PATTERN SEQ(A a) WITHIN 5 §fortnights", "WITHIN", "unknown unit"),
    ("PATTERN SEQ(A a) WITHIN §1e400", "WITHIN", "1e400 is too large a window"),
    ("PATTERN SEQ(A a) WITHIN §1e306 days", "WITHIN", "1e306 days is too large"),
    ("PATTERN SEQ(A a) WITHIN 5 s §WHERE a.x > 1", "WITHIN", "in this order"),
    ("PATTERN SEQ(A a) RETURN a.x §a.y", "RETURN", "expected ',', AS"),
    ("PATTERN SEQ(A a) RETURN a.x AS §1", "RETURN", "a name after AS"),
]


@pytest.mark.parametrize("marked, clause, fragment", RULE_VIOLATIONS + SYNTAX_ERRORS)
def test_errors_name_the_clause_and_point_at_the_position(marked, clause, fragment):
    text, pos = marked.replace("§", ""), marked.index("§")
    with pytest.raises(PatternError) as info:
        parse_query(text)
    error = info.value
    assert isinstance(error, QueryError)
    assert (error.pos, error.clause, error.text) == (pos, clause, text)
    assert error.message.startswith(clause + ": ") and fragment in error.message


def test_rule_messages_cite_the_spec():
    with pytest.raises(QueryError, match=r"EXACT\.md 2\.4 rule 2"):
        parse_query(where("c.x > b[i].x"))


def test_the_message_shows_line_column_and_a_caret_under_the_offending_line():
    text = "PATTERN SEQ(A a, B+ b[ ], C c)\nWHERE a.x > 1\n  AND\tc.x > b[i].x"
    with pytest.raises(QueryError) as info:
        parse_query(text)
    lines = str(info.value).splitlines()
    assert lines[0].startswith("query error at line 3, column 7 (position 51): WHERE: ")
    assert lines[1:] == ["    AND\tc.x > b[i].x", "       \t^"]


def test_valid_edge_and_middle_negations():
    assert parse_query("PATTERN SEQ(~B b, A a, ~C c) WITHIN 1 h").window == 3600
    assert parse_query("PATTERN SEQ(A a, ~B b, ~C c, D d)").window is None
    assert len(parse_query(where("n.x = a.x AND n.y < b[b.len].y")).conjuncts) == 2


@pytest.mark.parametrize("body", ["a.x > " + "(" * 200 + "1" + ")" * 200,
                                  " OR ".join(["a.x > 1"] * 200), "a.x > " + "-" * 200 + "1"],
                         ids=["parentheses", "or", "minus"])
def test_a_where_nested_too_deep_is_refused_by_its_limit(body):
    """A WHERE nested 200 deep raised RecursionError; a chain of 1,000 ANDs is 1,000
    conjuncts, each within the limit."""
    with pytest.raises(QueryError, match="WHERE: nested deeper than the limit of 64 levels"):
        parse_query(where(body))
    assert len(parse_query(where(" AND ".join(["a.x > 1"] * 1000))).conjuncts) == 1000


def test_load_query_reads_a_file_and_names_it_in_errors(tmp_path):
    good = tmp_path / "q1.sase"
    good.write_text(QUERY_1, encoding="utf-8")
    assert plain(load_query(good)) == plain(parse_query(QUERY_1))
    bad = tmp_path / "bad.sase"
    bad.write_text("PATTERN SEQ(A a)\nWITHIN 5 parsecs\n", encoding="utf-8")
    with pytest.raises(QueryError) as info:
        load_query(bad)
    assert str(info.value).startswith(f"{bad}: query error at line 2, column 10")
    assert info.value.source == str(bad) and info.value.clause == "WITHIN"


# --------------------------------------------------------------------------- printing

def test_format_query_reads_back_the_paper_queries():
    for text in (QUERY_1, QUERY_2, QUERY_3):
        q = parse_query(text)
        assert plain(parse_query(format_query(q))) == plain(q)
    assert format_expr(parse_query(QUERY_3).conjuncts[3]) == "b.volume < (0.8 * a[a.len].volume)"


def test_format_expr_refuses_what_it_cannot_write():
    with pytest.raises(ValueError):
        format_expr(ast.Const(float("nan")))
    with pytest.raises(ValueError):
        format_expr(ast.Const("it's \"x\""))
    assert plain(expr(format_expr(ast.BinOp("<", ast.Const(-1.5), R("a", "x"))))) == ast.BinOp(
        "<", ast.UnaryOp("-", C(1.5)), R("a", "x"))


# --------------------------------------------------------------------------- round trip

ATTRS = st.sampled_from(["x", "price", "t", "type", "from", "Vol_2"])
NUMBERS = st.floats(min_value=0, max_value=1e9, allow_nan=False, allow_infinity=False)
WORDS = st.text(string.ascii_letters + string.digits + " _-", max_size=6)
ARITHMETIC = st.sampled_from(["+", "-", "*", "/", "%"])
COMPARE = st.sampled_from(["<", "<=", ">", ">=", "==", "!="])


def _closed_terms(components, allowed_negated):
    """Identifiers of the closed forms: anchored at BEGIN or CLOSE, or one negated variable."""
    options = []
    for c in components:
        if c.kind is ast.Kind.ONE or c is allowed_negated:
            options.append(ATTRS.map(lambda a, v=c.var: R(v, a)))
        elif c.kind is ast.Kind.PLUS:
            v = c.var
            options += [
                ATTRS.map(lambda a, v=v: R(v, a, ast.Index.FIRST)),
                ATTRS.map(lambda a, v=v: R(v, a, ast.Index.LAST)),
                st.just(ast.Len(v)),
                st.just(ast.Agg("count", v, ast.Range.ALL, None)),
                st.tuples(st.sampled_from(["avg", "sum", "min", "max"]), ATTRS).map(
                    lambda fa, v=v: ast.Agg(fa[0], v, ast.Range.ALL, fa[1])),
            ]
    return options


def _iterator_terms(v):
    return [
        ATTRS.map(lambda a: R(v, a, ast.Index.I)),
        ATTRS.map(lambda a: R(v, a, ast.Index.PREV)),
        ATTRS.map(lambda a: R(v, a, ast.Index.FIRST)),
        st.just(ast.Agg("count", v, ast.Range.PREFIX, None)),
        st.tuples(st.sampled_from(["avg", "sum", "min", "max"]), ATTRS).map(
            lambda fa: ast.Agg(fa[0], v, ast.Range.PREFIX, fa[1])),
    ]


def _predicate(leaves):
    """A comparison of arithmetic over ``leaves``, maybe under NOT or OR."""
    values = st.recursive(
        st.one_of(*leaves, NUMBERS.map(ast.Const)),
        lambda inner: st.one_of(
            st.builds(ast.BinOp, ARITHMETIC, inner, inner),
            st.builds(ast.UnaryOp, st.just("-"), inner),
            inner.map(lambda e: ast.Call("abs", (e,))),
            st.builds(lambda f, a, b: ast.Call(f, (a, b)), st.sampled_from(["min", "max"]),
                      inner, inner),
        ),
        max_leaves=4,
    )
    comparison = st.one_of(st.builds(ast.BinOp, COMPARE, values, values),
                           st.builds(ast.BinOp, st.just("=="), values, WORDS.map(ast.Const)))
    return st.one_of(comparison, comparison.map(lambda e: ast.UnaryOp("not", e)),
                     st.builds(ast.BinOp, st.just("or"), comparison, comparison))


@st.composite
def conjuncts(draw, components):
    positive = [c for c in components if c.kind is not ast.Kind.NEG]
    kleene = [n for n, c in enumerate(components) if c.kind is ast.Kind.PLUS]
    if kleene and draw(st.booleans()):
        n = draw(st.sampled_from(kleene))
        earlier = [c for c in components[:n] if c.kind is not ast.Kind.NEG]
        leaves = _iterator_terms(components[n].var) + _closed_terms(earlier, None)
        return draw(_predicate(leaves))
    negated = [c for c in components if c.kind is ast.Kind.NEG]
    chosen = draw(st.sampled_from([None, *negated]))
    return draw(_predicate(_closed_terms(positive + [chosen] * (chosen is not None), chosen)))


@st.composite
def queries(draw):
    """A random valid query and its text, printed in one of the strategy forms, with keywords
    in random case."""
    n = draw(st.integers(1, 4))
    kinds = draw(st.lists(st.sampled_from(list(ast.Kind)), min_size=n, max_size=n).filter(
        lambda ks: any(k is not ast.Kind.NEG for k in ks)))
    names = draw(st.permutations(["a", "b", "c", "d", "x1", "Sym_2"]))[:n]
    types = st.sampled_from(["A", "B", "Stock", "Shelf"])
    components = tuple(ast.Component(k, draw(types), v) for k, v in zip(kinds, names))
    body = draw(st.lists(conjuncts(components), max_size=4))
    strategy = draw(st.sampled_from(list(ast.Strategy)))
    if strategy is ast.Strategy.PARTITION or draw(st.booleans()):
        body.insert(draw(st.integers(0, len(body))),
                    ast.Equiv(tuple(draw(st.lists(ATTRS, min_size=1, max_size=2)))))
    edge_negation = ast.Kind.NEG in (kinds[0], kinds[-1])
    window = draw(st.none() | NUMBERS) if not edge_negation else draw(NUMBERS)
    returns = []
    for item in draw(st.lists(_predicate(_closed_terms(
            [c for c in components if c.kind is not ast.Kind.NEG], None)), max_size=3)):
        name = f"r{len(returns)}" if draw(st.booleans()) else format_expr(item)
        if name not in [r.name for r in returns]:
            returns.append(ast.ReturnItem(item, name))
    query = ast.Query(components, strategy, tuple(body), window, tuple(returns))
    return _print(draw, query), query


def _declare(c: ast.Component) -> str:
    if c.kind is ast.Kind.PLUS:
        return f"{c.type}+ {c.var}[]"
    return f"~({c.type} {c.var})" if c.kind is ast.Kind.NEG else f"{c.type} {c.var}"


def _print(draw, query):
    def kw(word):
        return "".join(c.upper() if draw(st.booleans()) else c.lower() for c in word)

    def conj(e):
        wrap = isinstance(e, ast.BinOp) and e.op == "or"
        return f"({format_expr(e)})" if wrap else format_expr(e)

    seq = kw("SEQ") if draw(st.booleans()) else ""
    parts = [f"{kw('PATTERN')} {seq}(" + ", ".join(_declare(c) for c in query.components) + ")"]
    and_ = f" {kw('AND')} "
    body = [conj(c) for c in query.conjuncts]
    form = draw(st.sampled_from(["paper", "wrap", "none"]))
    if form == "none" and query.strategy is not ast.Strategy.ANY:
        form = "wrap"
    split = draw(st.integers(0, len(body)))
    name = kw(query.strategy.value)
    if form == "paper":
        varlist = ", ".join(c.var + ("[ ]" if c.kind is ast.Kind.PLUS else "")
                            for c in draw(st.permutations(query.components)))
        where_ = f"{name}({varlist}) {{ {and_.join(body[:split])} }}"
        where_ += and_ + and_.join(body[split:]) if body[split:] else ""
    elif form == "wrap":
        where_ = f"{name}({and_.join(body[:split])})"
        where_ += and_ + and_.join(body[split:]) if body[split:] else ""
    else:
        where_ = and_.join(body)
    if where_:
        parts.append(f"{kw('WHERE')} {where_}")
    if query.window is not None:
        parts.append(f"{kw('WITHIN')} {query.window!r}")
    if query.returns:
        parts.append(f"{kw('RETURN')} " + ", ".join(
            format_expr(r.expr) + ("" if r.name == format_expr(r.expr) else f" AS {r.name}")
            for r in query.returns))
    return draw(st.sampled_from(["\n", " ", " /* c */ "])).join(parts)


@settings(max_examples=120, deadline=None)
@given(queries())
def test_printed_queries_parse_back_to_the_same_ast(case):
    text, query = case
    assert plain(parse_query(text)) == query


@settings(max_examples=50, deadline=None)
@given(queries())
def test_format_query_round_trips(case):
    _, query = case
    assert plain(parse_query(format_query(query))) == query
