"""Hypothesis strategies of random SASE+ queries and streams for the compiled cores
(tests/acep/test_exact_core.py, test_exact_postpone_core.py) and of every early-filter
class with shifts and scales (test_exact_postpone.py, test_exact_postpone_core.py)."""

from __future__ import annotations

import math

from hypothesis import assume
from hypothesis import strategies as st

from acep.events import Event
from acep.nfab.ast import Call, Component, Equiv, Kind, Len, Query, ReturnItem, Strategy, UnaryOp

from .exact import draw_positive, ev, first, it, last, op, pre, prev, q, r, whole
from .exact_oracle import assignment_count

BIG = 2**53
XS = [0, 1, 2, 3, 0, 1, 2, 3, 1.5, -1, math.nan, True]
WIDE_XS = XS + [BIG, BIG + 1]
SS = ["p", "q", "p", 1]
KS = [0, 1, 7, 7.0, "7", BIG, BIG + 1, math.nan]
STEPS = [0, 0, 1, 1, 2, 0.1, 0.25]
MAX_CANDIDATES = 20_000  # the oracle's candidates per example (assignment_count)


# ------------------------------------------------------------------ queries and streams


def _singleton_menu(v: str, earlier: list[Component], wide: bool) -> list:
    x = r(v, "x")
    menu = [op("<", x, 2), op(">=", x, 1), op("!=", x, x), op("<=", Call("abs", (r(v, "y"),)), 1),
            UnaryOp("not", op("==", x, 0)), op("or", op("<", x, 0), op(">", r(v, "y"), 2))]
    if not wide:  # the oracle computes x % 2 in floats for x = 2**53 + 1, the engines not
        menu += [op("==", op("%", x, 2), 1), op(">", op("/", r(v, "y"), x), 1)]
    for e in earlier:
        ref = r(e.var, "x") if e.kind is Kind.ONE else last(e.var, "x")
        menu += [op("<=", ref, x), op("==", ref, x), op("<", op("-", ref, x), r(v, "y")),
                 op(">=", Call("max", (ref, r(v, "y"))), x)]
        if wide and e.kind is Kind.ONE:  # text: compared by 3.2's rules on shared.py
            menu += [op("<", r(e.var, "s"), r(v, "s")), op("!=", r(e.var, "s"), r(v, "s"))]
    if wide:
        menu.append(op("==", r(v, "s"), "p"))
    return menu


def _kleene_menu(v: str, earlier: list[Component], wide: bool) -> list:
    x = it(v, "x")
    menu = [op("<=", x, 2), op("!=", x, 0), op(">=", x, prev(v, "x")),
            op(">", x, pre("avg", v, "x")), op("<=", x, pre("max", v, "x")),
            op(">", x, pre("min", v, "x")), op(">=", op("+", x, pre("count", v)),
                                                pre("sum", v, "x")),
            op("!=", x, first(v, "x")), op(">", last(v, "x"), 0), op("<=", Len(v), 2),
            op("<", whole("sum", v, "x"), 5), op(">=", whole("max", v, "x"),
                                                 whole("min", v, "x")),
            op(">", first(v, "x"), 0), op("<", UnaryOp("-", x), it(v, "y")),
            op(">=", Call("min", (x, prev(v, "y"))), 0)]
    if not wide:
        menu.append(op("==", op("%", op("*", x, 3), it(v, "y")), 0))
    for e in earlier:
        ref = r(e.var, "x") if e.kind is Kind.ONE else last(e.var, "x")
        menu += [op(">=", x, ref), op("==", x, ref)]
    return menu


@st.composite
def queries(draw, wide: bool = False):
    positive = draw_positive(draw)
    menu = []
    for j, comp in enumerate(positive):
        maker = _kleene_menu if comp.kind is Kind.PLUS else _singleton_menu
        menu.extend(maker(comp.var, positive[:j], wide))
    where = draw(st.lists(st.sampled_from(menu), max_size=3, unique_by=repr))
    comps = list(positive)
    if draw(st.booleans()):
        at = draw(st.integers(0, len(comps)))
        comps.insert(at, Component(Kind.NEG, draw(st.sampled_from("ABCD")), "n0"))
        where += draw(st.lists(st.just(op(">", r("n0", "x"), 1)), max_size=1))
    if draw(st.booleans()):
        where.insert(draw(st.integers(0, len(where))),
                     Equiv(draw(st.sampled_from([("k",), ("k",), ("k", "y")]))))
    returns = ()
    if draw(st.booleans()):
        p = positive[0]
        returns = (ReturnItem(r(p.var, "x") if p.kind is Kind.ONE
                              else whole("sum", p.var, "x"), "v"),)
    edge_neg = comps[0].kind is Kind.NEG or comps[-1].kind is Kind.NEG
    within = "gap" if edge_neg or draw(st.booleans()) else None
    strategy = draw(st.sampled_from(list(Strategy)))
    if strategy is Strategy.PARTITION and not any(isinstance(c, Equiv) for c in where):
        strategy = Strategy.NEXT
    return Query(tuple(comps), strategy, tuple(where), within, returns)


