"""The collector's database: batches, matches with their exact re-check, device tokens,
sketches. SQLite (WAL) by default; :func:`open_store` takes a path or a database URL.

An upload batch is stored in one transaction: the batch row (``batch_id`` is the primary
key, so a second delivery cannot insert it again) and all of its match or summary rows
commit together or not at all. The collector commits the batches that are ready at the same
time in one transaction (one fsync for them all), and answers none of them before the
commit. A process killed mid-transaction leaves the database as it was. The rows are built
by :func:`prepare`, which the collector runs in its worker processes.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import sqlite3
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from acep import storage

from ..wire import sketch_etag
from .clock import utc_day

__all__ = ["Store", "Prepared", "prepare", "open_store", "hash_token", "damaged",
           "BackupError", "check_backup_target", "SUPPORTED_URLS", "SCHEMA_VERSION",
           "FleetFinds", "fleet_finds", "finds_since"]

SUPPORTED_URLS = "sqlite:///PATH (or a plain file path)"
SCHEMA_VERSION = 1  # PRAGMA user_version of the database; a newer one is refused
RESTORE = "restore it from a backup (docs/WIRE.md, Backup and restore)"
SEEN_EVERY = 30.0  # seconds between two writes of a device's last_seen
ROTATION_GRACE = 7 * 86400.0  # seconds a rotated token stays valid at most

_SCHEMA = """
CREATE TABLE IF NOT EXISTS devices (
    device_id    TEXT PRIMARY KEY,
    role         TEXT NOT NULL,
    token_sha256 TEXT NOT NULL UNIQUE,
    created_at   REAL NOT NULL,
    last_seen    REAL,
    status       TEXT,
    old_token_sha256 TEXT,  -- a rotated token, valid until old_until or the new one's use
    old_until    REAL,
    clock_ahead  REAL  -- its last heartbeat's time minus the collector's, in seconds
);
CREATE TABLE IF NOT EXISTS batches (
    batch_id     TEXT PRIMARY KEY,
    device       TEXT NOT NULL,
    seq          INTEGER NOT NULL,
    kind         TEXT NOT NULL,
    pattern_id   TEXT NOT NULL,
    pattern      TEXT NOT NULL,
    created_at   REAL NOT NULL,
    received_at  REAL NOT NULL,
    n_rows       INTEGER NOT NULL,
    n_events     INTEGER NOT NULL,
    bytes        INTEGER NOT NULL,
    archive      TEXT,
    body_sha256  TEXT
);
CREATE TABLE IF NOT EXISTS matches (
    batch_id      TEXT NOT NULL REFERENCES batches(batch_id),
    idx           INTEGER NOT NULL,
    device        TEXT NOT NULL,
    pattern_id    TEXT NOT NULL,
    partition     TEXT NOT NULL,
    point         REAL NOT NULL,
    start         REAL NOT NULL,
    errors        INTEGER NOT NULL,
    trajectory    TEXT NOT NULL,
    exact         INTEGER,
    exact_count   INTEGER,
    exact_matches TEXT,
    exact_reason  TEXT,
    PRIMARY KEY (batch_id, idx)
);
CREATE INDEX IF NOT EXISTS matches_by_pattern ON matches (pattern_id, point);
CREATE INDEX IF NOT EXISTS batches_by_pattern ON batches (pattern_id);
CREATE TABLE IF NOT EXISTS summaries (
    batch_id   TEXT NOT NULL REFERENCES batches(batch_id),
    idx        INTEGER NOT NULL,
    device     TEXT NOT NULL,
    pattern_id TEXT NOT NULL,
    partition  TEXT NOT NULL,
    slot       REAL NOT NULL,
    origin     REAL NOT NULL,
    slot_index INTEGER NOT NULL,
    matches    INTEGER NOT NULL,
    bundles    INTEGER NOT NULL,
    first      REAL NOT NULL,
    last       REAL NOT NULL,
    min_errors INTEGER NOT NULL,
    PRIMARY KEY (batch_id, idx)
);
CREATE TABLE IF NOT EXISTS sketches (
    pattern_id TEXT PRIMARY KEY,
    data       BLOB NOT NULL,
    etag       TEXT NOT NULL,
    updated_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS finds (  -- events read and matches found, from the heartbeats
    device  TEXT NOT NULL,
    day     TEXT NOT NULL,          -- the collector's UTC day, YYYY-MM-DD
    events  INTEGER NOT NULL,
    matches INTEGER NOT NULL,
    PRIMARY KEY (device, day)
);
"""


def hash_token(token: str) -> str:
    """The stored form of a device token (hex SHA-256)."""
    return hashlib.sha256(token.encode()).hexdigest()


def open_store(url: str | Path, create: bool = True) -> Store:
    """A :class:`Store` for ``sqlite:///PATH`` or a plain path; other schemes are refused
    with an error that names what is supported. ``create`` False: a missing file is an
    error too (a tool that only reads or revokes must not leave an empty database)."""
    text = str(url)
    if "://" in text:
        scheme = text.split("://", 1)[0]
        if scheme != "sqlite" or not text.startswith("sqlite:///"):
            raise ValueError(f"database URL {text!r}: scheme {scheme!r} is not supported; "
                             f"use {SUPPORTED_URLS}")
        text = text[len("sqlite:///"):]
        if not text:
            raise ValueError(f"database URL {str(url)!r} names no file; use {SUPPORTED_URLS}")
    if not create and not os.path.exists(text):
        raise ValueError(f"{text}: no collector database there")
    if not create and os.path.isfile(text) and os.path.getsize(text) == 0:
        raise ValueError(f"{text}: an empty file, no collector database (a copy cut off?); "
                         f"{RESTORE}")
    if why := _foreign_log(text):
        raise ValueError(f"{text}: {why}")
    try:
        return Store(text)
    except sqlite3.DatabaseError as exc:
        if _code(exc) == sqlite3.SQLITE_CORRUPT:  # NOTADB: another kind of file, said so
            raise ValueError(f"{text}: damaged ({exc}); {RESTORE}") from None
        raise ValueError(f"{text}: cannot open it as a SQLite database ({exc})") from None
    except OSError as exc:
        raise ValueError(f"{text}: cannot open it as a SQLite database ({exc})") from None


def damaged(exc: BaseException) -> bool:
    """SQLite found the file damaged (SQLITE_CORRUPT, SQLITE_NOTADB): pages that are not
    what it wrote, found when they are read."""
    return _code(exc) in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB)


def _code(exc: BaseException) -> int | None:
    """The primary SQLite result code of an error (extended codes folded), or None."""
    code = getattr(exc, "sqlite_errorcode", None)
    return code & 0xFF if isinstance(exc, sqlite3.Error) and code is not None else None


def _foreign_log(path: str) -> str | None:
    """Why ``path`` must not be opened: a database in rollback mode (a backup, which
    :meth:`Store.backup` writes so) beside a write-ahead log, which can only be the log of
    the database it replaced (a collector that was killed leaves its log). SQLite would
    apply that log's pages to the backup: the restore undone, or a database of both."""
    wal = f"{path}-wal"
    try:
        with open(path, "rb") as f:
            header = f.read(100)
        if os.path.getsize(wal) == 0:
            return None
    except OSError:
        return None
    if len(header) < 100 or not header.startswith(b"SQLite format 3\0") or header[18] != 1:
        return None
    return (f"a database in rollback mode (a backup put in its place?), and {wal} is beside "
            f"it: the write-ahead log of the database it replaced, which SQLite would apply "
            f"to it; move {wal} and {path}-shm away (they belong to the replaced database)")


_OURS = ("devices", "batches", "matches", "summaries", "sketches")  # the schema's tables
_INT64_MAX = (1 << 63) - 1
_BATCH_COLUMNS = ("batch_id, device, seq, kind, pattern_id, pattern, created_at, received_at, "
                  "n_rows, n_events, bytes, archive, body_sha256")


@dataclass
class Prepared:
    """A batch's database rows, built away from the database thread (:func:`prepare`)."""

    batch_id: str
    kind: str
    batch_row: tuple  # batch_id .. created_at
    n_rows: int
    n_events: int
    nbytes: int
    digest: str | None
    rows: list
    n_exact: int | None = None
    n_checked: int = 0
    archive_file: tuple[str, bytes] | None = None  # (path under the archive, its bytes)


def prepare(batch, checks: Sequence | None = None, *, nbytes: int = 0,
            digest: str | None = None) -> Prepared:
    """The rows :meth:`Store.store_prepared` inserts for ``batch``: an ``UploadBatch``
    with one ``edge.collector.recheck.MatchCheck`` per match, or a ``SummaryBatch``."""
    from ..wire import UploadBatch

    p = batch.pattern
    pattern = _json({"id": p.id, "text": p.text, "window": p.window, "k": p.k,
                     "where": list(p.where), "partition_by": p.partition_by, "hash": p.hash})
    is_matches = isinstance(batch, UploadBatch)
    kind = "matches" if is_matches else "summary"
    rows = list(Store._match_rows(batch, checks) if is_matches else Store._summary_rows(batch))
    n_exact = n_checked = None
    if is_matches and checks is not None:
        n_checked = sum(1 for c in checks if c.exact is not None)
        # None when none was checked, as SQL's sum(exact) answers a resent batch
        n_exact = sum(1 for c in checks if c.exact) if n_checked else None
    return Prepared(batch.batch_id, kind, (batch.batch_id, batch.device, batch.seq, kind, p.id,
                                           pattern, batch.created_at),
                    len(batch), len(batch.event_position) if is_matches else 0, nbytes,
                    digest, rows, n_exact, n_checked or 0)


class BackupError(Exception):
    """The database cannot be backed up (it is damaged); the message names it."""


def check_backup_target(path: Path) -> None:
    """Raise ``OSError`` naming ``path`` when a backup cannot be written there: it exists
    (a backup never overwrites), is a directory, or its folder is missing or not
    writable."""
    if path.is_dir():
        raise IsADirectoryError(f"{path}: is a directory; name the backup's file (a new one)")
    if path.exists():
        raise FileExistsError(f"{path}: exists (a backup never overwrites)")
    folder = path.parent
    if not folder.is_dir():
        raise FileNotFoundError(f"{path}: no such directory {folder}")
    why = storage.unwritable(folder)
    if why is not None:
        raise PermissionError(f"{path}: cannot write there ({why})")


def finds_since(before: dict | None, status: dict) -> tuple[int, int] | None:
    """The events read and matches found between two heartbeats of a device: the growth
    of its counters ``events_in`` and ``matches``, or all of them when the agent started
    again since ``before`` (another ``started_at``; without one, counters that went back).
    Counters that went back in the same run are a stale heartbeat: nothing. None when
    ``status`` lacks whole, non-negative counters (an agent before them, a bad body)."""
    now = _counters(status)
    if now is None:
        return None
    then = _counters(before) if isinstance(before, dict) else None
    if then is None or before.get("started_at") != status.get("started_at"):
        return now
    if now[0] >= then[0] and now[1] >= then[1]:
        return now[0] - then[0], now[1] - then[1]
    return now if status.get("started_at") is None else (0, 0)


def _counters(status: dict) -> tuple[int, int] | None:
    values = status.get("events_in"), status.get("matches")
    if all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**62
           for v in values):
        return values
    return None


