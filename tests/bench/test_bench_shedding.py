"""The shedding benchmark in quick mode (embedded flights sample and synthetic streams only)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from support.bench_runs import PNG_MAGIC, ROOT, run_quick

from acep import Matcher, bundles
from acep.shedding import Budget
from bench.shedding import policies, run
from bench.shedding.workloads import WORKLOADS, flights_split


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory) -> Path:
    """Run ``python -m bench.shedding --quick`` once; return its output directory."""
    out = tmp_path_factory.mktemp("shedding")
    run_quick("shedding", out, timeout=600)
    return out


@pytest.fixture(scope="module")
def results(quick_run) -> dict:
    return json.loads((quick_run / "shedding.json").read_text())


def test_json_has_every_section(results):
    assert {"benchmark", "command", "machine", "settings", "workloads", "rows",
            "targets"} <= set(results)
    assert results["command"] == "python -m bench.shedding --quick"
    s = results["settings"]
    assert s["quick"] is True and s["wall_seconds"] > 0
    assert s["fractions"] == [0.05, 0.1, 0.25, 0.5, 0.75, 1.0]
    assert s["policies"] == list(policies.POLICIES)
    assert [w["name"] for w in results["workloads"]] == [w.name for w in WORKLOADS]
    assert len(results["rows"]) == len(WORKLOADS) * len(policies.POLICIES) * 6
    assert any(w["where"] for w in results["workloads"])  # a parameterized predicate
    assert {"cpu_count", "python", "date", "acep_backend"} <= set(results["machine"])


def test_ground_truth_matches_a_direct_matcher_run(results):
    test = flights_split(None)["test"]
    for w in (w for w in WORKLOADS if w.stream == "flights"):
        found = Matcher(**w.matcher_args()).match(test)
        truth = next(x for x in results["workloads"] if x["name"] == w.name)["truth"]
        assert truth["events"] == len(test)
        assert truth["match_points"] == len(set(zip(found.partition, found.point)))
        assert truth["bundles"] == len(bundles(found, w.window))
        assert truth["bundles"] > 0 and truth["ops_per_event"] > 0
        assert truth["bundles_per_partition_day"] > 0


def test_figures_are_consistent(results):
    rows = results["rows"]
    runs = {(r["workload"], r["policy"], r["fraction"]) for r in rows}
    assert runs == {(w["name"], p, f) for w in results["workloads"]
                    for p in policies.POLICIES for f in results["settings"]["fractions"]}
    for r in rows:
        for key in ("bundle_recall", "point_recall", "precision"):
            assert 0.0 <= r[key] <= 1.0, (r["workload"], r["policy"], key)
            assert 0.0 <= r["prefix"][key] <= 1.0
        assert r["found_bundles"] <= r["true_bundles"]
        assert r["ops_spent"] == r["candidates"] - r["shed"] >= 0
        assert r["precision"] == 1.0  # shedding and sampling never invent a match point
        if r["policy"] != "sampling":  # a token bucket: the rate times the events, plus depth
            cap = r["budget_ops_per_event"] * (r["events"] + r["burst"])
            assert r["ops_spent"] <= cap + 1e-6
        if r["fraction"] == 1.0 and r["shed"] == 0:
            assert r["bundle_recall"] == 1.0 and r["point_recall"] == 1.0


def test_no_row_passes_either_upper_bound(results):
    """The runs' bound and the bucket's programme are ceilings for every policy, on the test
    stream and on the hindsight prefix; the targets' table names the lower one."""
    rows = results["rows"]
    for w in results["workloads"]:
        for f in results["settings"]["fractions"]:
            bound = w["recall_bound"][str(f)]
            assert bound["lp_prefix"] is not None  # the quick streams are small
            top = run.ceiling(w, f)
            assert top == min(bound["test"], bound["lp_test"])
            for r in (r for r in rows if r["workload"] == w["name"] and r["fraction"] == f):
                assert r["prefix"]["bundle_recall"] <= run.ceiling(w, f, "prefix") + 1e-9
                if r["scope"] == "test":
                    assert r["bundle_recall"] <= top + 1e-9, (w["name"], r["policy"], f)
    first = results["targets"][0]  # the share of the ceiling names the ceiling it is of
    assert set(first["ceilings"]) == set(first["values"])
    for w in results["workloads"]:
        f = first["at_budget"][w["name"]]
        assert f >= 0.10 and first["ceilings"][w["name"]] == run.ceiling(w, f)
        mine = next(r["bundle_recall"] for r in rows if r["workload"] == w["name"]
                    and r["policy"] == "history+rl" and r["fraction"] == f)
        assert first["values"][w["name"]] == pytest.approx(mine / run.ceiling(w, f))


