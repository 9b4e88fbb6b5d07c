"""A durable outbox for upload batches: SQLite in WAL mode, retry with backoff, a cap.

Every operation is one SQLite transaction, so a process killed at any point leaves either
the state before or the state after it: a batch that :meth:`Outbox.put` returned for is
never lost, a batch that :meth:`Outbox.ack` returned for is never handed out again, and a
batch id is stored at most once (it is the primary key, and acknowledged or dropped ids
are remembered, so putting them again is a counted no-op).

Delivery is at least once: a batch sent but not acknowledged before a crash is sent again,
and the collector deduplicates by batch id (the idempotency key, ``docs/WIRE.md``).

Retry: after the n-th failure a batch is due again after
``min(max_delay, base_delay * factor**(n-1))`` scaled by a jitter factor in
``[1 - jitter, 1 + jitter]``. With a ``seed`` the jitter is a hash of (seed, batch id, n),
so the schedule is the same across runs and restarts. Due times are Unix times (they
outlive the process); one further ahead than any retry delay (plus :data:`DUE_SLACK`) was
written before the clock went back, and is due at once (:meth:`Outbox.latest_due`).

Dead letters: a batch the collector refuses for good (:meth:`Outbox.reject`) is not
deleted. It moves, with its reason, to the dead letters, where it is never sent again until
:meth:`Outbox.requeue` puts it back; :meth:`Outbox.dead_letters`, :meth:`Outbox.dead_body`
and ``acep outbox PATH list|export DIR|requeue|discard`` (:mod:`edge.agent.outbox_cli`)
list, export, resend or delete them; ``acep outbox PATH status`` sums up the pending batches and
the dead letters (:meth:`Outbox.summary`).

Checksums: each body's CRC-32 is stored with it (:func:`checksum`). :meth:`Outbox.next_due`
never hands out a body that does not match: :attr:`Outbox.repair` (the agent's, from the
batch's ``put(..., recipe=)``: ``edge/agent/rebuild.py``) makes it again, counted as ``rebuilt``,
or it moves to the dead letters, its reason saying what it held (``put(..., about=)``) and
why it was not rebuilt; both are counted as ``damaged``. :meth:`Outbox.damaged` and
:meth:`Outbox.quick_check` find damage without moving anything (``acep agent --check``).

Split: :meth:`Outbox.split` replaces a batch the collector found too large (413) by its
halves, in one transaction.

Cap: ``max_rows`` and ``max_bytes`` bound the pending batches and the dead letters together.
When a new batch does not fit, ``policy="drop-oldest"`` deletes the oldest dead letters,
then the oldest pending batches, until it fits and ``policy="refuse-new"`` raises
:class:`OutboxFull`; both are counted (:meth:`metrics`).
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import random
import sqlite3
import threading
import time
import urllib.parse
import zlib
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["Outbox", "OutboxFull", "OutboxError", "Backoff", "Due", "DeadLetter", "POLICIES",
           "DUE_SLACK", "read_summary", "out_of_space", "OutboxReader", "checksum",
           "Damaged"]

log = logging.getLogger("edge.outbox")

POLICIES = ("drop-oldest", "refuse-new")
# seconds a due time may lie beyond the longest retry delay before it is taken for one
# written by a clock that has gone back since (Outbox.latest_due): due at once
DUE_SLACK = 60.0
_COUNTERS = ("put", "duplicate", "sent", "sent_bytes", "failed", "dropped", "dropped_bytes",
             "refused", "refused_bytes", "rejected", "rejected_bytes", "requeued",
             "discarded", "discarded_bytes", "damaged", "rebuilt", "split")
# CRC-32 of a batch body, kept beside it (column crc): a body damaged on the disk is never sent
_CHECKED = ("pending", "dead")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS pending (
    n INTEGER PRIMARY KEY AUTOINCREMENT,
    batch_id TEXT NOT NULL UNIQUE,
    body BLOB NOT NULL,
    size INTEGER NOT NULL,
    created REAL NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    due REAL NOT NULL,
    last_error TEXT,
    crc INTEGER,
    about TEXT,
    recipe TEXT
);
CREATE INDEX IF NOT EXISTS pending_due ON pending (due, n);
-- the cap's COUNT(*) and SUM(size) read this index, not the rows: size is stored after the
-- body, so a table scan would read every pending body's overflow pages on every put
CREATE INDEX IF NOT EXISTS pending_size ON pending (size);
CREATE TABLE IF NOT EXISTS done (
    n INTEGER PRIMARY KEY AUTOINCREMENT,
    batch_id TEXT NOT NULL UNIQUE,
    outcome TEXT NOT NULL,
    at REAL NOT NULL
);
-- batches the collector refused for good, kept with the reason until an operator acts
CREATE TABLE IF NOT EXISTS dead (
    n INTEGER PRIMARY KEY AUTOINCREMENT,
    batch_id TEXT NOT NULL UNIQUE,
    body BLOB NOT NULL,
    size INTEGER NOT NULL,
    created REAL NOT NULL,
    attempts INTEGER NOT NULL,
    reason TEXT NOT NULL,
    at REAL NOT NULL,
    crc INTEGER,
    about TEXT,
    recipe TEXT
);
CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS state (name TEXT PRIMARY KEY, value TEXT NOT NULL);
-- the settings of the agent that writes the outbox which its readers need: backoff_max, the
-- longest retry delay (acep outbox status tells a due time written before the clock went
-- back by it, as the agent does)
CREATE TABLE IF NOT EXISTS settings (name TEXT PRIMARY KEY, value NOT NULL);
"""


