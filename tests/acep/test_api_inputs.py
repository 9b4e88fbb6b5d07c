"""The public Python API refuses wrong arguments at its boundary, naming the parameter and
what it expects (an error that is both a ValueError and a TypeError, as scikit-learn's), the
same on the compiled and the pure-Python kernel; numpy scalars work where Python numbers do;
and docs/CLI.md's Python block runs as written."""

from __future__ import annotations

import decimal
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from acep import (
    Event,
    EventBatch,
    EventError,
    EventSpec,
    MatchBatch,
    Matcher,
    Pattern,
    backend,
    best_per_point,
    bundles,
    bundles_table,
    match,
    read_events,
)
from acep._checks import ParameterError
from acep.shedding import (
    Budget,
    CallbackPolicy,
    OldestFirstPolicy,
    RandomPolicy,
    ScorePolicy,
    VectorBins,
    check_buckets,
)

ROOT = Path(__file__).resolve().parents[2]
BACKENDS = ["compiled", "python"] if backend() == "compiled" else ["python"]
EVENTS = [{"type": "a", "t": 1.0, "x": 1.0}, {"type": "b", "t": 2.0, "x": 2.0},
          {"type": "c", "t": 3.0, "x": 3.0}]


def _refused(call, name: str) -> str:
    """``call()`` raises the boundary's error naming ``name``; its message."""
    with pytest.raises(ParameterError) as info:
        call()
    assert isinstance(info.value, ValueError) and isinstance(info.value, TypeError)
    assert name in str(info.value), str(info.value)
    return str(info.value)


# ---------------------------------------------------------------------- Matcher(...)

BAD_MATCHER = [
    ({"window": "2h"}, "window"), ({"window": "10"}, "window"), ({"window": None}, "window"),
    ({"window": True}, "window"), ({"window": [10]}, "window"),
    ({"window": np.array([10.0, 20.0])}, "window"), ({"window": 10**400}, "window"),
    ({"window": decimal.Decimal("10")}, "window"), ({"window": float("nan")}, "window"),
    ({"window": float("inf")}, "window"), ({"window": -1}, "window"),
    ({"k": None}, "k (error bound)"), ({"k": "1"}, "k (error bound)"),
    ({"k": float("nan")}, "k (error bound)"), ({"k": float("inf")}, "k (error bound)"),
    ({"k": True}, "k (error bound)"), ({"k": -1}, "k (error bound)"),
    ({"k": 65}, "k (error bound)"), ({"k": 1.5}, "k (error bound)"),
    ({"k": np.array([1, 2])}, "k (error bound)"), ({"k": 10**30}, "k (error bound)"),
    ({"partition": 5}, "partition"), ({"partition": ""}, "partition"),
    ({"partition": ["g"]}, "partition"),
    ({"merge": "no"}, "merge"), ({"merge": None}, "merge"),
    ({"all_trajectories": "yes"}, "all_trajectories"), ({"trace": 1}, "trace"),
    ({"on_bad_event": "SKIP"}, "on_bad_event"), ({"on_bad_event": None}, "on_bad_event"),
    ({"capacity": -5}, "capacity"), ({"capacity": 1.5}, "capacity"),
    ({"capacity": None}, "capacity"), ({"capacity": "1k"}, "capacity"),
    ({"capacity": 10**12}, "capacity"),
    ({"max_entries": "1e6"}, "max_entries"), ({"max_entries": 10}, "max_entries"),
    ({"max_entries": 10**30}, "max_entries"), ({"max_entries": 2.5e6 + 0.5}, "max_entries"),
    ({"budget": 0.1}, "budget"), ({"bins": (1.0, 2.0)}, "bins"),
    ({"policy": "oldest-first"}, "policy"), ({"policy": OldestFirstPolicy}, "policy"),
    ({"where": 5}, "where"), ({"where": [None]}, "where"),
]


@pytest.mark.parametrize("kernel", BACKENDS)
@pytest.mark.parametrize(("options", "name"), BAD_MATCHER,
                         ids=[f"{k}={v!r}"[:40] for (o, _) in BAD_MATCHER for k, v in o.items()])