@dataclass(frozen=True)
class FleetFinds:
    """A pattern's fleet in a collector's database, for a rule of when to retrain."""

    published: str | None  # the UTC day its sketch was last stored; None: never
    finds: list[tuple[str, int, int]]  # per UTC day: events read, matches found
    uploaded: dict[str, int]  # per UTC day a batch was made on since the sketch: its matches


def fleet_finds(path: str | Path, pattern_id: str) -> FleetFinds:
    """What the collector's database at ``path`` says of the devices that upload
    ``pattern_id``, read without writing (the collector may run). Raises ``ValueError``
    naming the file when it is not a collector's database that records the finds."""
    text = str(path)
    if text.startswith("sqlite:///"):  # the collector's --db may be its URL
        text = text[len("sqlite:///"):]
    if not os.path.isfile(text):
        raise ValueError(f"{text}: no collector database there")
    try:
        db = sqlite3.connect(Path(text).absolute().as_uri() + "?mode=ro", uri=True)
        try:
            return _fleet_finds(db, pattern_id)
        finally:
            db.close()
    except sqlite3.DatabaseError as exc:
        if "no such table: finds" in str(exc):
            raise ValueError(f"{text}: the collector has not recorded the devices' finds "
                             "yet (a collector before 2026-12 wrote it: run this acep's "
                             "collector, which records them from the next heartbeats)"
                             ) from None
        raise ValueError(f"{text}: not a collector database that can be read ({exc})"
                         ) from None


