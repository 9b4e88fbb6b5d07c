"""The devices' finds: the collector adds up the counters of their heartbeats per device and
UTC day (real SQLite files), and the rule of when to retrain reads them
(docs/TRAINING.md, "When to retrain")."""

from __future__ import annotations

import asyncio
import datetime as dt
import sqlite3

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edge.collector import Collector
from edge.collector.archive import Archive
from edge.collector.store import fleet_finds, open_store
from history.drift import FindsDrop, when_to_retrain

DAY = 86400.0
T0 = 1_767_225_600.0  # 2026-01-01 00:00 UTC


def utc_day(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).date().isoformat()


@st.composite
def heartbeats(draw):
    """One device's heartbeats over a few days: agent runs (each its own ``started_at``),
    whose counters only grow, at increasing collector times."""
    beats, t = [], T0
    for run in range(draw(st.integers(1, 3))):
        events = matches = 0
        for i in range(draw(st.integers(1, 5))):
            t += draw(st.sampled_from([60.0, 3600.0, 20 * 3600.0, DAY]))
            events += draw(st.integers(0, 100_000 if i == 0 else 10_000))  # a late first beat
            matches = min(events, matches + draw(st.integers(0, 50)))
            beats.append((t, {"started_at": T0 + run, "events_in": events,
                              "matches": matches}))
    return beats


def expected_finds(beats) -> dict[str, tuple[int, int]]:
    """Per day, what each run counted up to its last heartbeat of that day, less what it
    had counted by the end of the day before."""
    out: dict[str, list[int]] = {}
    runs: dict[float, list] = {}
    for t, status in beats:
        runs.setdefault(status["started_at"], []).append((t, status))
    for run in runs.values():
        before = (0, 0)
        for day in sorted({utc_day(t) for t, _ in run}):
            last = [s for t, s in run if utc_day(t) == day][-1]
            now = (last["events_in"], last["matches"])
            row = out.setdefault(day, [0, 0])
            row[0] += now[0] - before[0]
            row[1] += now[1] - before[1]
            before = now
    return {day: tuple(v) for day, v in out.items() if any(v)}


@settings(max_examples=60, deadline=None)
@given(heartbeats())
def test_heartbeats_add_up_to_each_day_s_events_and_matches(tmp_path_factory, beats):
    db = tmp_path_factory.mktemp("finds") / "collector.db"
    store = open_store(db)
    store.add_device("d1")
    store.add_device("d2")
    for t, status in beats:
        store.heartbeat("d1", status, now=t)
    store.heartbeat("d2", {"started_at": 1.0, "events_in": 7, "matches": 1}, now=T0)
    rows = store.query("SELECT day, events, matches FROM finds WHERE device = 'd1'")
    assert {day: (e, m) for day, e, m in rows} == expected_finds(beats)
    store.close()


def test_heartbeats_without_whole_counters_add_nothing(tmp_path):
    store = open_store(tmp_path / "collector.db")
    store.add_device("d1")
    for status in ({"consumed": 7}, {"events_in": 5.0, "matches": 1},
                   {"events_in": True, "matches": 0}, {"events_in": -3, "matches": 0},
                   {"events_in": 10**400, "matches": 0}, {"events_in": "9", "matches": 1}):
        store.heartbeat("d1", status, now=T0)
    assert store.query("SELECT * FROM finds") == []
    store.heartbeat("d1", {"started_at": 1.0, "events_in": 9, "matches": 2}, now=T0 + 1)
    store.heartbeat("d1", {"started_at": 1.0, "events_in": 4, "matches": 0}, now=T0 + 2)
    assert store.query("SELECT events, matches FROM finds") == [(9, 2)]  # stale: nothing
    store.heartbeat("d1", {"events_in": 9, "matches": 2}, now=T0 + 3)  # an agent without
    store.heartbeat("d1", {"events_in": 4, "matches": 1}, now=T0 + 4)  # started_at: went
    assert store.query("SELECT events, matches FROM finds") == [(22, 5)]  # back, restarted
    store.close()


def test_retention_deletes_the_finds_of_the_days_it_deletes(tmp_path):
    """``--retain-days`` and ``--prune-before`` delete the finds of the days before the
    first day they keep, with the batches of those days."""
    store = open_store(tmp_path / "c.db")
    store.add_device("d1")
    for i in range(7):  # 2026-01-01 .. 01-07, one heartbeat a day
        store.heartbeat("d1", {"started_at": 1.0, "events_in": 10 * (i + 1), "matches": i},
                        now=T0 + i * DAY + 3600.0)
    collector = Collector(store, Archive(tmp_path / "archive"), retain_days=3)
    try:
        gone = asyncio.run(collector.prune_pass(today=dt.date(2026, 1, 7)))
        assert gone["finds"] == 3 and collector.metrics["pruned_finds"] == 3
        days = [r[0] for r in store.query("SELECT day FROM finds ORDER BY day")]
        assert days == ["2026-01-04", "2026-01-05", "2026-01-06", "2026-01-07"]
        assert store.prune(T0 + 5 * DAY)["finds"] == 2  # --prune-before 2026-01-06
        assert fleet_finds(tmp_path / "c.db", "p").finds == []  # no device uploads "p"
        assert [r[0] for r in store.query("SELECT day FROM finds")] == ["2026-01-06",
                                                                         "2026-01-07"]
    finally:
        collector.close()


