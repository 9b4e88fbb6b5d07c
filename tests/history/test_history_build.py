"""build_history against brute force on random streams; bin choice; the flights sketch size."""

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from acep import EventBatch, Matcher, Pattern, bundles
from acep.shedding import VectorBins
from history.build import build_history, choose_bins, traced_run
from history.sketch import Sketch

PATTERN = "a b c d"  # each type once: a trajectory prefix determines its node
ORDER = {t: i for i, t in enumerate("abcd")}


def _stream(draw_types, gaps, parts):
    t, events = 0.0, []
    for ty, gap, p in zip(draw_types, gaps, parts):
        t += gap
        events.append({"type": ty, "t": t, "g": p})
    return events


def _brute_graph(events, window, k, bins):
    """Every node of the merge-off run by enumeration, and its outcome from all trajectories.

    A node is a subsequence of one partition's events whose types follow the pattern order,
    spanning at most w, with at most k letters skipped; its errors are the skipped letters.
    """
    pattern = Pattern.compile(PATTERN)
    state_of = {t: pattern.automaton.l_states(i)[0] for i, t in enumerate(pattern.types)}
    found = Matcher(pattern, window, k, partition="g", all_trajectories=True).match(events)
    reach = {}  # (partition, trajectory prefix) -> first match point through it
    for m in found:
        ev = tuple(int(x) for x in m.events)
        for j in range(1, len(ev) + 1):
            key = (m.partition, ev[:j])
            reach[key] = min(reach.get(key, np.inf), m.point)
    n_cells = bins.n_cells(pattern.automaton.n_states, k)
    visits, succ = np.zeros(n_cells, np.int64), np.zeros(n_cells, np.int64)
    edges, reach_edges = {}, {}
    blist = bundles(found, window)
    nodes = {}
    by_part = {}
    for i, e in enumerate(events):
        if e["type"] in ORDER:  # other types never enter a node
                by_part.setdefault(e["g"], []).append(i)
    for part, idx in by_part.items():
        for n in range(1, 5):
            for sub in itertools.combinations(idx, n):
                order = [ORDER[events[i]["type"]] for i in sub]
                if any(b <= a for a, b in zip(order, order[1:])):
                    continue
                err = order[0] + sum(b - a - 1 for a, b in zip(order, order[1:]))
                tags = [events[i]["t"] for i in sub]
                if err > k or tags[-1] - tags[0] > window:
                    continue
                gap = tags[-1] - tags[-2] if n > 1 else 0.0
                cell = int(bins.cells(state_of[events[sub[-1]]["type"]], err,
                                      window - (tags[-1] - tags[0]), gap, k))
                nodes[(part, sub)] = cell
    for (part, sub), cell in nodes.items():
        visits[cell] += 1
        if len(sub) > 1:
            src = nodes[(part, sub[:-1])]
            edges[(src, cell)] = edges.get((src, cell), 0) + 1
        r = reach.get((part, sub))
        if r is not None:
            succ[cell] += 1
            b = next(i for i, x in enumerate(blist) if x.partition == part
                     and x.first <= r <= x.last)
            reach_edges[(cell, b)] = reach_edges.get((cell, b), 0) + 1
    assert set(reach) <= set(nodes)  # every prefix of a match is a node
    return visits, succ, edges, blist, reach_edges


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_build_history_equals_brute_force_from_all_trajectories(data):
    n = data.draw(st.integers(1, 16))
    types = data.draw(st.lists(st.sampled_from("abcdx"), min_size=n, max_size=n))
    gaps = data.draw(st.lists(st.integers(1, 3).map(float), min_size=n, max_size=n))
    parts = data.draw(st.lists(st.sampled_from("PQ"), min_size=n, max_size=n))
    window = float(data.draw(st.integers(1, 8)))
    k = data.draw(st.integers(0, 2))
    events = _stream(types, gaps, parts)
    bins = VectorBins((window / 3, 2 * window / 3), (1.5,))
    g = build_history(PATTERN, EventBatch.from_events(events), window, k, partition="g",
                      bins=bins, merge=False)
    visits, succ, edges, blist, reach_edges = _brute_graph(events, window, k, bins)
    assert g.visits.tolist() == visits.tolist()
    assert g.successes.tolist() == succ.tolist()
    assert {(int(s), int(d)): int(c)
            for s, d, c in zip(g.edge_src, g.edge_dst, g.edge_count)} == edges
    keys = g.partition_keys
    mine = [(keys[p], float(f), float(la), int(c)) for p, f, la, c in zip(
        g.bundle_partition, g.bundle_first, g.bundle_last, g.bundle_points)]
    theirs = [(b.partition, b.first, b.last, b.n_points) for b in blist]
    assert sorted(mine) == sorted(theirs)
    bundle_id = [mine.index(b) for b in theirs]  # acep.bundles orders partitions by repr
    assert {(int(c), int(b)): int(n)
            for c, b, n in zip(g.reach_cell, g.reach_bundle, g.reach_count)} == \
        {(c, bundle_id[b]): n for (c, b), n in reach_edges.items()}
    # with merging (what a device runs) the bundles are the same and every reached pair
    # is one the merge-off run reaches too
    merged = build_history(PATTERN, EventBatch.from_events(events), window, k, partition="g",
                           bins=bins)
    assert np.array_equal(merged.bundle_first, g.bundle_first)
    assert set(zip(merged.reach_cell.tolist(), merged.reach_bundle.tolist())) <= \
        {(c, bundle_id[b]) for c, b in reach_edges}
    assert merged.visits.sum() <= g.visits.sum()


