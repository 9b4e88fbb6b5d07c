"""The collector: the aiohttp service devices upload their matches to (``docs/WIRE.md``,
"The collector's HTTP API").

::

    python -m edge.collector --db collector.db --archive archive/ --port 8750
    python -m edge.collector --db collector.db --add-device pi-kitchen   # prints a token once

Every accepted batch is decoded with limits (:mod:`edge.wire`), re-checked with the exact
engine (:mod:`edge.collector.recheck`), its windows' events written to the Parquet archive
(:mod:`edge.collector.archive`) and then stored in one database transaction
(:mod:`edge.collector.store`). The archive file is written before the commit: a collector
killed between the two has an archive file and no batch row, the device sends the batch
again, and the same file is rewritten under the same name, so nothing is stored twice and
nothing answered "stored" is missing. All blocking work runs in one worker thread, in
arrival order, so a duplicate check and its insert never interleave with another
request's.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import errno
import gc
import hashlib
import hmac
import json
import logging
import math
import multiprocessing
import os
import re
import secrets
import shutil
import signal
import sqlite3
import ssl
import sys
import time
import urllib.parse
from collections import Counter, deque
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from acep import storage
from acep.arguments import id_arg, path_arg, text_arg
from acep.utils import json_problem

from ..codings import ACCEPT_ENCODING, BodyDecoder, CodingError
from ..logs import LOG_LEVELS, LogLimiter
from ..wire import ID_RULE, LOOPBACK, Limits, UploadBatch, WireError, decode, valid_id
from . import exposition
from .admission import DEFAULT_MAX_WAIT, DEFAULT_PER_DEVICE, Admission, Refusal
from .archive import Archive, ArchiveMissing, archive_path, compacted_names
from .archive import encode as encode_archive
from .mirror import Mirror
from .recheck import recheck_batch
from .store import (
    RESTORE,
    BackupError,
    Prepared,
    Store,
    check_backup_target,
    damaged,
    open_store,
    prepare,
)
from .throttle import DEFAULT_FAILURES, DEFAULT_WINDOW, MAX_ADDRESSES, AuthThrottle, client_of

__all__ = ["Collector", "make_app", "main", "serve", "DEFAULT_PORT", "DEFAULT_MAX_BODY"]

# who sent a request, once its token is known (for the log lines of its failures)
DEVICE = web.RequestKey("device", str)

log = logging.getLogger("acep.collector")

DEFAULT_PORT = 8750
DEFAULT_MAX_BODY = 16 << 20
DEFAULT_MIN_FREE = 64 << 20  # bytes: below it uploads are refused (507) before SQLite fills up
CLIENT_GONE = 499  # nginx's status for a request its client closed, counted and logged so
RETRY_AFTER = 60  # seconds, sent with 507: the agents hold their uploads that long
MAX_RETAIN_DAYS = 36500  # --retain-days at most: the day it names must be a date
MAINTAIN_EVERY = 3600.0  # seconds between --retain-days and --compact passes
# a body is refused (408) when no byte of it arrives for DEFAULT_BODY_IDLE seconds
# (nginx's client_body_timeout: between two reads, not for the whole body), or when, after
# that long, it arrives at fewer than DEFAULT_BODY_MIN_RATE bytes/s (Apache's
# RequestReadTimeout MinRate): a device on a thin link (2G, cellular: 100 kbit/s is 12,500
# bytes/s) takes as long as its body needs, a client that trickles holds its upload's
# admission a grace period at most
DEFAULT_BODY_IDLE = 30.0
# a connection is closed when no whole request head came this long after it opened or after
# its last answer (aiohttp's keep-alive timer, 3630 s by default: a connection that sent
# nothing, or half a head, held a file descriptor an hour). nginx's keepalive_timeout: above
# the 60 s of the usual proxies in front, which close their idle connections first
DEFAULT_IDLE_TIMEOUT = 75.0
DEFAULT_BODY_MIN_RATE = 1024  # bytes/s (8 kbit/s)
MAX_GROUP = 64  # batches committed in one transaction at most
MAX_STATUS = 16 << 10  # bytes of a heartbeat's status (an agent's metrics: about 1 KiB)
# seconds a batch's created_at may be ahead of the collector's clock (Kafka refuses records
# an hour ahead, KIP-937): a day, so time zones mistaken for UTC pass, a year 2100 does not
DEFAULT_MAX_AHEAD = 86400.0
_MSGPACK_TYPES = ("application/msgpack", "application/x-msgpack", "application/vnd.msgpack")


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message, "status": status}, status=status)


def _status_doc(body: bytes) -> dict | web.Response:
    """A heartbeat's body as a JSON object, or the 400 naming what is wrong with it.
    ``NaN`` and ``Infinity`` (Python's ``json`` writes them), and numbers too large for a
    float (``1e400``), become null: what ``--list-devices`` prints stays JSON."""
    if problem := json_problem(body):
        return _error(400, f"heartbeat: body is {problem}")
    try:
        doc = json.loads(body, parse_constant=lambda _: None, parse_float=_finite_or_none)
    except (ValueError, RecursionError) as exc:
        return _error(400, f"heartbeat: body is not JSON ({exc})")
    if not isinstance(doc, dict):
        return _error(400, f"heartbeat: body must be a JSON object (the agent's metrics), "
                           f"not {type(doc).__name__}")
    return doc


def _finite_or_none(text: str) -> float | None:
    value = float(text)
    return value if math.isfinite(value) else None


def _no_space(exc: BaseException) -> bool:
    """A write refused for want of room: SQLite's SQLITE_FULL, or ENOSPC/EDQUOT."""
    if isinstance(exc, sqlite3.OperationalError):
        return getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)


def _failure(exc: Exception, incident: str) -> tuple[int, dict]:
    """The answer to a request that failed inside: ``507`` when the disk is full, ``503``
    when the archive directory is gone (send it again later: nothing of it was stored),
    else ``500`` naming the ``incident`` id the log has it under: not the exception, whose
    text may hold paths, SQL or values that are none of the client's business."""
    if isinstance(exc, ArchiveMissing):
        return 503, {"error": f"collector: {exc}; nothing was stored: send it again later",
                     "status": 503}
    if _no_space(exc):
        return 507, {"error": f"collector: no space left to store it ({exc}); nothing of it "
                              f"was stored: send it again later", "status": 507}
    return 500, {"error": f"internal error (id {incident}); see the collector's log",
                 "status": 500}