def test_a_bad_matcher_argument_is_refused_naming_it(kernel, options, name):
    options = {"window": 10, **options}
    _refused(lambda: Matcher("a b", backend=kernel, **options), name)


@pytest.mark.parametrize("pattern", [None, 5, b"a b", ["a", "b"]])
def test_a_pattern_that_is_not_text_is_refused(pattern):
    _refused(lambda: Matcher(pattern, 10), "pattern")
    if not isinstance(pattern, list):
        _refused(lambda: Pattern.compile(pattern), "pattern")


def test_the_messages_say_what_was_expected_and_what_came():
    assert _refused(lambda: Matcher("a b", "2h"), "window") == (
        "window must be a finite number >= 0 in tag units (seconds for timestamps: 7200 for "
        "2h), got '2h'")
    assert _refused(lambda: Matcher("a b", 1, 10**30), "k") == (
        "k (error bound) must be a whole number in 0..64, got 1000000000...00000000000")
    assert "the class OldestFirstPolicy" in _refused(
        lambda: Matcher("a b", 1, policy=OldestFirstPolicy), "policy")


@pytest.mark.parametrize("kernel", BACKENDS)
def test_numpy_scalars_and_integral_floats_are_the_python_numbers(kernel):
    events = [{"type": "ab"[i % 2], "t": float(i)} for i in range(40)]
    plain = Matcher("a b", 10.0, 1, capacity=64, max_entries=10**6,
                    budget=Budget(2.0, 8.0), backend=kernel).match(events)
    numpy = Matcher("a b", np.float32(10), np.int64(1), capacity=np.int32(64),
                    max_entries=1e6, budget=Budget(np.float64(2.0), np.float32(8.0)),
                    backend=kernel, merge=np.bool_(True)).match(events)
    assert numpy.to_matches() == plain.to_matches() and len(plain) > 0


_JUNK = st.one_of(st.none(), st.booleans(), st.text(max_size=4), st.binary(max_size=2),
                  st.lists(st.integers(), max_size=2), st.floats(allow_nan=True),
                  st.integers(-10**30, 10**30), st.complex_numbers(),
                  st.sampled_from([np.float32(5), np.int8(-3), np.array(3.0),
                                   np.array([1, 2]), np.nan, decimal.Decimal(2)]))


@settings(max_examples=150, deadline=None)
@given(name=st.sampled_from(["window", "k", "capacity", "max_entries"]), value=_JUNK)
def test_any_value_is_taken_or_refused_by_name_never_a_crash(name, value):
    options = {"window": 10, "k": 1, name: value}
    try:
        m = Matcher("a b", **options)
    except ParameterError as e:
        assert str(e).startswith(name), str(e)
        return
    assert len(m.match(EVENTS)) > 0  # what was taken works


# ---------------------------------------------------------------------- feeding a matcher

def _batch(codes=(0, 1), names=("a", "b"), tags=(1.0, 2.0), columns=None, position=0):
    as_array = (lambda v: np.asarray(v)) if not isinstance(codes, list) else (lambda v: v)
    return EventBatch(as_array(codes), list(names) if isinstance(names, tuple) else names,
                      as_array(tags), columns or {}, position)


BAD_BATCHES = [
    ("a list of rows", EVENTS, "batch must be an acep.EventBatch"),
    ("None", None, "batch must be an acep.EventBatch"),
    ("codes a list", _batch(codes=[0, 1], tags=[1.0, 2.0]), "batch.type_codes"),
    ("float codes", _batch(codes=np.array([0.0, 1.0])), "batch.type_codes"),
    ("a code past the names", _batch(codes=np.array([0, 5])), "event 1 has 5"),
    ("a negative code", _batch(codes=np.array([0, -3])), "event 1 has -3"),
    ("names a text", _batch(names="ab"), "batch.type_names"),
    ("fewer tags", _batch(codes=np.array([0, 1, 0])), "batch.tags has 2 entries for 3"),
    ("2-d tags", _batch(tags=np.array([[1.0], [2.0]])), "batch.tags"),
    ("text tags", _batch(tags=np.array(["1", "2"])), "batch.tags"),
    ("datetime64 tags", _batch(tags=np.array(["2001-01-01", "2001-01-02"],
                                             dtype="datetime64[s]")), "batch.tags"),
    ("a nan tag", _batch(tags=np.array([1.0, np.nan])), "event 1 has nan"),
    ("a short column", _batch(columns={"x": np.array([1.0])}), "batch.columns['x']"),
    ("a list column", _batch(columns={"x": [1.0, 2.0]}), "batch.columns['x']"),
]


