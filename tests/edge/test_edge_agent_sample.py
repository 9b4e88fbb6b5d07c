"""The agent's sample of its stream (``[sample]``): it uploads, besides the windows of its
matches, the events of the blocks ``acep.windows.sample_mask`` draws, also from chunks
without a match; the collector archives them; a damaged batch with a sample is rebuilt
to the same body. Real agent, real collector (``python -m edge.collector``) on loopback,
real SQLite outbox."""

from __future__ import annotations

import json
import logging
import random
import re
import sqlite3
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from support.collector import query, serving
from support.e2e import PATTERN, agent_doc, flip_bit_of, run_once, write_events
from support.wait import wait_for

import acep
from acep import EventBatch
from acep.windows import partition_groups, sample_mask, window_mask
from edge.agent.config import ConfigError, parse_config
from edge.agent.outbox import Outbox
from edge.agent.rebuild import rebuild
from edge.wire import PatternRef, decode_batch

SHARE, SEED = 0.3, 11
REF = PatternRef(PATTERN["id"], PATTERN["text"], PATTERN["window"], PATTERN["k"],
                 tuple(PATTERN["where"]), PATTERN["partition"])


def sparse(n: int, seed: int) -> list[dict]:
    """``n`` events, most of a type the pattern does not use: few matches, and many chunks
    without any."""
    rng = random.Random(seed)
    t, out = 0.0, []
    for _ in range(n):
        t += rng.random()
        out.append({"type": rng.choices("abcx", [1, 1, 1, 20])[0], "t": round(t, 3),
                    "id": rng.randrange(4), "x": rng.randrange(10)})
    return out


def sample_doc(tmp: Path, url: str | None = None, token: str | None = None,
               share: float = SHARE) -> dict:
    """The config of an agent reading ``tmp/events.jsonl`` once in small chunks, with a
    sample."""
    doc = agent_doc(tmp, url, token)
    doc["source"].update(follow=True, batch_events=13)  # --once: no flush, as direct()
    doc["sample"] = {"share": share, "seed": SEED}
    return doc


def expected(events: list[dict]) -> tuple[set[int], np.ndarray, list, np.ndarray]:
    """The positions an agent with the sample uploads, over the whole stream: the windows
    of the matches (no flush at the end) and ``sample_mask``; the mask; the matches; the
    match windows' mask."""
    whole = EventBatch.from_events(events)
    m = acep.Matcher(PATTERN["text"], PATTERN["window"], PATTERN["k"], partition="id",
                     where=PATTERN["where"])
    found = m.match_batch(whole)
    groups = partition_groups(whole, "id")
    keep = window_mask(whole, found.partition.tolist(), found.point, PATTERN["window"],
                       groups)
    mask = sample_mask(whole, "id", PATTERN["window"], SHARE, seed=SEED)
    return set(np.flatnonzero(keep | mask).tolist()), mask, found, keep


def outbox_batches(db_path: Path) -> list:
    """The decoded batches put into the outbox (read before any upload)."""
    with sqlite3.connect(db_path) as db:
        return [decode_batch(b) for (b,) in db.execute("SELECT body FROM pending ORDER BY n")]


def test_the_agent_uploads_its_match_windows_and_its_sample_and_the_collector_archives_them(
        tmp_path: Path):
    """Chunks of 13 events: the archive holds exactly the match windows and the sample
    drawn over the whole stream (the draw is per event, so chunks do not matter), batches
    without a match carry the sample of chunks without one, and no event of a chunk's
    sample goes twice."""
    events = sparse(3000, seed=4)
    write_events(tmp_path / "events.jsonl", events)
    want, mask, found, windows = expected(events)
    assert 0 < len(found) < 200 and 0 < mask.sum() < len(events)
    with serving(tmp_path) as c:
        final = run_once(sample_doc(tmp_path, c.url, c.token))
        wait_for(lambda: len(c.seqs()) == final["batches_put"], "every batch stored")
        files = sorted(c.archive.rglob("*.parquet"))
        table = pa.concat_tables([pq.read_table(f) for f in files])
        per_batch = {bid: n for bid, n in query(
            c.db, "SELECT b.batch_id, COUNT(m.batch_id) FROM batches b LEFT JOIN matches m "
                  "ON m.batch_id = b.batch_id GROUP BY b.batch_id")}
    assert final["outbox_pending"] == 0 and final["batches_sent"] == final["batches_put"]
    assert final["matches"] == len(found)
    positions = table.column("position").to_pylist()
    assert set(positions) == want
    for pos, tag, typ in zip(positions, table.column("tag").to_pylist(),
                             table.column("type").to_pylist()):
        assert (tag, typ) == (events[pos]["t"], events[pos]["type"])
    # a chunk's sample travels once: with its first batch, or alone in a batch of its own
    # (a later match's window may send a sampled event again, as it does any kept event)
    sampled = [p for p in positions if mask[p] and not windows[p]]
    assert sorted(sampled) == np.flatnonzero(mask & ~windows).tolist()
    assert final["events_sampled"] == int(mask.sum())
    alone = [bid for bid, n in per_batch.items() if n == 0]
    assert alone and len(alone) < len(per_batch)


@pytest.mark.parametrize("share", [0.0, 1.0])
def test_a_share_of_zero_sends_the_windows_alone_and_one_sends_everything(tmp_path, share):
    events = sparse(800, seed=2)
    write_events(tmp_path / "events.jsonl", events)
    final = run_once(sample_doc(tmp_path, share=share))
    got = set()
    for b in outbox_batches(tmp_path / "outbox.db"):
        got |= set(b.event_position.tolist())
        assert share or len(b)  # without a sample, no batch without a match
    if share:
        assert got == set(range(len(events))) and final["events_sampled"] == len(events)
    else:
        whole = EventBatch.from_events(events)
        m = acep.Matcher(PATTERN["text"], PATTERN["window"], PATTERN["k"], partition="id",
                         where=PATTERN["where"])
        found = m.match_batch(whole)
        keep = window_mask(whole, found.partition.tolist(), found.point, PATTERN["window"],
                           partition_groups(whole, "id"))
        assert got == set(np.flatnonzero(keep).tolist()) and final["events_sampled"] == 0