class Collector:
    """The state behind the HTTP handlers: store, archive, limits, metrics."""

    def __init__(self, store: Store, archive: Archive, *, max_body: int = DEFAULT_MAX_BODY,
                 sketch_key: bytes | None = None, limits: Limits | None = None,
                 recheck_workers: int = 0, min_free: int = DEFAULT_MIN_FREE,
                 retain_days: int | None = None, compact: bool = False,
                 max_wait: float = DEFAULT_MAX_WAIT, device_uploads: int = DEFAULT_PER_DEVICE,
                 mirror: str | None = None, max_ahead: float = DEFAULT_MAX_AHEAD,
                 body_idle: float = DEFAULT_BODY_IDLE,
                 body_min_rate: float = DEFAULT_BODY_MIN_RATE,
                 metrics_token: bytes | None = None, auth_failures: int = DEFAULT_FAILURES,
                 auth_window: float = DEFAULT_WINDOW, auth_addresses: int = MAX_ADDRESSES):
        if not body_idle > 0 or not math.isfinite(body_idle):
            raise ValueError(f"body_idle must be a finite number of seconds > 0, not {body_idle}")
        if not body_min_rate >= 0 or not math.isfinite(body_min_rate):
            raise ValueError(f"body_min_rate must be a finite number >= 0, not {body_min_rate}")
        self.store, self.archive = store, archive
        self.clock = ClockBounds(float(max_ahead), retain_days)
        self.body_idle, self.body_min_rate = float(body_idle), float(body_min_rate)
        self.min_free, self.retain_days, self.compact = int(min_free), retain_days, compact
        self.low_space: str | None = None  # why uploads are refused (507), while they are
        self.gone: str | None = None  # why uploads are refused (503: a directory missing)
        self.damage: str | None = None  # why nothing is written any more (503 until restored)
        self.busy: tuple[float, int] | None = None  # (since, how many) 503s, while refused
        self.errors = LogLimiter(log, what="failed requests")
        self.refusals = LogLimiter(log, what="refused requests")
        # requests with a token from a client that sent too many wrong ones: 429, unchecked
        self.throttle = AuthThrottle(auth_failures, auth_window, auth_addresses)
        # per client, its requests waiting for a check under way to end, in turn
        self.check_turns: dict[str, deque[asyncio.Future]] = {}
        self.throttled_log = LogLimiter(log, what="throttled addresses")
        self.max_body = int(max_body)
        self.sketch_key = sketch_key
        # GET /metrics needs this token when set (--metrics-token-file); kept as its hash,
        # compared in constant time
        self.metrics_digest = None if metrics_token is None else \
            hashlib.sha256(metrics_token).digest()
        self.limits = limits or Limits(max_bytes=self.max_body)
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="collector-db")
        self.recheck_workers = int(recheck_workers)
        # busy all the time from this many uploads on: one per re-check worker and the
        # database thread's one
        self.admission = Admission(max_wait, device_uploads, saturated=self.recheck_workers + 1)
        self.procs: ProcessPoolExecutor | None = None
        self._start_procs()
        # archive files of one group are written (and fsynced) side by side
        self.io = ThreadPoolExecutor(max_workers=4, thread_name_prefix="collector-archive")
        self.queue: list = []
        self.committer: asyncio.Task | None = None
        self.metrics: Counter = Counter()
        self.status_counts: Counter = Counter()
        self.started = time.time()
        # a copy of the archive in object storage (edge/collector/mirror.py), started by serve()
        self.mirror = None if mirror is None else Mirror(archive.root, mirror, self.metrics)

    async def run(self, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(self.pool, fn, *args)

    def _start_procs(self) -> None:
        if self.recheck_workers > 0:
            # spawn: the workers inherit neither the server's threads nor its socket
            self.procs = ProcessPoolExecutor(
                self.recheck_workers, mp_context=multiprocessing.get_context("spawn"),
                initializer=_warm, initargs=(os.getpid(),))
            # start (and warm) every worker now, not on the first uploads
            futures = [self.procs.submit(os.getpid) for _ in range(self.recheck_workers)]
            for f in futures:
                f.result()

    async def prepare(self, body: bytes, device: str) -> tuple:
        """Decode and re-check in a worker process (the CPU-heavy part), so several
        batches are re-checked at once and the event loop and the database thread go on;
        ``("error", status, doc)`` or ``("ok", checks)``. Without workers, or when the
        pool broke (a worker died), the database thread does it all (``("ok", None)``)."""
        if self.procs is None:
            return ("ok", None)
        try:
            prep = await asyncio.get_running_loop().run_in_executor(
                self.procs, prepare_rows, body, self.limits, device, self.clock)
        except BrokenProcessPool:
            self.procs.shutdown(wait=False, cancel_futures=True)
            self._start_procs()
            return ("ok", None)
        return ("error", *prep) if isinstance(prep, tuple) else ("ok", prep)

    async def commit(self, body: bytes, device: str, prep: Prepared | None
                     ) -> tuple[int, dict]:
        """Queue a batch for the database thread and wait for its answer. Batches that
        are ready while the thread is busy go into its next group (one commit)."""
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        self.queue.append((body, device, prep, done))
        if self.committer is None or self.committer.done():
            self.committer = loop.create_task(self._commit_loop())
        return await done

    async def _commit_loop(self) -> None:
        while self.queue:
            group = self.queue[:MAX_GROUP]
            del self.queue[:MAX_GROUP]
            try:
                answers = await self.run(self.ingest_group, [g[:3] for g in group])
            except Exception as exc:
                # one batch failed (a bug, a full disk): the group's transaction was rolled
                # back, so each batch is ingested again alone and only a failing one fails
                answers = [await self._ingest_alone(g[:3]) for g in group] \
                    if len(group) > 1 else [self.failed(exc, group[0][1])]
            for g, answer in zip(group, answers):
                if not g[3].done():
                    g[3].set_result(answer)

    async def _ingest_alone(self, item: tuple) -> tuple[int, dict]:
        try:
            return (await self.run(self.ingest_group, [item]))[0]
        except Exception as exc:
            return self.failed(exc, item[1])

    def close(self) -> None:
        if self.mirror is not None:
            self.mirror.stop()
        self.pool.shutdown(wait=True)
        self.io.shutdown(wait=True)
        if self.procs is not None:
            self.procs.shutdown(wait=True, cancel_futures=True)
        self.store.close()

    # ----------------------------------------------------------------- helpers

    def failed(self, exc: Exception, device: str, what: str = "batch") -> tuple[int, dict]:
        """Log a request that failed inside (with its traceback, unless the disk is full);
        its answer (:func:`_failure`). A ``500`` and its log line share a random id."""
        if damaged(exc):
            return self.broken(exc)
        incident = secrets.token_hex(4)
        status, doc = _failure(exc, incident)
        if status == 503:
            self.metrics["refused_unavailable"] += 1
            self.errors.error("%s from %s not stored: %s", what, device, exc)
        elif status == 507:
            self.metrics["refused_no_space"] += 1
            self.errors.error("%s from %s not stored: no space left (%s); answered 507",
                              what, device, exc)
        else:
            self.errors.error("%s from %s failed (id %s): %s: %s", what, device, incident,
                              type(exc).__name__, exc, exc_info=exc)
        return status, doc

    def broken(self, exc: Exception) -> tuple[int, dict]:
        """The answer while the database is damaged (SQLite found a page that is not what it
        wrote): ``503``, and every upload after it, until the collector is stopped and the
        database restored; writing on could spread the damage. Logged once."""
        if self.damage is None:
            self.damage = (f"the database {self.store.path} is damaged ({exc}); stop the "
                           f"collector and {RESTORE}")
            self.gone = f"collector: {self.damage}"  # available() says it no more
            log.error("%s; uploads are refused (503) until then", self.damage)
        self.metrics["refused_unavailable"] += 1
        return 503, {"error": f"collector: {self.damage}; nothing was stored: send it "
                              "again later", "status": 503}

    def free_bytes(self) -> int | None:
        """The free space of the fuller of the file systems of the database and archive;
        None when a directory of theirs is not there (:meth:`unusable`)."""
        try:
            return min(shutil.disk_usage(path).free
                       for path in (self.store.path.parent, self.archive.root))
        except OSError:
            return None

    def unusable(self) -> str | None:
        """Why nothing can be stored (the archive or the database directory is gone), or
        None. The collector never makes them again: it may be a disk not mounted. A
        damaged database (:meth:`broken`) stays unusable."""
        if self.damage is not None:
            return f"collector: {self.damage}"
        why = self.archive.missing()
        if why is None and not self.store.path.parent.is_dir():
            why = f"the database directory {self.store.path.parent} is missing"
        return None if why is None else f"collector: {why}"

    def available(self) -> web.Response | None:
        """None while the archive and the database directories are there; else the 503
        (with ``Retry-After``: the agents keep the batch) that refuses an upload before
        its body is read. Logged when it starts and ends."""
        why = self.unusable()
        if why is None:
            if self.gone is not None:
                log.warning("the archive and database directories are back: uploads are "
                            "accepted")
                self.gone = None
            return None
        if self.gone is None:
            log.error("%s; uploads are refused (503) until it is back", why)
        self.gone = why
        self.metrics["refused_unavailable"] += 1
        response = _error(503, f"{why}; nothing was stored: send it again later")
        response.headers["Retry-After"] = str(RETRY_AFTER)
        return response

    def room_left(self) -> web.Response | None:
        """None while the free space is above ``min_free``; else the 507 that refuses an
        upload before its body is read (SQLite must never find a full disk: the agents
        keep the batch and send it after ``Retry-After``). Logged when it starts and ends.
        A missing directory is :meth:`available`'s 503."""
        free = self.free_bytes()
        if free is None:  # a directory went missing since available() looked
            return self.available()
        if free >= self.min_free:
            if self.low_space is not None:
                log.warning("free space is %.0f MiB again: uploads are accepted", free / 2**20)
                self.low_space = None
            return None
        why = (f"collector: {free / 2**20:.0f} MiB free beside its database or archive, "
               f"below --min-free {self.min_free / 2**20:.0f} MiB; uploads are refused until "
               f"there is room: send it again later")
        if self.low_space is None:
            log.error("%s (%s, %s)", why, self.store.path.parent, self.archive.root)
        self.low_space = why
        self.metrics["refused_no_space"] += 1
        return _error(507, why)

    def refuse(self, refused: Refusal) -> web.Response:
        """The answer to an upload not admitted (:mod:`edge.collector.admission`), counted; a
        spell of 503s is logged when it starts and when uploads are admitted again."""
        if refused.status == 503:
            self.metrics["refused_busy"] += 1
            if self.busy is None:
                log.warning("%s (%d uploads, %.1f MiB admitted; answered at %.0f KiB/s)",
                            refused.reason, self.admission.pending,
                            self.admission.backlog / 2**20, (self.admission.rate or 0) / 1024)
            since, count = self.busy or (time.monotonic(), 0)
            self.busy = (since, count + 1)
        else:
            self.metrics["refused_device_busy"] += 1
        response = _error(refused.status, refused.reason)
        response.headers["Retry-After"] = str(refused.retry_after)
        return response

    def admitted(self) -> None:
        if self.busy is not None:
            log.info("uploads are admitted again, after %d refused in %.0f s", self.busy[1],
                     time.monotonic() - self.busy[0])
            self.busy = None

    def throttled(self, client: str) -> web.Response | None:
        """The 429 (with ``Retry-After``) of a request whose client sent too many wrong or
        missing tokens of late (:mod:`edge.collector.throttle`): its token is not checked. None when
        it may be."""
        wait = self.throttle.retry_after(client)
        if wait is None:
            return None
        self.metrics["refused_auth_throttled"] += 1
        response = _error(429, (
            f"too many requests with a wrong or missing token from {client} (at most "
            f"{self.throttle.failures} within {self.throttle.window:g} s: --auth-failures, "
            f"--auth-window): no token from it is checked for {wait} s; send it again "
            "after Retry-After"))
        response.headers["Retry-After"] = str(wait)
        return response

    async def admit(self, request: web.Request) -> web.Response | None:
        """Begin the check of ``request``'s token, reserved as a failure of its client
        until :meth:`checked` (:meth:`edge.collector.throttle.AuthThrottle.reserve`): None once
        begun, or the 429 of a throttled client (:meth:`throttled`). While the client's
        failures and checks under way are at ``--auth-failures``, wait for one to end: so
        no connection it holds open gets a guess beyond the limit."""
        client = client_of(request.remote)
        while (refused := self.throttled(client)) is None:
            if self.throttle.reserve(client):
                return None
            await self._turn(client)
        return refused

    async def _turn(self, client: str) -> None:
        """Wait until a check of ``client``'s under way ends (or its throttle begins). One
        waiter is woken per check that ends, not all: a herd of devices behind one
        address would otherwise be woken, each of them, at every check."""
        turn = asyncio.get_running_loop().create_future()
        self.check_turns.setdefault(client, deque()).append(turn)
        try:
            await turn
        except asyncio.CancelledError:  # its client went away: a turn it was given passes on
            if turn.done() and not turn.cancelled():
                self._pass_turn(client)
            raise

    def _pass_turn(self, client: str, every: bool = False) -> None:
        """Wake the first of ``client``'s requests waiting for a check to end (``every``:
        all of them)."""
        waiting = self.check_turns.get(client)
        while waiting:
            turn = waiting.popleft()
            if not turn.done():
                turn.set_result(None)
                if not every:
                    break
        if not waiting:
            self.check_turns.pop(client, None)

    def checked(self, request: web.Request) -> None:
        """End the check :meth:`admit` began (after :meth:`unauthorized`, if refused), and
        wake the next request of its client waiting for one to end."""
        client = client_of(request.remote)
        self.throttle.release(client)
        self._pass_turn(client)

    def unauthorized(self, request: web.Request, message: str) -> web.Response:
        """The 401 saying ``message``, counted against the request's client; the client
        that it throttles is logged (rate-limited)."""
        self.metrics["refused_unauthorized"] += 1
        client = client_of(request.remote)
        if self.throttle.failed(client):
            self._pass_turn(client, every=True)  # each is answered 429 now
            self.throttled_log.warning(
                "%s sent %d requests with a wrong or missing token within %g s: its "
                "requests with a token are answered 429, unchecked, for %g s", client,
                self.throttle.failures, self.throttle.window, self.throttle.window)
        return _error(401, message)

    async def identify(self, request: web.Request, admin: str | None = None
                       ) -> tuple[str, str] | web.Response:
        """``(id, role)`` of the bearer token's holder, or the 401 to answer (429 from a
        throttled client, before the token is looked up: :meth:`admit`); with ``admin``
        (what the request does), a token that is not an admin's is 403."""
        refused = await self.admit(request)
        if refused is not None:
            return refused
        try:
            who = await self._holder(request)
        finally:
            self.checked(request)
        if isinstance(who, web.Response):
            return who
        request[DEVICE] = who[0]
        if admin is not None and who[1] != "admin":
            return _error(403, f"{who[0]!r} may not {admin} (admin only)")
        return who

    async def _holder(self, request: web.Request) -> tuple[str, str] | web.Response:
        """``(id, role)`` of the bearer token's holder, or the 401 to answer."""
        auth = request.headers.get("Authorization", "")
        scheme, _, token = auth.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return self.unauthorized(request, "missing bearer token (header 'Authorization: "
                                              "Bearer <token>')")
        if not token.isascii():  # bytes beyond ASCII: no token (and no UTF-8 to hash)
            return self.unauthorized(request, "unknown token (not ASCII text: a token is 43 "
                                              "letters, digits, '-' and '_')")
        who = await self.run(self.store.identify, token.strip())
        if who is None:
            return self.unauthorized(request, "unknown token")
        return who

    async def read_body(self, request: web.Request, limit: int | None = None
                        ) -> bytes | web.Response:
        """The body, decoded (gzip, deflate: :mod:`edge.codings`; another coding is 415, one
        that does not decode 400), refused with 413 above ``limit`` (default ``max_body``)
        by Content-Length before reading, by the bytes actually received (chunked or lying
        clients) and by the bytes decoded (a zip bomb); 408 when too slow
        (:meth:`_read_deadline`)."""
        limit = self.max_body if limit is None else limit
        length = request.content_length
        if length is not None and length > limit:
            return _error(413, f"body: Content-Length {length} is above the limit of "
                               f"{limit} bytes")
        try:
            decoder = BodyDecoder(request.headers.get("Content-Encoding"), limit)
        except CodingError as e:
            return _error(415, str(e))
        await send_continue(request)
        clock = asyncio.get_running_loop().time
        parts, wire = [], 0
        start = last = clock()
        try:
            while True:
                deadline, slow = self._read_deadline(start, last, wire)
                try:
                    async with asyncio.timeout_at(deadline):
                        chunk = await request.content.read(1 << 16)
                except TimeoutError:
                    return self._too_slow(slow, clock() - start, wire, length)
                if not chunk:
                    break
                last = clock()
                wire += len(chunk)
                if wire > limit:
                    return _error(413, f"body: more than {limit} bytes")
                parts += decoder.feed(chunk)
            decoder.end()
        except CodingError as e:
            return _error(413 if e.too_large else 400, f"body: {e}")
        except ConnectionResetError:  # a device that lost its link: nobody reads the answer
            return _error(CLIENT_GONE, f"body: the client went away after {wire} of "
                                       f"{length if length is not None else '?'} bytes")
        self.metrics["bytes_in"] += decoder.decoded
        self.metrics["bytes_in_wire"] += wire
        return b"".join(parts)

    def _read_deadline(self, start: float, last: float, wire: int) -> tuple[float, bool]:
        """Until when (the event loop's clock) the next read of a body may wait, begun at
        ``start``, its last bytes read at ``last``, ``wire`` bytes so far; and whether the
        minimum rate (not the idle timeout) sets it. No byte for ``body_idle`` seconds is
        too slow; so is a body behind ``body_min_rate`` bytes/s after a grace of
        ``body_idle`` seconds: each byte buys ``1/body_min_rate`` seconds more (Apache's
        MinRate). So a body never takes longer than ``body_idle + bytes / body_min_rate``
        seconds, and a steady one above the rate takes as long as it needs."""
        idle_at = last + self.body_idle
        if not self.body_min_rate:
            return idle_at, False
        rate_at = start + self.body_idle + wire / self.body_min_rate
        return (rate_at, True) if rate_at < idle_at else (idle_at, False)

    def _too_slow(self, slow: bool, seconds: float, wire: int, length: int | None
                  ) -> web.Response:
        """The 408 of a body that stopped (``slow`` False) or came too slowly, after
        ``seconds`` with ``wire`` of ``length`` bytes."""
        got = f"{wire} of {length if length is not None else '?'} bytes"
        if slow:
            return _error(408, f"body: {got} in {seconds:.0f} s, {wire / seconds:.0f} "
                               f"bytes/s on average: below the collector's minimum of "
                               f"{self.body_min_rate:g} bytes/s (--body-min-rate)")
        return _error(408, f"body: no byte for {self.body_idle:g} s "
                           f"(--body-idle-timeout), after {got}")

    # ----------------------------------------------------------------- maintenance

    async def maintain(self) -> None:
        """``--retain-days`` and ``--compact``: their passes at the start, then every
        ``MAINTAIN_EVERY`` seconds, between the uploads."""
        passes = [(name, step) for name, step, on in (
            ("retention", self.prune_pass, self.retain_days),
            ("compaction", self.compact_pass, self.compact)) if on]
        while passes:
            for name, step in passes:
                try:
                    await step()
                except Exception as exc:
                    if damaged(exc):
                        self.broken(exc)
                        continue
                    self.errors.error("%s pass failed (tried again in %.0f s): %s: %s", name,
                                      MAINTAIN_EVERY, type(exc).__name__, exc, exc_info=exc)
            await asyncio.sleep(MAINTAIN_EVERY)

    async def prune_pass(self, today: dt.date | None = None) -> dict[str, int]:
        """Delete the batches created (``created_at``, the device's clock) before the day
        ``retain_days`` before ``today`` (UTC), as ``--prune-before`` that day does, one
        short transaction at a time between the uploads' commits; how much of each."""
        day = _first_day_kept(today or _utc_day(time.time()), self.retain_days)
        gone = {"batches": 0, "matches": 0, "summaries": 0}
        if self.mirror is not None:  # while the database still says which files are live
            for folder in await asyncio.to_thread(self.archive.device_folders, day.isoformat()):
                done = await self._compact_folder(folder, merge=False)
                self.metrics["compaction_leftovers"] += done["leftovers"]
        while some := await self.run(self.store.prune_chunk, _midnight(day)):
            for table, n in some.items():
                gone[table] += n
        gone["archive_files"] = await self.run(self._prune_archive, day.isoformat())
        for name, n in gone.items():
            self.metrics[f"pruned_{name}"] += n
        if any(gone.values()):
            log.info("retention (--retain-days %d): deleted the batches created before %s "
                     "(by the devices' clocks): %s", self.retain_days, day.isoformat(),
                     json.dumps(gone))
        return gone

    def _prune_archive(self, day: str) -> int:
        """The archive's days before ``day``, but those with a change the mirror has not
        made yet (database thread: no upload adds one meanwhile)."""
        held = set() if self.mirror is None else self.mirror.held_days()
        if held is None:
            log.info("retention: the archive's days are kept until the mirror is compared "
                     "with the archive")
            return 0
        if any(d < day for d in held):
            log.info("retention: the archive's days %s are kept until the mirror has them",
                     ", ".join(sorted(d for d in held if d < day)))
        return self.archive.prune(day, keep=held)

    async def compact_pass(self, today: dt.date | None = None) -> dict[str, int]:
        """Merge the small archive files of the days before ``today`` (UTC), device folder
        by device folder (:meth:`edge.collector.archive.Archive.compact`): the merge in a thread of
        its own while uploads go on, then in the database thread the batches moved to the
        new files (one transaction) and the old files deleted. An interrupted pass leaves
        files no batch is in; the next pass deletes them. How many files of each kind."""
        today = today or _utc_day(time.time())
        before = today.isoformat()
        # not the days retention deletes (a day the mirror holds back included)
        first = _first_day_kept(today, self.retain_days)
        since = "" if first is None else first.isoformat()
        done: Counter = Counter()
        for folder in await asyncio.to_thread(self.archive.device_folders, before, since):
            try:
                done.update(await self._compact_folder(folder))
            except Exception as exc:  # a bad file, a full disk: the other folders go on
                done["failed"] += 1
                self.errors.error("compaction of %s failed (tried again at the next pass): "
                                  "%s: %s", folder, type(exc).__name__, exc)
        names = ("merged", "written", "leftovers", "failed")
        for name in names:
            self.metrics[f"compaction_{name}"] += done[name]
        if done["merged"] or done["leftovers"]:
            log.info("compaction (days before %s): %d files merged into %d, %d leftovers of "
                     "an interrupted pass deleted", before, done["merged"], done["written"],
                     done["leftovers"])
        return {name: done[name] for name in names}

    async def _compact_folder(self, folder, merge: bool = True) -> Counter:
        """Merge a device folder's files (``merge``) and delete the leftovers of a pass cut
        off there. Retention does the latter alone before it deletes a day (``--mirror``:
        a leftover the mirror copied would stay there, beside the files it merged)."""
        rel = folder.relative_to(self.archive.root).as_posix()
        live = await self.run(self.store.archive_files, rel)
        files = [p for p in folder.glob("*.parquet") if not p.name.startswith(".")]
        held = [p for p in files if f"{rel}/{p.name}" in live]
        stale = await asyncio.to_thread(_leftovers, files, held)
        merged = await asyncio.to_thread(self.archive.compact, held) \
            if merge and len(held) > 1 else []
        moves = [([f"{rel}/{p.name}" for p in olds], f"{rel}/{new.name}") for new, olds in merged]
        gone = stale + [p for _, olds in merged for p in olds]
        await self.run(self._swap_files, rel, moves, gone)
        return Counter(merged=sum(len(olds) for _, olds in merged), written=len(merged),
                       leftovers=len(stale))

    def _swap_files(self, rel: str, moves: list, gone: list) -> None:
        """The batches into their compacted files, then the files none is in deleted
        (database thread: no upload is stored in between)."""
        self.store.move_archive(moves)
        live = self.store.archive_files(rel)
        deleted = [f"{rel}/{path.name}" for path in gone if f"{rel}/{path.name}" not in live]
        for name in deleted:
            (self.archive.root / name).unlink(missing_ok=True)
        if self.mirror is not None:  # the new files first: the mirror never lacks a batch
            self.mirror.put([new for _, new in moves])
            self.mirror.delete(deleted)

    # ----------------------------------------------------------------- ingest

    def ingest(self, body: bytes, device: str) -> tuple[int, dict]:
        """Decode, check, re-check, archive and store one batch (database thread)."""
        return self.ingest_group([(body, device, None)])[0]

    def ingest_group(self, items: list[tuple[bytes, str, Prepared | None]]
                     ) -> list[tuple[int, dict]]:
        """Store the batches that are ready, in arrival order, with one commit (database
        thread). Each item is (body, device, its :class:`edge.collector.store.Prepared` rows from a
        worker, or None to decode and re-check here). A batch id already stored, or earlier
        in the group, is ``duplicate`` with the same body and ``409`` with another."""
        out: list = [None] * len(items)
        todo = []
        for k, (body, device, prep) in enumerate(items):
            if prep is None:
                prep = prepare_rows(body, self.limits, device, self.clock)
                if isinstance(prep, tuple):
                    out[k] = prep
                    continue
            todo.append((k, body, prep))
        seen = self.store.stored_digests([prep.batch_id for _, _, prep in todo])
        new, repeats = [], []
        for k, body, prep in todo:
            digest = seen.get(prep.batch_id)
            if digest is None:
                seen[prep.batch_id] = prep.digest or ""
                new.append((k, body, prep))
            elif digest and prep.digest and digest != prep.digest:
                self.metrics["batches_conflict"] += 1
                out[k] = 409, {"error": f"field 'batch_id': {prep.batch_id!r} was already "
                                        "stored with another body (SHA-256 "
                                        f"{digest[:16]}..., this one {prep.digest[:16]}...); "
                                        "a batch id always means the same content",
                               "status": 409}
            else:
                repeats.append((k, prep))
        paths = list(self.io.map(self._archive, [(body, prep) for _, body, prep in new]))
        done = self.store.store_prepared([(prep, path) for (_, _, prep), path in zip(new, paths)])
        if self.mirror is not None:
            self.mirror.put([path for path, stored in zip(paths, done) if stored and path])
        for (k, _, prep), stored in zip(new, done):
            if not stored:  # cannot happen (checked above); the database has the last word
                repeats.append((k, prep))
                continue
            self.metrics["batches_stored"] += 1
            if prep.kind == "matches":
                self.metrics["matches_stored"] += prep.n_rows
                self.metrics["exact_rechecks"] += prep.n_checked
                self.metrics["exact_matches"] += prep.n_exact or 0
                self.metrics["rechecks_unsupported"] += prep.n_rows - prep.n_checked
            else:
                self.metrics["summary_rows_stored"] += prep.n_rows
            out[k] = 200, {"status": "stored", "batch_id": prep.batch_id,
                           "matches": prep.n_rows, "exact": prep.n_exact}
        for k, prep in repeats:
            self.metrics["batches_duplicate"] += 1
            out[k] = 200, {"status": "duplicate", "batch_id": prep.batch_id,
                           "matches": prep.n_rows, "exact": self._stored_exact(prep.batch_id)}
        return out

    def resent(self, body: bytes, device: str) -> dict | None:
        """The answer to a body this device already uploaded byte for byte (a retry after
        a lost answer), found by its SHA-256 before any decoding or re-check; else None
        (database thread)."""
        found = self.store.stored_body(hashlib.sha256(body).hexdigest(), device)
        if found is None:
            return None
        self.metrics["batches_duplicate"] += 1
        return {"status": "duplicate", "batch_id": found[0], "matches": found[1],
                "exact": self._stored_exact(found[0])}

    def _archive(self, item: tuple[bytes, Prepared]) -> str | None:
        """Write a new matches batch's archive file (before its commit); its path."""
        body, prep = item
        if prep.kind != "matches":
            return None
        if prep.archive_file is None:
            path = self.archive.write(decode(body, self.limits))
        else:
            path = self.archive.put(*prep.archive_file)
        return str(path.relative_to(self.archive.root))

    def _stored_exact(self, batch_id: str) -> int | None:
        (count,) = self.store.query("SELECT sum(exact) FROM matches WHERE batch_id = ?",
                                    (batch_id,))[0]
        return count

    # ----------------------------------------------------------------- handlers

    async def post_batch(self, request: web.Request) -> web.Response:
        who = await self.identify(request)
        if isinstance(who, web.Response):
            return who
        if request.content_type not in _MSGPACK_TYPES:
            return _error(415, f"Content-Type {request.content_type!r}: an upload batch is "
                               "'application/msgpack'")
        refusal = self.available()
        refusal = self.room_left() if refusal is None else refusal
        if refusal is not None:
            return refusal
        size = min(request.content_length or 0, self.max_body)  # more is refused: 413
        refused = self.admission.admit(who[0], size)
        if refused is not None:
            return self.refuse(refused)
        self.admitted()
        arrived = None  # the body's bytes once in, decoded: then it is in the backlog
        try:
            body = await self.read_body(request)
            if isinstance(body, web.Response):
                return body
            arrived = len(body)  # decoded: what the re-check works through, gzipped or not
            self.admission.arrived(arrived)
            return await self._upload(request, body, who[0])
        finally:
            self.admission.done(who[0], arrived, worked=request.get("decoded", False))

    async def _upload(self, request: web.Request, body: bytes, device: str) -> web.Response:
        resent = await self.run(self.resent, body, device)
        if resent is not None:
            return web.json_response(resent)
        request["decoded"] = True
        prepared = await self.prepare(body, device)
        self.metrics["batches_decoded"] += 1
        if prepared[0] == "error":
            return web.json_response(prepared[2], status=prepared[1])
        status, doc = await self.commit(body, device, prepared[1])
        return web.json_response(doc, status=status)

    async def get_sketch(self, request: web.Request) -> web.Response:
        who = await self.identify(request)
        if isinstance(who, web.Response):
            return who
        pattern_id = request.match_info["pattern_id"]
        found = await self.run(self.store.get_sketch, pattern_id)
        if found is None:
            return _error(404, f"no sketch for pattern {pattern_id!r}")
        data, etag = found
        quoted = f'"{etag}"'
        if request.headers.get("If-None-Match", "").strip() in (quoted, etag):
            return web.Response(status=304, headers={"ETag": quoted})
        return web.Response(body=data, content_type="application/octet-stream",
                            headers={"ETag": quoted})

    async def put_sketch(self, request: web.Request) -> web.Response:
        who = await self.identify(request, admin="publish sketches")
        if isinstance(who, web.Response):
            return who
        if self.sketch_key is None:
            return _error(403, "no sketch key is configured (--sketch-key-file), so no "
                               "signature can be checked")
        body = await self.read_body(request)
        if isinstance(body, web.Response):
            return body
        pattern_id = request.match_info["pattern_id"]
        if not valid_id(pattern_id):
            return _error(400, f"pattern id {pattern_id!r} does not match {ID_RULE} (the "
                               "agents' pattern.id)")
        unchecked = request.query.get("unchecked", "") in ("1", "true")
        status, doc = await self.run(self._put_sketch, pattern_id, body, unchecked)
        return web.json_response(doc, status=status)

    def _put_sketch(self, pattern_id: str, data: bytes, unchecked: bool = False
                    ) -> tuple[int, dict]:
        """Verify, check against the pattern the devices run under ``pattern_id``, store."""
        from history.sketch import Sketch, SketchError

        try:
            sketch = Sketch.from_bytes(data, self.sketch_key, self.max_body,
                                       key_from="the collector's --sketch-key-file")
        except SketchError as exc:
            return 400, {"error": f"sketch: {exc}", "status": 400}
        definitions = [] if unchecked else self.store.pattern_definitions(pattern_id)
        problems = [sketch.mismatch(d["text"], d["k"], d["window"], d["where"],
                                    d["partition_by"]) for d in definitions]
        if definitions and None not in problems:
            return 409, {"status": 409, "error": (
                f"sketch: the devices upload pattern {pattern_id!r} as {definitions[0]['text']!r}"
                f" and would refuse this sketch: {problems[0]} ({len(definitions)} "
                "definition(s) checked; ?unchecked=1 publishes it anyway)")}
        etag = self.store.put_sketch(pattern_id, data)
        self.metrics["sketches_stored"] += 1
        return 200, {"pattern_id": pattern_id, "bytes": len(data), "etag": etag,
                     "checked": 0 if unchecked else len(definitions),
                     "key_id": sketch.signed_with, "key_recorded": sketch.key_recorded}

    async def post_heartbeat(self, request: web.Request) -> web.Response:
        """A device says it is alive, with its metrics as ``status`` (``--list-devices``)."""
        who = await self.identify(request)
        if isinstance(who, web.Response):
            return who
        if request.content_type != "application/json":
            return _error(415, f"Content-Type {request.content_type!r}: a heartbeat is "
                               "'application/json'")
        body = await self.read_body(request, MAX_STATUS)
        if isinstance(body, web.Response):
            return body
        status = _status_doc(body)
        if isinstance(status, web.Response):
            return status
        await self.run(self.store.heartbeat, who[0], status)
        self.metrics["heartbeats"] += 1
        return web.json_response({"device": who[0], "time": time.time()})

    async def get_devices(self, request: web.Request) -> web.Response:
        """What ``--list-devices`` prints, for an admin away from the collector's host."""
        who = await self.identify(request, admin="list the devices")
        if isinstance(who, web.Response):
            return who
        devices = await self.run(self.store.devices)
        return web.json_response({"time": time.time(), "devices": devices})

    async def whoami(self, request: web.Request) -> web.Response:
        """Whose token this is (``acep agent --check`` compares it with ``device.id``)."""
        who = await self.identify(request)
        if isinstance(who, web.Response):
            return who
        return web.json_response({"device": who[0], "role": who[1]})

    async def health(self, request: web.Request) -> web.Response:
        """``200 ok``, or ``503`` saying why nothing can be stored; with the collector's
        clock and the ``created_at`` it takes (``acep agent --check`` compares the device's
        clock with them)."""
        now = time.time()
        first = self.clock.first_day(_utc_day(now))
        clock = {"time": now, "max_clock_ahead": self.clock.max_ahead,
                 "first_day_kept": None if first is None else first.isoformat()}
        why = self.unusable()
        if why is not None:
            return web.json_response({"status": "unavailable", "error": why, **clock},
                                     status=503)
        return web.json_response({"status": "ok", **clock})

    async def metrics_view(self, request: web.Request) -> web.Response:
        """The counters as JSON, or for Prometheus (``Accept: text/plain`` or OpenMetrics,
        or ``?format=prometheus``) with each device's last request and heartbeat; only to
        the bearer of the metrics token, when there is one (:meth:`unauthorized_scrape`)."""
        refused = await self.unauthorized_scrape(request)
        if refused is not None:
            return refused
        uptime = time.time() - self.started
        accept = request.headers.get("Accept", "")
        if exposition.wants_prometheus(accept, request.query):
            devices = await self.run(self.store.devices)
            body, content_type = exposition.render(self.metrics, self.status_counts, uptime,
                                                   devices, accept, self.gauges())
            return web.Response(body=body, headers={"Content-Type": content_type})
        doc = {name: self.metrics.get(name, 0) for name in exposition.COUNTERS}
        doc["requests"] = {str(k): v for k, v in sorted(self.status_counts.items())}
        doc["uptime_s"] = round(uptime, 3)
        doc.update(self.gauges())
        return web.json_response(doc)

    async def unauthorized_scrape(self, request: web.Request) -> web.Response | None:
        """None when ``request`` may read ``/metrics``: there is no metrics token, or it
        carries it (``Authorization: Bearer <token>``, compared in constant time); else
        the 401 to answer, or the 429 of a throttled client (:meth:`admit`)."""
        if self.metrics_digest is None:
            return None
        refused = await self.admit(request)
        if refused is not None:
            return refused
        try:
            return self._scrape_refused(request)
        finally:
            self.checked(request)

    def _scrape_refused(self, request: web.Request) -> web.Response | None:
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        token = token.strip()
        given = hashlib.sha256(token.encode() if token.isascii() else b"").digest()
        if hmac.compare_digest(given, self.metrics_digest) and scheme.lower() == "bearer" \
                and token:
            return None
        response = self.unauthorized(request, "GET /metrics needs the token of the "
                                              "collector's --metrics-token-file (header "
                                              "'Authorization: Bearer <token>')")
        response.headers["WWW-Authenticate"] = 'Bearer realm="acep metrics"'
        return response

    def gauges(self) -> dict[str, float]:
        """The values of :data:`edge.collector.exposition.GAUGES` (the limits too, for alerts)."""
        free = self.free_bytes()
        return {**({} if free is None else {"free_bytes": free}),
                "storage_ok": int(self.unusable() is None), "min_free_bytes": self.min_free,
                **self.admission.gauges(), "max_wait_s": self.admission.max_wait,
                "device_uploads": self.admission.per_device, **self.throttle.gauges(),
                **(self.mirror.gauges() if self.mirror is not None else {})}


@dataclass(frozen=True)
class ClockBounds:
    """The ``created_at`` a batch may have: at most ``max_ahead`` seconds ahead of the
    collector's clock, and not before the first day ``--retain-days`` keeps (a batch
    retention would delete at once: a device whose clock starts at 1970, a Raspberry Pi
    without a real-time clock before NTP has set it)."""

    max_ahead: float = DEFAULT_MAX_AHEAD
    retain_days: int | None = None

    def first_day(self, today: dt.date) -> dt.date | None:
        """The first day (UTC) retention keeps on ``today``; None: every day."""
        return _first_day_kept(today, self.retain_days)

    def refusal(self, created_at: float, now: float) -> str | None:
        """What is wrong with ``created_at``, or None."""
        when = f"{dt.datetime.fromtimestamp(created_at, dt.UTC):%Y-%m-%d %H:%M:%S} UTC"
        ahead = created_at - now
        if ahead > self.max_ahead:
            return (f"field 'created_at': {when} is {ahead / 86400:.2f} days ahead of the "
                    f"collector's clock (more than --max-clock-ahead {self.max_ahead:g} s; "
                    "is the device's clock set?)")
        first = self.first_day(_utc_day(now))
        if first is not None and created_at < _midnight(first):
            return (f"field 'created_at': {when} is before {first.isoformat()}, the first "
                    f"day the collector keeps (--retain-days {self.retain_days}): retention "
                    "would delete the batch at once (is the device's clock set?)")
        return None


def _decode(body: bytes, limits: Limits, device: str, clock: ClockBounds):
    """The decoded batch, or ``(status, error doc)`` for a bad body, another device or a
    ``created_at`` out of ``clock``'s bounds."""
    try:
        batch = decode(body, limits)
    except WireError as exc:
        status = 413 if "above the limit" in str(exc) and str(exc).startswith("body") else 400
        return status, {"error": str(exc), "status": status}
    if batch.device != device:
        return 403, {"error": f"field 'device': {batch.device!r} is not this token's "
                              f"device {device!r}", "status": 403}
    why = clock.refusal(batch.created_at, time.time())
    if why is not None:
        return 400, {"error": why, "status": 400}
    return batch


def prepare_rows(body: bytes, limits: Limits, device: str,
                 clock: ClockBounds = ClockBounds()) -> Prepared | tuple[int, dict]:
    """Decode, re-check and build the database rows of one batch (a worker process, or
    the database thread without workers); ``(status, error doc)`` for a refused body."""
    batch = _decode(body, limits, device, clock)
    if isinstance(batch, tuple):
        return batch
    checks = recheck_batch(batch) if isinstance(batch, UploadBatch) else None
    prep = prepare(batch, checks, nbytes=len(body), digest=hashlib.sha256(body).hexdigest())
    if checks is not None:  # the Parquet file too: the database thread only writes it
        prep.archive_file = (str(archive_path("", batch)), encode_archive(batch))
    return prep


def _warm(parent: int) -> None:
    """Worker start-up: import what a re-check needs before the first batch, and exit when
    the collector is gone. A SIGKILLed collector does not stop its pool: the workers would
    wait on their queue for ever (and hold their memory)."""
    import os
    import threading

    from . import fastcheck  # noqa: F401
    from .archive import warm_up

    warm_up()
    # what start-up made lives as long as the worker: keep it out of the collector's
    # scans (about 15% of a worker's time went to collecting the imported modules)
    gc.freeze()

    def watch() -> None:  # (the collector may be gone before this worker got here)
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(0)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _message(response: web.Response) -> str:
    """The ``error`` of a JSON error answer (for the log)."""
    try:
        return str(json.loads(response.body)["error"])
    except (TypeError, ValueError, KeyError):
        return ""


async def defer_continue(request: web.Request) -> None:
    """The expect handler of the routes with a body: ``Expect: 100-continue`` is answered
    by :func:`send_continue` when the handler is about to read the body, not on arrival
    (aiohttp's default), so that a refusal (401, 413, 415, 429, 503, 507) comes before the
    client sends it (RFC 9110 10.1.1). Another expectation gets 417 (:func:`make_app`)."""
    if request.version >= (1, 1):  # an HTTP/1.0 client does not wait (RFC 9110 10.1.1)
        request["expect"] = request.headers.get("Expect", "").lower()


async def send_continue(request: web.Request) -> None:
    """``100 Continue``, once, to a client that waits for it (:func:`defer_continue`)."""
    if request.pop("expect", None) == "100-continue":
        await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        request.writer.output_size = 0  # the answer's size in the access log, as aiohttp's


def make_app(collector: Collector) -> web.Application:
    """The aiohttp application of ``collector``: routes, JSON errors, request counting."""

    @web.middleware
    async def errors(request: web.Request, handler):
        try:
            expect = request.get("expect", "100-continue")
            response = await handler(request) if expect == "100-continue" else \
                _error(417, f"Expect: {expect!r}: only 100-continue is supported")
        except web.HTTPException as exc:  # routing: 404, 405, and aiohttp's own 413
            response = _error(exc.status, exc.reason or "error")
        except Exception as exc:  # a bug must answer 500, not drop the connection
            status, doc = collector.failed(exc, request.get(DEVICE, request.remote),
                                           f"{request.method} {request.path}")
            response = web.json_response(doc, status=status)
        response.headers["Accept-Encoding"] = ACCEPT_ENCODING
        if response.status in (503, 507):
            response.headers.setdefault("Retry-After", str(RETRY_AFTER))
        elif 400 <= response.status < 500 and response.status != 404:
            collector.refusals.warning("%s %s from %s: %d %s", request.method, request.path,
                                       request.get(DEVICE, request.remote), response.status,
                                       _message(response))
        collector.status_counts[response.status] += 1
        return response

    # client_max_size: aiohttp's own cap on request.read(); the handlers stream instead
    app = web.Application(middlewares=[errors], client_max_size=collector.max_body)
    # every route's Expect goes through defer_continue: aiohttp's own handler answers an
    # unknown expectation with a text it cannot encode when the header is not UTF-8 (a 500)
    expecting = {"expect_handler": defer_continue}
    app.add_routes([
        web.post("/v1/batches", collector.post_batch, **expecting),
        web.get("/v1/sketches/{pattern_id}", collector.get_sketch, **expecting),
        web.put("/v1/sketches/{pattern_id}", collector.put_sketch, **expecting),
        web.post("/v1/heartbeat", collector.post_heartbeat, **expecting),
        web.get("/v1/devices", collector.get_devices, **expecting),
        web.get("/v1/whoami", collector.whoami, **expecting),
        web.get("/health", collector.health, **expecting),
        web.get("/metrics", collector.metrics_view, **expecting),
    ])
    return app


def _one_line(text: str, limit: int = 200) -> str:
    """aiohttp's parser message on one line, without its caret line, and without the
    token of an Authorization header it quotes (:func:`_redacted`)."""
    parts = [p.strip() for p in text.splitlines() if p.strip().strip("^")]
    return _redacted(" ".join(parts))[:limit]


# aiohttp's parser quotes the line it refused: an Authorization header with a stray byte,
# one too long, one with a space before its colon, shows the token it carries
_AUTHORIZATION = re.compile(r"(?i)(authorization|bearer).*")


def _redacted(text: str) -> str:
    """``text`` cut after the first 'Authorization' or 'Bearer' it holds; a line too long
    without what it quotes (a header's value alone: which header, it does not say)."""
    if text.startswith("Got more than"):
        return text.split(":", 1)[0] + ": ... (not logged: it may hold a token)"
    return _AUTHORIZATION.sub(r"\1 ... (not logged: it may hold a token)", text, count=1)


class ServerLog:
    """aiohttp's ``logger`` for the collector's connections. A request aiohttp cannot parse
    (a bad Content-Length or chunk size, a header line too long) is a client's error: one
    warning line through the collector's rate limit for refusals, no traceback; anything
    else is logged as a failure, with its traceback, through that rate limit."""

    def __init__(self, collector: Collector):
        self.collector = collector

    def debug(self, msg: str, *args, exc_info=None, **_) -> None:
        log.debug(msg + (f": {_redacted(repr(exc_info))}"
                         if isinstance(exc_info, BaseException) else ""), *args)

    def exception(self, msg: str, *args, exc_info=True, **_) -> None:
        exc = exc_info if isinstance(exc_info, BaseException) else sys.exc_info()[1]
        if isinstance(exc, HttpProcessingError):
            self.collector.status_counts[exc.code] += 1
            self.collector.refusals.warning("malformed request from %s: %d %s",
                                            args[0] if args else "?", exc.code,
                                            _one_line(exc.message or type(exc).__name__))
        else:
            self.collector.errors.error(msg, *args, exc_info=exc_info)


class ListenError(OSError):
    """The collector cannot listen on ``--host``/``--port``: one line, exit 2."""


async def serve(collector: Collector, host: str, port: int, ready=print,
                tls: ssl.SSLContext | None = None, access_log: bool = False,
                idle_timeout: float = DEFAULT_IDLE_TIMEOUT) -> None:
    """Serve until SIGTERM or SIGINT, then finish the requests in flight and return;
    HTTPS with ``tls`` (:func:`server_tls`); one log line per request with ``access_log``
    (logger ``aiohttp.access``, level INFO). A connection without a whole request head
    ``idle_timeout`` seconds after it opened or after its last answer is closed (a body
    has its own limits: :meth:`Collector.read_body`)."""
    # bodies are decoded by edge.codings, bounded; aiohttp's decoding is not used
    runner = web.AppRunner(make_app(collector), handle_signals=False, auto_decompress=False,
                           access_log=logging.getLogger("aiohttp.access") if access_log else None,
                           logger=ServerLog(collector), keepalive_timeout=idle_timeout)
    await runner.setup()
    site = web.TCPSite(runner, host, port, ssl_context=tls)
    try:
        await site.start()
    except OSError as exc:  # a port in use or not this process's to take, an unknown host
        await runner.cleanup()
        raise ListenError(f"--host {host} --port {port}: cannot listen there "
                          f"({exc.strerror or exc})") from None
    bound = runner.addresses[0]
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):  # before "listening": a client may stop it
        loop.add_signal_handler(sig, stop.set)
    scheme = "http" if tls is None else "https"
    ready(f"acep collector listening on {scheme}://{bound[0]}:{bound[1]}")
    if collector.mirror is not None:
        collector.mirror.start()
    upkeep = asyncio.create_task(collector.maintain())
    try:
        await stop.wait()
    finally:
        upkeep.cancel()
        await runner.cleanup()


