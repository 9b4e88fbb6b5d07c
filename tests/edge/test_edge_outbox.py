"""The durable outbox: idempotency, backoff, the cap policy, and SIGKILL at any point."""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time

import pytest

from edge.agent.outbox import Outbox, OutboxFull
from edge.agent.outbox_reader import DUE_SLACK, Backoff


def test_put_is_idempotent_by_batch_id_even_after_ack(tmp_path):
    with Outbox(tmp_path / "o.db") as box:
        assert box.put(b"one", "d/1", now=0)
        assert not box.put(b"other body", "d/1", now=0)
        assert box.pending_ids() == ["d/1"]
        assert box.ack("d/1", now=1)
        assert not box.ack("d/1", now=1)
        assert not box.put(b"one", "d/1", now=2)
        assert box.next_due(now=10) is None
        assert box.status("d/1") == "sent"
        m = box.metrics()
    assert (m["put"], m["duplicate"], m["sent"], m["sent_bytes"], m["pending"]) == (1, 2, 1, 3, 0)


def test_the_file_is_in_wal_mode_and_survives_reopening(tmp_path):
    path = tmp_path / "o.db"
    with Outbox(path) as box:
        box.put(b"a", "d/1", now=0)
        box.put(b"bb", "d/2", now=0)
        box.ack("d/1")
    assert sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    with Outbox(path) as box:
        assert box.pending_ids() == ["d/2"]
        assert box.metrics()["sent"] == 1
        assert not box.put(b"a", "d/1")


def test_next_due_is_oldest_first_and_respects_the_retry_time(tmp_path):
    with Outbox(tmp_path / "o.db", backoff=Backoff(1.0, 2.0, 100.0, 0.0)) as box:
        for i in range(3):
            box.put(b"x", f"d/{i}", now=0)
        assert box.next_due(0).batch_id == "d/0"
        assert box.fail("d/0", "timeout", now=0) == 1.0
        assert box.next_due(0).batch_id == "d/1"
        box.ack("d/1")
        box.ack("d/2")
        assert box.next_due(0.5) is None
        assert box.next_due_at() == 1.0
        due = box.next_due(1.0)
        assert (due.batch_id, due.body, due.attempts) == ("d/0", b"x", 1)


def test_a_retry_after_from_the_collector_replaces_the_backoff_delay(tmp_path):
    with Outbox(tmp_path / "o.db", backoff=Backoff(1.0, 2.0, 100.0, 0.0)) as box:
        box.put(b"x", "d/0", now=0)
        assert [box.fail("d/0", "timeout", now=0) for _ in range(4)] == [1, 2, 4, 8]
        assert box.fail("d/0", "HTTP 503", now=0, delay=3.0) == 3.0  # not 16
        assert box.fail("d/0", "HTTP 503", now=0, delay=500.0) == 100.0  # at most the max
        assert box.fail("d/0", "timeout", now=0) == 64.0  # the 7th attempt's backoff
        assert box.next_due(63.9) is None and box.next_due(64).attempts == 7


def test_a_due_time_written_before_the_clock_went_back_is_due_at_once(tmp_path):
    """A Pi without a real-time clock that sets its clock back (NTP, at boot), or a fast
    clock corrected: a retry written due at T by the clock then waited until the clock read
    T again, hours. A due time further ahead than the longest retry delay (and DUE_SLACK)
    is due now, after a restart too; one within it is waited for as before."""
    backoff = Backoff(1.0, 2.0, 300.0, 0.0)
    with Outbox(tmp_path / "o.db", backoff=backoff) as box:
        for i in range(3):
            box.put(b"x", f"d/{i}", now=0)
        box.fail("d/0", "timeout", now=1000 + 3 * 3600)  # the clock read 3 hours later then
        box.fail("d/1", "HTTP 503", now=1000, delay=300.0)  # the longest wait: 1300
        box.fail("d/2", "HTTP 503", now=1000 + DUE_SLACK - 1, delay=300.0)  # within the slack
    with Outbox(tmp_path / "o.db", backoff=backoff) as box:
        due = box.next_due(1000)
        assert due is not None and due.batch_id == "d/0"
        assert box.next_due_at(1000) == 1000
        box.ack("d/0")
        assert box.next_due(1000) is None and box.next_due_at(1000) == 1300
        assert box.next_due(1300).batch_id == "d/1"


