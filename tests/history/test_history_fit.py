"""Reserves fitted to a budget (history.fit, docs/SHEDDING.md section 10): the table a device
gets reproduces, on the training stream, the recall the fit chose it for, and it is never
worse there than the history's own scores."""

import msgpack
import numpy as np
import pytest
from support.history import random_batch
from support.sketches import KEY, resigned

import history.fit
from acep import EventBatch, Matcher, bundles
from acep.shedding import Budget, ScorePolicy
from history.build import build_history
from history.fit import (
    CANDIDATES,
    SEARCH_STARTS,
    SEARCH_VALUES,
    SLACK_VALUES,
    FitStream,
    candidate_tables,
    fit_budgets,
    fit_streams,
    matcher_args,
    windows_task,
)
from history.policies import HistoryPolicy
from history.sketch import Sketch, SketchError, cell_scores

PATTERN, W, K = "a b c d", 6.0, 1


def _recall(truth, found):
    """Bundle recall by brute force: a bundle is found when a found point lies in its span."""
    table = bundles(truth, W)
    hit = {i for i, b in enumerate(table) for p, t in zip(found.partition, found.point)
           if p == b.partition and b.first <= t <= b.last}
    return len(hit) / len(table)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_fitted_table_reproduces_the_chosen_recall_and_never_loses_to_the_history(seed):
    events = random_batch(seed)
    sketch = Sketch.from_graph(build_history(PATTERN, events, W, K, partition="g", n_bins=4))
    ratios = [0.1, 0.3, 0.6]
    fitted, report = fit_budgets(sketch, events, ratios, partition="g", burst=16,
                                 min_visits=5, seed=seed)
    truth = Matcher(PATTERN, W, K, partition="g").match(events)
    ops = report["ops_per_event"]
    assert fitted.fitted_ratios.tolist() == ratios and fitted.ops_per_event == ops
    assert report["bundles"] == len(bundles(truth, W))
    shipped = Sketch.from_bytes(fitted.to_bytes(KEY), KEY)
    for i, ratio in enumerate(ratios):
        row = report["ratios"][ratio]
        recall = row["bundle_recall"]
        assert set(recall) == set(CANDIDATES)
        best = max(recall.values())
        assert recall[row["chosen"]] == best
        assert CANDIDATES.index(row["chosen"]) == min(
            CANDIDATES.index(n) for n in CANDIDATES if recall[n] == best)
        assert recall[row["chosen"]] >= recall["history"]
        slack = row["slack"]
        assert slack["bundle_recall"][f"{sketch.default_cover_slack:g}"] == recall[row["chosen"]]
        budget = Budget(ratio * ops, 16)
        for s in (fitted, shipped):
            policy = HistoryPolicy(s, learning_rate=0.0, explore=0.0, seed=seed, budget=budget)
            assert np.allclose(policy.reserve, (1 - np.clip(s.fitted[i], 0, 1)) ** 2)
            assert policy.cover_slack == s.fitted_slack[i] == slack["chosen"]
            found = Matcher(PATTERN, W, K, partition="g", bins=s.bins(), budget=budget,
                            policy=policy).match(events)
            assert _recall(truth, found) == pytest.approx(
                slack["bundle_recall"][f"{slack['chosen']:g}"])
        plain = HistoryPolicy(sketch, learning_rate=0.0, explore=0.0, seed=seed, budget=budget)
        found = Matcher(PATTERN, W, K, partition="g", bins=sketch.bins(), budget=budget,
                        policy=plain).match(events)
        assert _recall(truth, found) == pytest.approx(recall["history"])


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_search_only_improves_and_the_device_reproduces_what_it_reports(seed):
    """Step 4 starts from one of the two best candidate tables, changes at most ``search``
    of its cells, each to one of ``SEARCH_VALUES``, never finds fewer training bundles than
    the table chosen before it, and the shipped table finds on the training stream exactly
    the recall it reports."""
    events = random_batch(seed)
    sketch = Sketch.from_graph(build_history(PATTERN, events, W, K, partition="g", n_bins=4))
    ratios = [0.05, 0.3, 0.6]
    plain, before = fit_budgets(sketch, events, ratios, partition="g", burst=32, min_visits=5)
    fitted, report = fit_budgets(sketch, events, ratios, partition="g", burst=32, min_visits=5,
                                 search=6)
    truth = Matcher(PATTERN, W, K, partition="g").match(events)
    for i, ratio in enumerate(ratios):
        row, start = report["ratios"][ratio], before["ratios"][ratio]
        assert row["chosen"] == start["chosen"]
        searched, chosen = row["searched"], row["bundle_recall"][row["chosen"]]
        ranked = sorted(CANDIDATES, key=lambda c: (-row["bundle_recall"][c], CANDIDATES.index(c)))
        assert searched["from"] in ranked[:SEARCH_STARTS]
        assert searched["bundle_recall"] >= chosen and searched["cells"] <= 6
        if searched["from"] == row["chosen"]:
            moved = np.flatnonzero(fitted.fitted[i] != plain.fitted[i])
            assert len(moved) == searched["changed"] <= searched["cells"]
            assert all(np.isclose(fitted.fitted[i][c], SEARCH_VALUES).any() for c in moved)
        if chosen == 1.0:
            assert searched == {"cells": searched["cells"], "changed": 0, "bundle_recall": 1.0,
                                "found": report["bundles"], "from": row["chosen"]}
        slack = row["slack"]["bundle_recall"]
        assert slack[f"{sketch.default_cover_slack:g}"] == pytest.approx(searched["bundle_recall"])
        budget = Budget(ratio * report["ops_per_event"], 32)
        policy = HistoryPolicy(fitted, learning_rate=0.0, explore=0.0, budget=budget)
        found = Matcher(PATTERN, W, K, partition="g", bins=fitted.bins(), budget=budget,
                        policy=policy).match(events)
        assert _recall(truth, found) == pytest.approx(max(slack.values()))


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_describe_names_the_table_the_sketch_ships(seed):
    """The line of each ratio starts with the table the sketch holds: the start of the
    winning search (which can be the runner-up of step 3), or step 3's choice without one."""
    events = random_batch(seed)
    sketch = Sketch.from_graph(build_history(PATTERN, events, W, K, partition="g", n_bins=4))
    for search in (0, 6):
        _, report = fit_budgets(sketch, events, [0.05, 0.3], partition="g", burst=32,
                                min_visits=5, search=search)
        for line, row in zip(history.fit.describe(report), report["ratios"].values()):
            shipped = row["searched"]["from"] if search else row["chosen"]
            assert line.split(": ", 1)[1].startswith(f"{shipped} reserves (training bundle recall ")


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_two_starts_end_at_least_where_the_best_start_alone_ends(seed, monkeypatch):
    events = random_batch(seed)
    sketch = Sketch.from_graph(build_history(PATTERN, events, W, K, partition="g", n_bins=4))
    options = {"partition": "g", "burst": 16, "min_visits": 5, "search": 6}
    _, both = fit_budgets(sketch, events, [0.1, 0.3], **options)
    monkeypatch.setattr(history.fit, "SEARCH_STARTS", 1)
    _, alone = fit_budgets(sketch, events, [0.1, 0.3], **options)
    for ratio, row in both["ratios"].items():
        one = alone["ratios"][ratio]["searched"]
        assert one["from"] == row["chosen"]
        assert row["searched"]["bundle_recall"] >= one["bundle_recall"]


