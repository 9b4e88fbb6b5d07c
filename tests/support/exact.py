"""SASE+ queries and events built from small constructors, the paper's example queries
and streams of docs/EXACT.md section 4, and Hypothesis strategies of random ones."""

from __future__ import annotations

from hypothesis import strategies as st

from acep.events import Event
from acep.nfab import ast

ANY, NEXT = ast.Strategy.ANY, ast.Strategy.NEXT
STRICT, PART = ast.Strategy.STRICT, ast.Strategy.PARTITION
HOUR, MINUTE = 3600.0, 60.0


# --------------------------------------------------------------------------- constructors


def one(typ: str, var: str) -> ast.Component:
    return ast.Component(ast.Kind.ONE, typ, var)


def plus(typ: str, var: str) -> ast.Component:
    return ast.Component(ast.Kind.PLUS, typ, var)


def neg(typ: str, var: str) -> ast.Component:
    return ast.Component(ast.Kind.NEG, typ, var)


def r(var: str, attr: str) -> ast.Ref:        # v.x
    return ast.Ref(var, ast.Index.NONE, attr)


def first(var: str, attr: str) -> ast.Ref:    # v[1].x
    return ast.Ref(var, ast.Index.FIRST, attr)


def it(var: str, attr: str) -> ast.Ref:       # v[i].x
    return ast.Ref(var, ast.Index.I, attr)


def prev(var: str, attr: str) -> ast.Ref:     # v[i-1].x
    return ast.Ref(var, ast.Index.PREV, attr)


def last(var: str, attr: str) -> ast.Ref:     # v[v.len].x
    return ast.Ref(var, ast.Index.LAST, attr)


def pre(func: str, var: str, attr: str | None = None) -> ast.Agg:   # func(v[..i-1].x)
    return ast.Agg(func, var, ast.Range.PREFIX, attr)


def whole(func: str, var: str, attr: str | None = None) -> ast.Agg:  # func(v[].x)
    return ast.Agg(func, var, ast.Range.ALL, attr)


def c(value) -> ast.Const:
    return ast.Const(value)


def lit(value):
    expressions = (ast.Ref, ast.Agg, ast.Len, ast.BinOp, ast.UnaryOp, ast.Call, ast.Const)
    return value if isinstance(value, expressions) else c(value)


def op(o: str, left, right) -> ast.BinOp:
    return ast.BinOp(o, lit(left), lit(right))


def eq(left, right) -> ast.BinOp:
    return op("==", left, right)


def equiv(*attrs: str) -> ast.Equiv:
    return ast.Equiv(tuple(attrs))


def q(*components, strategy=ANY, where=(), within=None, returns=()) -> ast.Query:
    items = tuple(ast.ReturnItem(e, name) for name, e in returns)
    return ast.Query(tuple(components), strategy, tuple(where), within, items)


def ev(typ: str, t: float, **attrs) -> Event:
    return Event(typ, float(t), attrs)


def ids(*blocks) -> tuple:
    """Paper-style 1-based event numbers -> the 0-based identity tuple of a match."""
    return tuple((b - 1,) if isinstance(b, int) else tuple(x - 1 for x in b) for b in blocks)


# --------------------------------------------------------------------------- docs/EXACT.md 4


Z14_FIG3 = [ev("A", 1), ev("A", 2), ev("B", 5), ev("B", 6), ev("C", 7)]  # a1 a2 b1 b2 c1


def fig3(strategy):
    return q(one("A", "a"), plus("B", "b"), one("C", "c"), strategy=strategy, within=10)


def fig4(strategy):
    return q(one("A", "a"), plus("B", "b"), one("C", "c"), strategy=strategy, within=100,
             where=[equiv("task_id"), op(">=", it("b", "val"), prev("b", "val"))])


FIG4 = [ev("A", 1, task_id=1), ev("B", 4, task_id=1, val=6), ev("B", 5, task_id=1, val=7),
        ev("B", 6, task_id=1, val=9), ev("C", 7, task_id=1)]