@pytest.mark.parametrize("backoff_max", [300.0, 3600.0])
def test_status_says_when_the_agent_sends_a_batch_due_before_the_clock_went_back(
        tmp_path, backoff_max):
    """``acep outbox status`` showed a retry's stored due time, 2000 s ahead once the clock
    had been set back, while the agent sends that batch at once: it says what the agent
    does now, by the agent's own outbox.backoff_max (recorded in the outbox; under 3600 s
    such a retry is one the agent waits for), also after acep outbox requeue opened it."""
    path = tmp_path / "o.db"
    with Outbox(path, backoff=Backoff(1.0, 2.0, backoff_max, 0.0)) as box:
        box.put(b"x", "d/1")
        stored = box.fail("d/1", "timeout", now=time.time() + 2000)  # the clock read later
    assert _outbox_cli(path, "requeue").returncode == 0  # no backoff of its own recorded
    start = time.time()
    status = json.loads(_outbox_cli(path, "status").stdout)
    with Outbox(path, backoff=Backoff(1.0, 2.0, backoff_max, 0.0)) as agent:
        sends_at = agent.next_due_at()
    if backoff_max == 300.0:
        assert start <= status["next_due"] <= time.time() and sends_at <= time.time()
    else:
        assert status["next_due"] == stored == sends_at


def test_backoff_schedule_is_exponential_capped_and_seeded(tmp_path):
    plain = Backoff(base_delay=0.5, factor=2.0, max_delay=10.0, jitter=0.0)
    assert [plain.delay("b", n) for n in range(1, 8)] == [0.5, 1, 2, 4, 8, 10, 10]
    seeded = Backoff(base_delay=1.0, factor=3.0, max_delay=1e9, jitter=0.25, seed=42)
    delays = [seeded.delay("b", n) for n in range(1, 15)]
    for n, d in enumerate(delays, start=1):
        assert 0.75 * 3 ** (n - 1) <= d <= 1.25 * 3 ** (n - 1)
    assert delays == [Backoff(1.0, 3.0, 1e9, 0.25, seed=42).delay("b", n) for n in range(1, 15)]
    assert delays != [Backoff(1.0, 3.0, 1e9, 0.25, seed=43).delay("b", n) for n in range(1, 15)]
    assert len({round(d / 3 ** n, 9) for n, d in enumerate(delays)}) > 10  # jitter varies
    with Outbox(tmp_path / "o.db", backoff=seeded) as box:
        box.put(b"x", "b", now=100)
        dues = [box.fail("b", "e", now=100) for _ in range(5)]
    assert dues == [100 + d for d in delays[:5]]
    with pytest.raises(ValueError):
        Backoff(jitter=1.0)
    assert Backoff(seed=None).delay("x", 1) > 0


def test_cap_drop_oldest_counts_what_it_drops(tmp_path):
    with Outbox(tmp_path / "o.db", max_rows=3, max_bytes=10) as box:
        for i in range(3):
            box.put(b"abc", f"d/{i}", now=i)
        box.put(b"abcd", "d/3", now=3)  # 9 + 4 > 10: drops d/0
        assert box.pending_ids() == ["d/1", "d/2", "d/3"]
        box.put(b"a", "d/4", now=4)  # 4 rows > 3: drops d/1
        assert box.pending_ids() == ["d/2", "d/3", "d/4"]
        assert box.status("d/0") == "dropped"
        assert not box.put(b"abc", "d/0")  # a dropped id is not taken again
        with pytest.raises(OutboxFull):
            box.put(b"x" * 11, "d/5")  # larger than the cap on its own
        m = box.metrics()
    assert (m["dropped"], m["dropped_bytes"], m["refused"], m["refused_bytes"]) == (2, 6, 1, 11)
    assert (m["pending"], m["pending_bytes"], m["put"]) == (3, 8, 5)


def test_cap_refuse_new_keeps_the_old_and_counts_the_refusals(tmp_path):
    with Outbox(tmp_path / "o.db", max_rows=2, policy="refuse-new") as box:
        box.put(b"a", "d/0")
        box.put(b"b", "d/1")
        for i in range(3):
            with pytest.raises(OutboxFull, match="refuse-new"):
                box.put(b"cc", f"d/{2 + i}")
        assert box.pending_ids() == ["d/0", "d/1"]
        box.ack("d/0")
        assert box.put(b"cc", "d/2")
        m = box.metrics()
    assert (m["refused"], m["refused_bytes"], m["dropped"], m["put"]) == (3, 6, 0, 3)
    with pytest.raises(ValueError, match="policy"):
        Outbox(tmp_path / "p.db", policy="drop-newest")