class OutboxFull(Exception):
    """The outbox is at its cap and the policy is ``refuse-new``."""


class OutboxError(Exception):
    """The outbox file cannot be opened (or created); the message starts with its path."""


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff with jitter; see the module docstring."""

    base_delay: float = 1.0
    factor: float = 2.0
    max_delay: float = 300.0
    jitter: float = 0.2
    seed: int | None = None

    def __post_init__(self):
        if not (self.base_delay > 0 and self.factor >= 1 and self.max_delay >= self.base_delay
                and 0 <= self.jitter < 1):
            raise ValueError(f"bad backoff settings {self}")

    def delay(self, batch_id: str, attempts: int) -> float:
        """Seconds to wait after the ``attempts``-th failure (``attempts >= 1``)."""
        exp = min(attempts - 1, 1024)  # beyond this the cap applies anyway; avoids overflow
        raw = min(self.max_delay, self.base_delay * self.factor ** exp)
        if self.seed is None:
            u = random.random()
        else:
            digest = hashlib.sha256(f"{self.seed}:{batch_id}:{attempts}".encode()).digest()
            u = int.from_bytes(digest[:8], "big") / 2.0 ** 64
        return min(self.max_delay, raw * (1 - self.jitter + 2 * self.jitter * u))


@dataclass(frozen=True)
class DeadLetter:
    """A batch the collector refused for good, kept with its reason (without the body)."""

    batch_id: str
    size: int
    created: float
    attempts: int
    reason: str
    at: float


@dataclass(frozen=True)
class Damaged:
    """A batch whose body does not match its checksum: damaged on the disk."""

    batch_id: str
    table: str  # "pending" or "dead"
    crc: int  # the body's CRC-32 when it was put
    now: int  # the body's CRC-32 now
    about: str | None  # what it held, as the agent described it when it put it
    recipe: str | None = None  # how to make it again (JSON: edge/agent/rebuild.py), if recorded

    def reason(self, unrebuilt: str | None = None) -> str:
        """For a dead letter and a log line: what is lost (and why it was not rebuilt)."""
        lost = self.about or "its matches (how many was not recorded)"
        why = "" if unrebuilt is None else f"not rebuilt: {unrebuilt}; "
        return (f"damaged in the outbox: its body's CRC-32 is {self.now:08x}, it was "
                f"{self.crc:08x} when put; never sent; {why}lost: {lost}")


@dataclass(frozen=True)
class Due:
    """A batch to send now."""

    batch_id: str
    body: bytes
    attempts: int


class _Reads:
    """What an outbox holds, as :class:`Outbox` and :class:`OutboxReader` read it."""

    path: str
    _db: sqlite3.Connection
    _lock: threading.Lock

    def dead_letters(self) -> list[DeadLetter]:
        """The dead letters, oldest first (without their bodies: see :meth:`dead_body`)."""
        with self._lock:
            rows = self._db.execute("SELECT batch_id, size, created, attempts, reason, at "
                                    "FROM dead ORDER BY n").fetchall()
        return [DeadLetter(*r) for r in rows]

    def dead_body(self, batch_id: str) -> bytes | None:
        """The body of a dead letter, byte for byte as it was sent; None if there is none."""
        with self._lock:
            row = self._db.execute("SELECT body FROM dead WHERE batch_id = ?",
                                   (batch_id,)).fetchone()
        return None if row is None else bytes(row[0])

    def status(self, batch_id: str) -> str | None:
        """``"pending"``, ``"dead"`` (a dead letter), ``"sent"``, ``"dropped"``,
        ``"discarded"``, ``"split"`` (replaced by its halves), or None when unknown (or
        forgotten). Outboxes written before dead letters existed may also answer
        ``"rejected"``."""
        with self._lock:
            if self._db.execute("SELECT 1 FROM pending WHERE batch_id = ?",
                                (batch_id,)).fetchone():
                return "pending"
            if self._db.execute("SELECT 1 FROM dead WHERE batch_id = ?",
                                (batch_id,)).fetchone():
                return "dead"
            row = self._db.execute("SELECT outcome FROM done WHERE batch_id = ?",
                                   (batch_id,)).fetchone()
        return None if row is None else row[0]

    def damaged(self) -> list[Damaged]:
        """The batches whose body no longer has the checksum it was put with, pending ones
        first (reads every body). Rows of an outbox no agent of this version opened have
        no checksum and are not checked."""
        out = []
        with self._lock:
            for table in _CHECKED:
                cols = {r[1] for r in self._db.execute(f"PRAGMA table_info({table})")}
                if "crc" not in cols:  # an older outbox
                    continue
                recipe = "recipe" if "recipe" in cols else "NULL"
                rows = self._db.execute(f"SELECT batch_id, body, crc, about, {recipe} FROM "
                                        f"{table} WHERE crc IS NOT NULL ORDER BY n").fetchall()
                out += [Damaged(bid, table, crc, checksum(bytes(body)), about, recipe)
                        for bid, body, crc, about, recipe in rows
                        if checksum(bytes(body)) != crc]
        return out

    def quick_check(self) -> list[str]:
        """What SQLite's ``PRAGMA quick_check`` finds wrong in the file (empty: nothing)."""
        with self._lock:
            rows = [r[0] for r in self._db.execute("PRAGMA quick_check")]
        return [] if rows == ["ok"] else rows

    def pending_ids(self) -> list[str]:
        """Pending batch ids, oldest first."""
        with self._lock:
            return [r[0] for r in self._db.execute("SELECT batch_id FROM pending ORDER BY n")]

    def summary(self, now: float | None = None) -> dict:
        """What the outbox holds now: the pending batches (how many, their bytes, the oldest
        by creation with its attempts and last error, when the next one is due as the
        agent sees it: :meth:`next_due_at`) and the dead letters (how many, their bytes).
        Times are seconds since the epoch."""
        with self._lock:  # one query per index where there is one (see _SCHEMA)
            rows, total, dead, dead_bytes = _held(self._db)
            oldest = self._db.execute("SELECT batch_id, created, attempts, last_error "
                                      "FROM pending ORDER BY created, n LIMIT 1").fetchone()
        return {"pending": rows, "pending_bytes": total,
                "oldest": None if oldest is None else dict(
                    zip(("batch_id", "created", "attempts", "last_error"), oldest)),
                "next_due": self.next_due_at(now), "dead": dead, "dead_bytes": dead_bytes}

    def next_due_at(self, now: float | None = None) -> float | None:
        """When the earliest pending batch is due (None when nothing is pending): ``now``
        when one is due beyond :meth:`latest_due`."""
        now = time.time() if now is None else now
        with self._lock:  # one aggregate per subquery: each reads one end of the index
            first, last = self._db.execute("SELECT (SELECT MIN(due) FROM pending), "
                                           "(SELECT MAX(due) FROM pending)").fetchone()
        return min(first, now) if last is not None and last > self.latest_due(now) else first

    def latest_due(self, now: float) -> float:
        """The latest due time a retry scheduled at ``now`` can have (the backoff's maximum,
        which also bounds a ``Retry-After``), and :data:`DUE_SLACK`. A due time beyond it
        was written while the clock read later than it does now (a device without a
        real-time clock that set it back, NTP correcting it): waiting for the clock to get
        there again would hold the batch for as long as the clock jumped (hours)."""
        return now + self._backoff_max() + DUE_SLACK

    def _backoff_max(self) -> float:
        raise NotImplementedError

    def load_state(self) -> dict:
        """The progress saved with the batches: everything written by ``save_state`` and
        ``put(..., state=)``."""
        with self._lock:
            return {k: json.loads(v) for k, v in self._db.execute("SELECT name, value FROM state")}

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> Outbox:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class OutboxReader(_Reads):
    """The outbox at ``path`` opened for reading only (``acep outbox status``, ``list``,
    ``export``): nothing is written, beside an agent that has it open or not (see
    :func:`read_summary`); ``ValueError`` when the file is not an outbox, ``sqlite3.Error``
    or ``OSError`` when it cannot be read."""

    def __init__(self, path: str | os.PathLike):
        self.path = os.path.abspath(os.fspath(path))
        self._lock = threading.Lock()
        self._db = _read_only(self.path)

    def _backoff_max(self) -> float:
        """The longest retry delay of the agent that wrote the outbox (as it recorded it),
        else the default's (an outbox no agent of this version opened)."""
        with self._lock:
            try:
                row = self._db.execute("SELECT value FROM settings WHERE name = "
                                       "'backoff_max'").fetchone()
            except sqlite3.OperationalError:  # no such table: written by an older version
                row = None
        return Backoff().max_delay if row is None else float(row[0])