def test_choose_bins_at_quantiles_without_empty_low_bins():
    rem = np.arange(10.0)
    gap = np.array([0.0] * 6 + [6.0, 6.5, 7.0, 9.0])  # seed nodes: gap 0
    bins = choose_bins(rem, gap, n_bins=2)
    assert bins.rem_edges == (4.5,)  # np.quantile's median of 0..9
    assert bins.gap_edges == ()  # the median gap is 0, the smallest: no edge
    bins = choose_bins(rem, gap, n_bins=4)
    assert bins.gap_edges == (6.375,) and len(bins.rem_edges) == 3
    assert choose_bins(np.zeros(5), np.zeros(5)).gap_edges == ()
    assert choose_bins(np.zeros(0), np.zeros(0)).rem_edges == ()


@pytest.mark.parametrize("n_bins", [0, -3, 2.5, True])
def test_a_bin_count_below_one_or_not_an_integer_is_refused(n_bins):
    events = EventBatch.from_events([{"type": "a", "t": 0.0}, {"type": "b", "t": 1.0}])
    with pytest.raises(ValueError, match=r"n_bins must be an integer >= 1 .* got"):
        build_history("a b", events, 2.0, 0, n_bins=n_bins)
    assert build_history("a b", events, 2.0, 0, n_bins=1).n_bundles == 1


def test_chosen_bins_spread_the_visits():
    rng = np.random.default_rng(3)
    events = [{"type": t, "t": float(i)} for i, t in enumerate(rng.choice(list("abcd"), 400))]
    g = build_history(PATTERN, EventBatch.from_events(events), 12.0, 1, n_bins=4)
    assert 2 <= g.n_rem <= 4 and 2 <= g.n_gap <= 4
    per_rem = g.visits.reshape(g.shape).sum(axis=(0, 1, 3))
    per_gap = g.visits.reshape(g.shape).sum(axis=(0, 1, 2))
    assert (per_rem > 0).all() and (per_gap > 0).all()
    # the same bins given explicitly give the same graph
    h = build_history(PATTERN, [EventBatch.from_events(events[:150]),
                                EventBatch.from_events(events[150:], position=150)],
                      12.0, 1, bins=VectorBins(tuple(g.rem_edges), tuple(g.gap_edges)))
    assert np.array_equal(h.visits, g.visits) and np.array_equal(h.reach_cell, g.reach_cell)


def test_traced_run_keeps_matches_and_partition_ids():
    events = [{"type": "a", "t": 1.0, "g": "P"}, {"type": "a", "t": 1.0, "g": "Q"},
              {"type": "b", "t": 2.0, "g": "Q"}]
    run = traced_run("a b", EventBatch.from_events(events), 5.0, 0, partition="g",
                     keep_matches=True, fields=None)
    assert run.partition_keys == ["P", "Q"] and run.partition.tolist() == [1]
    assert run.point.tolist() == [2.0] and len(run.matches) == 1
    assert {"position", "state", "start"} <= set(run.log)


@pytest.fixture(scope="module")
def flights_history():
    from acep.demo import DEMO, demo_events

    return build_history(DEMO["pattern"], demo_events(), DEMO["window"], DEMO["k"],
                         where=DEMO["where"], partition="origin")


def test_flights_sketch_fits_256_kib_and_is_accurate(flights_history):
    g = flights_history
    assert g.n_bundles > 50 and g.where == tuple(__import__("acep.demo").demo.DEMO["where"])
    s = Sketch.from_graph(g, hashes=16)
    assert s.nbytes <= 256 * 1024
    err = s.error_against(g)
    assert err["jaccard_mae"] < 0.15 and err["score_mae"] < 0.05
    assert err["proxy_shared_related"] > err["proxy_shared_random"]