def test_search_gains_on_a_tight_budget():
    """Over a few streams the search finds more training bundles somewhere: a search that
    never moved a cell would pass the test above."""
    gained = 0
    for seed in (1, 2, 3, 4):
        events = random_batch(seed)
        sketch = Sketch.from_graph(build_history(PATTERN, events, W, K, partition="g",
                                                 n_bins=4))
        _, report = fit_budgets(sketch, events, [0.15, 0.3], partition="g", burst=16,
                                min_visits=5, search=6)
        for row in report["ratios"].values():
            gained += row["searched"]["bundle_recall"] > row["bundle_recall"][row["chosen"]]
    assert gained > 0


def test_a_stream_whose_unconstrained_run_is_shipped_fits_the_same():
    """The Spark trainer runs each stream unconstrained once and ships the outcome (msgpack)
    to its later jobs; the fit must not tell the difference."""
    events = random_batch(4)
    sketch = Sketch.from_graph(build_history(PATTERN, events, W, K, partition="g", n_bins=4))
    args = matcher_args(sketch, "g")
    first = FitStream(events)
    assert first.truth_state() is None
    first.truth(args)
    state = msgpack.unpackb(msgpack.packb(first.truth_state()))
    shipped = FitStream(events, state)
    assert shipped.truth_state() == first.truth_state()
    calls = []

    def map_streams(tasks):
        calls.append(len(tasks))
        return [[task(first if len(calls) == 1 else FitStream(events, state))]
                for task in tasks]

    ratios = [0.1, 0.3]
    fitted, report = fit_streams(sketch, ratios, map_streams, args, burst=16, min_visits=5)
    alone, expected = fit_budgets(sketch, events, ratios, partition="g", burst=16,
                                  min_visits=5)
    default = f"{sketch.default_cover_slack:g}"
    open_ = sum(row["slack"]["bundle_recall"][default] < 1 for row in report["ratios"].values())
    assert calls == [1, 2, 2] + ([open_] if open_ else []) and report == expected
    assert fitted.to_bytes(KEY) == alone.to_bytes(KEY)


