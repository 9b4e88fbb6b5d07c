"""Differential fuzzing of the ACEP engine against the brute-force oracle (tests/support/oracle.py),
on inputs wider than tests/acep/test_engine_properties.py draws: four pattern types and a type of
no pattern, up to 16 events, equal tags and float tags whose differences round, windows at
(and one ulp beside) the gaps between events, up to three errors, partition keys of mixed
kinds (7, 7.0, "7", ids beyond 2**53) with tags that go back across partitions, and bad
events (a missing or NaN partition key or predicate attribute, text where a number is
needed, a tag going back in its partition) skipped by ``on_bad_event="skip"``.

Properties: both kernels and the literal Algorithm 1 equal the oracle (all trajectories;
best per point with merging on and off), the kernels row for row; batches cut anywhere
(empty ones too) change nothing, under a budget too; shedding never invents a match point,
and both kernels shed alike; with no budget every policy, the history's, the completion
model's, pSPICE's and hSPICE's included, finds exactly what the run without one finds, and
so do the policies asked only when the candidates exceed the credit when there is credit to
spare.

``HYPOTHESIS_PROFILE=campaign`` (tests/conftest.py) runs these with thousands of examples.
"""

from __future__ import annotations

import bisect
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st
from support.oracle import enumeration_cost, longest_serialization, oracle_matches

from acep import backend
from acep.events import EventBatch, EventError, partition_key
from acep.matcher import MatchBatch, Matcher, best_per_point, bundles
from acep.pattern import Attr, BinOp, Call, UnaryOp, parse_regex
from acep.reference import acep_match
from acep.shedding import (
    Budget,
    KeepFirstPolicy,
    OldestFirstPolicy,
    RandomPolicy,
    ScorePolicy,
    VectorBins,
)
from history.build import build_history
from history.policies import CompletionPolicy, HistoryPolicy, HSpicePolicy, PSpicePolicy
from history.sketch import Sketch

TYPES = ["a", "b", "c", "d"]
BACKENDS = ["compiled", "python"] if backend() == "compiled" else ["python"]
BIG = 2**53
KEYS = [7, 7.0, "7", BIG, BIG + 1, 12345678901234567, 0, -0.0, "x"]
BAD_KEYS = [None, math.nan, math.inf]
GAPS = [0.0, 0.0, 0.1, 0.1, 0.25, 1.0, 1.0, 2.0, 3.0]
MAX_DENSITY = 10  # events of pattern types in one window of one partition: the oracle's cost
MAX_SEQUENCES, MAX_PAIRS = 5_000, 5_000_000  # what the oracle may enumerate (about 0.3 s)
SETTINGS = settings(max_examples=120, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                           HealthCheck.data_too_large])


@st.composite
def regex(draw, depth=0):
    """A pattern text over a, b, c, d with groups, alternation and quantifiers."""
    if depth >= 2 or draw(st.integers(0, 2)) == 0:
        text = draw(st.sampled_from(TYPES))
    else:
        kind = draw(st.sampled_from(["concat", "concat", "alt", "group"]))
        if kind == "concat":
            text = " ".join(draw(st.lists(regex(depth + 1), min_size=2, max_size=3)))
        elif kind == "alt":
            text = "(" + " | ".join(draw(st.lists(regex(depth + 1), min_size=2,
                                                  max_size=3))) + ")"
        else:
            text = "(" + draw(regex(depth + 1)) + ")"
    suffix = draw(st.sampled_from(["", "", "", "*", "+", "?", "{2}", "{1,2}", "{2,}",
                                   "{0,1}", "{3}"]))
    if suffix and " " in text and not text.startswith("("):
        text = f"({text})"
    return text + suffix


@st.composite
def values(draw):
    """A predicate attribute: mostly small numbers, sometimes missing, NaN, text that reads
    as a number ("2", as in CSV) or text that does not."""
    kind = draw(st.sampled_from(["int", "int", "int", "float", "big", "bad"]))
    if kind == "int":
        return draw(st.integers(0, 4))
    if kind == "float":
        return draw(st.sampled_from([0.5, 1.5, -1.0, 2.0]))
    if kind == "big":
        return BIG + 1
    return draw(st.sampled_from([None, math.nan, "2", "text"]))