def test_fail_of_unknown_batches_and_bad_arguments(tmp_path):
    with Outbox(tmp_path / "o.db") as box:
        assert box.fail("nope", "e") is None
        with pytest.raises(TypeError):
            box.put("text", "d/1")
        with pytest.raises(ValueError):
            box.put(b"x", "")


def test_forgotten_done_ids_are_bounded(tmp_path):
    with Outbox(tmp_path / "o.db", keep_done=5) as box:
        for i in range(20):
            box.put(b"x", f"d/{i}")
            box.ack(f"d/{i}")
        assert box.status("d/19") == "sent"
        assert box.status("d/0") is None
        rows = box._db.execute("SELECT COUNT(*) FROM done").fetchone()[0]
    assert rows <= 6


# --------------------------------------------------------------------------- SIGKILL

CHILD = textwrap.dedent("""
    import os, sys
    from edge.agent.outbox import Outbox
    from edge.agent.outbox_reader import Backoff
    path, log, start = sys.argv[1], sys.argv[2], int(sys.argv[3])
    box = Outbox(path, backoff=Backoff(0.001, 2.0, 0.002, 0.0, seed=1))
    out = sys.stdout

    def deliver(due):
        # the "collector": appends each delivery to a file, durably, before the ack
        with open(log, "a") as fh:
            fh.write(due.batch_id + "\\n")
            fh.flush()
            os.fsync(fh.fileno())

    for i in range(start, start + 10_000):
        bid = f"d/{i}"
        box.put(b"x" * (i % 50 + 1), bid)
        print("put", bid, flush=True)
        box.put(b"again", bid)  # a duplicate put after a restart must be a no-op
        due = box.next_due(now=1e18)
        if due is None:
            continue
        deliver(due)
        if i % 3 == 0:
            box.fail(due.batch_id, "pretend the server said 503", now=0)
            print("fail", due.batch_id, flush=True)
        else:
            box.ack(due.batch_id)
            print("ack", due.batch_id, flush=True)
""")


def test_sigkill_at_random_points_loses_nothing_and_resends_nothing_acked(tmp_path):
    path, log = str(tmp_path / "outbox.db"), str(tmp_path / "delivered.txt")
    rng = random.Random(7)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    put: set[str] = set()
    acked: set[str] = set()
    next_start = 0
    for _ in range(8):
        acked_before, seen = set(acked), len(_deliveries(log))
        child = subprocess.Popen([sys.executable, "-c", CHILD, path, log, str(next_start)],
                                 stdout=subprocess.PIPE, text=True, env=env)
        lines, stop = [], rng.randint(5, 120)
        for line in child.stdout:
            lines.append(line.split())
            if len(lines) >= stop:
                break
        child.send_signal(signal.SIGKILL)
        assert child.wait() == -signal.SIGKILL
        child.stdout.close()
        put |= {bid for op, bid in lines if op == "put"}
        acked |= {bid for op, bid in lines if op == "ack"}
        resent = set(_deliveries(log)[seen:]) & acked_before
        assert not resent, f"acknowledged batches sent again: {sorted(resent)}"
        # the child may have died between a put's commit and its report: the next one
        # puts that id again, which must be a no-op
        next_start = max(int(b.split("/")[1]) for b in put) + 1 if put else 0
        with Outbox(path) as box:
            pending = set(box.pending_ids())
            status = {b: box.status(b) for b in put}
            m = box.metrics()
        assert not pending & acked, "an acknowledged batch is pending again"
        assert all(status[b] in ("pending", "sent") for b in put), "a put batch was lost"
        assert all(status[b] == "sent" for b in acked)
        assert m["pending"] == len(pending) and m["sent"] >= len(acked)
        assert m["dropped"] == 0 and m["put"] >= len(put)
    assert len(acked) > 20 and len(put) > 50  # the kills really landed mid-run
    with Outbox(path) as box:
        while (due := box.next_due(now=1e18)) is not None:
            assert due.batch_id not in acked
            box.ack(due.batch_id)
        assert all(box.status(b) == "sent" for b in put)
        assert box.metrics()["pending"] == 0


def _deliveries(log: str) -> list[str]:
    try:
        with open(log) as fh:
            return [line.strip() for line in fh if line.strip()]
    except FileNotFoundError:
        return []


# --------------------------------------------------------------------------- dead letters