def _fitted_sketch():
    events = random_batch(5, 600)
    sketch = Sketch.from_graph(build_history(PATTERN, events, W, K, partition="g", n_bins=4))
    n = sketch.n_cells
    return sketch.with_fitted(0.5, np.full(n, 0.9), 2.0).with_fitted(0.1, np.full(n, 0.2), 2.0)


def test_the_policy_takes_the_table_fitted_nearest_its_budget():
    s = _fitted_sketch()
    assert s.fitted_ratios.tolist() == [0.1, 0.5]
    assert s.reserve_score(None) is None
    assert s.reserve_score(0.2)[0] == pytest.approx(0.2)  # ratio 0.1
    assert s.reserve_score(0.3)[0] == pytest.approx(0.2)  # 0.15: nearer 0.1 in log scale
    assert s.reserve_score(0.5)[0] == pytest.approx(0.9)  # 0.25: nearer 0.5 in log scale
    assert s.reserve_score(100.0)[0] == pytest.approx(0.9)
    p = HistoryPolicy(s, budget=Budget(0.2, 64))
    assert np.allclose(p.reserve, (1 - 0.2) ** 2) and np.allclose(p.reserve_adv, 0.1 * 0.8 ** 2)
    assert np.array_equal(p.score, s.score.astype(np.float64))  # the scores still rank
    unfitted = Sketch.from_graph(build_history(PATTERN, random_batch(5, 600), W, K, partition="g",
                                               n_bins=4))
    assert unfitted.reserve_score(1.0) is None
    replaced = s.with_fitted(0.1, np.full(s.n_cells, 0.4), 3.0)
    assert replaced.fitted_ratios.tolist() == [0.1, 0.5] and replaced.ops_per_event == 3.0
    assert replaced.reserve_score(0.3)[0] == pytest.approx(0.4)
    with pytest.raises(ValueError, match="finite entries"):
        s.with_fitted(0.2, np.zeros(3), 1.0)
    with pytest.raises(ValueError, match="positive"):
        s.with_fitted(0.0, np.zeros(s.n_cells), 1.0)


def test_score_policy_reserves_from_a_separate_table():
    score, rs = np.linspace(0, 1, 6), np.full(6, 0.5)
    p = ScorePolicy(score, seed_reserve=1.0, advance_reserve=0.5, reserve_power=2,
                    reserve_score=rs)
    assert np.allclose(p.reserve, 0.25) and np.allclose(p.reserve_adv, 0.125)
    assert np.array_equal(p.score, score)
    with pytest.raises(ValueError, match="one entry per cell"):
        ScorePolicy(score, seed_reserve=1.0, reserve_score=np.zeros(5))
    with pytest.raises(ValueError, match="reserve_score must be finite"):
        ScorePolicy(score, seed_reserve=1.0, reserve_score=np.full(6, np.nan))