Q6_VALS = [0.1, 0.2, 0.15, 0.19, 0.25]
Q6_STREAM = ([ev("ReducerStart", 0, task_id=1)]
             + [ev("LoadStd", k + 1, task_id=1, val=v) for k, v in enumerate(Q6_VALS)]
             + [ev("ReducerEnd", 6, task_id=1)])


def query6(strategy):
    return q(one("ReducerStart", "a"), plus("LoadStd", "b"), one("ReducerEnd", "c"),
             strategy=strategy, within=10 * MINUTE,
             where=[equiv("task_id"), op(">=", it("b", "val"), prev("b", "val"))])


Q1_ROWS = [("Shelf", 1, 0), ("Shelf", 2, 1), ("Register", 2, 2), ("Shelf", 1, 3),
           ("Exit", 2, 4), ("Exit", 1, 5), ("Register", 4, 6), ("Exit", 1, 7),
           ("Shelf", 3, 8), ("Exit", 3, 20.5), ("Shelf", 5, 21), ("Exit", 5, 22)]
Q1_STREAM = [ev(typ, h * HOUR, tag_id=tag) for typ, tag, h in Q1_ROWS]


def query1(strategy, compact=False):
    where = ([equiv("tag_id")] if compact else
             [eq(r("a", "tag_id"), r("b", "tag_id")), eq(r("a", "tag_id"), r("c", "tag_id"))])
    return q(one("Shelf", "a"), neg("Register", "b"), one("Exit", "c"), strategy=strategy,
             where=where, within=12 * HOUR)


Q2_STREAM = [
    ev("Alert", 0, type="contaminated", site="X"),
    ev("Shipment", 10 * MINUTE, **{"from": "X", "to": "Y"}),
    ev("Shipment", 20 * MINUTE, **{"from": "X", "to": "Z"}),
    ev("Shipment", 30 * MINUTE, **{"from": "Y", "to": "W"}),
    ev("Shipment", 40 * MINUTE, **{"from": "Z", "to": "W"}),
    ev("Alert", 50 * MINUTE, type="ok", site="Y"),
    ev("Shipment", 60 * MINUTE, **{"from": "W", "to": "V"}),
    ev("Shipment", 200 * MINUTE, **{"from": "Y", "to": "Q"}),
]


def query2(strategy):
    return q(one("Alert", "a"), plus("Shipment", "b"), strategy=strategy, within=3 * HOUR,
             where=[eq(r("a", "type"), "contaminated"), eq(first("b", "from"), r("a", "site")),
                    eq(it("b", "from"), prev("b", "to"))])


PRICE = [100, 120, 120, 121, 120, 125, 120, 120]
VOLUME = [1010, 990, 1005, 999, 999, 750, 950, 700]


def fig3_stream(minutes_per_event: float = 1.0) -> list[Event]:
    return [ev("Stock", (k + 1) * minutes_per_event * MINUTE, symbol="IBM", price=p, volume=v)
            for k, (p, v) in enumerate(zip(PRICE, VOLUME))]


def query3(strategy, agg="avg"):
    return q(plus("Stock", "a"), one("Stock", "b"), strategy=strategy, within=1 * HOUR,
             where=[equiv("symbol"), op(">", first("a", "volume"), 1000),
                    op(">", it("a", "price"), pre(agg, "a", "price")),
                    op("<", r("b", "volume"), op("*", 0.8, last("a", "volume")))])


# --------------------------------------------------------------------------- random cases


TYPES = "ABC"


@st.composite
def streams(draw, max_size=8, types="ABCD", partition_values=(0, 1), min_size=0):
    n = draw(st.integers(min_size, max_size))
    out, t = [], 0
    for _ in range(n):
        t += draw(st.integers(0, 2))
        out.append(ev(draw(st.sampled_from(types)), t, x=draw(st.integers(0, 3)),
                      k=draw(st.sampled_from(partition_values))))
    return out


