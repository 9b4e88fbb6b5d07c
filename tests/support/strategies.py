"""Hypothesis strategies of random patterns, event streams and whole matching cases for
the engine tests."""

from __future__ import annotations

from hypothesis import strategies as st

ALPHABET = ["a", "b", "c"]


@st.composite
def regex(draw, depth=0):
    """A random pattern text over a, b, c (bounded so the oracle stays fast)."""
    if depth >= 2 or draw(st.integers(0, 2)) == 0:
        text = draw(st.sampled_from(ALPHABET))
    else:
        kind = draw(st.sampled_from(["concat", "concat", "alt", "group"]))
        if kind == "concat":
            items = draw(st.lists(regex(depth + 1), min_size=2, max_size=3))
            text = " ".join(items)
        elif kind == "alt":
            items = draw(st.lists(regex(depth + 1), min_size=2, max_size=2))
            text = "(" + " | ".join(items) + ")"
        else:
            text = "(" + draw(regex(depth + 1)) + ")"
    suffix = draw(st.sampled_from(["", "", "", "*", "+", "?", "{2}", "{1,2}", "{2,}"]))
    if suffix and " " in text and not text.startswith("("):
        text = f"({text})"
    return text + suffix


@st.composite
def stream(draw, max_events=10):
    n = draw(st.integers(1, max_events))
    events, t = [], 0
    for _ in range(n):
        t += draw(st.integers(0, 2))
        events.append({"type": draw(st.sampled_from(ALPHABET + ["d"])), "t": float(t),
                       "x": float(draw(st.integers(0, 4))),
                       "g": draw(st.sampled_from(["P", "Q"]))})
    return events


PREDICATES = ["{u}.x > {v}.x", "{u}.x + {v}.x <= 5", "abs({u}.x - {v}.x) != 1",
              "{u}.x >= 2", "not ({u}.x == {v}.x) or {u}.x > 3"]


@st.composite
def case(draw):
    pattern = draw(regex())
    types = sorted({ch for ch in pattern if ch in ALPHABET})
    where = []
    if draw(st.booleans()):
        u, v = draw(st.sampled_from(types)), draw(st.sampled_from(types))
        where.append(draw(st.sampled_from(PREDICATES)).format(u=u, v=v))
    if draw(st.booleans()):
        where.append("[g]")
    return pattern, where, draw(stream()), float(draw(st.integers(0, 7))), draw(st.integers(0, 2))
