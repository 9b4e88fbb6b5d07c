"""`history.evaluate` and `acep history evaluate` (docs/SHEDDING.md section 11): every figure
of a row is what the policy's own run gives, scored by brute force against the unconstrained
run; the CLI prints and writes those figures; bad input is refused by name."""

import json

import numpy as np
import pytest
from support.cli import FIXTURE, run_acep
from support.history import random_batch
from support.sketches import KEY, built_sketch

from acep import Matcher, bundles
from acep.shedding import Budget, BudgetError, OldestFirstPolicy
from history.build import build_history, traced_run
from history.evaluate import DEFAULT_POLICIES, POLICIES, evaluate
from history.fit import fit_budgets
from history.policies import (
    CompletionPolicy,
    HindsightPolicy,
    HistoryPolicy,
    HSpicePolicy,
    HybridPolicy,
    PSpicePolicy,
)
from history.sketch import Sketch

PATTERN, W, K = "a b c d", 6.0, 1


def _graph(events):
    return build_history(PATTERN, events, W, K, partition="g", n_bins=4)


def _sketch(events, fit=(0.1, 0.4), graph=None):
    sketch = Sketch.from_graph(graph or _graph(events))
    return fit_budgets(sketch, events, fit, partition="g", burst=16, min_visits=5)[0]


def _brute(truth, found):
    """(bundle recall, point recall, precision): a bundle is found when a found point of its
    partition lies in its span; points compare as (partition, point) pairs."""
    table = bundles(truth, W)
    hit = {i for i, b in enumerate(table) for p, t in zip(found.partition, found.point)
           if p == b.partition and b.first <= t <= b.last}
    true = set(zip(truth.partition, truth.point))
    got = set(zip(found.partition, found.point))
    return (len(hit) / len(table), len(true & got) / len(true),
            len(true & got) / len(got) if got else None)


@pytest.mark.parametrize("seed", [11, 12, 13, 14])
def test_every_row_is_the_policys_own_run_scored_by_brute_force(seed):
    train, test = random_batch(seed), random_batch(seed + 100)
    graph = _graph(train)
    sketch = _sketch(train, graph=graph)
    ratios = [0.05, 0.2, 0.5]
    seen = []
    result = evaluate(sketch, test, ratios, partition="g", burst=32, seed=seed,
                      policies=POLICIES, graph=graph,
                      on_row=lambda row, truth: seen.append((row, truth)))
    run = traced_run(PATTERN, test, W, K, partition="g", fields=None)
    truth = Matcher(PATTERN, W, K, partition="g").match(test)
    ops = Matcher(PATTERN, W, K, partition="g")
    ops.match(test)
    t = result["truth"]
    assert t["bundles"] == len(bundles(truth, W)) and t["match_points"] == len(truth)
    assert t["ops_per_event"] == ops.stats["candidates"] / len(test)
    assert [(r["ratio"], r["policy"]) for r in result["rows"]] == [
        (f, p) for f in ratios for p in POLICIES]
    assert set(DEFAULT_POLICIES) == set(POLICIES) - {"completion", "pspice", "hspice",
                                                     "hybrid", "hindsight"}
    assert [r for r, _ in seen] == result["rows"] and all(x is t for _, x in seen)
    for row in result["rows"]:
        budget = Budget(row["ratio"] * t["ops_per_event"], 32)
        if row["policy"] == "oldest-first":
            options = {"policy": OldestFirstPolicy()}
        elif row["policy"] in ("completion", "pspice", "hspice", "hybrid"):
            made = {"completion": CompletionPolicy, "pspice": PSpicePolicy,
                    "hspice": HSpicePolicy, "hybrid": HybridPolicy}[row["policy"]]
            policy = made(graph)
            options = {"policy": policy, "bins": policy.bins}
        elif row["policy"] == "hindsight":
            options = {"policy": HindsightPolicy(run.log, W, {"partition": run.partition,
                                                               "point": run.point})}
        elif row["policy"].startswith("history"):
            rl = {} if row["policy"] == "history+rl" else {"learning_rate": 0.0,
                                                          "explore": 0.0}
            policy = HistoryPolicy(sketch, seed=seed, budget=budget, **rl)
            options = {"policy": policy, "bins": policy.bins}
            nearest = min(sketch.fitted_ratios, key=lambda f: abs(
                np.log(f) - np.log(budget.ops_per_event / sketch.ops_per_event)))
            assert row["fitted_ratio"] == nearest
        else:
            continue  # keep-first and random: the engine's presets, tested in test_shedding
        m = Matcher(PATTERN, W, K, partition="g", budget=budget, **options)
        found = m.match(test)
        assert (row["bundle_recall"], row["point_recall"], row["precision"]) == \
            pytest.approx(_brute(truth, found))
        assert row["shed"] == m.stats["shed"] > 0
        assert row["ops_spent_per_event"] == pytest.approx(
            (m.stats["candidates"] - m.stats["shed"]) / len(test))


