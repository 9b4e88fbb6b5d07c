"""Reading an agent's outbox: its records, the reads both sides share, a read-only view.

:class:`OutboxReader` opens an outbox without writing anything (``acep outbox status``,
``acep agent --check``), beside an agent that may have it open; :class:`~edge.agent.outbox.Outbox`
adds the writes. Both read through :class:`Reads`. :class:`Backoff` is the retry
schedule the agent records in the file (``docs/WIRE.md``, Agent, Outbox).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import sqlite3
import threading
import time
import urllib.parse
import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .outbox import Outbox

__all__ = ["Backoff", "DeadLetter", "Damaged", "Due", "Reads", "OutboxReader", "read_summary",
           "checksum", "DUE_SLACK"]

# seconds a due time may lie beyond the longest retry delay before it is taken for one
# written by a clock that has gone back since (Outbox.latest_due): due at once
DUE_SLACK = 60.0
# CRC-32 of a batch body, kept beside it (column crc): a body damaged on the disk is never sent
_CHECKED = ("pending", "dead")


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff with jitter; ``docs/WIRE.md`` (Agent, Outbox)."""

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


class Reads:
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


class OutboxReader(Reads):
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


def checksum(body: bytes) -> int:
    """A batch body's CRC-32, as the outbox keeps it."""
    return zlib.crc32(body)


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