class Outbox(_Reads):
    """The durable outbox at ``path`` (created if missing). One uploader at a time.

    A ``backoff`` given (the agent's) is recorded in the file, for its readers
    (:class:`OutboxReader`); without one, the default backoff is used and nothing is
    recorded (``acep outbox requeue`` and ``discard``)."""

    def __init__(self, path: str | os.PathLike, *, max_rows: int | None = None,
                 max_bytes: int | None = None, policy: str = "drop-oldest",
                 backoff: Backoff | None = None, keep_done: int = 100_000,
                 synchronous: str = "FULL"):
        if policy not in POLICIES:
            raise ValueError(f"policy {policy!r} is not one of {list(POLICIES)}")
        if synchronous not in ("FULL", "NORMAL", "EXTRA"):
            raise ValueError(f"synchronous {synchronous!r} is not FULL, NORMAL or EXTRA")
        self.path = os.fspath(path)
        self.max_rows, self.max_bytes, self.policy = max_rows, max_bytes, policy
        self.backoff = backoff or Backoff()
        self.keep_done = keep_done
        # (batch id, CRC-32 when put, recipe) -> the body made again, or raises saying why
        # not: a damaged pending batch is rebuilt rather than buried (edge/agent/rebuild.py)
        self.repair: Callable[[str, int, dict], bytes] | None = None
        self._lock = threading.Lock()
        self._db = None
        try:
            self._open(synchronous, record=backoff is not None)
        except (sqlite3.Error, OutboxError) as e:
            if self._db is not None:
                self._db.close()
            if isinstance(e, OutboxError):
                raise
            raise OutboxError(f"{self.path}: {_open_problem(self.path, e)}") from None

    def _open(self, synchronous: str, record: bool) -> None:
        self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False,
                                   timeout=30.0)
        mode = self._db.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        if mode.lower() != "wal":
            raise OutboxError(f"{self.path}: SQLite refused WAL mode (got {mode!r})")
        # FULL: an acknowledged commit also survives power loss, not only a killed process.
        self._db.execute(f"PRAGMA synchronous={synchronous}")
        self._db.executescript(_SCHEMA)
        with self._tx() as db:
            _add_checksums(db)
            db.executemany("INSERT OR IGNORE INTO counters VALUES (?, 0)",
                           [(c,) for c in _COUNTERS])
            if record:
                db.execute("INSERT OR REPLACE INTO settings VALUES ('backoff_max', ?)",
                           (self.backoff.max_delay,))

    def _backoff_max(self) -> float:
        return self.backoff.max_delay

    # ----------------------------------------------------------------- transactions

    def _tx(self):
        return _Transaction(self._db, self._lock)

    def _bump(self, db, name: str, by: int = 1) -> None:
        db.execute("UPDATE counters SET value = value + ? WHERE name = ?", (by, name))

    def _remember(self, db, batch_id: str, outcome: str, now: float) -> None:
        db.execute("INSERT OR REPLACE INTO done (batch_id, outcome, at) VALUES (?, ?, ?)",
                   (batch_id, outcome, now))
        if self.keep_done is not None:
            db.execute("DELETE FROM done WHERE n <= (SELECT MAX(n) FROM done) - ?",
                       (self.keep_done,))

    # ----------------------------------------------------------------- operations

    def put(self, body: bytes, batch_id: str, now: float | None = None, *,
            state: dict | None = None, about: str | None = None,
            recipe: dict | None = None) -> bool:
        """Store a batch, due at once. False when the id is already pending or done (a
        counted duplicate). Raises :class:`OutboxFull` under ``refuse-new`` (counted), and
        always for a batch larger than ``max_bytes`` on its own.

        ``state`` (JSON values by name) is written in the same transaction whatever the
        outcome, so a producer's progress and its batch are committed together. ``about``
        says what the batch holds (its matches, its events), for the dead letter's reason
        should its body be damaged on the disk (its CRC-32 is stored with it); ``recipe``
        (JSON values) what :attr:`repair` needs to make it again then."""
        if not isinstance(body, (bytes, bytearray, memoryview)):
            raise TypeError(f"body must be bytes, not {type(body).__name__}")
        if not isinstance(batch_id, str) or not batch_id:
            raise ValueError(f"batch_id must be a non-empty str, not {batch_id!r}")
        body = bytes(body)
        now = time.time() if now is None else now
        with self._tx() as db:
            if self._known(db, batch_id):
                self._bump(db, "duplicate")
                self._write_state(db, state)
                return False
            if not self._make_room(db, len(body), batch_id):
                self._bump(db, "refused")
                self._bump(db, "refused_bytes", len(body))
                refused = True
            else:
                db.execute("INSERT INTO pending (batch_id, body, size, created, due, crc, about, "
                           "recipe) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                           (batch_id, body, len(body), now, now, checksum(body), about,
                            None if recipe is None else json.dumps(recipe)))
                self._bump(db, "put")
                refused = False
            self._write_state(db, state)
        if refused:
            raise OutboxFull(f"outbox full ({self.max_rows} rows / {self.max_bytes} bytes, "
                             f"policy {self.policy}): batch {batch_id!r} of {len(body)} bytes "
                             "refused")
        return True

    def _write_state(self, db, state: dict | None) -> None:
        if state:
            db.executemany("INSERT OR REPLACE INTO state VALUES (?, ?)",
                           [(k, json.dumps(v)) for k, v in state.items()])

    def save_state(self, state: dict) -> None:
        """Write ``state`` (JSON values by name) in a transaction of its own."""
        with self._tx() as db:
            self._write_state(db, state)

    def _make_room(self, db, size: int, batch_id: str) -> bool:
        if self.max_bytes is not None and size > self.max_bytes:
            return False
        while True:
            rows, total, dead_rows, dead_total = _held(db)
            fits = ((self.max_rows is None or rows + dead_rows + 1 <= self.max_rows)
                    and (self.max_bytes is None
                         or total + dead_total + size <= self.max_bytes))
            if fits:
                return True
            if self.policy == "refuse-new" or rows + dead_rows == 0:
                return False
            # a dead letter waits for an operator; a pending batch can still be delivered
            table = "dead" if dead_rows else "pending"
            old_id, old_size = db.execute(
                f"SELECT batch_id, size FROM {table} ORDER BY n LIMIT 1").fetchone()
            self._settle(db, old_id, old_size, "dropped", time.time(), table)

    def next_due(self, now: float | None = None) -> Due | None:
        """The oldest batch due at ``now``, or None. It stays pending until acked. A due time
        beyond :meth:`latest_due` is due: set by a clock that has gone back since. A batch
        whose body does not match its checksum is never handed out: it moves to the dead
        letters, its reason saying what is lost, and is logged as an error; unless
        :attr:`repair` makes it again (counted as ``rebuilt``, kept under its id)."""
        now = time.time() if now is None else now
        while True:
            row = self._due_row(now)
            if row is None:
                return None
            bid, body, attempts, crc, about, recipe = row
            body = bytes(body)
            if crc is None or checksum(body) == crc:
                return Due(bid, body, attempts)
            bad = Damaged(bid, "pending", crc, checksum(body), about)
            fixed, why = self._repaired(bad, recipe)
            if fixed is not None:
                return Due(bid, fixed, attempts)
            self._bury(bad, now, why)

    def _repaired(self, bad: Damaged, recipe: str | None) -> tuple[bytes | None, str]:
        """The damaged batch made again by :attr:`repair` and stored (or None), and why not."""
        if recipe is None:
            return None, "how it was made was not recorded"
        if self.repair is None:
            return None, "nothing here can make it again"
        try:
            body = self.repair(bad.batch_id, bad.crc, json.loads(recipe))
        except Exception as e:  # the reason of the dead letter: the file gone, lines changed
            return None, str(e) or type(e).__name__
        with self._tx() as db:
            db.execute("UPDATE pending SET body = ?, size = ? WHERE batch_id = ?",
                       (body, len(body), bad.batch_id))
            self._bump(db, "damaged")
            self._bump(db, "rebuilt")
        log.warning("%s: batch %s was damaged in the outbox (CRC-32 %08x, put with %08x); "
                    "rebuilt from its events, sent under the same id", self.path,
                    bad.batch_id, bad.now, bad.crc)
        return body, ""

    def _due_row(self, now: float) -> tuple | None:
        with self._lock:
            row = self._db.execute(
                "SELECT batch_id, body, attempts, crc, about, recipe FROM pending WHERE due <= ? "
                "ORDER BY due, n LIMIT 1", (now,)).fetchone()
            if row is None:
                row = self._db.execute(
                    "SELECT batch_id, body, attempts, crc, about, recipe FROM pending "
                    "WHERE due > ? "
                    "ORDER BY due, n LIMIT 1", (self.latest_due(now),)).fetchone()
        return row

    def _bury(self, bad: Damaged, now: float, why: str | None = None) -> None:
        """A damaged pending batch to the dead letters, counted as ``damaged``."""
        with self._tx() as db:
            self._to_dead(db, bad.batch_id, bad.reason(why), now)
            self._bump(db, "damaged")
        log.error("%s: batch %s is %s (acep outbox %s list)", self.path, bad.batch_id,
                  bad.reason(why), self.path)

    def _to_dead(self, db, batch_id: str, reason: str, now: float) -> None:
        db.execute("INSERT INTO dead (batch_id, body, size, created, attempts, reason, at, "
                   "crc, about, recipe) SELECT batch_id, body, size, created, attempts + 1, ?, ?, "
                   "crc, about, recipe FROM pending WHERE batch_id = ?",
                   (reason[:1000], now, batch_id))
        db.execute("DELETE FROM pending WHERE batch_id = ?", (batch_id,))

    def ack(self, batch_id: str, now: float | None = None) -> bool:
        """The collector has the batch: forget it for good. False when it was not pending."""
        return self._finish(batch_id, "sent", now)

    def fail(self, batch_id: str, error: str, now: float | None = None,
             delay: float | None = None) -> float | None:
        """A delivery attempt failed: schedule the retry, after ``delay`` seconds when the
        collector said when (its ``Retry-After``), else after the backoff's delay for the
        attempts so far. Returns the new due time, or None when the batch is not pending."""
        now = time.time() if now is None else now
        with self._tx() as db:
            row = db.execute("SELECT attempts FROM pending WHERE batch_id = ?",
                             (batch_id,)).fetchone()
            if row is None:
                return None
            attempts = row[0] + 1
            due = now + (self.backoff.delay(batch_id, attempts) if delay is None
                         else min(max(delay, 0.0), self.backoff.max_delay))
            db.execute("UPDATE pending SET attempts = ?, due = ?, last_error = ? "
                       "WHERE batch_id = ?", (attempts, due, str(error)[:1000], batch_id))
            self._bump(db, "failed")
        return due

    def reject(self, batch_id: str, error: str, now: float | None = None) -> bool:
        """The collector refused the batch for good (a permanent 4xx): move it, with
        ``error`` as its reason, to the dead letters, counted as ``rejected``. It is not sent
        again unless :meth:`requeue` puts it back. False when it was not pending."""
        now = time.time() if now is None else now
        with self._tx() as db:
            row = db.execute("SELECT size FROM pending WHERE batch_id = ?",
                             (batch_id,)).fetchone()
            if row is None:
                return False
            self._to_dead(db, batch_id, str(error), now)
            self._bump(db, "rejected")
            self._bump(db, "rejected_bytes", row[0])
        return True

    def split(self, batch_id: str, parts: list[tuple[str, bytes, str | None]],
              now: float | None = None) -> bool:
        """Replace a pending batch by ``parts`` (batch id, body, about), due at once, in one
        transaction: the batch is remembered as ``split`` (counted), a part whose id is
        known already is skipped (a retry). False when the batch was not pending."""
        now = time.time() if now is None else now
        with self._tx() as db:
            row = db.execute("SELECT created FROM pending WHERE batch_id = ?",
                             (batch_id,)).fetchone()
            if row is None:
                return False
            db.execute("DELETE FROM pending WHERE batch_id = ?", (batch_id,))
            self._remember(db, batch_id, "split", now)
            self._bump(db, "split")
            for bid, body, about in parts:
                if self._known(db, bid):
                    continue
                db.execute("INSERT INTO pending (batch_id, body, size, created, due, crc, "
                           "about) VALUES (?, ?, ?, ?, ?, ?, ?)",
                           (bid, body, len(body), row[0], now, checksum(body), about))
        return True

    def _known(self, db, batch_id: str) -> bool:
        return db.execute("SELECT 1 FROM pending WHERE batch_id = ? UNION ALL "
                          "SELECT 1 FROM dead WHERE batch_id = ? UNION ALL "
                          "SELECT 1 FROM done WHERE batch_id = ?",
                          (batch_id, batch_id, batch_id)).fetchone() is not None

    def requeue(self, batch_ids: list[str] | None = None, now: float | None = None,
                rewrite: Callable[[str, bytes], bytes] | None = None) -> int:
        """Put dead letters (all when ``batch_ids`` is None) back as pending, due at once,
        with their attempts reset, each body through ``rewrite(batch id, body)`` first if given (one
        transaction: when it raises for one, none is moved); how many were moved."""
        now = time.time() if now is None else now
        with self._tx() as db:
            ids = self._dead_ids(db, batch_ids)
            for bid in ids:
                if rewrite is not None:
                    old = db.execute("SELECT body FROM dead WHERE batch_id = ?", (bid,))
                    body = rewrite(bid, bytes(old.fetchone()[0]))
                    db.execute("UPDATE dead SET body = ?, size = ?, crc = ? WHERE batch_id = ?",
                               (body, len(body), checksum(body), bid))
                db.execute("INSERT INTO pending (batch_id, body, size, created, due, crc, "
                           "about, recipe) SELECT batch_id, body, size, created, ?, crc, "
                           "about, recipe FROM dead WHERE batch_id = ?", (now, bid))
                db.execute("DELETE FROM dead WHERE batch_id = ?", (bid,))
            self._bump(db, "requeued", len(ids))
        return len(ids)

    def discard(self, batch_ids: list[str] | None = None, now: float | None = None) -> int:
        """Delete dead letters (all when ``batch_ids`` is None) for good, remembered as
        ``discarded``; how many were deleted."""
        now = time.time() if now is None else now
        with self._tx() as db:
            ids = self._dead_ids(db, batch_ids)
            for bid in ids:
                size = db.execute("SELECT size FROM dead WHERE batch_id = ?", (bid,)).fetchone()[0]
                self._settle(db, bid, size, "discarded", now, "dead")
        return len(ids)

    def _dead_ids(self, db, batch_ids: list[str] | None) -> list[str]:
        if batch_ids is None:
            return [r[0] for r in db.execute("SELECT batch_id FROM dead ORDER BY n")]
        return [b for b in batch_ids
                if db.execute("SELECT 1 FROM dead WHERE batch_id = ?", (b,)).fetchone()]

    def _finish(self, batch_id: str, outcome: str, now: float | None) -> bool:
        """Settle a pending batch as ``outcome`` in one transaction; False if not pending."""
        now = time.time() if now is None else now
        with self._tx() as db:
            row = db.execute("SELECT size FROM pending WHERE batch_id = ?",
                             (batch_id,)).fetchone()
            if row is None:
                return False
            self._settle(db, batch_id, row[0], outcome, now)
        return True

    def _settle(self, db, batch_id: str, size: int, outcome: str, now: float,
                table: str = "pending") -> None:
        """Forget a pending batch (or a dead letter), remember its outcome and count it (and
        its bytes)."""
        db.execute(f"DELETE FROM {table} WHERE batch_id = ?", (batch_id,))
        self._remember(db, batch_id, outcome, now)
        self._bump(db, outcome)
        self._bump(db, f"{outcome}_bytes", size)

    def metrics(self) -> dict[str, int]:
        """Counters since the outbox file was created, plus the pending rows and bytes and the
        dead letters and their bytes."""
        with self._lock:
            out = dict(self._db.execute("SELECT name, value FROM counters"))
            rows, total, dead, dead_bytes = _held(self._db)
        out["pending"], out["pending_bytes"] = rows, total
        out["dead"], out["dead_bytes"] = dead, dead_bytes
        return out