@st.composite
def streams(draw, max_events=16, bad=True):
    """Events with per-partition or global clocks, partition keys ``g`` of mixed kinds."""
    n = draw(st.integers(1, max_events))
    per_key = draw(st.booleans())
    clocks: dict = {}
    events = []
    for _ in range(n):
        key = draw(st.sampled_from(KEYS + (BAD_KEYS if bad else [])))
        clock = partition_key(key) if per_key and key in KEYS else "all"
        t = clocks.get(clock, 0.0) + draw(st.sampled_from(GAPS))
        if bad and draw(st.integers(0, 30)) == 0:
            t -= 1.5  # a tag going back
        clocks[clock] = t
        ev = {"type": draw(st.sampled_from(TYPES + ["e"])), "t": t}
        if not (bad and key is None and draw(st.booleans())):
            ev["g"] = key
        x = draw(values()) if bad else draw(st.integers(0, 4))
        if x is not None or not bad or draw(st.booleans()):
            ev["x"] = x
        events.append(ev)
    return events


PREDICATES = ["{u}.x > {v}.x", "{u}.x + {v}.x <= 5", "abs({u}.x - {v}.x) != 1",
              "{u}.x >= 2", "not ({u}.x == {v}.x) or {u}.x > 3", "{u}.x / ({v}.x - 2) < 1",
              "min({u}.x, {v}.x) * 2 == {v}.x", "{u}.x < {v}.x and {u}.x >= 1"]


def window_near_gaps(draw, events) -> float:
    """A window at a gap between two events' tags, one ulp beside it, or a plain one."""
    tags = sorted({ev["t"] for ev in events})
    gaps = sorted({b - a for a in tags for b in tags if b >= a})
    kind = draw(st.sampled_from(["gap", "gap", "ulp", "plain"]))
    if kind == "plain" or not gaps:
        return float(draw(st.sampled_from([0.0, 0.1, 0.3, 1.0, 2.0, 3.5, 7.0])))
    w = draw(st.sampled_from(gaps))
    if kind == "ulp":
        w = math.nextafter(w, draw(st.sampled_from([0.0, math.inf])))
    return max(w, 0.0)


@st.composite
def case(draw, bad=True, max_events=16):
    pattern = draw(regex())
    types = sorted({ch for ch in pattern if ch in TYPES})
    where = []
    for _ in range(draw(st.integers(0, 2))):
        u, v = draw(st.sampled_from(types)), draw(st.sampled_from(types))
        where.append(draw(st.sampled_from(PREDICATES)).format(u=u, v=v))
    partition = draw(st.sampled_from([None, "where", "option"]))
    if partition == "where":
        where.insert(draw(st.integers(0, len(where))), "[g]")
    events = draw(streams(max_events=max_events, bad=bad))
    w = window_near_gaps(draw, events)
    k = draw(st.integers(0, 3))
    return pattern, where, partition == "option", events, w, k


def good_events(pattern, where, by_option, events) -> list[int]:
    """Positions of the events the matcher keeps with ``on_bad_event="skip"`` (the rules of
    acep.matcher and the kernel, written out: a missing, NaN or infinite partition key; a
    tag below the last kept tag of its partition; a missing or non-numeric attribute that a
    predicate binds from an event of its type)."""
    m = Matcher(pattern, 1.0, 0, where=where, partition="g" if by_option else None)
    partitioned = m.partition is not None
    bound = {}
    for pred in m.pattern.where.predicates:
        for var, attr in _attrs(pred):
            bound.setdefault(var, set()).add(attr)
    last: dict = {}
    keep = []
    for i, ev in enumerate(events):
        key = partition_key(ev.get("g")) if partitioned else "all"
        if key is None or (isinstance(key, float) and not math.isfinite(key)):
            continue
        if ev["t"] < last.get(key, -math.inf):
            continue
        if any(math.isnan(_number(ev.get(attr))) for attr in bound.get(ev["type"], ())):
            continue
        last[key] = ev["t"]
        keep.append(i)
    return keep