def test_a_budget_that_never_binds_finds_everything():
    events = random_batch(21)
    result = evaluate(_sketch(events), events, [50.0], partition="g", burst=1024)
    for row in result["rows"]:
        assert row["shed"] == 0
        assert row["bundle_recall"] == row["point_recall"] == row["precision"] == 1.0


def test_bad_input_is_refused_by_name():
    events = random_batch(22, n=300)
    sketch = _sketch(events)
    with pytest.raises(ValueError, match="budget ratios must be positive"):
        evaluate(sketch, events, [0.1, 0.0], partition="g")
    with pytest.raises(ValueError, match="unknown policies \\['best'\\]"):
        evaluate(sketch, events, [0.1], partition="g", policies=["history", "best"])
    with pytest.raises(ValueError, match="completion policy needs the history graph"):
        evaluate(sketch, events, [0.1], partition="g", policies=["completion"])
    with pytest.raises(ValueError, match="no events"):
        evaluate(sketch, events.slice(0, 0), [0.1], partition="g")
    with pytest.raises(ValueError, match="burst"):
        evaluate(sketch, events, [0.1], partition="g", burst=0.5)
    with pytest.raises(BudgetError, match="budget 0.001 x .* give --burst"):
        evaluate(sketch, events, [2.0, 0.001], partition="g", burst=1)
    only_x = type(events).from_events([{"type": "x", "t": float(i), "g": 0} for i in range(5)])
    with pytest.raises(ValueError, match="no operations on these events"):
        evaluate(sketch, only_x, [0.1], partition="g")


def test_a_history_graph_that_is_not_the_sketchs_is_refused_by_what_differs():
    """The completion row rates the sketch's cells: a graph of other bins, another pattern
    or another partition is refused, the graph the sketch was made from accepted."""
    events = random_batch(24, n=300)
    graph = _graph(events)
    sketch = _sketch(events, graph=graph)
    others = {
        "the match-vector bins": build_history(PATTERN, events, W, K, partition="g", n_bins=2),
        "pattern 'a b c' (the sketch's: 'a b c d')":
            build_history("a b c", events, W, K, partition="g", n_bins=4),
        "k 0 (the sketch's: 1)": build_history(PATTERN, events, W, 0, partition="g", n_bins=4),
        "partition None (the sketch's: 'g')": build_history(PATTERN, events, W, K, n_bins=4),
    }
    for message, other in others.items():
        with pytest.raises(ValueError) as exc:
            evaluate(sketch, events, [0.1], policies=["completion"], graph=other)
        assert str(exc.value).startswith("the history graph does not go with the sketch: "
                                         + message)
    rows = evaluate(sketch, events, [0.1], policies=["completion"], graph=graph)["rows"]
    assert [r["policy"] for r in rows] == ["completion"]


def test_the_partition_defaults_to_the_sketchs_and_another_is_refused():
    events = random_batch(23, n=600)
    sketch = _sketch(events)
    assert sketch.partition_by == "g"
    ratios = [0.1, 0.4]
    given = evaluate(sketch, events, ratios, partition="g", burst=16)
    default = evaluate(sketch, events, ratios, burst=16)
    assert default["truth"]["partition"] == "g"
    for a, b in zip(given["rows"], default["rows"], strict=True):
        assert (a["bundle_recall"], a["shed"]) == (b["bundle_recall"], b["shed"])
    for wrong in (None, "h"):
        with pytest.raises(ValueError, match="the sketch does not fit partition .*trained "
                                             "partitioned by 'g'"):
            evaluate(sketch, events, ratios, partition=wrong)
        with pytest.raises(ValueError, match="does not fit partition"):
            fit_budgets(sketch, events, [0.1], partition=wrong)