def _component_conjuncts(comp: ast.Component, earlier: list[ast.Component]) -> list:
    v = comp.var
    if comp.kind is ast.Kind.ONE:
        menu = [op("<", r(v, "x"), 2), op(">=", r(v, "x"), 1)]
        for e in earlier:
            e_ref = r(e.var, "x") if e.kind is ast.Kind.ONE else last(e.var, "x")
            menu.append(op("<=", e_ref, r(v, "x")))
        return menu
    menu = [op("<=", it(v, "x"), 2),                                 # pure
            op("!=", it(v, "x"), 0),                                 # pure
            op(">=", it(v, "x"), prev(v, "x")),                      # relational
            op(">", it(v, "x"), pre("avg", v, "x")),
            op("<=", it(v, "x"), pre("max", v, "x")),
            op(">=", op("+", it(v, "x"), pre("count", v)), pre("sum", v, "x")),
            op("!=", it(v, "x"), first(v, "x")),
            op(">", last(v, "x"), 0),                                # CLOSE
            op("<=", ast.Len(v), 2),
            op("<", whole("sum", v, "x"), 5),
            op(">", first(v, "x"), 0)]                               # BEGIN
    for e in earlier:
        e_ref = r(e.var, "x") if e.kind is ast.Kind.ONE else last(e.var, "x")
        menu.append(op(">=", it(v, "x"), e_ref))                     # pure, other variable
    return menu


@st.composite
def queries(draw, negation=True, equivalence=None, window=True):
    k = draw(st.integers(1, 3))
    positive = [ast.Component(draw(st.sampled_from([ast.Kind.ONE, ast.Kind.PLUS])),
                          draw(st.sampled_from(TYPES)), f"p{j}") for j in range(k)]
    menu = []
    for j, comp in enumerate(positive):
        menu.extend(_component_conjuncts(comp, positive[:j]))
    where = draw(st.lists(st.sampled_from(menu), max_size=3, unique=True))
    comps = list(positive)
    if negation and draw(st.booleans()):
        at = draw(st.integers(0, k))
        comps.insert(at, neg(draw(st.sampled_from("ABCD")), "n"))
        if draw(st.booleans()):
            nb = positive[min(at, k - 1)]
            nb_ref = r(nb.var, "x") if nb.kind is ast.Kind.ONE else last(nb.var, "x")
            where.append(op("==", r("n", "x"), nb_ref))
    if equivalence is None:
        equivalence = draw(st.booleans())
    if equivalence:
        where.insert(draw(st.integers(0, len(where))), equiv("k"))
    edge_neg = comps[0].kind is ast.Kind.NEG or comps[-1].kind is ast.Kind.NEG
    within = None
    if window and (edge_neg or draw(st.booleans())):
        within = float(draw(st.integers(0, 10)))
    return q(*comps, where=where, within=within)


@st.composite
def cases(draw, partition_values=(0, 1), **query_options):
    """A query and a stream whose types are mostly the query's own (so that matches are
    common), with an occasional type of no component."""
    query = draw(queries(**query_options))
    types = "".join(sorted({comp.type for comp in query.components})) + "D"
    return query, draw(streams(types=types, partition_values=partition_values, min_size=3))


def with_strategy(query: ast.Query, strategy: ast.Strategy) -> ast.Query:
    return ast.Query(query.components, strategy, query.conjuncts, query.window, query.returns)


def with_window(query: ast.Query, window) -> ast.Query:
    return ast.Query(query.components, query.strategy, query.conjuncts, window, query.returns)


def draw_positive(draw, sizes=(1, 2, 2, 2, 3, 3, 4)) -> list[ast.Component]:
    """Draw a query's positive components: ``A``-``C`` as p0, p1...; at most two Kleene."""
    n = draw(st.sampled_from(sizes))
    kinds = [draw(st.sampled_from([ast.Kind.ONE, ast.Kind.ONE, ast.Kind.PLUS])) for _ in range(n)]
    if kinds.count(ast.Kind.PLUS) > 2:
        kinds = [ast.Kind.ONE if i else kinds[0] for i in range(n)]
    return [ast.Component(kind, draw(st.sampled_from("ABC")), f"p{j}")
            for j, kind in enumerate(kinds)]
