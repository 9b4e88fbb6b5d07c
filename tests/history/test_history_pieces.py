"""Histories built in chunk pieces (history.pieces, trainer.chunks) equal one whole run.

No Spark here: the chunking rule and the piece arithmetic are checked in one process on many
random streams, against ``build_history`` over the whole stream (the Spark job adds only the
plumbing, checked in test_trainer.py).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from acep import EventBatch, Pattern
from history import pieces as P
from history.build import build_history, choose_bins
from history.graph import HistoryGraph
from trainer.chunks import choose_plan

PATTERNS = [  # text, window, k, where
    ("a b+ c", 5.0, 1, ["c.v > a.v"]),
    ("a (b|c) d", 4.0, 2, []),
    ("a+ b", 3.0, 0, []),
    ("a b c d", 6.0, 1, ["d.v >= b.v + 1"]),
]


@st.composite
def streams(draw, max_events: int = 70):
    n = draw(st.integers(1, max_events))
    gaps = draw(st.lists(st.sampled_from([0, 0, 1, 1, 2, 3, 7]), min_size=n, max_size=n))
    return EventBatch.from_events([
        {"type": draw(st.sampled_from("abcd")), "t": float(t),
         "p": draw(st.sampled_from(["x", "y", "z"])), "v": float(draw(st.integers(0, 4)))}
        for t in np.cumsum(gaps)])


def subset(batch: EventBatch, rows: np.ndarray) -> EventBatch:
    return EventBatch(batch.type_codes[rows], batch.type_names, batch.tags[rows],
                      {k: v[rows] for k, v in batch.columns.items()}, 0, batch.source, None,
                      batch.tag_is_time)


def chunked_history(batch: EventBatch, pattern, plan, bins=None, n_bins: int = 8):
    """What the Spark job computes, in one process: units of (key group, chunk)."""
    text, window, k, where = pattern
    keys = batch.columns["p"]
    group = np.array([hash(x) % plan.key_groups for x in keys]) if plan.key_groups > 1 \
        else np.zeros(len(batch), int)
    rows, chunks = plan.chunks_of(batch.tags)
    units = [(c, subset(batch, rows[(chunks == c) & (group[rows] == g)]))
             for c in range(plan.n_chunks) for g in range(plan.key_groups)]
    units = [(c, ev) for c, ev in units if len(ev)]
    common = {"where": where, "partition": "p"}
    if bins is None:
        rem, gap = P.counts_from_rows(pa.concat_tables(
            [P.bin_rows(text, ev, window, k, plan.owned(c), **common) for c, ev in units]))
        bins = P.bins_from_counts(rem, gap, n_bins)
    rows_t = pa.concat_tables([P.piece_rows(text, ev, window, k, bins, plan.owned(c), **common)
                               for c, ev in units])
    n_states = Pattern.compile(text, where).automaton.n_states
    return P.graph_from_parts(text, window, k, n_states, bins, where=where,
                              partition_by="p", **P.parts_from_rows(rows_t))


@settings(max_examples=150, deadline=None)
@given(batch=streams(), which=st.integers(0, len(PATTERNS) - 1),
       stretch=st.floats(1.0, 4.0), key_groups=st.integers(1, 3))
def test_chunked_history_equals_one_run(batch, which, stretch, key_groups):
    pattern = PATTERNS[which]
    text, window, k, where = pattern
    plan = choose_plan(batch.tags.min(), batch.tags.max(), window, before=0.0, after=window,
                       parallelism=2, chunk=window * stretch, key_groups=key_groups)
    whole = build_history(text, batch, window, k, where=where, partition="p").canonical()
    assert chunked_history(batch, pattern, plan).to_bytes() == whole.to_bytes()


def test_random_streams_have_nodes_and_bundles_across_chunk_edges():
    """The property above is not vacuous: bundles and nodes do cross chunk edges."""
    rng = np.random.default_rng(3)
    n = 400
    batch = EventBatch.from_events([
        {"type": str(rng.choice(list("abcd"))), "t": float(t), "p": str(rng.choice(["x", "y"])),
         "v": float(rng.integers(0, 5))} for t in np.cumsum(rng.integers(0, 3, n))])
    text, window, k, where = PATTERNS[0]
    plan = choose_plan(batch.tags.min(), batch.tags.max(), window, before=0.0, after=window,
                       parallelism=2, chunk=window)
    whole = build_history(text, batch, window, k, where=where, partition="p").canonical()
    edges = np.array([plan.owned(c)[1] for c in range(plan.n_chunks - 1)])
    crossing = [(f, last) for f, last in zip(whole.bundle_first, whole.bundle_last)
                if np.any((edges > f) & (edges <= last))]
    assert plan.n_chunks > 10 and len(crossing) > 3
    assert chunked_history(batch, PATTERNS[0], plan).to_bytes() == whole.to_bytes()


@settings(max_examples=200, deadline=None)
@given(values=st.lists(st.integers(-5, 30), min_size=1, max_size=60),
       n_bins=st.integers(2, 9))
def test_bins_from_value_counts_equal_quantiles_of_all_values(values, n_bins):
    a = np.array(values, dtype=np.float64)
    v, c = np.unique(a, return_counts=True)
    assert P.bins_from_counts((v, c), (v[::-1], c[::-1]), n_bins) == choose_bins(a, a, n_bins)


def test_weighted_quantiles_match_numpy():
    rng = np.random.default_rng(0)
    for _ in range(50):
        a = rng.integers(0, 40, rng.integers(1, 300)).astype(float) * 0.5
        v, c = np.unique(a, return_counts=True)
        qs = np.linspace(0, 1, 11)
        assert np.array_equal(P.weighted_quantiles(v, c, qs), np.quantile(a, qs))


def test_canonical_order_does_not_depend_on_partition_order():
    rng = np.random.default_rng(1)
    rows = [{"type": str(rng.choice(list("abc"))), "t": float(i // 2),
             "p": str(rng.choice(["x", "y", "z"])), "v": 0.0} for i in range(300)]
    text, window, k, _ = PATTERNS[1]
    first = build_history(text, EventBatch.from_events(rows), window, k, partition="p")
    rows_b = sorted(rows, key=lambda r: (r["t"], r["p"] != "z"))  # z first at equal tags
    second = build_history(text, EventBatch.from_events(rows_b), window, k, partition="p")
    assert first.partition_keys != second.partition_keys
    assert first.canonical().to_bytes() == second.canonical().to_bytes()
    back = HistoryGraph.from_bytes(first.canonical().to_bytes())
    assert back.n_bundles == first.n_bundles and back.partition_keys == sorted(
        set(first.partition_keys[p] for p in first.bundle_partition))


def test_a_point_no_chunk_reported_is_refused():
    empty = (np.zeros(0, object), np.zeros(0))
    with pytest.raises(ValueError, match="no chunk reported"):
        P.graph_from_parts("a b", 2.0, 0, 3, choose_bins([], []), cells={
            P.VISIT: (np.array([0]), np.array([1])), P.SUCCESS: (np.array([0]), np.array([1]))},
            edges=(np.zeros(0, int), np.zeros(0, int), np.zeros(0, int)), points=empty,
            reach=(np.array([P.encode_key("x")], object), np.array([1.0]), np.array([0]),
                   np.array([1])))
