"""Thompson's automaton (Figure 1): structure, and the language it accepts."""

from hypothesis import given, settings
from support.oracle import serializations
from support.strategies import regex

from acep.automaton import UNREACHABLE, build_automaton
from acep.pattern import parse_regex, pattern_length_bounds


def _accepted(automaton, max_len):
    """Every word of length <= max_len the automaton accepts (ε-closure simulation)."""
    def closure(states):
        stack, seen = list(states), set(states)
        while stack:
            p = stack.pop()
            for q in automaton.post[p]:
                if not automaton.is_l_state(q) and q not in seen:
                    seen.add(q)
                    stack.append(q)
        return frozenset(seen)

    words, frontier = set(), {(): closure({automaton.start})}
    for _ in range(max_len + 1):
        nxt = {}
        for word, states in frontier.items():
            if automaton.final in states:
                words.add(word)
            for p in states:
                for q in automaton.post[p]:
                    if automaton.is_l_state(q):
                        w = word + (automaton.types[automaton.label[q]],)
                        nxt[w] = nxt.get(w, frozenset()) | closure({q})
        frontier = nxt
    return words


def test_figure_1_structure_of_a_b_or_c_d_b():
    a = build_automaton("a (b|c) d b")
    assert a.types == ["a", "b", "c", "d"]
    l_states = a.l_states()
    assert sorted(a.types[a.label[q]] for q in l_states) == ["a", "b", "b", "c", "d"]
    for q in range(a.n_states):  # an L-state has exactly one incoming edge
        if a.is_l_state(q):
            assert len(a.pre(q)) == 1
    assert a.pre(a.start) == [] and a.post[a.final] == []
    cost = a.skip_cost()
    assert cost[a.start, a.final] == 4  # skipping the whole pattern inserts 4 letters


@settings(max_examples=200, deadline=None)
@given(regex())
def test_automaton_accepts_exactly_the_serializations(text):
    automaton = build_automaton(text)
    assert _accepted(automaton, 4) == serializations(parse_regex(text), 4)
    for q in range(automaton.n_states):
        if automaton.is_l_state(q):
            assert len(automaton.pre(q)) == 1


@settings(max_examples=100, deadline=None)
@given(regex())
def test_skip_cost_from_start_to_final_is_the_shortest_serialization(text):
    automaton = build_automaton(text)
    lo, _ = pattern_length_bounds(parse_regex(text))
    shortest = min(len(s) for s in serializations(parse_regex(text), lo))
    assert shortest == lo
    assert automaton.skip_cost()[automaton.start, automaton.final] == shortest
    assert (automaton.skip_cost() <= UNREACHABLE).all()
