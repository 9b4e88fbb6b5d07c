"""The pattern language: parse trees, where clauses, and errors that point at the problem."""

import pytest

from acep.pattern import (
    Alt,
    Attr,
    BinOp,
    Concat,
    PatternError,
    Repeat,
    Star,
    Symbol,
    parse_expression,
    parse_regex,
    parse_where,
    pattern_length_bounds,
    symbols,
)


def test_concatenation_alternation_and_postfix_operators():
    node = parse_regex("a (b | c) d* e+ f? g{2,3}")
    assert isinstance(node, Concat)
    a, alt, star, plus, opt, rep = node.items
    assert a == Symbol("a", 0)
    assert isinstance(alt, Alt) and [s.name for s in alt.items] == ["b", "c"]
    assert isinstance(star, Star) and star.item.name == "d"
    assert plus == Repeat(Symbol("e", 13), 1, None)
    assert opt == Repeat(Symbol("f", 16), 0, 1)
    assert rep == Repeat(Symbol("g", 19), 2, 3)


def test_multi_character_type_names_are_single_symbols():
    node = parse_regex("late late+ (verylate | ontime)")
    assert symbols(node) == ["late", "verylate", "ontime"]
    assert symbols(parse_regex("abc")) == ["abc"]


def test_length_bounds():
    assert pattern_length_bounds(parse_regex("a (b | c d) e{2,3}")) == (4, 6)
    assert pattern_length_bounds(parse_regex("a b*")) == (1, None)
    assert pattern_length_bounds(parse_regex("a{2,}")) == (2, None)


@pytest.mark.parametrize("text, pos, fragment", [
    ("a (b | c", 8, "expected ')' to close the group opened at position 2"),
    ("a | | b", 4, "expected an event type"),
    ("a b{3,1}", 3, "upper bound below its lower bound"),
    ("a $ b", 2, "unexpected character '$'"),
    ("", 0, "empty pattern"),
    ("a b{x}", 4, "expected a whole number"),
    ("a)", 1, "unexpected ')'"),
    ("a{0}", 1, "matches nothing"),
])
def test_syntax_errors_point_at_the_position(text, pos, fragment):
    with pytest.raises(PatternError) as info:
        parse_regex(text)
    assert info.value.pos == pos
    assert fragment in str(info.value)
    assert str(info.value).splitlines()[-1] == "  " + " " * pos + "^"


def test_expressions_respect_precedence():
    e = parse_expression("d.price > a.price * 1.5 + 2 or not b.x == 1")
    assert e.op == "or"
    gt = e.left
    assert gt.op == ">" and gt.left == Attr("d", "price", 0)
    assert gt.right.op == "+" and gt.right.left.op == "*"
    assert e.right.op == "not" and e.right.operand.op == "=="


def test_where_splits_top_level_conjuncts_and_reads_the_equivalence_test():
    w = parse_where(["b.x > a.x and (c.x > b.x or c.x < 0)", "[origin]"])
    assert w.partition == "origin"
    assert len(w.predicates) == 2
    assert isinstance(w.predicates[1], BinOp) and w.predicates[1].op == "or"
    assert parse_where("[g] and a.x > 1").partition == "g"


@pytest.mark.parametrize("text, pos, fragment", [
    ("a.x > ", 6, "expected a value"),
    ("a > b.x", 2, "expected '.' and an attribute after 'a'"),
    ("a.x > 1 and b.y < 2 and c.z <", 29, "expected a value"),
    ("foo(a.x) > 1", 0, "unknown function 'foo'"),
    ("a.x < b.x < c.x", 10, "chained comparisons"),
    ("a.x > 1 and and b.x", 11, "empty condition"),
])
def test_predicate_errors_point_into_the_where_text(text, pos, fragment):
    with pytest.raises(PatternError) as info:
        parse_where([text])
    assert info.value.pos == pos, str(info.value)
    assert fragment in str(info.value)


DEEP = "nested deeper than the limit of 64 levels"


@pytest.mark.parametrize("text", ["(" * 300 + "a" + ")" * 300, "a" + "?" * 300,
                                  "(" * 65 + "a" + ")" * 65], ids=["groups", "?", "65"])
def test_a_pattern_nested_too_deep_is_refused_by_its_limit(text):
    """A pattern nested 300 deep raised RecursionError."""
    with pytest.raises(PatternError, match=DEEP):
        parse_regex(text)
    assert symbols(parse_regex("(" * 63 + "a" + ")" * 63)) == ["a"]


@pytest.mark.parametrize("text", [
    " or ".join(["b.v > 1"] * 1000), "b.v > " + "+".join(["1"] * 1000),
    "b.v > " + "(" * 1000 + "1" + ")" * 1000, "b.v > " + "-" * 1000 + "1",
    "not " * 1000 + "b.v > 1", "b.v > max(" * 300 + "1" + ", 1)" * 300,
], ids=["or", "+", "parentheses", "minus", "not", "max"])
def test_a_where_nested_too_deep_is_refused_by_its_limit(text):
    """A --where of 1,000 terms raised RecursionError; 1,000 conditions joined by a top-level
    and are 1,000 predicates, each shallow."""
    with pytest.raises(PatternError, match=DEEP):
        parse_where([text])
    assert len(parse_where([" and ".join(["b.v > 1"] * 1000)]).predicates) == 1000


def test_two_different_equivalence_tests_are_refused():
    with pytest.raises(PatternError, match="second equivalence test"):
        parse_where(["[a]", "[b]"])


@pytest.mark.parametrize("where, partition", [
    ([], None), (["[o]"], None), (["[o]"], "o"), ([], "p"), (["a.x > 1 and [o]"], None),
    ("[o] and b.x > a.x", None),
])
def test_partition_attribute_is_what_the_matcher_partitions_by(where, partition):
    from acep import Matcher
    from acep.pattern import partition_attribute

    expected = Matcher("a b", 1.0, where=where, partition=partition).partition
    assert partition_attribute(where, partition) == expected