def test_a_refused_batch_is_kept_as_a_dead_letter_until_requeued_or_discarded(tmp_path):
    with Outbox(tmp_path / "o.db") as box:
        box.put(b"body-1", "d/1", now=0)
        box.put(b"body-2", "d/2", now=0)
        assert box.reject("d/1", "HTTP 400: field 'seq': missing", now=5)
        assert not box.reject("d/1", "again")
        assert box.status("d/1") == "dead" and box.pending_ids() == ["d/2"]
        [dead] = box.dead_letters()
        assert (dead.batch_id, dead.size, dead.reason, dead.at, dead.attempts) == \
            ("d/1", 6, "HTTP 400: field 'seq': missing", 5, 1)
        assert box.dead_body("d/1") == b"body-1"
        assert not box.put(b"other", "d/1")  # a dead id is known: a counted duplicate
        assert box.next_due(now=100).batch_id == "d/2"
        m = box.metrics()
        assert (m["rejected"], m["rejected_bytes"], m["dead"], m["dead_bytes"],
                m["pending"]) == (1, 6, 1, 6, 1)
        box.ack("d/2")
        assert box.requeue(now=10) == 1
        due = box.next_due(now=10)
        assert (due.batch_id, due.body, due.attempts) == ("d/1", b"body-1", 0)
        box.reject("d/1", "HTTP 409: conflict")
        assert box.discard(["d/1", "nope"]) == 1
        assert box.status("d/1") == "discarded" and box.dead_body("d/1") is None
        m = box.metrics()
    assert (m["dead"], m["requeued"], m["discarded"], m["rejected"]) == (0, 1, 1, 2)
    with Outbox(tmp_path / "o.db") as box:  # and it all survives reopening
        assert box.status("d/2") == "sent" and box.status("d/1") == "discarded"


def test_dead_letters_count_against_the_cap(tmp_path):
    with Outbox(tmp_path / "o.db", max_rows=3) as box:
        for i in range(3):
            box.put(b"x", f"d/{i}")
        box.reject("d/0", "HTTP 400")
        box.reject("d/1", "HTTP 400")
        box.put(b"x", "d/3")  # 3 rows with the dead letters: drops the oldest dead letter
        assert box.status("d/0") == "dropped" and box.status("d/1") == "dead"
        box.put(b"x", "d/4")
        assert box.status("d/1") == "dropped"
        assert box.pending_ids() == ["d/2", "d/3", "d/4"]  # the live batches are kept
        assert box.metrics()["dropped"] == 2
    with Outbox(tmp_path / "r.db", max_rows=2, policy="refuse-new") as box:
        box.put(b"x", "d/0")
        box.reject("d/0", "HTTP 409")
        box.put(b"x", "d/1")
        with pytest.raises(OutboxFull):
            box.put(b"x", "d/2")
        assert box.status("d/0") == "dead"


def test_cli_lists_exports_requeues_and_discards_dead_letters(tmp_path):
    path = tmp_path / "o.db"
    with Outbox(path) as box:
        box.put(b"\x81\xa1a\x01", "pi-1/7")
        box.reject("pi-1/7", "HTTP 400: field 'format': missing")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))

    def cli(*args):
        out = subprocess.run([sys.executable, "-m", "acep", "outbox", str(path), *args],
                             capture_output=True, text=True, env=env, timeout=60)
        assert out.returncode == 0, out.stderr
        return out.stdout

    [line] = cli("list").splitlines()
    doc = json.loads(line)
    assert doc["batch_id"] == "pi-1/7" and "field 'format'" in doc["reason"]
    cli("export", str(tmp_path / "dead"))
    assert (tmp_path / "dead" / "pi-1_7.msgpack").read_bytes() == b"\x81\xa1a\x01"
    assert "requeued 1" in cli("requeue")
    with Outbox(path) as box:
        assert box.pending_ids() == ["pi-1/7"]
        box.reject("pi-1/7", "HTTP 400")
    assert "discarded 1" in cli("discard", "--all")
    assert cli("list") == ""
    missing = subprocess.run([sys.executable, "-m", "acep", "outbox",
                              str(tmp_path / "no.db"), "list"],
                             capture_output=True, text=True, env=env, timeout=60)
    assert missing.returncode == 2 and "no such outbox" in missing.stderr
    assert not (tmp_path / "no.db").exists()


def _outbox_cli(path, *args):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    return subprocess.run([sys.executable, "-m", "acep", "outbox", str(path), *args],
                          capture_output=True, text=True, env=env, timeout=60)


