"""The collector: the aiohttp service devices upload their matches to.

:class:`Collector` holds the state; its methods come from one part per concern:
:mod:`~edge.collector.guards`, :mod:`~edge.collector.access`, :mod:`~edge.collector.bodies`,
:mod:`~edge.collector.maintenance`, :mod:`~edge.collector.ingest` and
:mod:`~edge.collector.handlers`. The API is docs/WIRE.md, "The collector's HTTP API"; the
commands and the order of work per batch are in "Collector (as built)".
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import multiprocessing
import os
import time
from collections import Counter, deque
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from ..logs import LogLimiter
from ..wire import Limits
from .access import Access
from .admission import DEFAULT_MAX_WAIT, DEFAULT_PER_DEVICE, Admission
from .archive import Archive
from .bodies import DEFAULT_BODY_IDLE, DEFAULT_BODY_MIN_RATE, Bodies
from .clock import DEFAULT_MAX_AHEAD, ClockBounds
from .guards import DEFAULT_MIN_FREE, Guards
from .handlers import Handlers
from .ingest import Ingest, prepare_rows, warm_worker
from .maintenance import Maintenance
from .mirror import Mirror
from .store import Prepared, Store
from .throttle import DEFAULT_FAILURES, DEFAULT_WINDOW, MAX_ADDRESSES, AuthThrottle

__all__ = ["Collector", "DEFAULT_MAX_BODY"]

log = logging.getLogger("acep.collector")

DEFAULT_MAX_BODY = 16 << 20
MAX_GROUP = 64  # batches committed in one transaction at most


class Collector(Guards, Access, Bodies, Maintenance, Ingest, Handlers):
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
                initializer=warm_worker, initargs=(os.getpid(),))
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