@pytest.mark.parametrize("kernel", BACKENDS)
@pytest.mark.parametrize(("what", "batch", "said"), BAD_BATCHES,
                         ids=[w for w, _, _ in BAD_BATCHES])
def test_a_batch_the_kernel_cannot_read_is_refused_before_it(kernel, what, batch, said):
    m = Matcher("a b", 10, where=["b.x > a.x"] if "column" in what else (), backend=kernel)
    assert said in _refused(lambda: m.match_batch(batch), "batch")
    found = m.match(EVENTS)  # nothing was taken: the matcher goes on as new
    assert [x.events for x in found] == [(0, 1)]


def test_both_kernels_refuse_a_bad_batch_with_one_message():
    if len(BACKENDS) < 2:
        pytest.skip("the compiled kernel is not built")
    for _, batch, _ in BAD_BATCHES:
        said = {_refused(lambda k=k, b=batch: Matcher("a b", 10, backend=k).match_batch(b),
                         "batch") for k in BACKENDS}
        assert len(said) == 1, said


@pytest.mark.parametrize("kernel", BACKENDS)
@pytest.mark.parametrize("load", [
    [[0] * 4] * 3, np.zeros((2, 4), np.int64), np.zeros((3, 4), np.int32),
    np.zeros((3, 4), np.int64, order="F"), np.zeros((3, 8), np.int64)[:, ::2],
    np.broadcast_to(np.zeros(4, np.int64), (3, 4))],
    ids=["list", "shape", "int32", "F-order", "strided", "read-only"])
def test_a_load_array_the_kernel_cannot_write_is_refused(kernel, load):
    # the compiled kernel refused non-contiguous arrays in Cython's words, the Python one
    # took them; neither may take one it cannot write the counts into
    m = Matcher("a b", 10, backend=kernel)
    assert "np.zeros((3, 4), np.int64)" in _refused(
        lambda: m.match_batch(EventBatch.from_events(EVENTS), load=load), "load")


@pytest.mark.parametrize("kernel", BACKENDS)
def test_a_flushed_matcher_takes_no_more_events(kernel):
    m = Matcher("a b", 10, backend=kernel)
    assert len(m.match(EVENTS)) == 1
    with pytest.raises(ValueError, match=r"Matcher.match after flush\(\).*new Matcher"):
        m.match(EVENTS)  # it used to say "tag 1 goes back in time"
    later = EventBatch.from_events([{"type": "a", "t": 9.0}], position=3)
    with pytest.raises(ValueError, match=r"Matcher.match_batch after flush\(\)"):
        m.match_batch(later)
    assert len(m.flush()) == 0  # flushing again is harmless


@pytest.mark.parametrize("kernel", BACKENDS)
def test_batch_positions_may_not_go_back(kernel):
    m = Matcher("a b", 10, backend=kernel)
    m.match_batch(EventBatch.from_events(EVENTS[:2]))
    rest = [{"type": "a", "t": 5.0}, {"type": "b", "t": 6.0}]
    message = _refused(lambda: m.match_batch(EventBatch.from_events(rest)), "batch.position")
    assert "EventBatch.from_events(rows, position=2)" in message
    found = MatchBatch.concat([m.match_batch(EventBatch.from_events(rest, position=2)),
                               m.flush()])
    assert [x.events for x in found] == [(0, 1), (2, 3)]  # positions stay the stream's