def test_a_cut_batch_carries_the_sample_in_its_first_piece_only(tmp_path, caplog):
    """collector.max_body so small that every batch of two matches or more is cut: each
    sampled event is sent once all the same."""
    caplog.set_level(logging.INFO, logger="edge.agent")
    events = sparse(1500, seed=9)
    write_events(tmp_path / "events.jsonl", events)
    _, mask, _, windows = expected(events)
    doc = sample_doc(tmp_path)
    doc["source"]["batch_events"] = 400
    doc["collector"] = {"max_body": 2000}
    run_once(doc)
    batches = outbox_batches(tmp_path / "outbox.db")
    sampled = []
    for b in batches:
        sampled += [p for p in b.event_position.tolist() if mask[p] and not windows[p]]
    assert len(batches) > 10 and any("cut in two" in r.getMessage() for r in caplog.records)
    # a sampled event is in one batch only, unless a match window holds it too
    assert sorted(sampled) == np.flatnonzero(mask & ~windows).tolist()


# --------------------------------------------------------------------------- config

@pytest.mark.parametrize("sample, words", [
    ({"share": 1.5}, "sample.share: must be in [0, 1], not 1.5"),
    ({"share": -0.1}, "sample.share: must be in [0, 1]"),
    ({"share": "a lot"}, "sample.share: must be float"),
    ({"share": float("nan")}, "sample.share: must be in [0, 1], not nan"),
    ({"seed": 1.5}, "sample.seed: must be int"),
    ({"shares": 0.1}, "sample.shares: unknown key"),
])
def test_bad_sample_values_are_refused_naming_the_key(tmp_path, sample, words):
    doc = agent_doc(tmp_path)
    (tmp_path / "events.jsonl").write_text("")
    doc["sample"] = sample
    with pytest.raises(ConfigError) as e:
        parse_config(doc)
    assert words in str(e.value)


def test_a_sample_with_condensed_summaries_is_refused(tmp_path):
    (tmp_path / "events.jsonl").write_text("")
    doc = {**agent_doc(tmp_path), "sample": {"share": 0.05}, "condensed": {"enabled": True}}
    with pytest.raises(ConfigError, match=r"sample.share: .*condensed.enabled = true.*carry "
                                          r"none"):
        parse_config(doc)
    doc["sample"]["share"] = 0.0  # off: condensed alone is fine
    assert parse_config(doc).sample.share == 0.0


def test_the_sample_defaults_to_off_and_takes_an_integer_share(tmp_path):
    (tmp_path / "events.jsonl").write_text("")
    doc = agent_doc(tmp_path)
    cfg = parse_config(doc)
    assert (cfg.sample.share, cfg.sample.seed) == (0.0, 0)
    doc["sample"] = {"share": 1, "seed": -3}
    cfg = parse_config(doc)
    assert (cfg.sample.share, cfg.sample.seed) == (1.0, -3)


# --------------------------------------------------------------------------- rebuild

def test_every_batch_with_a_sample_rebuilds_to_the_same_body(tmp_path):
    """Each recipe of a batch with a sample says how to draw it again; the rebuild from the
    file gives the body byte for byte (its CRC-32 is checked), with a match or without."""
    events = sparse(1500, seed=5)
    write_events(tmp_path / "events.jsonl", events)
    run_once(sample_doc(tmp_path))
    with sqlite3.connect(tmp_path / "outbox.db") as db:
        rows = db.execute("SELECT batch_id, body, crc, recipe FROM pending").fetchall()
    kinds = set()
    for bid, body, crc, made in rows:
        r = json.loads(made)
        assert rebuild(r, crc, device=bid.rsplit("/", 1)[0], seq=int(bid.rsplit("/", 1)[1]),
                       pattern=REF) == body
        if "sample" in r:
            kinds.add(bool(r["matches"]["point"]))
    assert kinds == {True, False}


def test_a_damaged_batch_of_a_sample_alone_is_rebuilt_and_stored(tmp_path):
    """A bit flipped in a batch that holds no match, only the sample of its chunk: the
    agent rebuilds it under the same id and the collector stores it."""
    events = sparse(1500, seed=5)
    write_events(tmp_path / "events.jsonl", events)
    put = run_once(sample_doc(tmp_path))
    alone = [b.batch_id for b in outbox_batches(tmp_path / "outbox.db") if len(b) == 0]
    assert alone
    with sqlite3.connect(tmp_path / "outbox.db") as db:  # a dead letter's reason says it
        (about,) = db.execute("SELECT about FROM pending WHERE batch_id = ?",
                              (alone[0],)).fetchone()
    assert re.match(r"0 matches and \d+ sampled events of the events at positions", about)
    flip_bit_of(tmp_path / "outbox.db", alone[0])
    with serving(tmp_path) as c:
        final = run_once(sample_doc(tmp_path, c.url, c.token))
        ids = {b for (b,) in query(c.db, "SELECT batch_id FROM batches")}
    assert alone[0] in ids and len(ids) == put["outbox_pending"]
    assert final["outbox_damaged"] == final["outbox_rebuilt"] == 1
    assert final["outbox_dead"] == final["outbox_pending"] == 0
    with Outbox(tmp_path / "outbox.db") as box:
        assert not box.dead_letters()