def _fleet_finds(db: sqlite3.Connection, pattern_id: str) -> FleetFinds:
    row = db.execute("SELECT updated_at FROM sketches WHERE pattern_id = ?",
                     (pattern_id,)).fetchone()
    published = None if row is None else utc_day(row[0]).isoformat()
    finds = db.execute(
        "SELECT day, SUM(events), SUM(matches) FROM finds WHERE device IN "
        "(SELECT DISTINCT device FROM batches WHERE pattern_id = ?) GROUP BY day ORDER BY day",
        (pattern_id,)).fetchall()
    uploaded = db.execute(
        "SELECT date(b.created_at, 'unixepoch'), COUNT(*) FROM matches m JOIN batches b "
        "ON b.batch_id = m.batch_id WHERE b.pattern_id = ? AND b.created_at >= ? "
        "GROUP BY 1", (pattern_id, 0.0 if row is None else row[0])).fetchall()
    return FleetFinds(published, [(d, int(e), int(m)) for d, e, m in finds],
                      {d: int(n) for d, n in uploaded})


def _in_parts(values: Sequence[str], size: int = 500):
    """``values`` in parts of at most ``size``, each with its ``?,?,...`` for an ``IN``
    list (SQLite bounds the parameters of one statement)."""
    for i in range(0, len(values), size):
        part = list(values[i:i + size])
        yield ",".join("?" * len(part)), part