def _attrs(expr):
    if isinstance(expr, Attr):
        yield expr.var, expr.attr
    elif isinstance(expr, BinOp):
        yield from _attrs(expr.left)
        yield from _attrs(expr.right)
    elif isinstance(expr, UnaryOp):
        yield from _attrs(expr.operand)
    elif isinstance(expr, Call):
        for a in expr.args:
            yield from _attrs(a)


def _number(v) -> float:
    """What the matcher reads: ``float(v)`` (so the text "2" is 2.0), NaN when it fails."""
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


def densest(events: list[dict], w: float) -> int:
    """The most events one window of length ``w`` of one partition holds."""
    by_key: dict = {}
    for ev in events:
        by_key.setdefault(partition_key(ev.get("g")), []).append(ev["t"])
    most = 0
    for tags in by_key.values():
        tags.sort()
        most = max(most, max(bisect.bisect_right(tags, t + w) - i for i, t in enumerate(tags)))
    return most


def affordable(pattern: str, density: int, k: int) -> bool:
    """True if the oracle's serializations of ``pattern`` stay small: matches of at most
    ``density`` events with up to ``k`` insertions. One draw of nested quantifiers over
    alternatives, e.g. ``((a | b | c)* d?){2,}`` at 13 letters, costs it minutes."""
    node = parse_regex(pattern)
    cap = longest_serialization(node)
    sequences, pairs = enumeration_cost(node, (density if cap is None else min(density, cap)) + k)
    return sequences <= MAX_SEQUENCES and pairs <= MAX_PAIRS


def expected(pattern, where, by_option, events, w, k) -> tuple[dict, list[int]]:
    """The oracle on the events the matcher keeps, positions mapped back."""
    keep = good_events(pattern, where, by_option, events)
    kept = [dict(events[i], t=float(events[i]["t"]), x=_number(events[i].get("x")))
            for i in keep]
    oracle_where = list(where) + (["[g]"] if by_option else [])
    res = oracle_matches(pattern, kept, w, k, oracle_where)
    matches = {(p, tuple(keep[i] for i in sig)): e for (p, sig), e in res["matches"].items()}
    return {"matches": matches, "points": res["points"], "bundles": res["bundles"]}, keep


def matcher(pattern, where, by_option, w, k, **options) -> Matcher:
    return Matcher(pattern, w, k, where=where, partition="g" if by_option else None,
                   on_bad_event="skip", **options)


def trajectories(found: MatchBatch) -> dict:
    return {(p, tuple(int(x) for x in found.events_of(i))): int(found.errors[i])
            for i, p in enumerate(found.partition)}


def rows(found: MatchBatch) -> list:
    return [(m.partition, m.point, m.start, m.errors, m.events, m.tags)
            for m in found.to_matches()]


def sorted_rows(found: MatchBatch) -> list:
    return sorted(rows(found), key=repr)


def relevant(pattern, where, by_option, events, w) -> list[dict]:
    keep = good_events(pattern, where, by_option, events)
    types = {ch for ch in pattern if ch in TYPES}
    return [events[i] for i in keep if events[i]["type"] in types]


@SETTINGS
@given(case())
def test_wide_inputs_agree_with_the_oracle(c):
    pattern, where, by_option, events, w, k = c
    density = densest(relevant(pattern, where, by_option, events, w), w)
    assume(density <= MAX_DENSITY and affordable(pattern, density, k))
    want, keep = expected(pattern, where, by_option, events, w, k)
    event(f"{'some' if want['points'] else 'no'} match points"
          f"{', bad events' if len(keep) < len(events) else ''}")
    outputs = []
    for name in BACKENDS:
        every = matcher(pattern, where, by_option, w, k, all_trajectories=True,
                        backend=name).match(events)
        assert trajectories(every) == want["matches"], name
        outputs.append(rows(every))
        for merge in (True, False):
            best = matcher(pattern, where, by_option, w, k, merge=merge,
                           backend=name).match(events)
            assert best_per_point(best) == want["points"], (name, merge)
            assert len(best) == len(want["points"])
            got = sorted(((b.partition, b.first, b.last, b.n_points)
                          for b in bundles(best, w)), key=repr)
            assert got == sorted(want["bundles"], key=repr)
            for m in best.to_matches():
                assert want["matches"][(m.partition, m.events)] == m.errors
            outputs.append(rows(best))
    if len(BACKENDS) == 2:  # one source, two builds: the same rows in the same order
        half = len(outputs) // 2
        assert outputs[:half] == outputs[half:]
    assert reference(pattern, where, by_option, events, w, k) == want["matches"]
    bad = sorted(set(range(len(events))) - set(keep))
    if bad:  # on_bad_event="error" names the first bad event the skip mode skipped
        strict = Matcher(pattern, w, k, where=where, partition="g" if by_option else None)
        with pytest.raises(EventError) as info:
            strict.match(events)
        assert info.value.position == bad[0]