def test_the_synthetic_rows_split_recall_by_planted_motif(results):
    """On the sensor streams each row scores the bundles with a planted motif and the
    noise-only ones apart; together they are its bundle recall."""
    for w in results["workloads"]:
        rows = [r for r in results["rows"] if r["workload"] == w["name"]]
        if w["stream"] == "flights":
            assert "planted_bundles" not in w and all("planted" not in r for r in rows)
            continue
        assert 0 < w["planted_bundles"] < w["truth"]["bundles"]
        for r in (r for r in rows if r["scope"] == "test"):
            p = r["planted"]
            assert p["motif_bundles"] + p["noise_bundles"] == r["true_bundles"]
            found = p["motif"] * p["motif_bundles"] + p["noise"] * p["noise_bundles"]
            assert found == pytest.approx(r["found_bundles"])
    from bench.shedding.table import markdown

    assert "bundles with a planted motif / noise-only bundles" in markdown(results)


def test_full_rate_sampling_is_the_oldest_first_run(results):
    """At 100% the sampler keeps every event and runs under the same budget, oldest-first
    inside it: the very run of the oldest-first row."""
    rows = {(r["workload"], r["policy"]): r for r in results["rows"] if r["fraction"] == 1.0}
    for (workload, policy), r in rows.items():
        if policy == "sampling":
            oldest = rows[(workload, "oldest-first")]
            assert r["sampled_rate"] == 1.0
            assert r["bundle_recall"] == oldest["bundle_recall"]
            assert r["point_recall"] == oldest["point_recall"]


def test_every_workload_has_its_history_and_sketch(results):
    for w in results["workloads"]:
        assert w["history"]["sketch_bytes"] > 0 and w["history"]["cells"] > 0


def test_targets_have_numbers_and_verdicts(results):
    targets = results["targets"]
    assert len(targets) == 4
    for t in targets:
        assert isinstance(t["pass"], bool)
        assert set(t["per_workload"]) == set(t["values"])
    fractions = results["settings"]["fractions"]
    for t in targets[:3]:  # each names the budget of each workload's worst case
        assert set(t["at_budget"]) == set(t["values"])
        assert set(t["at_budget"].values()) - {None} <= set(fractions)
    field = targets[1]  # over pspice and hspice: the margin names one of the two
    assert all(field["against"][n] in ("pspice", "hspice") for n in field["values"]
               if field["values"][n] is not None)