def _json(value) -> str:
    return json.dumps(value, separators=(",", ":"), allow_nan=False)


def _key(v):
    """A partition key as JSON: str, number or null (NaN has no JSON form: as a string)."""
    if isinstance(v, float) and v != v:
        return "NaN"
    return v


class Store:
    """A SQLite database of uploads. Not thread-safe: use it from one thread."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(self.path), isolation_level=None,
                                   check_same_thread=False)
        try:
            self._open()
        except BaseException:
            self._db.close()
            raise

    def _open(self) -> None:
        """Check that the file is a collector's database (or a new one) before anything is
        written to it, then bring its schema up to date."""
        why = self._not_ours()
        if why is not None:
            raise ValueError(f"{self.path}: {why}")
        self._db.execute("PRAGMA journal_mode=WAL")
        # FULL: a batch answered "stored" survives a power cut, not only a killed process
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute("PRAGMA foreign_keys=ON")
        self._db.executescript(_SCHEMA)
        self._add_columns("batches", body_sha256="TEXT")  # databases made before them
        self._add_columns("devices", last_seen="REAL", status="TEXT", old_token_sha256="TEXT",
                          old_until="REAL", clock_ahead="REAL")
        self._db.execute("CREATE INDEX IF NOT EXISTS batches_by_body ON batches (body_sha256)")
        self._db.execute("CREATE INDEX IF NOT EXISTS batches_by_created ON batches (created_at)")
        self._db.execute("CREATE INDEX IF NOT EXISTS batches_by_archive ON batches (archive)")
        if self._db.execute("PRAGMA user_version").fetchone()[0] != SCHEMA_VERSION:
            self._db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def _not_ours(self) -> str | None:
        """Why the file is not a collector database this code may write: another
        program's database (an agent's outbox), or a newer schema. None: ours, or empty."""
        version = self._db.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            return (f"schema version {version}, written by a newer acep (this one knows up "
                    f"to {SCHEMA_VERSION}); run the acep that wrote it")
        tables = [r[0] for r in self._db.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' "
            "ORDER BY name")]
        if tables and not set(_OURS) & set(tables):
            return (f"a SQLite database but not a collector's (its tables: "
                    f"{', '.join(tables[:8])}{', ...' if len(tables) > 8 else ''}); "
                    "an agent's outbox? --db names the collector's own database")
        return None

    def _add_columns(self, table: str, **types: str) -> None:
        have = {r[1] for r in self._db.execute(f"PRAGMA table_info({table})")}
        for name, sql_type in types.items():
            if name not in have:
                self._db.execute(f"ALTER TABLE {table} ADD COLUMN {name} {sql_type}")

    def close(self) -> None:
        self._db.close()

    # ----------------------------------------------------------------- devices

    def add_device(self, device_id: str, role: str = "device") -> str:
        """A new random token for ``device_id`` (replacing any previous one); only its hash
        is stored, so this is the one time it can be shown. ``role``: ``"device"`` (uploads
        its own batches, reads sketches) or ``"admin"`` (also publishes sketches)."""
        if role not in ("device", "admin"):
            raise ValueError(f"role must be 'device' or 'admin', not {role!r}")
        token = secrets.token_urlsafe(32)
        self._db.execute(
            "INSERT INTO devices (device_id, role, token_sha256, created_at) "
            "VALUES (?, ?, ?, ?) ON CONFLICT(device_id) DO UPDATE SET "
            "role = excluded.role, token_sha256 = excluded.token_sha256, "
            "created_at = excluded.created_at, old_token_sha256 = NULL, old_until = NULL",
            (device_id, role, hash_token(token), time.time()))
        return token

    def rotate_token(self, device_id: str, grace: float = ROTATION_GRACE,
                     now: float | None = None) -> str | None:
        """A new token for a registered ``device_id`` while its current one stays valid
        until the device first uses the new one, ``grace`` seconds at most: the new token
        can be put on the device without a window in which it is refused. None for an
        unknown id."""
        now = time.time() if now is None else now
        token = secrets.token_urlsafe(32)
        done = self._db.execute(
            "UPDATE devices SET old_token_sha256 = token_sha256, old_until = ?, "
            "token_sha256 = ?, created_at = ? WHERE device_id = ?",
            (now + grace, hash_token(token), now, device_id)).rowcount
        return token if done else None

    def revoke_device(self, device_id: str) -> bool:
        """Forget the token of ``device_id`` (a device lost or retired): its next request is
        ``401``, also on a running collector (it asks the database at every request). Its
        stored batches stay. False when no such device is registered."""
        return self._db.execute("DELETE FROM devices WHERE device_id = ?",
                                (device_id,)).rowcount > 0

    def devices(self) -> list[dict]:
        """Each registered device and admin (``role``, ``token_issued``: when its token was
        made; ``old_token_until``: until when its rotated token stays valid, None when there
        is none) and each device id with stored batches that has no token any more
        (``registered`` False), with its batches, when the last one arrived, when it last
        made any authenticated request (``last_seen``), its last heartbeat's status (the
        agent's metrics, or None) and how far its clock was ahead of the collector's then
        (``clock_ahead_s``, negative: behind; None without a heartbeat that said its time),
        by id; times in seconds since the epoch."""
        rows = self._db.execute(
            "WITH seen AS (SELECT device, COUNT(*) AS n, MAX(received_at) AS last "
            "FROM batches GROUP BY device) "
            "SELECT d.device_id, d.role, d.created_at, COALESCE(s.n, 0), s.last, 1, "
            "d.last_seen, d.status, d.old_until, d.clock_ahead FROM devices d "
            "LEFT JOIN seen s ON s.device = d.device_id "
            "UNION ALL SELECT s.device, NULL, NULL, s.n, s.last, 0, NULL, NULL, NULL, NULL "
            "FROM seen s "
            "WHERE s.device NOT IN (SELECT device_id FROM devices) ORDER BY 1").fetchall()
        keys = ("device", "role", "token_issued", "batches", "last_batch", "registered",
                "last_seen", "status", "old_token_until", "clock_ahead_s")
        return [{**dict(zip(keys, row)), "registered": bool(row[5]),
                 "status": None if row[7] is None else json.loads(row[7])} for row in rows]

    def identify(self, token: str, now: float | None = None) -> tuple[str, str] | None:
        """``(id, role)`` of the holder of ``token``, or None for an unknown token. Records
        the request as the device's ``last_seen``, at most once per ``SEEN_EVERY`` seconds
        (a write per request would be one per uploaded batch)."""
        digest, now = hash_token(token), time.time() if now is None else now
        row = self._db.execute("SELECT device_id, role, last_seen, old_token_sha256 "
                               "FROM devices WHERE token_sha256 = ?", (digest,)).fetchone()
        if row is not None and row[3] is not None:  # the new token is in use: the old ends
            self._db.execute("UPDATE devices SET old_token_sha256 = NULL, old_until = NULL "
                             "WHERE device_id = ?", (row[0],))
        if row is None:
            row = self._db.execute("SELECT device_id, role, last_seen FROM devices WHERE "
                                   "old_token_sha256 = ? AND old_until > ?",
                                   (digest, now)).fetchone()
        if row is None:
            return None
        if row[2] is None or now - row[2] >= SEEN_EVERY:
            self._db.execute("UPDATE devices SET last_seen = ? WHERE device_id = ?",
                             (now, row[0]))
        return row[0], row[1]

    def heartbeat(self, device_id: str, status: dict, now: float | None = None) -> None:
        """Record a device's heartbeat: seen now, with ``status`` (its metrics, a JSON
        object already checked by the caller) as its latest status, and how far the
        ``time`` it says is ahead of ``now`` (its clock's offset, to within the heartbeat's
        delivery; kept from the last heartbeat that said its time)."""
        now = time.time() if now is None else now
        sent = status.get("time")
        timely = isinstance(sent, (int, float)) and not isinstance(sent, bool) and \
            abs(sent) < 1e15  # seconds; not NaN, infinite or a 10**400
        ahead = sent - now if timely else None
        with self._transaction():
            row = self._db.execute("SELECT status FROM devices WHERE device_id = ?",
                                   (device_id,)).fetchone()
            before = json.loads(row[0]) if row and row[0] else None
            found = finds_since(before, status)
            if found is not None and any(found):
                day = utc_day(now).isoformat()
                self._db.execute(
                    "INSERT INTO finds VALUES (?, ?, ?, ?) ON CONFLICT (device, day) DO "
                    "UPDATE SET events = events + excluded.events, "
                    "matches = matches + excluded.matches", (device_id, day, *found))
            self._db.execute("UPDATE devices SET last_seen = ?, status = ?, "
                             "clock_ahead = COALESCE(?, clock_ahead) WHERE device_id = ?",
                             (now, json.dumps(status), ahead, device_id))

    # ----------------------------------------------------------------- batches

    def has_batch(self, batch_id: str) -> bool:
        return self._db.execute("SELECT 1 FROM batches WHERE batch_id = ?",
                                (batch_id,)).fetchone() is not None

    def stored_digests(self, batch_ids: Sequence[str]) -> dict[str, str]:
        """{batch id: SHA-256 of the stored body} for the ids already stored ('' when the
        row predates the digest column)."""
        out = {}
        for bid in dict.fromkeys(batch_ids):
            row = self._db.execute("SELECT body_sha256 FROM batches WHERE batch_id = ?",
                                   (bid,)).fetchone()
            if row is not None:
                out[bid] = row[0] or ""
        return out

    def stored_body(self, digest: str, device: str) -> tuple[str, int] | None:
        """``(batch_id, n_rows)`` of a batch ``device`` uploaded with a body of this
        SHA-256, or None: a resent body can be answered before it is decoded again."""
        return self._db.execute("SELECT batch_id, n_rows FROM batches WHERE body_sha256 = ? "
                                "AND device = ?", (digest, device)).fetchone()

    def store_batch(self, batch, checks: Sequence | None = None, *, nbytes: int = 0,
                    archive: str | None = None, digest: str | None = None) -> bool:
        """Store an ``UploadBatch`` (with one ``edge.collector.recheck.MatchCheck`` per match) or a
        ``SummaryBatch`` in one transaction. False (and nothing written) when its
        ``batch_id`` is already stored."""
        return self.store_prepared([(prepare(batch, checks, nbytes=nbytes, digest=digest),
                                     archive)])[0]

    def store_prepared(self, items: Sequence[tuple[Prepared, str | None]]) -> list[bool]:
        """Store prepared batches (:func:`prepare`, each with its archive path) in one
        transaction: one commit, and one fsync, for them all. A batch whose id is already
        stored (or comes earlier in ``items``) is skipped: False at its place."""
        out = []
        with self._transaction() as db:
            for prep, archive in items:
                try:
                    db.execute(f"INSERT INTO batches ({_BATCH_COLUMNS}) VALUES "
                               "(?,?,?,?,?,?,?,?,?,?,?,?,?)",
                               (*prep.batch_row, time.time(), prep.n_rows, prep.n_events,
                                prep.nbytes, archive, prep.digest))
                except sqlite3.IntegrityError:
                    out.append(False)
                    continue
                table = "matches" if prep.kind == "matches" else "summaries"
                db.executemany(f"INSERT INTO {table} VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                               prep.rows)
                out.append(True)
        return out

    @contextlib.contextmanager
    def _transaction(self):
        """One write transaction: committed at the end of the block, rolled back if it
        raises (a full disk, a failed COMMIT)."""
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise

    @staticmethod
    def _match_rows(batch, checks):
        ptr, traj = batch.trajectory_ptr.tolist(), batch.trajectory.tolist()
        point, start, errors = batch.point.tolist(), batch.start.tolist(), batch.errors.tolist()
        for i in range(len(batch)):
            c = checks[i] if checks is not None else None
            exact = None if c is None or c.exact is None else int(c.exact)
            count, reason = (None, None) if c is None else (c.exact_count, c.reason)
            if count is not None and count > _INT64_MAX:  # SQLite integers are 64-bit
                count, reason = None, f"exact_count {count} is above 2^63 - 1"
            yield (batch.batch_id, i, batch.device, batch.pattern.id,
                   _json(_key(batch.partition[i])), point[i], start[i], errors[i],
                   _json(traj[ptr[i]:ptr[i + 1]]), exact, count,
                   None if c is None else c.exact_json,
                   reason)

    @staticmethod
    def _summary_rows(batch):
        cols = [batch.slot_index.tolist(), batch.matches.tolist(), batch.bundles.tolist(),
                batch.first.tolist(), batch.last.tolist(), batch.min_errors.tolist()]
        for i, (j, m, b, f, la, e) in enumerate(zip(*cols)):
            yield (batch.batch_id, i, batch.device, batch.pattern.id,
                   _json(_key(batch.partition[i])), batch.slot, batch.origin, j, m, b, f, la, e)

    def backup(self, path: str | Path) -> dict:
        """A consistent copy of the database at ``path`` (a new file), also while a
        collector writes to it: SQLite's online backup in one step, one read transaction
        (WAL: the writers go on meanwhile, and no write makes it start again, as a copy page
        by page does on a busy database), checked (``PRAGMA quick_check``: a damaged
        database gives no backup), fsynced and renamed, so ``path`` is whole or absent. Its
        size in bytes and the batches it holds. Raises ``OSError`` (``path`` unusable) or
        :class:`BackupError`, naming the file."""
        path = Path(path)
        check_backup_target(path)
        with storage.durably(path) as tmp:
            try:
                batches = self._copy_to(tmp)
            finally:
                for junk in (f"{tmp}-journal", f"{tmp}-wal", f"{tmp}-shm"):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(junk)
        return {"backup": str(path), "bytes": path.stat().st_size, "batches": batches}

    def _copy_to(self, target: str) -> int:
        """Copy the database into the new file ``target`` and check the copy; its batches."""
        with contextlib.closing(sqlite3.connect(target)) as copy:
            self._db.backup(copy)  # pages=-1: all of it in one step
            try:
                problems = [r[0] for r in copy.execute("PRAGMA quick_check")]
                batches = copy.execute("SELECT COUNT(*) FROM batches").fetchone()[0]
            except sqlite3.DatabaseError as exc:
                problems = [str(exc)]
            if problems != ["ok"]:
                lines = [p.strip() for text in problems for p in text.splitlines()
                         if p.strip() and not p.startswith("***")] or ["?"]
                more = f", and {len(lines) - 1} more" if len(lines) > 1 else ""
                raise BackupError(f"{self.path}: damaged, no backup written (SQLite's "
                                  f"quick_check of the copy: {lines[0]}{more}); the last "
                                  "good backup is the one to restore")
            copy.execute("PRAGMA journal_mode=DELETE")  # one self-contained file
        return batches

    def prune(self, before: float, chunk: int = 500) -> dict[str, int]:
        """Delete the batches created before ``before`` (seconds since the epoch) with their
        matches and summaries, and the finds of the UTC days before its day; how many of
        each. In transactions of ``chunk`` batches (:meth:`prune_chunk`), so a running
        collector's writes wait for one short transaction at a time. A device that sends a
        pruned batch again (its acknowledgement lost) has it stored anew."""
        gone = {"batches": 0, "matches": 0, "summaries": 0}
        while some := self.prune_chunk(before, chunk):
            for table, n in some.items():
                gone[table] += n
        gone["finds"] = self.prune_finds(utc_day(before).isoformat())
        return gone

    def prune_finds(self, day: str) -> int:
        """Delete the devices' finds of the (UTC) days before ``day`` (YYYY-MM-DD); how
        many rows. The finds go with the batches of their days: ``acep train
        --when-finds-drop`` compares days it could still train on."""
        with self._transaction() as db:
            return db.execute("DELETE FROM finds WHERE day < ?", (day,)).rowcount

    def prune_chunk(self, before: float, chunk: int = 500) -> dict[str, int] | None:
        """One transaction of :meth:`prune`: at most ``chunk`` batches; None when no batch
        created before ``before`` is left."""
        ids = [r[0] for r in self._db.execute(
            "SELECT batch_id FROM batches WHERE created_at < ? LIMIT ?", (before, chunk))]
        if not ids:
            return None
        marks = ",".join("?" * len(ids))
        with self._transaction() as db:
            return {table: db.execute(f"DELETE FROM {table} WHERE batch_id IN ({marks})",
                                      ids).rowcount
                    for table in ("matches", "summaries", "batches")}

    def archive_files(self, folder: str) -> dict[str, int]:
        """The archive files under ``folder`` (``date=D/device=X``) that stored batches
        are in: {path under the archive: batches}."""
        low = folder.rstrip("/") + "/"
        high = low[:-1] + chr(ord("/") + 1)  # every path that starts with ``low`` sorts below
        return dict(self._db.execute(
            "SELECT archive, COUNT(*) FROM batches WHERE archive >= ? AND archive < ? "
            "GROUP BY archive", (low, high)))

    def archive_names(self, names: Sequence[str] | None = None) -> dict[str, int]:
        """{path under the archive: batches} of every file stored batches are in (of
        ``names`` only, when given)."""
        if names is None:
            return dict(self._db.execute("SELECT archive, COUNT(*) FROM batches WHERE "
                                         "archive IS NOT NULL GROUP BY archive"))
        out: dict[str, int] = {}
        for marks, part in _in_parts(names):
            out.update(self._db.execute(
                f"SELECT archive, COUNT(*) FROM batches WHERE archive IN ({marks}) "
                "GROUP BY archive", part))
        return out

    def known_batches(self, batch_ids: Sequence[str]) -> set[str]:
        """Those of ``batch_ids`` that are stored."""
        known: set[str] = set()
        for marks, part in _in_parts(batch_ids):
            known.update(r[0] for r in self._db.execute(
                f"SELECT batch_id FROM batches WHERE batch_id IN ({marks})", part))
        return known

    def newest_archive_files(self, count: int, look: int = 1000) -> list[tuple[str, float]]:
        """The archive files of the ``count`` batches stored last that are in one, with
        their ``created_at``, newest first; among the last ``look`` batches only (by rowid,
        the order they were stored in), so the cost does not grow with the database."""
        rows = self._db.execute(
            "SELECT archive, created_at FROM (SELECT archive, created_at FROM batches "
            "ORDER BY rowid DESC LIMIT ?) WHERE archive IS NOT NULL", (look,))
        out: dict[str, float] = {}
        for name, created_at in rows:
            out.setdefault(name, created_at)
            if len(out) == count:
                break
        return list(out.items())

    def archive_file_count(self) -> int:
        """How many archive files the stored batches are in."""
        return self._db.execute("SELECT COUNT(DISTINCT archive) FROM batches").fetchone()[0]

    def move_archive(self, moves: Sequence[tuple[Sequence[str], str]]) -> int:
        """After a compaction: the batches in each move's files are now in its new file
        (paths under the archive), in one transaction; how many batches moved."""
        moved = 0
        with self._transaction() as db:
            for olds, new in moves:
                for marks, part in _in_parts(olds):
                    moved += db.execute(f"UPDATE batches SET archive = ? WHERE archive IN "
                                        f"({marks})", (new, *part)).rowcount
        return moved

    def counts(self) -> dict:
        """Rows per table (for metrics and tests)."""
        return {t: self._db.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
                for t in ("batches", "matches", "summaries", "devices", "sketches")}

    def query(self, sql: str, params: Sequence = ()) -> list[tuple]:
        """Rows of a read-only query (for tools and tests)."""
        return self._db.execute(sql, tuple(params)).fetchall()

    # ----------------------------------------------------------------- sketches

    def put_sketch(self, pattern_id: str, data: bytes) -> str:
        """Store a (verified) sketch; its ETag, the hex SHA-256 of the bytes."""
        etag = sketch_etag(data)
        self._db.execute("INSERT OR REPLACE INTO sketches VALUES (?, ?, ?, ?)",
                         (pattern_id, sqlite3.Binary(data), etag, time.time()))
        return etag

    def pattern_definitions(self, pattern_id: str) -> list[dict]:
        """The distinct definitions (text, window, k, where, partition_by) devices uploaded
        batches under ``pattern_id``, the most recently received first."""
        rows = self._db.execute(
            "SELECT pattern, max(received_at) FROM batches WHERE pattern_id = ? "
            "GROUP BY pattern ORDER BY 2 DESC", (pattern_id,)).fetchall()
        return [json.loads(row[0]) for row in rows]

    def get_sketch(self, pattern_id: str) -> tuple[bytes, str] | None:
        row = self._db.execute("SELECT data, etag FROM sketches WHERE pattern_id = ?",
                               (pattern_id,)).fetchone()
        return (bytes(row[0]), row[1]) if row else None
