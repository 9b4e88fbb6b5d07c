"""Context trees (docs/SHEDDING.md 13): the event context the kernel computes, the cells a
tree splits, the files that carry a tree, and the tree a history build fits.

The kernel's context is checked against a direct sum over each partition's earlier events;
its cells against the numpy formula of ``VectorBins.cells`` with ``ContextTree.leaves``.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.strategies import case

from acep import backend
from acep._checks import ParameterError
from acep.events import EventBatch
from acep.matcher import Matcher
from acep.shedding import Budget, ContextTree, ScorePolicy, VectorBins
from history.build import build_history, fit_context
from history.graph import HistoryFormatError, HistoryGraph
from history.sketch import Sketch, SketchError

BACKENDS = ["compiled", "python"] if backend() == "compiled" else ["python"]
SETTINGS = settings(max_examples=120, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
KEY = b"context tests"


@st.composite
def trees(draw, depth=3):
    """A random context tree in the layout of ``ContextTree`` (children after parents)."""
    feature, threshold, left, right = [], [], [], []
    leaves = [0]

    def grow(level):
        i = len(feature)
        feature.append(-1)
        threshold.append(0.0)
        left.append(0)
        right.append(0)
        if level < depth and draw(st.booleans()):
            feature[i] = draw(st.integers(0, 1))
            threshold[i] = draw(st.floats(0.0, 6.0))
            left[i] = grow(level + 1)
            right[i] = grow(level + 1)
        else:
            left[i] = leaves[0]
            leaves[0] += 1
        return i
    grow(0)
    return ContextTree(feature, threshold, left, right)


def expected_context(events: list[dict], w: float, partition: str | None):
    """Per event: the sum of exp(-(t - t_j) / w) over its partition's events so far (itself
    included), and the time since the partition's previous event, at most ``w``."""
    act, idle, seen = [], [], {}
    for e in events:
        key = e.get(partition) if partition else None
        before = seen.setdefault(key, [])
        t = e["t"]
        if w > 0:
            act.append(1.0 + sum(np.exp(-(t - s) / w) for s in before))
        else:
            act.append(1.0)
        idle.append(min(t - before[-1], w) if before else w)
        before.append(t)
    return np.array(act), np.array(idle)


def traced(pattern, where, events, w, k, bins, **options):
    m = Matcher(pattern, window=w, k=k, where=where, bins=bins, trace=True, **options)
    m.match(EventBatch.from_events(events))
    m.flush()
    return m, m.take_node_log()


@SETTINGS
@given(case(), st.sampled_from(BACKENDS))
def test_the_node_log_holds_each_events_partition_activity(c, kernel):
    pattern, where, events, w, k = c
    m, log = traced(pattern, where, events, w, k, VectorBins((1.0,), (0.5,)), backend=kernel)
    act, idle = expected_context(events, w, m.partition)
    pos = log["position"].astype(np.int64)
    assert np.allclose(log["act"], act[pos], rtol=1e-9, atol=1e-12)
    assert np.allclose(log["idle"], idle[pos], rtol=1e-9, atol=1e-12)


@SETTINGS
@given(case(), trees(), st.sampled_from(BACKENDS), st.integers(0, 3))
def test_the_kernels_cells_are_the_trees_leaves_of_the_bins_cells(c, tree, kernel, ops):
    """With or without a budget, a node's cell is its vector's cell split by the tree leaf
    of the event that made it, as ``VectorBins.cells`` computes it."""
    pattern, where, events, w, k = c
    bins = VectorBins((1.0, 3.0), (0.5,), tree)
    n_states = Matcher(pattern, window=w, k=k, where=where).pattern.automaton.n_states
    policy = ScorePolicy(np.linspace(0, 1, bins.n_cells(n_states, k)))
    _, log = traced(pattern, where, events, w, k, bins, backend=kernel,
                    budget=Budget(float(ops), burst=1), policy=policy)
    want = bins.cells(log["state"], log["err"], w - (log["tag"] - log["start"]), log["gap"], k,
                      log["act"], log["idle"])
    assert np.array_equal(log["cell"], want)
    assert np.all(log["cell"] < bins.n_cells(n_states, k))