def test_cli_prints_and_writes_the_figures_of_evaluate(tmp_path):
    from acep.events import EventSpec, read_all

    sketch, key = built_sketch(tmp_path)
    out = tmp_path / "eval.json"
    r = run_acep("history", "evaluate", sketch, FIXTURE, "--key-file", key, "--spec", "flights",
                 "--partition", "origin", "--budgets", "0.1,0.5", "--burst", "32",
                 "--policies", "oldest-first,history", "--json", out)
    assert r.returncode == 0, r.stderr
    direct = evaluate(Sketch.load(sketch, KEY), read_all(FIXTURE, EventSpec.load("flights")),
                      [0.1, 0.5], partition="origin", burst=32,
                      policies=["oldest-first", "history"])
    written = json.loads(out.read_text())
    assert written["truth"]["bundles"] == direct["truth"]["bundles"] > 0
    for got, want in zip(written["rows"], direct["rows"], strict=True):
        for field in ("policy", "ratio", "bundle_recall", "point_recall", "precision", "shed",
                      "fitted_ratio"):
            assert got[field] == want[field]
    lines = r.stdout.splitlines()
    assert lines[0].startswith(f"# {direct['truth']['events']:,} events")
    rows = [x.split() for x in lines[2:]]
    assert [(x[0], x[1]) for x in rows] == [("10%", "oldest-first"), ("10%", "history"),
                                            ("50%", "oldest-first"), ("50%", "history")]
    for x, want in zip(rows, direct["rows"]):
        assert x[2] == f"{100 * want['bundle_recall']:.1f}%"
    assert rows[1][-3:] == ["fitted", "at", "0.1"] and rows[3][-3:] == ["fitted", "at", "0.5"]
    assert lines[0].endswith("; partitioned by origin")
    same = run_acep("history", "evaluate", sketch, FIXTURE, "--key-file", key, "--spec", "flights",
                    "--budgets", "0.1,0.5", "--burst", "32", "--policies", "oldest-first,history")
    assert same.returncode == 0, same.stderr
    assert [x.split()[:6] for x in same.stdout.splitlines()[2:]] == [x[:6] for x in rows]


@pytest.mark.parametrize("args, code, message", [
    (["--policies", "history,best"], 2, "--policies 'history,best': unknown best; choose from"),
    (["--policies", ","], 2, "--policies ',': unknown (none); choose from"),
    (["--policies", "completion"], 2, "--policies completion needs --history"),
    (["--partition", "dest"], 2, "--partition: the sketch does not fit partition 'dest': it was "
                                 "trained partitioned by 'origin', and this run is "
                                 "partitioned by 'dest'"),
])
def test_cli_refuses_bad_options_by_name(tmp_path, args, code, message):
    sketch, key = built_sketch(tmp_path)
    r = run_acep("history", "evaluate", sketch, FIXTURE, "--key-file", key, "--spec", "flights",
                 "--partition", "origin", *args)
    assert r.returncode == code and message in r.stderr and "Traceback" not in r.stderr


def test_cli_refuses_a_sketch_signed_with_another_key(tmp_path):
    sketch, _ = built_sketch(tmp_path)
    other = tmp_path / "other.key"
    other.write_bytes(b"not the fleet's key")
    r = run_acep("history", "evaluate", sketch, FIXTURE, "--key-file", other, "--spec", "flights",
                 "--partition", "origin")
    assert r.returncode == 2 and "Traceback" not in r.stderr and str(sketch) in r.stderr


def test_cli_adds_the_completion_baseline_with_the_history_graph(tmp_path):
    sketch, key = built_sketch(tmp_path)
    common = [sketch, FIXTURE, "--key-file", key, "--spec", "flights", "--partition", "origin",
              "--budgets", "0.25"]
    plain = run_acep("history", "evaluate", *common)
    full = run_acep("history", "evaluate", *common, "--history", tmp_path / "h.history")
    assert plain.returncode == full.returncode == 0, plain.stderr + full.stderr
    names = [[x.split()[1] for x in r.stdout.splitlines()[2:]] for r in (plain, full)]
    assert names[0] == list(DEFAULT_POLICIES)
    assert names[1] == ["keep-first", "random", "oldest-first", "completion", "pspice",
                        "hspice", "hybrid", "history", "history+rl"]