@pytest.mark.parametrize("action", ["discard", "requeue"])
def test_cli_names_ids_that_are_not_dead_letters_and_fails_but_acts_on_the_others(
        tmp_path, action):
    path = tmp_path / "o.db"
    with Outbox(path) as box:
        for bid in ("pi-1/1", "pi-1/2"):
            box.put(b"x", bid)
        box.reject("pi-1/1", "HTTP 400")
    out = _outbox_cli(path, action, "nope/123", "pi-1/1", "pi-1/2")
    assert out.returncode == 1
    assert out.stderr == "acep outbox: not dead letters, left alone: nope/123 (unknown), " \
                         "pi-1/2 (pending)\n"
    with Outbox(path) as box:
        assert box.dead_letters() == []  # pi-1/1 was acted on all the same
        assert box.status("pi-1/1") == ("discarded" if action == "discard" else "pending")


@pytest.mark.parametrize("make, why", [
    (lambda p: p.mkdir(), "not an outbox (a directory)"),
    (lambda p: p.write_text("hello\n"), "not an outbox (file is not a database)"),
    (lambda p: p.write_bytes(bytes(range(256)) * 8), "not an outbox (file is not a database)"),
    (lambda p: sqlite3.connect(p).execute("CREATE TABLE t (x)"),
     "not an outbox (no table 'pending')"),
    (lambda p: None, "no such outbox"),
])
@pytest.mark.parametrize("action", [["status"], ["list"], ["export", "dead"],
                                    ["requeue"], ["discard", "--all"]])
def test_cli_on_what_is_not_an_outbox_says_so_in_one_line_and_writes_nothing(
        tmp_path, make, why, action):
    path = tmp_path / "o.db"
    make(path)
    before = sorted(os.listdir(tmp_path))
    out = _outbox_cli(path, *[tmp_path / a if a == "dead" else a for a in action])
    assert (out.returncode, out.stdout) == (2, "")
    assert out.stderr == f"acep outbox: {path}: {why}\n"
    assert sorted(os.listdir(tmp_path)) == before


def test_backoff_jitter_never_goes_past_the_maximum():
    for seed in range(20):
        b = Backoff(base_delay=1.0, factor=2.0, max_delay=2.0, jitter=0.2, seed=seed)
        delays = [b.delay("x", n) for n in range(1, 12)]
        assert all(d <= 2.0 for d in delays)
        assert 0.8 <= delays[0] <= 1.2


def test_requeue_redate_refuses_a_body_that_is_no_batch_and_requeues_none(tmp_path):
    """``--redate`` rewrites each body in one transaction: one it cannot read (an old
    format, a foreign body) is named and none of them moves, each body left as it was."""
    from support.collector import make_batch

    from edge.wire import encode_batch

    path, good = tmp_path / "o.db", encode_batch(make_batch("pi-1", 1, created_at=5.0))
    with Outbox(path) as box:
        for bid, body in (("pi-1/1", good), ("pi-1/2", b"\x81\xa1a\x01")):
            box.put(body, bid)
            box.reject(bid, "HTTP 400")
    out = _outbox_cli(path, "requeue", "--redate")
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr.startswith("acep outbox requeue: pi-1/2: not a batch this version can "
                                 "date (") and out.stderr.endswith("; nothing requeued\n")
    with Outbox(path) as box:
        assert box.pending_ids() == [] and len(box.dead_letters()) == 2
        assert box.dead_body("pi-1/1") == good


def test_status_list_and_export_read_without_writing_beside_a_running_agent_or_not(tmp_path):
    """The reading actions open the outbox read-only: on a stopped agent's outbox no file
    appears or changes (a user who may only read it can run them; nothing owned by another
    user is left beside it), and beside an agent holding it open they see its batches."""
    path = tmp_path / "box" / "o.db"
    path.parent.mkdir()
    with Outbox(path) as box:
        box.put(b"x" * 10, "pi-1/1")
        box.put(b"y" * 5, "pi-1/2")
        box.reject("pi-1/1", "HTTP 400")

    def snapshot():
        return {p.name: p.stat().st_mtime_ns for p in path.parent.iterdir()}, \
            path.parent.stat().st_mtime_ns

    before = snapshot()
    for action in (["status"], ["list"], ["export", str(tmp_path / "dead")]):
        out = _outbox_cli(path, *action)
        assert out.returncode == 0 and out.stdout, out.stderr
        assert snapshot() == before, action
    assert (tmp_path / "dead" / "pi-1_1.msgpack").read_bytes() == b"x" * 10

    with Outbox(path) as running:  # the agent: its -wal file beside the outbox
        running.put(b"z" * 7, "pi-1/3")
        status = json.loads(_outbox_cli(path, "status").stdout)
        assert (status["pending"], status["pending_bytes"], status["dead"]) == (2, 12, 1)
        running.put(b"w", "pi-1/4")  # the reader held no lock the agent waits for