def test_fleet_finds_reads_a_pattern_s_devices_sketch_and_uploads(tmp_path):
    from support.collector import REF, make_batch

    path = tmp_path / "collector.db"
    store = open_store(path)
    for device in ("d1", "d2", "other"):
        store.add_device(device)
        store.heartbeat(device, {"started_at": 1.0, "events_in": 100, "matches": 9},
                        now=T0 + DAY)
    batch = make_batch("d1", 0, created_at=T0 + 2 * DAY)
    store.store_batch(batch)
    store.store_batch(make_batch("d2", 0, created_at=T0 - DAY))
    store.put_sketch(REF.id, b"signed sketch bytes")
    store.close()
    with sqlite3.connect(path) as con:
        con.execute("UPDATE sketches SET updated_at = ?", (T0 + 0.5,))
    fleet = fleet_finds(path, REF.id)
    assert fleet.published == "2026-01-01"
    assert fleet.finds == [("2026-01-02", 200, 18)]  # d1 and d2 upload the pattern
    assert fleet.uploaded == {"2026-01-03": len(batch)} and len(batch)  # d2: before it
    assert fleet_finds(f"sqlite:///{path}", REF.id) == fleet  # as the collector's --db
    assert fleet_finds(path, "none") == type(fleet)(None, [], {})
    with pytest.raises(ValueError, match="no collector database there"):
        fleet_finds(tmp_path / "missing.db", REF.id)
    (tmp_path / "junk.db").write_bytes(b"not a database" * 100)
    with pytest.raises(ValueError, match="junk.db: not a collector database"):
        fleet_finds(tmp_path / "junk.db", REF.id)


# ------------------------------------------------------------------ the rule


def days_from(first: str, n: int) -> list[str]:
    start = dt.date.fromisoformat(first)
    return [(start + dt.timedelta(days=i)).isoformat() for i in range(n)]


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 200_000), st.integers(0, 400)), min_size=1,
                max_size=12), st.integers(0, 11), st.integers(0, 11), st.integers(0, 120))
def test_the_rule_retrains_from_the_first_day_that_fell_once_uploads_suffice(
        counts, published, today, uploaded_each):
    days = days_from("2026-03-01", len(counts))
    finds = [(d, e, min(m, e)) for d, (e, m) in zip(days, counts)]
    published, today = days[min(published, len(days) - 1)], days_from("2026-03-01", 13)[today]
    uploaded = {d: uploaded_each for d in days}
    decided = when_to_retrain(finds, published, uploaded, today)

    trigger, fell = FindsDrop(), []
    for day, e, m in finds:
        if published < day < today and trigger.update(m, e):
            fell.append(day)
    assert [d["day"] for d in decided.days] == [d for d, _, _ in finds
                                                if published < d < today]
    assert [d["day"] for d in decided.days if d["fell"]] == fell
    if not fell:
        assert (decided.retrain, decided.since) == (False, None)
        return
    since = sum(uploaded_each for d in days if d >= fell[0])
    assert decided.since == fell[0] and decided.retrain == (since >= 50)
    assert f"the finds fell on {fell[0]}" in decided.why


def test_the_rule_on_a_fleet_whose_finds_halve():
    finds = [(d, 100_000, 300 if d < "2026-03-05" else 150)
             for d in days_from("2026-03-01", 8)]
    uploaded = dict.fromkeys(days_from("2026-03-01", 8), 20)
    steady = when_to_retrain(finds[:4], "2026-02-28", uploaded, "2026-03-09")
    assert not steady.retrain and steady.why.startswith(
        "the finds have not dropped since the sketch was published on 2026-02-28 (4 days; "
        "matches per event 0.003 on the first, 0.003 on 2026-03-04)")
    early = when_to_retrain(finds[:5], "2026-02-28", {"2026-03-05": 20}, "2026-03-09")
    assert (early.retrain, early.since) == (False, "2026-03-05")
    assert early.why.startswith("the finds fell on 2026-03-05 (p = ")
    assert early.why.endswith("but the uploads since hold 20 matches, fewer than 50")
    late = when_to_retrain(finds, "2026-02-28", uploaded, "2026-03-09")
    assert (late.retrain, late.since) == (True, "2026-03-05")
    assert late.why.endswith("training on the 80 matches uploaded since")
    # the day the sketch was published and today are not whole days of it: not periods
    assert when_to_retrain(finds, "2026-03-04", uploaded, "2026-03-09").days[0]["day"] == \
        "2026-03-05"
    assert when_to_retrain(finds, None, {}, "2026-03-09").retrain
    quiet = when_to_retrain([], "2026-02-28", {}, "2026-03-09")
    assert not quiet.retrain and "no whole day with events" in quiet.why