def test_fitted_tables_round_trip_and_an_unfitted_sketch_writes_none():
    s = _fitted_sketch()
    back = Sketch.from_bytes(s.to_bytes(KEY), KEY)
    assert np.array_equal(back.fitted, s.fitted) and back.ops_per_event == 2.0
    assert np.array_equal(back.fitted_ratios, s.fitted_ratios)
    plain = Sketch.from_graph(build_history(PATTERN, random_batch(5, 600), W, K, partition="g",
                                            n_bins=4))
    doc = msgpack.unpackb(msgpack.unpackb(plain.to_bytes(KEY), raw=False)["payload"],
                          raw=False)
    assert not {"fitted", "fitted_ratios", "ops_per_event"} & set(doc)
    assert len(Sketch.from_bytes(plain.to_bytes(KEY), KEY).fitted_ratios) == 0


def test_fitted_slacks_round_trip_and_a_sketch_without_them_takes_the_default():
    s = _fitted_sketch()
    assert s.fitted_slack.tolist() == [s.default_cover_slack] * 2
    s = s.with_fitted(0.5, s.fitted[1], 2.0, slack=0.0)
    back = Sketch.from_bytes(s.to_bytes(KEY), KEY)
    assert back.fitted_slack.tolist() == [s.default_cover_slack, 0.0]
    assert back.cover_slack(0.2) == s.default_cover_slack and back.cover_slack(1.0) == 0.0
    assert back.cover_slack(None) == s.default_cover_slack
    assert HistoryPolicy(back, budget=Budget(1.0, 64)).cover_slack == 0.0
    assert HistoryPolicy(back, budget=Budget(1.0, 64), cover_slack=0.7).cover_slack == 0.7
    older = _add_fitted([0.1], 1)  # a sketch fitted before slacks were: the default
    assert Sketch.from_bytes(resigned(older), KEY).fitted_slack.tolist() == [
        Sketch.from_bytes(resigned(lambda d: None), KEY).default_cover_slack]
    with pytest.raises(ValueError, match="cover slack must be in"):
        s.with_fitted(0.1, s.fitted[0], 2.0, slack=-1.0)


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5, 6])
def test_the_fitted_slack_is_the_best_tried_and_the_device_reproduces_it(seed):
    """Step 5 replays the budget's table with the default slack and each of SLACK_VALUES,
    keeps the one that finds the most training bundles (ties: the default), and every
    recall it reports is the one a device finds with that slack."""
    events = random_batch(seed)
    sketch = Sketch.from_graph(build_history(PATTERN, events, W, K, partition="g", n_bins=4))
    ratios = [0.05, 0.1, 0.3]
    fitted, report = fit_budgets(sketch, events, ratios, partition="g", burst=32, min_visits=5)
    truth = Matcher(PATTERN, W, K, partition="g").match(events)
    default = f"{sketch.default_cover_slack:g}"
    for i, ratio in enumerate(ratios):
        slack = report["ratios"][ratio]["slack"]
        recall = slack["bundle_recall"]
        if recall[default] < 1.0:
            assert set(recall) == {default} | {f"{v:g}" for v in SLACK_VALUES}
        best = max(recall.values())
        assert recall[f"{slack['chosen']:g}"] == best
        assert recall[default] < best or slack["chosen"] == sketch.default_cover_slack
        assert fitted.fitted_slack[i] == slack["chosen"]
        budget = Budget(ratio * report["ops_per_event"], 32)
        for value, r in recall.items():
            policy = HistoryPolicy(fitted, learning_rate=0.0, explore=0.0, budget=budget,
                                   cover_slack=float(value))
            found = Matcher(PATTERN, W, K, partition="g", bins=fitted.bins(), budget=budget,
                            policy=policy).match(events)
            assert _recall(truth, found) == pytest.approx(r)


def test_some_random_streams_fit_a_slack_other_than_the_default():
    """The step can change what a device runs: on a few of these streams it does."""
    moved = 0
    for seed in (1, 2, 3, 4, 5, 6):
        events = random_batch(seed)
        sketch = Sketch.from_graph(build_history(PATTERN, events, W, K, partition="g", n_bins=4))
        fitted, _ = fit_budgets(sketch, events, [0.05, 0.1, 0.3], partition="g", burst=32,
                                min_visits=5)
        moved += int(np.sum(fitted.fitted_slack != sketch.default_cover_slack))
    assert moved > 0