@SETTINGS
@given(trees(), st.lists(st.tuples(st.floats(0, 8), st.floats(0, 8)), min_size=1, max_size=30))
def test_tree_leaves_follow_the_splits(tree, points):
    """A leaf is the one the conditions of ``describe`` lead to."""
    act, idle = np.array(points).T
    leaves = tree.leaves(act, idle)
    assert set(leaves.tolist()) <= set(range(tree.n_leaves))
    for a, i, leaf in zip(act, idle, leaves):
        node = 0
        while tree.feature[node] >= 0:
            v = (a, i)[tree.feature[node]]
            node = tree.left[node] if v <= tree.threshold[node] else tree.right[node]
        assert tree.left[node] == leaf


@pytest.mark.parametrize("arrays, problem", [
    (([0], [1.0], [0], [0]), "children must come after"),
    (([0, -1, -1], [1.0, 0, 0], [1, 0, 0], [2, 0, 0]), "numbered 0, 1"),
    (([2, -1, -1], [1.0, 0, 0], [1, 0, 1], [2, 0, 0]), "feature must be -1"),
    (([0, -1, -1], [1.0, 0], [1, 0, 1], [2, 0, 0]), "must have one entry"),
    (([0, -1, -1], [float("nan"), 0, 0], [1, 0, 1], [2, 0, 0]), "thresholds finite"),
])
def test_a_bad_tree_is_refused_naming_the_problem(arrays, problem):
    with pytest.raises(ParameterError, match=problem):
        ContextTree(*arrays)


