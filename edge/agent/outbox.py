"""A durable outbox for upload batches: SQLite in WAL mode, retry with backoff, a cap.

Every operation of :class:`Outbox` is one SQLite transaction: a batch put is never lost,
one acknowledged is never handed out again, a batch id is stored at most once. Its reads
(and the read-only :class:`~edge.agent.outbox_reader.OutboxReader`) are in
:mod:`~edge.agent.outbox_reader`, its command line in :mod:`~edge.agent.outbox_cli`. The
guarantees, retries, dead letters, checksums and cap are specified in ``docs/WIRE.md``
(Agent, Outbox).
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator

from .outbox_reader import (
    _CHECKED,
    Backoff,
    Damaged,
    Due,
    Reads,
    _held,
    checksum,
)

__all__ = ["Outbox", "OutboxFull", "OutboxError", "POLICIES", "out_of_space"]

log = logging.getLogger("edge.outbox")

POLICIES = ("drop-oldest", "refuse-new")
_COUNTERS = ("put", "duplicate", "sent", "sent_bytes", "failed", "dropped", "dropped_bytes",
             "refused", "refused_bytes", "rejected", "rejected_bytes", "requeued",
             "discarded", "discarded_bytes", "damaged", "rebuilt", "split")

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


class Outbox(Reads):
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
        self._group: int | None = None  # the thread whose writes join one transaction
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
        if self._group == threading.get_ident():
            return _Joined(self._db)
        return _Transaction(self._db, self._lock)

    @contextlib.contextmanager
    def group(self) -> Iterator[None]:
        """The writes of this thread inside are one transaction: all committed, with one
        fsync, or none."""
        with self._tx():
            self._group = threading.get_ident()
            try:
                yield
            finally:
                self._group = None

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


class _Joined:
    """A transaction inside :meth:`Outbox.group`: its writes join the group's."""

    def __init__(self, db: sqlite3.Connection):
        self.db = db

    def __enter__(self) -> sqlite3.Connection:
        return self.db

    def __exit__(self, kind, exc, tb) -> None:
        return None


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