@pytest.mark.parametrize("kernel", BACKENDS)
def test_a_batch_may_go_on_past_a_bad_event(kernel):
    # what the agent and history.build do: the rest of the batch after the bad event
    events = [{"type": "a", "t": 3.0}, {"type": "b", "t": 1.0}, {"type": "b", "t": 4.0}]
    m = Matcher("a b", 10, backend=kernel)
    batch = EventBatch.from_events(events)
    with pytest.raises(EventError) as info:
        m.match_batch(batch)
    rest = batch.slice(info.value.position + 1, len(batch))
    found = MatchBatch.concat([m.match_batch(rest), m.flush()])
    assert [x.events for x in found] == [(0, 2)]


@pytest.mark.parametrize(("events", "hint"), [
    ("events.jsonl", "read_events"), (Path("events.jsonl"), "read_events"),
    ({"type": "a", "t": 1}, "put it in a list"), (None, "Event or dict rows"),
    (5, "Event or dict rows")])
def test_rows_that_are_not_a_list_of_events_are_refused(events, hint):
    # a path used to be read as its characters: "event 0: record is not an object (str)"
    assert hint in _refused(lambda: match("a b", events, 10), "events")
    assert hint in _refused(lambda: EventBatch.from_events(events), "events")


def test_an_event_whose_attrs_are_not_a_dict_is_a_bad_event():
    with pytest.raises(EventError, match="event 1: Event.attrs is not a dict"):
        match("a b", [Event("a", 1.0), Event("b", 2.0, None)], 10)


@pytest.mark.parametrize("position", [-5, 1.5, "3", None])
def test_a_bad_first_position_is_refused(position):
    _refused(lambda: EventBatch.from_events(EVENTS, position=position), "position")


# ---------------------------------------------------------------------- outputs

def test_bundles_and_best_per_point_take_a_match_batch_and_a_window():
    found = match("a b", EVENTS, 10)
    for window in (-1, float("nan"), float("inf"), None, "10", [10]):
        _refused(lambda w=window: bundles(found, w), "window")  # -1, nan, None: were taken
        _refused(lambda w=window: bundles_table(found, w), "window")
    for wrong in (found.to_matches(), None, EventBatch.from_events(EVENTS)):
        _refused(lambda w=wrong: bundles(w, 10), "found")
        _refused(lambda w=wrong: best_per_point(w), "found")
    assert bundles(found, np.float32(10)) == bundles(found, 10)


def test_concat_takes_a_list_of_match_batches():
    found = match("a b", EVENTS, 10)
    assert "concat([found])" in _refused(lambda: MatchBatch.concat(found), "batches")
    _refused(lambda: MatchBatch.concat([found, None]), "batches")
    assert "concat([batch])" in _refused(
        lambda: EventBatch.concat(EventBatch.from_events(EVENTS)), "batches")
    _refused(lambda: EventBatch.concat([EventBatch.from_events(EVENTS), None]), "batches")


def test_events_of_counts_from_the_end_like_a_list_and_refuses_past_it():
    found = match("a b", EVENTS + [{"type": "a", "t": 4.0}, {"type": "b", "t": 5.0}], 10)
    assert len(found) == 2
    assert found.events_of(-1).tolist() == found.events_of(1).tolist() == [3, 4]  # was []
    assert found.events_of(np.int64(0)).tolist() == [0, 1]
    with pytest.raises(IndexError, match="match index 2 is out of range for 2 matches"):
        found.events_of(2)
    _refused(lambda: found.events_of("0"), "i (a match index)")


# ---------------------------------------------------------------------- reading

@pytest.fixture()
def events_file(tmp_path):
    path = tmp_path / "ev.jsonl"
    path.write_text("".join(f'{{"type": "a", "t": {i}}}\n' for i in range(5)))
    return path