def _f8(values):
    return {"dtype": "<f8", "shape": [len(values)], "data": np.asarray(values, "<f8").tobytes()}


def _add_fitted(ratios, table_rows, ops=2.0, cells=24, dtype="<f4"):
    def change(doc):
        doc["ops_per_event"] = ops
        doc["fitted_ratios"] = {"dtype": "<f8", "shape": [len(ratios)],
                                "data": np.asarray(ratios, "<f8").tobytes()}
        data = np.full((table_rows, cells), 0.5, dtype).tobytes()
        doc["fitted"] = {"dtype": dtype, "shape": [table_rows, cells], "data": data}
    return change


@pytest.mark.parametrize("change, message", [
    (_add_fitted([0.5, 0.1], 2), "'fitted_ratios': not positive, finite and strictly"),
    (_add_fitted([-0.5], 1), "'fitted_ratios'"),
    (_add_fitted([0.1, 0.5], 1), r"'fitted': shape \(1, 24\) for 2 ratios and 24 cells"),
    (_add_fitted([0.1], 1, cells=23), "'fitted': shape"),
    (_add_fitted([0.1], 1, dtype="<f8"), "'fitted': dtype"),
    (_add_fitted([0.1], 1, ops=0.0), "'ops_per_event': 0 with fitted tables"),
    (_add_fitted([0.1], 1, ops=float("inf")), "'ops_per_event': not finite"),
    (lambda d: (_add_fitted([0.1], 1)(d), d.pop("ops_per_event")), "'ops_per_event'"),
    (lambda d: (_add_fitted([0.1], 1)(d), d.update(fitted_slack=_f8([0.5, 0.5]))),
     "'fitted_slack': 2 entries for 1 ratios"),
    (lambda d: (_add_fitted([0.1], 1)(d), d.update(fitted_slack=_f8([-0.5]))),
     r"'fitted_slack': not finite or outside \[0, 1\]"),
    (lambda d: (_add_fitted([0.1], 1)(d), d.update(fitted_slack=_f8([1.5]))),
     r"'fitted_slack': not finite or outside \[0, 1\]"),
    (lambda d: (_add_fitted([0.1], 1)(d), d.update(fitted_slack=_f8([np.nan]))),
     "'fitted_slack': not finite"),
    (lambda d: d.update(fitted_slack=_f8([0.5])), "'fitted_slack': without fitted tables"),
])
def test_malformed_fitted_tables_name_the_field(change, message):
    with pytest.raises(SketchError, match=message):
        Sketch.from_bytes(resigned(change), KEY)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_windows_candidate_rates_cells_on_the_match_windows_alone(seed):
    """Step 2's ``windows`` table: the history's rule applied to the unconstrained run over
    only the events within W before a match point of their partition (found here by brute
    force), in the sketch's cells."""
    events = random_batch(seed, 800)
    sketch = Sketch.from_graph(build_history(PATTERN, events, W, K, partition="g", n_bins=4))
    truth = Matcher(PATTERN, W, K, partition="g").match(events)
    keys = events.columns["g"].tolist()
    inside = [i for i, (k, t) in enumerate(zip(keys, events.tags.tolist()))
              if any(k == p and q - W <= t <= q
                     for p, q in zip(truth.partition.tolist(), truth.point.tolist()))]
    assert 0 < len(inside) < len(events)
    subset = EventBatch.from_events([events.to_events()[i] for i in inside])
    oracle = build_history(PATTERN, subset, W, K, partition="g", bins=sketch.bins())
    counts = windows_task(matcher_args(sketch, "g"), sketch, FitStream(events))
    assert counts["visits"].tolist() == oracle.visits.tolist()
    assert counts["successes"].tolist() == oracle.successes.tolist()
    table = candidate_tables(sketch.score, counts["visits"], counts["successes"], 5,
                             cell_scores(counts["visits"], counts["successes"]))["windows"]
    assert np.allclose(table, Sketch.from_graph(oracle).score)