def checksum(body: bytes) -> int:
    """A batch body's CRC-32, as the outbox keeps it."""
    return zlib.crc32(body)


def _add_checksums(db) -> None:
    """Schema migration: an outbox written before batches had checksums gets the columns,
    and its rows the checksum of their body as it is then (damage done before that cannot
    be told; the collector still refuses a body it cannot decode)."""
    for table in _CHECKED:
        cols = {r[1] for r in db.execute(f"PRAGMA table_info({table})")}
        if "about" not in cols:
            db.execute(f"ALTER TABLE {table} ADD COLUMN about TEXT")
        if "recipe" not in cols:
            db.execute(f"ALTER TABLE {table} ADD COLUMN recipe TEXT")
        if "crc" in cols:
            continue
        db.execute(f"ALTER TABLE {table} ADD COLUMN crc INTEGER")
        rows = db.execute(f"SELECT n, body FROM {table}").fetchall()
        db.executemany(f"UPDATE {table} SET crc = ? WHERE n = ?",
                       [(checksum(bytes(body)), n) for n, body in rows])


def _open_problem(path: str, exc: sqlite3.Error) -> str:
    """Why the outbox at ``path`` could not be opened, in words (SQLite says "unable to open
    database file" for most of it)."""
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        return "is a directory, not a file"
    if not os.access(folder, os.W_OK | os.X_OK):  # SQLite writes -wal and -shm beside it
        return f"cannot be opened: the directory {folder} is not writable"
    if os.path.exists(path) and not os.access(path, os.R_OK | os.W_OK):
        return "cannot be opened: this user cannot read and write it"
    if isinstance(exc, sqlite3.DatabaseError) and "not a database" in str(exc):
        return "is not an outbox (not an SQLite database)"
    return f"cannot be opened as an outbox ({exc})"