@pytest.mark.parametrize(("options", "name", "hint"), [
    ({"spec": "flights"}, "spec", "EventSpec.load('flights')"),
    ({"spec": {"tag": "t"}}, "spec", "EventSpec.from_dict"),
    ({"batch_size": 0}, "batch_size", ">= 1"), ({"batch_size": "100"}, "batch_size", ">= 1"),
    ({"batch_size": 1.5}, "batch_size", ">= 1"),  # was taken: one batch of everything
    ({"batch_size": float("nan")}, "batch_size", ">= 1"), ({"batch_size": True}, "batch_size", ""),
    ({"on_bad_event": "ignore"}, "on_bad_event", "'error' or 'skip'"),
    ({"bad_events": ()}, "bad_events", "a list"),
])
def test_read_events_refuses_bad_options_before_reading(events_file, options, name, hint):
    assert hint in _refused(lambda: read_events(events_file, **options), name)


@pytest.mark.parametrize("path", [None, 5, b"ev.jsonl", ["ev.jsonl"]])
def test_read_events_takes_a_path(path):
    _refused(lambda: read_events(path), "path")


def test_read_events_takes_numpy_batch_sizes(events_file):
    assert [len(b) for b in read_events(events_file, batch_size=np.int64(2))] == [2, 2, 1]


@pytest.mark.parametrize(("call", "name"), [
    (lambda: EventSpec(attributes=5), "attributes"), (lambda: EventSpec(attributes=[1]),
                                                      "attributes"),
    (lambda: EventSpec.from_dict(None), "event spec"),
    (lambda: EventSpec.from_dict("flights"), "event spec"),  # was: unknown keys ['f', ...]
    (lambda: EventSpec.load(None), "event spec")])
def test_event_specs_refuse_bad_arguments(call, name):
    _refused(call, name)


def test_event_spec_attributes_may_be_any_iterable_of_names():
    assert EventSpec(attributes=("a", "b")).attributes == ("a", "b")
    assert EventSpec(attributes=(c for c in "ab")).attributes == ("a", "b")
    assert EventSpec(attributes="price").attributes == ("price",)


# ---------------------------------------------------------------------- shedding

@pytest.mark.parametrize(("call", "name"), [
    (lambda: Budget("0.1"), "ops_per_event"), (lambda: Budget(None), "ops_per_event"),
    (lambda: Budget(True), "ops_per_event"), (lambda: Budget([0.1]), "ops_per_event"),
    (lambda: Budget(10**400), "ops_per_event"), (lambda: Budget(0.1, burst="64"), "burst"),
    (lambda: VectorBins("12", "34"), "rem_edges"), (lambda: VectorBins((1.0,), None),
                                                    "gap_edges"),
    (lambda: VectorBins.from_quantiles([1, 2], [1, 2], n_bins=0), "n_bins"),
    (lambda: VectorBins.from_quantiles([1, 2], [1, 2], n_bins=2.5), "n_bins"),
    (lambda: VectorBins.from_quantiles([1, 2], [1, 2], n_bins=10**6), "n_bins"),
    (lambda: VectorBins.from_quantiles("abc", [1, 2]), "rem_values"),
    (lambda: ScorePolicy(explore="0.1"), "explore"),
    (lambda: ScorePolicy(min_score=float("nan")), "min_score"),
    (lambda: ScorePolicy(proxy_class=["a"]), "proxy_class"),
    (lambda: ScorePolicy(proxy_class=[[1]]), "proxy_class"),
    (lambda: ScorePolicy(proxy_class=[1.5]), "proxy_class"),
    (lambda: ScorePolicy(seed="x"), "seed"), (lambda: RandomPolicy(seed=None), "seed"),
    (lambda: ScorePolicy(defer=True), "defer"), (lambda: ScorePolicy(proxy_live="no"),
                                                 "proxy_live"),
    (lambda: ScorePolicy(cover="0.5"), "cover"),
    (lambda: check_buckets([0], 1.0, 64), "budget ratios"),  # was a ZeroDivisionError
    (lambda: check_buckets([0.1], "1", 64), "ops_per_event"),
])
def test_shedding_arguments_are_checked_when_given(call, name):
    _refused(call, name)