def _bursty_events(n=1500, seed=5) -> list[dict]:
    """Three sensors whose event rate switches between busy and quiet spells."""
    rng = np.random.default_rng(seed)
    busy = np.repeat(rng.random(n // 50) < 0.5, 50)[:n]
    tags = np.cumsum(np.where(busy, rng.exponential(0.2, n), rng.exponential(2.0, n)))
    return [{"type": str(rng.choice(list("abc"))), "t": float(t), "s": f"s{rng.integers(3)}"}
            for t in tags]


SENSOR_EVENTS = _bursty_events()


def _context_history(context=("act", "idle"), leaves=4):
    return build_history("a b c", EventBatch.from_events(SENSOR_EVENTS), 4.0, 0, partition="s",
                         context=context, context_leaves=leaves)


def test_a_context_history_splits_the_same_nodes_as_the_plain_one():
    """The tree only splits cells: summed over its leaves, every cell has the visits,
    successes and bundles of the history built with the same bins and no tree."""
    split = _context_history()
    plain = build_history("a b c", EventBatch.from_events(SENSOR_EVENTS), 4.0, 0, partition="s",
                          bins=VectorBins(tuple(split.rem_edges), tuple(split.gap_edges)))
    c = split.n_ctx
    assert 2 <= c <= 4 and split.n_cells == plain.n_cells * c
    assert np.array_equal(split.visits.reshape(-1, c).sum(1), plain.visits)
    assert np.array_equal(split.successes.reshape(-1, c).sum(1), plain.successes)
    assert split.n_bundles == plain.n_bundles


def test_a_context_tree_travels_in_history_and_sketch_files(tmp_path):
    graph = _context_history()
    graph.save(tmp_path / "h.acep")
    again = HistoryGraph.load(tmp_path / "h.acep")
    assert again.context == graph.context and np.array_equal(again.visits, graph.visits)
    sketch = Sketch.from_graph(again)
    loaded = Sketch.from_bytes(sketch.to_bytes(KEY), KEY)
    assert loaded.context == graph.context and loaded.bins() == graph.bins()
    assert loaded.n_cells == graph.n_cells


def test_a_damaged_context_field_is_refused_by_name():
    from history import _format

    graph = _context_history()
    doc = _format.loads(_format.unsealed(_format.loads_envelope(
        graph.to_bytes(), HistoryFormatError, "history", 1 << 30), HistoryFormatError),
        HistoryFormatError, "history payload", 1 << 30)
    doc["context"]["left"][0] = 0  # the root's child is itself: a walk would never end
    with pytest.raises(HistoryFormatError, match="field 'context'.*children must come after"):
        HistoryGraph._from_doc(doc)
    sketch = Sketch.from_graph(graph)
    payload = _format.loads(sketch._payload(), SketchError, "sketch", 1 << 30, 1 << 20)
    payload["context"] = {"feature": [0]}
    with pytest.raises(SketchError, match="field 'context'"):
        Sketch._from_doc(payload)


def test_a_sketch_with_a_context_tree_runs_a_budget():
    """The device side: the sketch's bins bring the tree into the kernel, whose cells stay
    within the sketch's table."""
    sketch = Sketch.from_graph(_context_history())
    m = Matcher("a b c", window=4.0, k=0, partition="s", bins=sketch.bins(),
                budget=Budget(0.3, burst=4), policy=ScorePolicy(sketch.score.astype(float)),
                trace=True)
    found = m.match(EventBatch.from_events(SENSOR_EVENTS))
    log = m.take_node_log()
    assert len(found) > 0 and m.stats["shed"] > 0
    assert log["cell"].max() < sketch.n_cells and log["cell"].min() >= 0


def test_fit_context_finds_the_split_that_decides_the_outcome():
    """Nodes succeed when their partition was busy (act above 5): the tree's first split is
    there, and its leaves separate the outcomes."""
    rng = np.random.default_rng(3)
    n = 20_000
    act, idle = rng.uniform(1, 10, n), rng.uniform(0, 4, n)
    success = act > 5
    log = {"state": np.zeros(n, np.int32), "err": np.zeros(n, np.int32),
           "tag": np.full(n, 5.0), "start": np.full(n, 4.0), "gap": np.full(n, 0.5),
           "reach": np.where(success, 5.0, np.nan), "merged": np.zeros(n, np.uint8),
           "act": act, "idle": idle}
    tree = fit_context(log, VectorBins((), ()), 0, 4.0, ("act", "idle"), leaves=2)
    assert tree.n_leaves == 2 and tree.feature[0] == 0
    assert abs(tree.threshold[0] - 5.0) < 0.05
    leaf = tree.leaves(act, idle)
    assert {frozenset(success[leaf == x].tolist()) for x in (0, 1)} == {
        frozenset([True]), frozenset([False])}


def test_unknown_context_features_are_refused():
    with pytest.raises(ValueError, match="context features must be some of act, idle"):
        _context_history(context=("speed",))


def test_acep_history_build_fits_a_context_tree_the_sketch_carries(tmp_path, capsys):
    from acep.cli import main

    events = tmp_path / "events.jsonl"
    events.write_text("".join(f'{{"type": "{e["type"]}", "t": {e["t"]!r}, "s": "{e["s"]}"}}\n'
                              for e in SENSOR_EVENTS))
    key = tmp_path / "key"
    key.write_text("secret\n")
    out, sketch = tmp_path / "h.acep", tmp_path / "s.sketch"
    argv = ["history", "build", str(events), "-p", "a b c", "-w", "4", "-k", "0",
            "--partition", "s", "-o", str(out), "--sketch", str(sketch), "--key-file", str(key),
            "--context", "act,idle", "--context-leaves", "3", "--fit", "0.25"]
    assert main(argv) == 0
    graph = HistoryGraph.load(out)
    assert graph.n_ctx == 3 and graph.context == _context_history(leaves=3).context
    assert Sketch.load(sketch, b"secret").context == graph.context
    capsys.readouterr()
    assert main(["history", "inspect", str(out)]) == 0
    shown = capsys.readouterr().out
    assert "every cell split in 3" in shown and "leaf 2:" in shown


@pytest.mark.parametrize("option, value, said", [
    ("--context", "act,speed", "give some of act, idle"),
    ("--context", "act,act", "each once"),
    ("--context-leaves", "1", "context leaves"),
])
def test_acep_history_build_refuses_a_bad_context_option(tmp_path, capsys, option, value, said):
    from acep.cli import main

    argv = ["history", "build", str(tmp_path / "e.jsonl"), "-p", "a b", "-w", "4",
            "-o", str(tmp_path / "h"), "--context", "act", option, value]
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert option in err and said in err and not (tmp_path / "h").exists()