def server_tls(cert: str | None, key: str | None) -> ssl.SSLContext | None:
    """The TLS context of ``--tls-cert``/``--tls-key`` (PEM; TLS 1.2 or later), None for
    plain HTTP. Raises ``ValueError`` naming the file and the problem."""
    if cert is None and key is None:
        return None
    if cert is None or key is None:
        raise ValueError("--tls-cert and --tls-key go together (the certificate chain and "
                         "its private key, PEM)")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise ValueError(f"--tls-cert {cert} / --tls-key {key}: cannot load them as a PEM "
                         f"certificate chain and its key ({exc})") from None
    return context


def _at_least_zero(unit: str):
    """An argparse type: a finite number >= 0 of ``unit``."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or value < 0:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number of {unit} >= 0")
        return value
    return parse


_seconds = _at_least_zero("seconds")
_rate = _at_least_zero("bytes per second")


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port (0 to 65535)")
    return value


def _unwritable(folder: str) -> str | None:
    """Why the collector cannot write files in ``folder`` (made if missing), or None."""
    try:
        Path(folder).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return f"cannot write there ({exc.strerror or exc})"
    why = storage.unwritable(folder)
    return None if why is None else f"cannot write there ({why})"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="acep serve", description=(
        "The collector: devices POST msgpack batches; matches go to the database, "
        "their windows to a Parquet archive, each re-checked by the exact engine."))
    p.add_argument("--db", required=True, type=path_arg,
                   help="database: a SQLite file path or sqlite:///PATH")
    p.add_argument("--archive", type=path_arg,
                   help="directory of the Parquet archive (needed to serve)")
    p.add_argument("--host", default="127.0.0.1", type=text_arg,
                   help="address to bind (default 127.0.0.1; 0.0.0.0: every interface)")
    p.add_argument("--port", type=_port, default=DEFAULT_PORT,
                   help=f"port (default {DEFAULT_PORT}; 0 picks a free one, printed)")
    p.add_argument("--tls-cert", metavar="PEM", type=path_arg,
                   help="serve HTTPS with this certificate chain (with --tls-key); the "
                        "agents set collector.ca_file to the CA that signed it")
    p.add_argument("--tls-key", metavar="PEM", type=path_arg, help="the private key of --tls-cert")
    p.add_argument("--metrics-token-file", metavar="PATH", type=path_arg,
                   help="GET /metrics answers only a request with 'Authorization: Bearer "
                        "<the token in this file>' (401 otherwise; Prometheus: "
                        "authorization: {credentials_file: ...}); /health stays open. "
                        "Without it /metrics is open, device ids included")
    p.add_argument("--max-body", type=int, default=DEFAULT_MAX_BODY,
                   help="largest request body in bytes (default 16 MiB)")
    p.add_argument("--recheck-workers", type=int, default=2,
                   help="processes that decode and re-check batches in parallel (default 2; "
                        "0: all ingest work in the database thread)")
    p.add_argument("--sketch-key-file", type=path_arg,
                   help="the key that signs sketches (PUT is refused "
                        "without it)")
    p.add_argument("--min-free", type=int, default=DEFAULT_MIN_FREE >> 20, metavar="MIB",
                   help="refuse uploads (507, Retry-After: the agents keep them) while the "
                        "database's or the archive's file system has less free space than "
                        f"this (default {DEFAULT_MIN_FREE >> 20} MiB; 0: until it is full)")
    p.add_argument("--max-wait", type=_seconds, default=DEFAULT_MAX_WAIT, metavar="SECONDS",
                   help="refuse an upload (503, Retry-After) before reading it when it would "
                        "wait longer than this behind the uploads already admitted (default "
                        f"{DEFAULT_MAX_WAIT:g}: half the agents' default timeout; 0: no limit)")
    p.add_argument("--device-uploads", type=int, default=DEFAULT_PER_DEVICE, metavar="N",
                   help="uploads of one device processed at a time; another one is refused "
                        f"(429, Retry-After) (default {DEFAULT_PER_DEVICE}: the agent sends "
                        "one at a time, so a second is its retry of one still queued)")
    p.add_argument("--auth-failures", type=int, default=DEFAULT_FAILURES, metavar="N",
                   help="after N requests from one client address (of an IPv6 client: its "
                        "/64) refused for a wrong or missing token (401) within "
                        "--auth-window, answer its requests that need a token 429 "
                        "(Retry-After) for --auth-window seconds without checking the "
                        "token, a correct one too; /health stays open (default "
                        f"{DEFAULT_FAILURES}; 0: off, say behind a proxy that limits them, "
                        "whose address every client would share)")
    p.add_argument("--auth-window", type=_seconds, default=DEFAULT_WINDOW, metavar="SECONDS",
                   help="the window of --auth-failures, and how long a client address "
                        "(IPv6: /64) that reached it is throttled (default "
                        f"{DEFAULT_WINDOW:g}; above 0)")
    p.add_argument("--idle-timeout", type=_seconds, default=DEFAULT_IDLE_TIMEOUT,
                   metavar="SECONDS",
                   help="close a connection that has not sent a whole request head this "
                        "long after it opened or after its last answer: one that sends "
                        "nothing or trickles its headers, an idle keep-alive one (default "
                        f"{DEFAULT_IDLE_TIMEOUT:g}; above 0)")
    p.add_argument("--body-idle-timeout", type=_seconds, default=DEFAULT_BODY_IDLE,
                   metavar="SECONDS",
                   help="refuse a request body (408) when no byte of it arrives for this "
                        "long: a pause between two reads, not the whole body (default "
                        f"{DEFAULT_BODY_IDLE:g}; above 0)")
    p.add_argument("--body-min-rate", type=_rate, default=DEFAULT_BODY_MIN_RATE,
                   metavar="BYTES",
                   help="refuse a request body (408) that arrives at fewer bytes per second "
                        "than this, counted after a grace of --body-idle-timeout seconds "
                        "(each byte buys 1/BYTES s more), so a device on a thin link takes "
                        "as long as its body needs while a client that trickles gives its "
                        f"upload's place back (default {DEFAULT_BODY_MIN_RATE}: 8 kbit/s; "
                        "0: no minimum, the idle timeout alone)")
    p.add_argument("--max-clock-ahead", type=_seconds, default=DEFAULT_MAX_AHEAD,
                   metavar="SECONDS",
                   help="refuse (400) a batch created more than this far ahead of the "
                        "collector's clock: a device whose clock is wrong; the agent keeps "
                        f"it as a dead letter (default {DEFAULT_MAX_AHEAD:g}: a day)")
    p.add_argument("--retain-days", type=int, metavar="N",
                   help="while serving, delete the batches created before the day N days "
                        "ago (UTC, by the device's clock: the day of the archive's date= "
                        "folder; as --prune-before that day), at the start and every hour, "
                        "and refuse (400) a batch created before it (a device whose clock "
                        "is wrong; the agent keeps it as a dead letter); acep train --since "
                        "Nd reads the days kept")
    p.add_argument("--compact", action="store_true",
                   help="while serving, merge each device's small archive files of the days "
                        "before today into files of up to a million rows, at the start and "
                        "every hour (the trainer reads far fewer files)")
    p.add_argument("--mirror", metavar="URI", type=path_arg,
                   help="keep a copy of the archive here while serving, for a cluster's "
                        "trainer to read: s3://bucket/prefix (also gs://, hdfs://, a path); "
                        "each stored batch's file is copied, compactions follow, retention "
                        "leaves it alone; what is missing is copied at the start")
    p.add_argument("--accept-missing-archive", action="store_true",
                   help="serve although --archive lacks files of the batches stored last "
                        "(the start looks at the newest few): their events are lost, say "
                        "an archive restored from an older copy (--check-archive lists "
                        "them); without it the collector refuses to start, as on an empty "
                        "mount point or a wrong path")
    p.add_argument("--log-level", default="INFO", type=str.upper, choices=LOG_LEVELS,
                   help="DEBUG, INFO (default: start, retention, refused and failed "
                        "requests), WARNING or ERROR; logged on stderr")
    p.add_argument("--access-log", action="store_true",
                   help="also log one line per request (at INFO)")
    tools = p.add_mutually_exclusive_group()
    tools.add_argument("--add-device", metavar="ID", type=id_arg,
                       help="register a device, print its new token once and exit (a known "
                            "device gets a new token; its old one is refused at once)")
    tools.add_argument("--add-admin", metavar="NAME", type=id_arg,
                       help="register an admin (may PUT sketches), print its token and exit")
    tools.add_argument("--rotate-token", metavar="ID", type=text_arg,
                       help="print a new token for a registered device or admin; its current "
                            "one stays valid until the new one is first used (7 days at "
                            "most), so the device is never refused meanwhile; exit")
    tools.add_argument("--revoke-device", metavar="ID", type=text_arg,
                       help="refuse the token of a device or admin from now on (also on the "
                            "running collector) and exit; its stored batches stay")
    tools.add_argument("--list-devices", action="store_true",
                       help="one JSON line per device: role, when its token was issued, its "
                            "batches, when the last one arrived, when it was last seen and "
                            "its last heartbeat's status; exit")
    tools.add_argument("--prune-before", metavar="YYYY-MM-DD", type=text_arg,
                       help="delete the batches created before this UTC day (by the device's "
                            "clock: the day of the archive's date= folder), their matches "
                            "and summaries, and with --archive its days before it; print "
                            "how many; exit (the collector may be running)")
    tools.add_argument("--backup", metavar="FILE", type=path_arg,
                       help="copy the database to FILE, a new file, consistent also while "
                            "the collector runs (SQLite's online backup; not cp), checked "
                            "(a damaged database gives none); print its size and batches; "
                            "exit")
    tools.add_argument("--check-archive", action="store_true",
                       help="compare the database with --archive (after a restore from a "
                            "backup): one JSON line per archive file no batch is in (with "
                            "the batches the database lacks) and per file it names that is "
                            "missing, then a summary; exit 0 when they agree, 1 when not; "
                            "writes nothing (the collector may be running)")
    return p


# the maintenance tools (a mutually exclusive group); the first two may create the database
_TOOLS = ("add_device", "add_admin", "rotate_token", "revoke_device", "list_devices",
          "prune_before", "backup", "check_archive")


def _prune(store: Store, args: argparse.Namespace) -> int:
    try:
        day = dt.date.fromisoformat(args.prune_before)
    except ValueError:
        print(f"acep serve: --prune-before {args.prune_before!r} is not a day (YYYY-MM-DD)",
              file=sys.stderr)
        return 2
    if args.archive and not os.path.isdir(args.archive):  # a typo: prune nothing at all
        print(f"acep serve: --archive {args.archive}: no such directory (nothing pruned)",
              file=sys.stderr)
        return 2
    gone = store.prune(_midnight(day))
    if args.archive:
        gone["archive_files"] = Archive(args.archive).prune(day.isoformat())
    print(json.dumps({"before": day.isoformat(), **gone}))
    return 0


def _bad_mirror(mirror: str, archive: str) -> str | None:
    """Why ``--mirror`` cannot be used (None: it can be tried): a filesystem this
    collector cannot write, or a folder that holds the archive or is inside it."""
    try:
        storage.check_scheme(mirror)
    except storage.StorageError as exc:
        return exc.reason
    local = urllib.parse.urlsplit(mirror).path if mirror.startswith("file://") else \
        None if storage.is_uri(mirror) else mirror
    if local is not None:
        a, m = os.path.realpath(archive), os.path.realpath(local)
        if os.path.commonpath([a, m]) in (a, m):
            where = "the archive itself" if m == a else "inside the archive" \
                if os.path.commonpath([a, m]) == a else "a folder the archive is in"
            return f"is {where} ({archive}); the mirror must be another place"
    return None


def _leftovers(files: list, held: list) -> list:
    """Files of an interrupted compaction: a compacted file no batch is in while files it
    replaced are still there (written, then the collector stopped: they hold its
    batches), and a file a compacted file that batches are in replaced (the batches
    moved, then it stopped before the deletion). A compacted file no batch is in whose
    files are all gone holds batches retention deleted from the database (the files kept
    on disk for the mirror, ``--mirror``): not a leftover; retention deletes it."""
    held_names = {p.name for p in held}
    unheld = [p for p in files if p.name not in held_names]
    if not unheld:
        return []
    replaced = {name for p in held if p.name.startswith("compact-")
                for name in compacted_names(p)}
    present = {p.name for p in files}
    return [p for p in unheld if p.name in replaced or (
        p.name.startswith("compact-") and not present.isdisjoint(compacted_names(p)))]


def _midnight(day: dt.date) -> float:
    """The start of ``day`` (UTC), in seconds since the epoch."""
    return dt.datetime.combine(day, dt.time(), dt.UTC).timestamp()


def _first_day_kept(today: dt.date, retain_days: int | None) -> dt.date | None:
    """The first day (UTC) ``--retain-days`` keeps on ``today``; None: every day."""
    return None if retain_days is None else today - dt.timedelta(days=retain_days)


def _utc_day(when: float) -> dt.date:
    """The day (UTC) of ``when``, in seconds since the epoch."""
    return dt.datetime.fromtimestamp(when, dt.UTC).date()


def _backup(store: Store, target: str) -> int:
    """``--backup``: the copy's size and batches, or one line naming what is wrong: exit 2
    for a FILE refused before the copy (or a damaged database), 1 for a copy that failed
    while it was written (a full disk)."""
    try:
        check_backup_target(Path(target))
    except OSError as exc:
        print(f"acep serve: --backup: {exc}", file=sys.stderr)
        return 2
    try:
        print(json.dumps(store.backup(target)))
        return 0
    except BackupError as exc:  # the --db file is damaged: a file the command line names
        print(f"acep serve: --backup: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # the system's name the temporary file: name the target
        why = f"{target}: {exc.strerror}" if exc.errno else str(exc)
    except sqlite3.DatabaseError as exc:
        if damaged(exc):
            raise
        why = f"{target}: {exc}"
    print(f"acep serve: --backup: {why}", file=sys.stderr)
    return 1


def _check_archive(store: Store, archive: str | None) -> int:
    """``--check-archive``: the disagreements of the database and the archive, one JSON
    line each, then the summary; 0 when there are none, 1 when there are."""
    if not archive:
        print("acep serve: --check-archive needs --archive DIR", file=sys.stderr)
        return 2
    if not os.path.isdir(archive):
        print(f"acep serve: --archive {archive}: no such directory", file=sys.stderr)
        return 2
    from .consistency import compare

    for line in compare(store, archive):
        print(json.dumps(line), flush=True)
    return 0 if line["ok"] else 1


def _missing_archive(store: Store, archive: str) -> str | None:
    """Why the collector must not make ``archive``: it is missing while the database names
    files in it (a disk not mounted, a path mistyped or moved); None otherwise."""
    if os.path.exists(archive):
        return None
    files = store.archive_file_count()
    if not files:
        return None
    return (f"no such directory, but the database names {files} archive "
            f"file{'s' if files != 1 else ''} in it (a disk not mounted? moved?); make it by "
            "hand if the archive is lost (and serve with --accept-missing-archive), then "
            "--check-archive says what is missing")


def read_metrics_token(path: str) -> bytes:
    """The token of ``--metrics-token-file``: the file's text without surrounding
    whitespace, one word of printable ASCII (what a header carries). An ``OSError`` naming
    the file and the problem."""
    from history.sketch import read_key

    token = read_key(path, "metrics token")
    bad = next(((i, b) for i, b in enumerate(token) if not 0x21 <= b <= 0x7E), None)
    if bad is not None:
        i, byte = bad
        what = {0x20: "a space", 0x09: "a tab", 0x0A: "a line break",
                0x0D: "a line break"}.get(byte, f"the byte 0x{byte:02x}")
        raise OSError(f"{path}: the metrics token file holds {what} at character {i + 1}: "
                      "a bearer token is one word of printable ASCII (python -c 'import "
                      "secrets; print(secrets.token_urlsafe(32))' makes one)")
    return token


def _archive_behind(store: Store, args: argparse.Namespace) -> str | None:
    """Why the collector must not serve ``--archive``: it lacks files of the batches stored
    last (an empty mount point, a wrong path, an old copy), which ``--accept-missing-archive``
    lets it start without (said on stderr); None when they are there."""
    first = _first_day_kept(_utc_day(time.time()), args.retain_days)
    from .consistency import newest_missing

    gone, looked = newest_missing(store, args.archive,
                                  None if first is None else _midnight(first))
    if not gone:
        return None
    why = (f"{gone[0]} is missing ({len(gone)} of the {looked} files of the batches stored "
           f"last are: a disk not mounted? a wrong path? an older copy?); acep serve --db "
           f"{args.db} --archive {args.archive} --check-archive lists what the database names "
           "that is not there")
    if args.accept_missing_archive:
        print(f"acep serve: warning: --archive {args.archive}: {why}; serving without them "
              "(--accept-missing-archive)", file=sys.stderr)
        return None
    return f"{why}; --accept-missing-archive serves without them (lost)"


def _failed(tool: str, exc: sqlite3.Error | OSError, db: str) -> int:
    """One line for an admin command whose work failed after its checks (a full disk, a
    file system mounted read-only, a lock held too long), exit 1 (README, Exit codes)."""
    if isinstance(exc, sqlite3.Error):
        why = f"{db}: {exc}"
    else:
        why = f"{exc.filename}: {exc.strerror}" if exc.filename and exc.strerror else str(exc)
    print(f"acep serve: --{tool.replace('_', '-')}: {why}", file=sys.stderr)
    return 1


def _unknown(device_id: str, db: str) -> int:
    """An id that names no device: a bad option value, exit 2 (README, Exit codes)."""
    print(f"acep serve: no device {device_id!r} is registered in {db}", file=sys.stderr)
    return 2


def _maintain(store: Store, args: argparse.Namespace) -> int:
    """``--add-device``, ``--add-admin``, ``--rotate-token``, ``--revoke-device``,
    ``--list-devices``, ``--prune-before``, ``--backup``, ``--check-archive``."""
    if args.prune_before is not None:
        return _prune(store, args)
    if args.backup is not None:
        return _backup(store, args.backup)
    if args.check_archive:
        return _check_archive(store, args.archive)
    if args.list_devices:
        for device in store.devices():
            print(json.dumps(device))
        return 0
    if args.rotate_token is not None:
        token = store.rotate_token(args.rotate_token)
        if token is None:
            return _unknown(args.rotate_token, args.db)
        print(token)
        return 0
    if args.revoke_device is not None:
        if not store.revoke_device(args.revoke_device):
            return _unknown(args.revoke_device, args.db)
        print(f"revoked {args.revoke_device}: its token is refused from now on")
        return 0
    name = args.add_device if args.add_device is not None else args.add_admin
    print(store.add_device(name, "device" if args.add_device is not None else "admin"))
    return 0


@dataclass
class _Serving:
    """What serving needs from the options beside the database and the archive."""

    key: bytes | None
    metrics_token: bytes | None
    tls: ssl.SSLContext | None


class _Refused(Exception):
    """An option serving cannot use; the message names it."""


def _serving_options(args: argparse.Namespace) -> _Serving:
    """The options of a serving collector that need neither the database nor the archive,
    checked before either is opened, so that a refusal leaves no new database behind;
    :class:`_Refused` naming the option otherwise."""
    if not args.archive:
        raise _Refused("--archive DIR is needed to serve")
    if args.max_body < 1:
        raise _Refused("--max-body must be positive")
    for flag, value in (("--body-idle-timeout", args.body_idle_timeout),
                        ("--idle-timeout", args.idle_timeout),
                        ("--auth-window", args.auth_window)):
        if value <= 0:
            raise _Refused(f"{flag} must be above 0")
    for flag, value, least in (("--recheck-workers", args.recheck_workers, 0),
                               ("--min-free", args.min_free, 0),
                               ("--device-uploads", args.device_uploads, 1),
                               ("--auth-failures", args.auth_failures, 0),
                               ("--retain-days", args.retain_days, 1)):
        if value is not None and value < least:
            raise _Refused(f"{flag} must be {least} or more")
    if args.retain_days is not None and args.retain_days > MAX_RETAIN_DAYS:
        raise _Refused(f"--retain-days must be at most {MAX_RETAIN_DAYS} (100 years)")
    if args.mirror is not None and (why := _bad_mirror(args.mirror, args.archive)):
        raise _Refused(f"--mirror {storage.redact(args.mirror)}: {why}")
    key = metrics_token = None
    if args.sketch_key_file:
        from history.sketch import read_key

        try:
            key = read_key(args.sketch_key_file, "sketch key")
        except OSError as exc:
            raise _Refused(f"--sketch-key-file {exc}") from None
    if args.metrics_token_file:
        try:
            metrics_token = read_metrics_token(args.metrics_token_file)
        except OSError as exc:
            raise _Refused(f"--metrics-token-file {exc}") from None
    try:
        tls = server_tls(args.tls_cert, args.tls_key)
    except ValueError as exc:
        raise _Refused(str(exc)) from None
    return _Serving(key, metrics_token, tls)


def main(argv: list[str] | None = None) -> int:
    """``python -m edge.collector`` / ``acep serve``."""
    args = _parser().parse_args(argv)
    tool = next((name for name in _TOOLS if getattr(args, name) not in (None, False)), None)
    serving = None
    if tool is None:
        try:
            serving = _serving_options(args)
        except _Refused as exc:
            print(f"acep serve: {exc}", file=sys.stderr)
            return 2
    try:
        store = open_store(args.db, create=tool in (None, "add_device", "add_admin"))
    except ValueError as exc:
        print(f"acep serve: --db: {exc}", file=sys.stderr)
        return 2
    if tool is not None:
        try:
            return _maintain(store, args)
        except sqlite3.DatabaseError as exc:
            if not damaged(exc):
                return _failed(tool, exc, store.path)
            print(f"acep serve: --db: {store.path}: damaged ({exc}); {RESTORE}",
                  file=sys.stderr)
            return 2
        except OSError as exc:
            return _failed(tool, exc, store.path)
        finally:
            store.close()
    try:
        why = _missing_archive(store, args.archive) or _archive_behind(store, args) \
            or _unwritable(args.archive)
    except sqlite3.DatabaseError as exc:
        if not damaged(exc):
            raise
        print(f"acep serve: --db: {store.path}: damaged ({exc}); {RESTORE}", file=sys.stderr)
        return 2
    if why:
        print(f"acep serve: --archive {args.archive}: {why}", file=sys.stderr)
        return 2
    key, metrics_token, tls = serving.key, serving.metrics_token, serving.tls
    if tls is None and args.host not in LOOPBACK:
        print(f"acep serve: warning: plain HTTP on {args.host}: device tokens travel in "
              "clear; give --tls-cert and --tls-key, or put a TLS proxy in front",
              file=sys.stderr)
    logging.basicConfig(level=args.log_level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    collector = Collector(store, Archive(args.archive), max_body=args.max_body,
                          sketch_key=key, recheck_workers=args.recheck_workers,
                          min_free=args.min_free << 20, retain_days=args.retain_days,
                          compact=args.compact, max_wait=args.max_wait,
                          device_uploads=args.device_uploads, mirror=args.mirror,
                          max_ahead=args.max_clock_ahead, body_idle=args.body_idle_timeout,
                          body_min_rate=args.body_min_rate, metrics_token=metrics_token,
                          auth_failures=args.auth_failures, auth_window=args.auth_window)
    log.info("database %s, archive %s, %d re-check workers, uploads refused below %d MiB "
             "free%s, %d at a time per device, bodies refused after %g s without a byte%s, "
             "%s, %s",
             store.path, collector.archive.root, args.recheck_workers, args.min_free,
             f" or when they would wait over {args.max_wait:g} s" if args.max_wait else "",
             args.device_uploads, args.body_idle_timeout,
             f" or below {args.body_min_rate:g} bytes/s" if args.body_min_rate else "",
             f"keeping {args.retain_days} days" if args.retain_days
             else "keeping everything (no --retain-days)",
             "compacting closed days" if args.compact else "no compaction")
    if args.mirror:
        log.info("mirroring the archive to %s", storage.redact(args.mirror))
    if metrics_token is not None:
        log.info("GET /metrics needs the token of %s", args.metrics_token_file)
    if args.auth_failures:
        log.info("an address (IPv6: a /64) that sends %d wrong or missing tokens within "
                 "%g s has no token checked for %g s (429)", args.auth_failures, args.auth_window,
                 args.auth_window)
    try:
        asyncio.run(serve(collector, args.host, args.port,
                          ready=lambda line: print(line, flush=True), tls=tls,
                          access_log=args.access_log, idle_timeout=args.idle_timeout))
    except ListenError as exc:
        print(f"acep serve: {exc}", file=sys.stderr)
        return 2
    finally:
        collector.close()
    print(json.dumps({"stopped": True, **{k: v for k, v in collector.metrics.items()}}),
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