def test_budgets_hold_plain_floats():
    budget = Budget(np.float32(0.5), np.int64(4))
    assert type(budget.ops_per_event) is float and budget.depth == 2.0
    assert ScorePolicy(defer=2.0).defer == 2 and ScorePolicy(proxy_class=[1.0]).proxy_class[0] == 1


@pytest.mark.parametrize("kernel", BACKENDS)
def test_a_two_dimensional_proxy_class_is_refused_on_both_kernels(kernel):
    # the compiled kernel refused it in Cython's words when attached, the Python one ran
    bins = VectorBins((), ())
    _refused(lambda: Matcher("a b", 10, budget=Budget(0.5, 2), bins=bins, backend=kernel,
                             policy=ScorePolicy(np.zeros(3), np.zeros((3, 1), np.int64))),
             "proxy_class")


def test_a_callback_policy_without_select_says_so():
    events = [{"type": "ab"[i % 2], "t": float(i)} for i in range(40)]
    m = Matcher("a b", 10, k=1, budget=Budget(0.5, 2), policy=CallbackPolicy())
    with pytest.raises(NotImplementedError, match="must implement select"):
        m.match(events)


# ---------------------------------------------------------------------- history policies

def test_history_policies_check_their_arguments():
    from history import CompletionPolicy, EventSampler, HistoryPolicy, Sketch, build_history

    events = EventBatch.from_events([{"type": "ab"[i % 2], "t": float(i)} for i in range(60)])
    sketch = Sketch.from_graph(build_history("a b", events, 4.0, 0, n_bins=2))
    for wrong in (None, "jan.sketch"):
        assert "Sketch.load" in _refused(lambda w=wrong: HistoryPolicy(w), "sketch")
    for budget in ("0.1", -1, float("nan")):  # were taken, a nan picking a fitted table
        _refused(lambda b=budget: HistoryPolicy(sketch, budget=b), "budget")
    _refused(lambda: HistoryPolicy(sketch, need=-1), "need")
    _refused(lambda: HistoryPolicy(sketch, proxy="no"), "proxy")
    assert HistoryPolicy(sketch, budget=np.float32(0.1)).defer == 4
    _refused(lambda: CompletionPolicy(sketch), "graph_or_counts")
    _refused(lambda: EventSampler(True), "keep_every")
    _refused(lambda: EventSampler(2, offset="1"), "offset")
    _refused(lambda: EventSampler(2)(EVENTS), "batch")


def test_policy_options_names_what_a_row_needs():
    from history.policies import policy_options

    _refused(lambda: policy_options("hindsight"), "hindsight=")  # was 'NoneType' ... subscriptable
    _refused(lambda: policy_options("history"), "sketch")
    _refused(lambda: policy_options("completion"), "graph")
    _refused(lambda: policy_options("pspice"), "graph")
    _refused(lambda: policy_options("hspice"), "graph")


# ------------------------------------------------------------ docs/CLI.md's Python

def _documented_python_block(first_line: str) -> str:
    text = (ROOT / "docs" / "CLI.md").read_text()
    blocks = re.findall(r"```python\n(.*?)\n```", text, re.S)
    return next(b for b in blocks if b.startswith(first_line))


def test_the_documented_python_api_block_keeps_every_match(tmp_path, monkeypatch, capsys):
    # it kept only the last batch's matches and the flush's: 26 of the week's 25,032
    pytest.importorskip("pyarrow")
    from acep.events import PRESETS, read_all

    week = ROOT / "acep" / "data" / "flights-week.parquet"
    shutil.copy(week, tmp_path / "flights-3m.parquet")
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(_documented_python_block("from acep import Matcher, MatchBatch"), scope)
    whole = Matcher("late late+ verylate", window=7200, k=1, partition="origin",
                    where=["verylate.delay > late.delay + 30"]).match(
        read_all(week, PRESETS["flights"]))
    assert len(scope["found"]) == len(whole) > 1000
    assert f"{len(whole)} matches in {len(bundles(whole, 7200))} bundles" in capsys.readouterr().out