def out_of_space(exc: BaseException) -> bool:
    """A write refused for want of space: SQLite's ``SQLITE_FULL`` ("database or disk is
    full": the disk, or the database's page limit) or ``ENOSPC``."""
    if isinstance(exc, sqlite3.OperationalError):
        return getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL or \
            "disk is full" in str(exc)
    return isinstance(exc, OSError) and exc.errno == errno.ENOSPC


class _Transaction:
    """``BEGIN IMMEDIATE`` .. ``COMMIT`` (``ROLLBACK`` on error) under the outbox lock."""

    def __init__(self, db: sqlite3.Connection, lock: threading.Lock):
        self.db, self.lock = db, lock

    def __enter__(self) -> sqlite3.Connection:
        self.lock.acquire()
        try:
            self.db.execute("BEGIN IMMEDIATE")
        except BaseException:
            self.lock.release()
            raise
        return self.db

    def __exit__(self, kind, exc, tb) -> None:
        try:
            if kind is None:
                self.db.execute("COMMIT")
        finally:
            try:
                # after an error, or a COMMIT that failed (a full disk): the transaction
                # must not stay open, and SQLite may have rolled it back already
                if self.db.in_transaction:
                    self.db.execute("ROLLBACK")
            finally:
                self.lock.release()


def _held(db) -> tuple[int, int, int, int]:
    """The pending batches and their bytes, the dead letters and their bytes."""
    return (*db.execute("SELECT COUNT(*), COALESCE(SUM(size), 0) FROM pending").fetchone(),
            *db.execute("SELECT COUNT(*), COALESCE(SUM(size), 0) FROM dead").fetchone())