@st.composite
def streams(draw, types: str, max_size: int, xs: list, bad: bool):
    n = draw(st.integers(0, max_size))
    out, t = [], 0
    for _ in range(n):
        t += draw(st.sampled_from(STEPS))
        if bad and draw(st.integers(0, 4 * max_size)) == 0:
            t -= 1
        attrs = {"x": draw(st.sampled_from(xs)), "y": draw(st.sampled_from(xs)),
                 "k": draw(st.sampled_from(KS))}
        if bad:
            attrs["s"] = draw(st.sampled_from(SS))
        if bad and draw(st.integers(0, 4 * max_size)) == 0:
            del attrs[draw(st.sampled_from(sorted(attrs)))]
        out.append(Event(draw(st.sampled_from(types)), t, attrs))
    return out


@st.composite
def cases(draw, max_size=10, wide=False):
    query = draw(queries(wide=wide))
    types = "".join(c.type for c in query.components) + "D"
    events = draw(streams(types, max_size, WIDE_XS if wide else XS, wide))
    # the oracle lists every candidate (EXACT.md 3.8): a long run of one Kleene type alone
    # would take hours
    positive = [c for c in query.components if c.kind is not Kind.NEG]
    assume(assignment_count(positive, events) <= MAX_CANDIDATES)
    if query.window == "gap":
        tags = sorted({e.t for e in events})
        gaps = sorted({b - a for a in tags for b in tags if b >= a})
        w = draw(st.sampled_from(gaps)) if gaps else 1.0
        if draw(st.booleans()):
            w = max(0.0, math.nextafter(w, draw(st.sampled_from([0.0, math.inf]))))
        query = Query(query.components, query.strategy, query.conjuncts, w, query.returns)
    return query, events


# max / min, and values that include NaN and infinities: the filters must never change
# the output.

_VALUES = st.sampled_from([0, 1, 2, 3, 1.5, -1, float("nan"), float("inf"), float("-inf")])
_OPS = ["<", "<=", ">", ">="]
_MAPS = [lambda y: y, lambda y: op("+", y, 1), lambda y: op("-", y, 1.5),
         lambda y: op("*", 2, y), lambda y: op("/", y, 2), lambda y: op("+", 0.5, op("*", y, 3)),
         lambda y: op("*", -1, y), lambda y: op("-", 1, y)]   # the last two: inconsistent


def _terms(comp, earlier, take):
    """S-dependent terms a conjunct of ``comp`` may compare against."""
    out = []
    for e in earlier:
        if e.kind is Kind.ONE:
            out.append(r(e.var, "x"))
        else:
            out += [first(e.var, "x"), last(e.var, "x"), whole("max", e.var, "x"),
                    whole("min", e.var, "x"), whole("avg", e.var, "x")]
    if take:
        v = comp.var
        out += [prev(v, "x"), first(v, "x"), pre("max", v, "x"), pre("min", v, "x"),
                pre("sum", v, "x")]
    return out


@st.composite
def filter_cases(draw):
    k = draw(st.integers(1, 3))
    comps = [Component(draw(st.sampled_from([Kind.ONE, Kind.PLUS])),
                       draw(st.sampled_from("AB")), f"p{j}") for j in range(k)]
    where = []
    for j, comp in enumerate(comps):
        own = r(comp.var, "x") if comp.kind is Kind.ONE else it(comp.var, "x")
        take = comp.kind is Kind.PLUS
        terms = _terms(comp, comps[:j], take)
        for _ in range(draw(st.integers(0, 2))):
            if not terms:
                break
            term = draw(st.sampled_from(terms))
            y = draw(st.sampled_from(_MAPS))(term)
            x = draw(st.sampled_from([own, op("+", own, 1), op("*", 0.5, own)]))
            o = draw(st.sampled_from(_OPS))
            where.append(op(o, x, y) if draw(st.booleans()) else op(o, y, x))
    if draw(st.booleans()):
        where.append(op(">", r(comps[0].var, "x") if comps[0].kind is Kind.ONE
                        else first(comps[0].var, "x"), 0))
    within = draw(st.sampled_from([None, 3.0, 6.0]))
    n = draw(st.integers(3, 9))
    events, t = [], 0
    for _ in range(n):
        t += draw(st.integers(0, 1))
        events.append(ev(draw(st.sampled_from("ABC")), t, x=draw(_VALUES)))
    return q(*comps, where=where, within=within), events
