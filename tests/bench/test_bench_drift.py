"""The drift benchmark: its streams, and one quick run (embedded flights, short synthetic)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from support.bench_runs import PNG_MAGIC, run_quick

from acep.windows import sample_mask
from bench.drift import run, streams
from bench.shedding.workloads import PLANTED


def motif_gaps(events, lo: float, hi: float) -> np.ndarray:
    """The gaps between consecutive letters of the planted motifs with tags in [lo, hi), per
    sensor (approximate where two motifs of a sensor overlap)."""
    mark = (np.asarray(events.columns[PLANTED]) == 1) & (events.tags >= lo) & (events.tags < hi)
    gaps = []
    for sensor in np.unique(events.columns["sensor"][mark]):
        mine = mark & (events.columns["sensor"] == sensor)
        codes, tags = events.type_codes[mine], events.tags[mine]
        gaps += [t2 - t1 for c1, c2, t1, t2 in zip(codes, codes[1:], tags, tags[1:])
                 if c2 == c1 + 1]
    return np.array(gaps)


def inside(gaps: np.ndarray, span: tuple[float, float]) -> float:
    """The share of ``gaps`` in ``span`` (two motifs of one sensor may interleave)."""
    return float(np.mean((gaps >= span[0]) & (gaps <= span[1])))


def test_streams_are_seeded():
    a, b = streams.synthetic("switch", 40.0, 7), streams.synthetic("switch", 40.0, 7)
    for part in ("train", "test", "new_regime"):
        assert np.array_equal(a[part].tags, b[part].tags)
        assert np.array_equal(a[part].type_codes, b[part].type_codes)
    other = streams.synthetic("switch", 40.0, 8)
    assert not np.array_equal(a["test"].tags[:50], other["test"].tags[:50])


def test_switch_swaps_the_motif_gaps_at_half_time():
    split = streams.synthetic("switch", 200.0, 3)
    test, when = split["test"], streams.switch_time(split["test"], split["switch"])
    assert when == pytest.approx(100.0, abs=1.0)
    before, after = motif_gaps(test, 0, when - 10), motif_gaps(test, when + 10, 200)
    assert inside(before, streams.OLD.motif_gap) > 0.9
    assert inside(after, streams.NEW.motif_gap) > 0.9
    assert inside(motif_gaps(split["train"], 0, 200), streams.OLD.motif_gap) > 0.9
    assert inside(motif_gaps(split["new_regime"], 0, 200), streams.NEW.motif_gap) > 0.9


def test_decoys_are_noise_with_the_other_gaps():
    split = streams.synthetic("switch", 100.0, 3)
    base = streams.sensors(100.0, (streams.OLD.sensor_spec(),), streams.SENSORS, 3)
    decoys = len(split["train"]) - len(base)
    assert decoys > 0 and decoys % streams.DECOY == 0
    assert np.sum(np.asarray(split["train"].columns[PLANTED]) == 1) == \
        np.sum(np.asarray(base.columns[PLANTED]) == 1)
    assert streams.OLD.decoy_gap == streams.NEW.motif_gap
    assert streams.NEW.decoy_gap == streams.OLD.motif_gap


def test_gradual_moves_the_gaps_step_by_step():
    test = streams.synthetic("gradual", 400.0, 5)["test"]
    means = [np.median(motif_gaps(test, lo, lo + 50)) for lo in range(0, 400, 50)]
    assert means[0] < 0.5 and means[-1] > 1.6
    assert all(b > a for a, b in zip(means, means[1:]))


def test_flights_place_moves_from_the_hubs():
    split = streams.flights_place(None)
    hubs, test = set(split["hubs"]), split["test"]
    assert len(hubs) == streams.HUBS
    when = streams.switch_time(test, split["switch"])
    origin = test.columns["origin"]
    assert set(origin[test.tags < when]) <= hubs
    assert not set(origin[test.tags >= when]) & hubs
    assert set(split["train"].columns["origin"]) <= hubs
    assert not set(split["new_regime"].columns["origin"]) & hubs


def late_share(events) -> float:
    late = [events.type_names.index(t) for t in ("late", "verylate")]
    return float(np.isin(events.type_codes, late).mean())


def test_flights_weather_moves_from_storms_to_calm():
    split = streams.flights_weather(None)
    test = split["test"]
    when = streams.switch_time(test, split["switch"])
    before, after = (streams.select(test, m) for m in (test.tags < when, test.tags >= when))
    assert min(len(split["train"]), len(split["new_regime"]), len(before), len(after)) > 0
    assert late_share(split["train"]) > late_share(split["new_regime"])
    assert late_share(before) > late_share(after)
    storm = min(late_share(streams.select(test, (test.tags // 3600) == h))
                for h in np.unique(before.tags // 3600))
    calm = max(late_share(streams.select(test, (test.tags // 3600) == h))
               for h in np.unique(after.tags // 3600))
    assert storm > calm  # every storm hour is later than every calm one


def test_late_units_rate_whole_units_and_skip_small_ones():
    events = streams.demo_events()
    storm, calm = streams.late_units(events, 3600.0, 0.9, 0.5)
    assert not (storm & calm).any()
    hour = events.tags // 3600
    for h in np.unique(hour):
        mine = hour == h
        assert storm[mine].all() or not storm[mine].any()
        assert calm[mine].all() or not calm[mine].any()
        if mine.sum() < streams.MIN_UNIT:
            assert not (storm[mine] | calm[mine]).any()
    assert 0 < storm.sum() < calm.sum()


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> tuple[dict, Path]:
    out = tmp_path_factory.mktemp("drift")
    run_quick("drift", out, timeout=600)
    return json.loads((out / "drift.json").read_text()), out


def test_quick_run_has_every_row_and_slice(results):
    res, out = results
    assert (out / "drift.png").read_bytes()[:8] == PNG_MAGIC
    assert res["command"] == "python -m bench.drift --quick"
    assert [s["name"] for s in res["streams"]] == list(run.STREAMS)
    fractions = res["settings"]["fractions"]
    assert fractions == list(run.QUICK_FRACTIONS)
    for s in res["streams"]:
        assert {(r["row"], r["fraction"]) for r in s["rows"]} == \
            {(row, f) for row in run.ROWS for f in fractions}
        assert len(s["time_edges"]) == run.QUICK["slices"] + 1
        for r in s["rows"]:
            assert len(r["over_time"]) == run.QUICK["slices"]
            assert 0 <= r["bundle_recall"] <= 1
        assert set(s["ceiling"]) == {str(f) for f in fractions}
        assert [t["fraction"] for t in s["targets"]] == fractions
        for row in run.LOOPS:
            assert len(s["retrain_periods"][row][str(fractions[0])]) == \
                run.QUICK["periods"] - 1
        assert res["settings"]["periods"] == run.QUICK["periods"]


def test_every_row_has_a_line_in_the_plot():
    from bench.drift import plot

    assert set(plot.STYLE) == set(run.ROWS)


def test_switch_gap_is_at_least_20_points_at_10_percent(results):
    switch = next(s for s in results[0]["streams"] if s["name"] == "switch")
    gap = next(t for t in switch["targets"] if t["fraction"] == 0.1)["gap"]
    assert gap >= 0.20


def test_the_first_retrained_period_follows_a_period_wholly_after_the_switch():
    test = SimpleNamespace(tags=np.arange(101.0))
    assert run.first_retrained(test, 4, 50.0) == pytest.approx([75.0, 100.0])
    assert run.first_retrained(test, 4, 40.0) == pytest.approx([75.0, 100.0])
    assert run.first_retrained(test, 4, 0.0) == pytest.approx([25.0, 50.0])
    assert run.first_retrained(test, 8, 50.0) == pytest.approx([62.5, 75.0])
    assert run.first_retrained(test, 4, 90.0) is None


def _rows(fraction: float, after: dict, first: dict) -> list[dict]:
    return [{"row": row, "fraction": fraction, "after": after[row],
             "first_retrained": first.get(row)} for row in after]


def test_targets_share_of_the_gap_for_rl_and_the_retrained_loops():
    after = {"history": 0.2, "history+rl": 0.3, run.RETRAIN: 0.45, run.ON_DROP: 0.4,
             run.NEW: 0.6, "oldest-first": 0.0}
    first = {run.RETRAIN: 0.5, "history+rl": 0.25}
    t = run.targets(_rows(0.1, after, first), [0.1])[0]
    assert t["gap"] == pytest.approx(0.4)
    assert t["share_of_gap"] == pytest.approx({"history+rl": 0.25, run.RETRAIN: 0.625,
                                               run.ON_DROP: 0.5})
    assert t["a_pass"] == {"history+rl": False, run.RETRAIN: True, run.ON_DROP: True}
    assert t["b_pass"] is True
    no_gap = dict(after, **{run.NEW: 0.2})
    t = run.targets(_rows(0.1, no_gap, {}), [0.1])[0]
    assert set(t["a_pass"].values()) == {None} and t["b_pass"] is None
    full = run.targets(_rows(0.1, after, {run.RETRAIN: 1.0, "history+rl": 1.0}), [0.1])[0]
    assert full["b_pass"] is None


def _matches(n: int, position: int, tag: float):
    """``n`` one-event matches of the event at ``position`` (with tag ``tag``)."""
    from acep.matcher import MatchBatch

    return MatchBatch(np.array([7] * n, dtype=object), np.full(n, tag), np.full(n, tag),
                      np.zeros(n, np.int32), np.arange(n + 1, dtype=np.int64),
                      np.full(n, position, np.int64), np.full(n, tag), False)


def test_retraining_on_drop_waits_for_a_fall_then_trains_on_all_since(monkeypatch):
    monkeypatch.setattr(run, "MIN_MATCHES", 150)
    test = streams.synthetic("switch", 20.0, 1)["test"]
    calls = []

    def trainer(w, span, found, budget, sketch):
        calls.append((float(span.tags[0]), len(span), len(found), np.asarray(found.trajectory)))
        return f"retrained on {len(found)}", {"seconds": 0.0}

    train, sketch = run.on_drop(trainer, test), "old"
    quarter = len(test) // 4
    for q, matches in enumerate((100, 95, 40, 120)):  # reference, as many, fewer, as many
        period = run.rebase(test, q * quarter, (q + 1) * quarter)
        sketch, facts = train(None, period, _matches(matches, 5, float(period.tags[5])), None,
                              sketch)
        assert facts["retrained"] == (q == 3)
    assert facts["matches_since"] == 160 and not facts["fell"]
    assert sketch == "retrained on 160"
    [(first_tag, events, matches, trajectory)] = calls
    assert first_tag == test.tags[2 * quarter] and events == 2 * quarter and matches == 160
    assert set(trajectory.tolist()) == {5, quarter + 5}  # each period's event 5, in the span


def test_periods_option_is_checked_and_named_in_the_command():
    args = run.parse_args(["--quick", "--periods", "8"])
    assert args.periods == 8 and args.partial
    assert run.command(args, None) == "python -m bench.drift --quick --periods 8"
    for bad in ("1", "x", "2.5"):
        with pytest.raises(SystemExit):
            run.parse_args(["--periods", bad])


def test_a_period_without_uploads_keeps_its_sketch():
    split = streams.synthetic("switch", 20.0, 1)
    w = run.workload_of("switch")
    sketch = run.fitted(w, split["train"], (0.1,))["sketch"]
    from acep.matcher import MatchBatch
    from acep.shedding import Budget

    kept, facts = run.retrain(w, split["test"], MatchBatch.empty(), Budget(0.1), sketch,
                              share=0.0)
    assert kept is sketch and facts["kept"] and facts["uploaded_events"] == 0


def test_uploads_are_the_match_windows_and_the_sample():
    split = streams.synthetic("switch", 30.0, 2)
    w, period = run.workload_of("switch"), split["test"]
    found, _, _ = run.run_matcher(w, period)
    found = run.only(found, float(np.median(found.point)))  # the windows of some matches
    uploads, facts = run.uploaded(w, period, found, 0.2)
    sensors, tags = period.columns["sensor"], period.tags
    in_window = np.zeros(len(period), dtype=bool)
    for key, point in zip(found.partition.tolist(), found.point.tolist()):
        in_window |= (sensors == key) & (tags >= point - w.window) & (tags <= point)
    block = np.floor(tags / (2 * w.window))
    drawn = sample_mask(period, "sensor", w.window, 0.2)
    for key in np.unique(sensors)[:10]:  # the sample takes whole blocks of a sensor
        mine = sensors == key
        assert all(len(set(drawn[mine & (block == b)].tolist())) == 1 for b in block[mine])
    want = in_window | drawn
    assert uploads.tags.tolist() == tags[want].tolist()
    assert facts["uploaded_events"] == want.sum() and facts["sampled_events"] == drawn.sum()
    assert 0.1 < drawn.mean() < 0.3 and (drawn & ~in_window).any()
    alone, facts = run.uploaded(w, period, run.only(found, np.inf), 0.2)
    assert alone.tags.tolist() == tags[drawn].tolist() and facts["uploaded_matches"] == 0
    none, _ = run.uploaded(w, period, found, 0.0)
    assert none.tags.tolist() == tags[in_window].tolist()


def test_sample_share_option_is_checked_and_named_in_the_command():
    args = run.parse_args(["--quick", "--sample-share", "0.1"])
    assert args.sample_share == 0.1 and args.partial
    assert run.command(args, None) == "python -m bench.drift --quick --sample-share 0.1"
    assert run.parse_args(["--sample-share", "0"]).sample_share == 0.0
    for bad in ("-0.1", "1.5", "x", "nan"):
        with pytest.raises(SystemExit):
            run.parse_args(["--sample-share", bad])


def test_unknown_streams_are_refused(capsys):
    with pytest.raises(SystemExit):
        run.parse_args(["--streams", "switch,nowhere"])
    assert "unknown stream(s) nowhere" in capsys.readouterr().err


def test_only_keeps_the_matches_from_a_point_on():
    split = streams.synthetic("switch", 30.0, 2)
    w = run.workload_of("switch")
    found, _, _ = run.run_matcher(w, split["test"])
    start = float(np.median(found.point))
    kept = run.only(found, start)
    mine = np.flatnonzero(found.point >= start)
    assert list(kept.point) == list(found.point[mine]) and len(kept) > 0
    for j, i in enumerate(mine):
        assert list(kept.events_of(j)) == list(found.events_of(int(i)))


def test_the_archive_of_a_period_holds_exactly_its_uploads(tmp_path):
    import pyarrow.parquet as pq

    from bench.drift.spark import archive_uploads

    split = streams.synthetic("switch", 30.0, 2)
    w, period = run.workload_of("switch"), split["test"]
    found, _, _ = run.run_matcher(w, period)
    found = run.only(found, float(np.median(found.point)))
    for share, sub in ((0.2, "sampled"), (0.0, "windows")):
        root = archive_uploads(tmp_path / sub, w, period, found, share)
        archived = pq.ParquetDataset(str(root)).read()
        uploads, facts = run.uploaded(w, period, found, share)
        assert sorted(archived.column("tag").to_pylist()) == uploads.tags.tolist()
        assert archived.num_rows == facts["uploaded_events"]
    assert facts["sampled_events"] == 0