def read_summary(path: str | os.PathLike) -> dict:
    """What the outbox at ``path`` holds, read without writing anything (see
    :class:`OutboxReader`): its :meth:`~OutboxReader.summary` and the progress saved with
    the batches (``state``, JSON values by name). Raises ``ValueError`` when the file is not
    an outbox and ``sqlite3.Error`` or ``OSError`` when it cannot be read."""
    with OutboxReader(path) as outbox:
        return {**outbox.summary(), "state": outbox.load_state()}


def _read_only(path: str) -> sqlite3.Connection:
    """A read-only connection to the outbox at ``path``: ``mode=ro``, and while no ``-wal``
    file is beside it (no process has it open) also ``immutable=1``, since a read-only open
    of a WAL database would create its ``-wal`` and ``-shm`` files."""
    with open(path, "rb"):  # FileNotFoundError/PermissionError by name, before SQLite's
        pass
    flags = "mode=ro" if os.path.exists(path + "-wal") else "mode=ro&immutable=1"
    db = sqlite3.connect("file:" + urllib.parse.quote(path) + "?" + flags, uri=True,
                         check_same_thread=False)
    try:
        found = db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' "
                           "AND name = 'pending'").fetchone()
    except BaseException:
        db.close()
        raise
    if not found:
        db.close()
        raise ValueError(f"{path}: not an outbox (no table 'pending')")
    return db