def reference(pattern, where, by_option, events, w, k) -> dict:
    """The literal Algorithm 1 (acep.reference) on the kept events, positions mapped back."""
    keep = good_events(pattern, where, by_option, events)
    kept = [dict(events[i], x=_number(events[i].get("x"))) for i in keep]
    best: dict = {}
    for m in acep_match(pattern, kept, w, k, list(where) + (["[g]"] if by_option else [])):
        key = (m.partition, tuple(keep[i] for i in m.events))
        best[key] = min(best.get(key, k + 1), m.errors)
    return best


def cuts_of(draw, n: int) -> list[int]:
    return sorted(draw(st.lists(st.integers(0, n), max_size=4)))


def pieces(events: list, cuts: list[int]) -> list[EventBatch]:
    bounds = [0, *cuts, len(events)]
    return [EventBatch.from_events(events[a:b], position=a)  # empty batches too
            for a, b in zip(bounds, bounds[1:])]


def streamed(m: Matcher, events: list, cuts: list[int]) -> MatchBatch:
    found = [m.match_batch(batch) for batch in pieces(events, cuts)]
    return MatchBatch.concat([*found, m.flush()])


@SETTINGS
@given(case(max_events=24), st.data())
def test_batches_cut_anywhere_change_nothing(c, data):
    pattern, where, by_option, events, w, k = c
    cuts = cuts_of(data.draw, len(events))
    assume(densest(relevant(pattern, where, by_option, events, w), w) <= 14)
    for name in BACKENDS:
        for options in ({}, {"merge": False}, {"all_trajectories": True}):
            whole = matcher(pattern, where, by_option, w, k, backend=name, **options)
            split = matcher(pattern, where, by_option, w, k, backend=name, **options)
            assert sorted_rows(streamed(split, events, cuts)) == sorted_rows(
                whole.match(events)), (name, options)
            assert split.stats["skipped"] == whole.stats["skipped"]


BINS = VectorBins((1.0, 3.0), (0.5, 2.0))


def policies(m: Matcher, seed: int, sketch=None, graph=None) -> list:
    cells = m.n_cells
    rng = np.random.default_rng(seed)
    out = [KeepFirstPolicy(), RandomPolicy(seed), OldestFirstPolicy(),
           ScorePolicy(rng.random(cells), rng.integers(-1, 3, cells), explore=0.2,
                       learning_rate=0.3, seed=seed),
           ScorePolicy(rng.random(cells), explore=0.2, learning_rate=0.3, seed=seed,
                       seed_reserve=0.5, defer=2),
           ScorePolicy(rng.random(cells), learning_rate=0.3, seed=seed, probe=0.4,
                       probe_share=1.0)]
    if sketch is not None:
        out += [HistoryPolicy(sketch, seed=seed),
                HistoryPolicy(sketch, learning_rate=0.5, explore=0.5, seed=seed, defer=2)]
    if graph is not None:
        out += [CompletionPolicy(graph), PSpicePolicy(graph), HSpicePolicy(graph)]
    return out


def bins_of(policy) -> VectorBins:
    """The history policies' cells are the history's; the others use BINS."""
    return policy.bins if isinstance(policy, (HistoryPolicy, CompletionPolicy, PSpicePolicy,
                                              HSpicePolicy)) else BINS


def history_for(pattern, where, by_option, events, w, k):
    """A sketch and graph trained on the stream itself (its bins; good events only)."""
    keep = good_events(pattern, where, by_option, events)
    train = [events[i] for i in keep]
    if not train:
        return None, None
    g = build_history(pattern, EventBatch.from_events(train), w, k, where=where,
                      partition="g" if by_option else None, n_bins=3)
    return Sketch.from_graph(g), g


