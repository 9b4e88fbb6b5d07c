"""The Examples blocks of the public API and the README's quickstart run as doctests.

Each public name a user calls has a docstring with a one-sentence summary, Parameters and
an Examples block; the examples run here, so the API reference (docs/api) never shows one
that no longer works. The trainer's example starts Spark: it runs in a subprocess of its
own, skipped without pyspark or Java.
"""

from __future__ import annotations

import doctest
import importlib
import inspect
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# the names docs/api documents; the trainer's Spark example is run apart
PUBLIC = [
    "acep.Matcher", "acep.match", "acep.bundles", "acep.read_events", "acep.EventSpec",
    "acep.nfab.Engine", "acep.nfab.load_query",
    "acep.shedding.Budget", "acep.shedding.ScorePolicy", "acep.shedding.RandomPolicy",
    "acep.shedding.OldestFirstPolicy", "acep.shedding.KeepFirstPolicy",
    "acep.shedding.CallbackPolicy",
    "history.HistoryGraph", "history.Sketch", "history.HistoryPolicy",
    "history.CompletionPolicy", "history.PSpicePolicy", "history.HSpicePolicy",
    "history.HybridPolicy", "history.build_history", "history.fit_budgets",
    "history.FindsDrop", "history.drift.when_to_retrain", "acep.windows.sample_mask",
    "edge.Agent", "edge.load_config", "edge.agent.main",
    "trainer.train.PatternSpec", "trainer.train.train",
]
SPARK = {"trainer.train.train"}
NO_PARAMETERS = {"acep.shedding.OldestFirstPolicy", "acep.shedding.KeepFirstPolicy",
                 "acep.shedding.CallbackPolicy"}  # no constructor arguments
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def resolve(name: str):
    module, _, attr = name.rpartition(".")
    return getattr(importlib.import_module(module), attr)


def examples(name: str) -> list[doctest.DocTest]:
    """The doctests of ``name``'s own docstring (not its methods')."""
    obj = resolve(name)
    found = doctest.DocTestFinder(recurse=False).find(obj, name, module=inspect.getmodule(obj),
                                                        globs={})
    return [t for t in found if t.examples]


@pytest.mark.parametrize("name", PUBLIC)
def test_a_public_name_has_a_summary_parameters_and_examples(name):
    doc = inspect.getdoc(resolve(name)) or ""
    summary = doc.split("\n\n")[0]
    assert summary and summary.rstrip().endswith("."), f"{name}: no one-sentence summary"
    if name not in NO_PARAMETERS:
        assert "\nParameters\n----------\n" in doc, f"{name}: no Parameters section"
    assert "\nExamples\n--------\n" in doc and examples(name), f"{name}: no Examples"


@pytest.mark.parametrize("name", sorted(set(PUBLIC) - SPARK))
def test_the_examples_of_a_public_name_run(name, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # an example that writes a file writes it here
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    for test in examples(name):
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.attempted > 0 and result.failed == 0, f"{name}: {result}"


def test_the_readme_quickstart_runs():
    result = doctest.testfile(str(ROOT / "README.md"), module_relative=False,
                              optionflags=FLAGS, verbose=False)
    assert result.attempted >= 5 and result.failed == 0, result


def test_the_trainer_example_runs_on_spark(tmp_path):
    pytest.importorskip("pyspark")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("no Java for Spark")
    code = ("import doctest, sys, trainer.train as t\n"
            "runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)\n"
            "for test in doctest.DocTestFinder(recurse=False).find(t.train, 'train', t):\n"
            "    runner.run(test)\n"
            "r = runner.summarize(verbose=False)\n"
            "sys.exit(0 if r.attempted and not r.failed else 1)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                         text=True, timeout=600,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