def test_pngs_and_tables(quick_run, results):
    for name in ("shedding.png", "drift.png"):
        png = (quick_run / name).read_bytes()
        assert png.startswith(PNG_MAGIC) and len(png) > 10_000
    from bench.shedding.table import markdown

    text = markdown(results)
    assert "### Targets" in text and "bundles per partition-day" in text
    assert "### Drift: bundle recall before and after" in text
    for given in (quick_run, quick_run / "shedding.json"):  # the --out directory or the JSON
        shown = subprocess.run([sys.executable, "-m", "bench.shedding.table", str(given)],
                               cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert shown.returncode == 0 and shown.stdout == text + "\n", shown.stderr


def test_the_drift_reference_is_a_history_of_the_drifted_regime(results):
    """The retrained reference runs the static policy with a history of phase 2 only, on the
    same test stream and budgets as the drift workload's rows."""
    drift = next(w for w in results["workloads"] if w["stream"] == "drift")
    retrained = drift["retrained_history"]
    assert retrained["train_events"] > 0 and retrained["bundles"] > 0
    assert retrained["gap_edges"] != drift["history"]["gap_edges"]  # slower motifs
    reference = results["drift_reference"]
    fractions = sorted(r["fraction"] for r in results["rows"]
                       if r["workload"] == drift["name"] and r["policy"] == "history")
    assert sorted(r["fraction"] for r in reference) == fractions
    for r in reference:
        assert r["workload"] == drift["name"] and r["events"] == drift["truth"]["events"]
        assert 0.0 <= r["bundle_recall"] <= 1.0 and r["precision"] == 1.0
        assert len(r["over_time"]) == len(drift["time_edges"]) - 1


def test_every_workload_has_the_history_of_its_test_stream_as_reference(results):
    """The reference runs the static policy with a history built and fitted on the test
    stream itself: its bundles are the ground truth's; it runs every budget on the whole test
    stream, passes neither bound, and the targets it would change name it."""
    reference = results["test_history_reference"]
    for w in results["workloads"]:
        built = w["test_history"]
        assert built["train_events"] == w["truth"]["events"]
        assert built["bundles"] == w["truth"]["bundles"]
        assert built["fit"] is not None  # fitted to every budget, as the training history
        rows = [r for r in reference if r["workload"] == w["name"]]
        assert [r["fraction"] for r in rows] == results["settings"]["fractions"]
        for r in rows:
            assert r["policy"] == policies.TEST_HISTORY and r["scope"] == "test"
            assert r["events"] == w["truth"]["events"] and r["precision"] == 1.0
            assert r["bundle_recall"] <= run.ceiling(w, r["fraction"]) + 1e-9
    first = results["targets"][0]
    assert set(first["references"]) == set(first["values"])
    assert all(v is not None for v in first["references"].values())
    w = next(w for w in results["workloads"] if w["name"] == "rare-verylate")
    f = first["at_budget"]["rare-verylate"]
    assert first["references"]["rare-verylate"] == pytest.approx(next(
        r["bundle_recall"] for r in reference
        if r["workload"] == "rare-verylate" and r["fraction"] == f) / run.ceiling(w, f))
    from bench.shedding.table import markdown

    assert f"| {policies.TEST_HISTORY} (reference) |" in markdown(results)


def test_the_sampler_keeps_its_share():
    events = flights_split(None)["test"]
    for rate in (0.05, 0.25, 0.75):
        kept = len(policies.sample(events, rate))
        assert abs(kept - rate * len(events)) <= 1
    assert run.FRACTIONS[-1] == 1.0


def test_workloads_option_selects_a_subset():
    args = run.parse_args(["--quick", "--workloads", "sensors,delay-wave"])
    assert [w.name for w in run.selected(args)] == ["delay-wave", "sensors"]
    assert run.selected(run.parse_args([])) == list(WORKLOADS)
    assert "--workloads sensors,delay-wave" in run.command(args)
    with pytest.raises(SystemExit):  # tests/bench/test_bench_common.py checks the message
        run.parse_args(["--workloads", "nope"])


def test_n_bins_option_sets_the_history_bins():
    args = run.parse_args(["--quick", "--n-bins", "4"])
    assert args.n_bins == 4 and "--n-bins 4" in run.command(args)
    assert run.parse_args([]).n_bins == run.N_BINS
    assert "--n-bins" not in run.command(run.parse_args(["--quick"]))
    w = next(w for w in WORKLOADS if w.name == "delay-wave")
    train = flights_split(None)["train"]
    for n in (2, 4):
        info = run.build(w, train, n)["history"]
        assert 0 < len(info["rem_edges"]) <= n - 1 and len(info["gap_edges"]) <= n - 1


def test_defer_option_reaches_the_history_policies():
    args = run.parse_args(["--quick", "--defer", "0"])
    assert args.defer == 0 and "--defer 0" in run.command(args)
    assert "--defer" not in run.command(run.parse_args(["--quick"]))
    w = next(w for w in WORKLOADS if w.name == "delay-wave")
    state = {"sketch": run.build(w, flights_split(None)["train"], 4)["sketch"]}
    for defer, expected in ((None, policies.DEFER), (0, 0), (9, 9)):
        if defer is not None:
            state["defer"] = defer
        for row in ("history", "history+rl"):
            assert policies.make(row, state, 0.25).options["policy"].defer == expected
    with pytest.raises(SystemExit):
        run.parse_args(["--defer", "-1"])


def test_histories_are_fitted_to_every_budget_unless_no_fit():
    args = run.parse_args(["--quick", "--no-fit"])
    assert args.no_fit and "--no-fit" in run.command(args)
    assert "--no-fit" not in run.command(run.parse_args(["--quick"]))
    w = next(w for w in WORKLOADS if w.name == "delay-wave")
    train = flights_split(None)["train"]
    plain = run.build(w, train, 4, fit=False)
    fitted = run.build(w, train, 4)
    assert len(plain["sketch"].fitted_ratios) == 0 and plain["history"]["fit"] is None
    assert fitted["sketch"].fitted_ratios.tolist() == list(run.FRACTIONS)
    info = fitted["history"]
    assert info["sketch_bytes"] > info["plain_sketch_bytes"] == plain["history"]["sketch_bytes"]
    for row in info["fit"]["ratios"].values():
        assert row["bundle_recall"][row["chosen"]] == max(row["bundle_recall"].values())
    budget = Budget(0.05 * info["fit"]["ops_per_event"], run.BURST)
    made = policies.make("history", {"sketch": fitted["sketch"]}, 0.05, budget)
    expected = (1 - np.clip(fitted["sketch"].fitted[0], 0, 1)) ** 2
    assert np.allclose(made.options["policy"].reserve, expected)