def shed_run(c, policy, budget, backend_name=None, cuts=(), bins=BINS, trace=False):
    pattern, where, by_option, events, w, k = c
    m = matcher(pattern, where, by_option, w, k, bins=bins, policy=policy, budget=budget,
                backend=backend_name, trace=trace)
    found = streamed(m, events, list(cuts))
    log = m.take_node_log() if trace else None
    return m, found, log


def log_rows(m: Matcher, log: dict) -> list:
    """The node log as a multiset of rows, partitions by key: kernel partition ids, and
    so the order nodes still live at the end are logged in, follow the batches' keys."""
    keys = m.partition_keys()
    fields = sorted(f for f in log if f != "partition")
    out = [(repr(keys[p]), *(repr(log[f][i].item()) for f in fields))
           for i, p in enumerate(log["partition"])]
    return sorted(out)


@pytest.mark.filterwarnings("ignore::acep.matcher.BucketWarning")  # tiny buckets on purpose
@SETTINGS
@given(case(max_events=24), st.integers(0, 2**16), st.sampled_from([0.0, 0.3, 1.0, 2.0]),
       st.sampled_from([1.0, 2.0, 4.0]), st.data())
def test_shedding_is_exact_per_kernel_and_batch_and_never_invents_a_point(c, seed, ops,
                                                                         burst, data):
    pattern, where, by_option, events, w, k = c
    truth = best_per_point(matcher(pattern, where, by_option, w, k).match(events))
    sketch, graph = history_for(pattern, where, by_option, events, w, k)
    cuts = cuts_of(data.draw, len(events))
    budget = Budget(ops, burst=burst)
    probe = matcher(pattern, where, by_option, w, k, bins=BINS)
    for i in range(len(policies(probe, seed, sketch, graph))):
        results = []
        for name in BACKENDS:
            for split in ((), cuts):
                policy = policies(probe, seed, sketch, graph)[i]
                m, found, log = shed_run(c, policy, budget, name, split, bins_of(policy),
                                         trace=True)
                for key, (err, start) in best_per_point(found).items():
                    assert key in truth, type(policy).__name__
                    assert (err, -start) >= (truth[key][0], -truth[key][1])
                score = getattr(policy, "score", None)
                results.append((sorted_rows(found), m.stats["shed"], m.stats["skipped"],
                                None if score is None else np.asarray(score).tobytes(),
                                log_rows(m, log)))
        assert all(r == results[0] for r in results[1:]), type(policy).__name__


def lenient(m: Matcher, seed: int, sketch=None, graph=None) -> list:
    """Policies consulted only when the candidates exceed the credit (no ``ahead``, no
    reserve a full bucket cannot meet): with credit to spare they never shed."""
    out = policies(m, seed, graph=graph)
    if sketch is not None:
        out.append(HistoryPolicy(sketch, seed=seed, ahead=0.0, seed_reserve=0.0,
                                 advance_reserve=0.0, cover=None, proxy=False))
    return out


@SETTINGS
@given(case(max_events=24), st.integers(0, 2**16), st.data())
def test_policies_with_credit_to_spare_find_what_the_run_without_them_finds(c, seed, data):
    """No budget: every policy, the history's with its defaults too, is never asked. Credit
    to spare: the policies that are asked only when the candidates exceed it (the history
    policy's defaults shed the seeds of cells whose score is 0 whatever the credit, by
    design: SHEDDING.md 3, ``seed_reserve``)."""
    pattern, where, by_option, events, w, k = c
    sketch, graph = history_for(pattern, where, by_option, events, w, k)
    plain = matcher(pattern, where, by_option, w, k).match(events)
    cuts = cuts_of(data.draw, len(events))
    probe = matcher(pattern, where, by_option, w, k, bins=BINS)
    for budget, make in ((None, policies), (Budget(1e6, burst=1), lenient)):
        for i in range(len(make(probe, seed, sketch, graph))):
            policy = make(probe, seed, sketch, graph)[i]
            m, found, _ = shed_run(c, policy, budget, cuts=cuts, bins=bins_of(policy))
            assert sorted_rows(found) == sorted_rows(plain), (type(policy).__name__, budget)
            assert m.stats["shed"] == 0
