"""The agent's outbox writes: one thread, in order, waiting out a full disk.

Each transaction holds a chunk's batch with the progress after it, so a kill leaves a
consistent outbox; the agent matches the next chunk while one is committed (its fsync).
A transaction refused for want of space (a full SD card: :func:`edge.agent.outbox.out_of_space`)
is tried again every ``retry`` seconds until it commits; the agent waits behind it and
takes no input meanwhile, so nothing is lost. A stop gives it up, and every transaction
after it, so the saved progress never passes an uncommitted chunk.
"""

from __future__ import annotations

import itertools
import logging
import sqlite3
import threading
from concurrent.futures import Future, ThreadPoolExecutor

from .outbox import out_of_space

__all__ = ["Commits"]

log = logging.getLogger("edge.agent")


class _GivenUp(Exception):
    """A transaction given up on: the disk was full when the agent stopped."""


class Commits:
    """Outbox transactions run one after the other in a thread of their own."""

    def __init__(self, stop: threading.Event, retry: float = 5.0):
        self.stop, self.retry = stop, float(retry)
        self.disk_full = False  # a transaction waits for room now
        self._given_up = False
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="agent-outbox")
        self._pending: Future | None = None

    def submit(self, fn, *args) -> None:
        """Run ``fn(*args)`` once the transaction before it is committed."""
        self.wait()
        self._pending = self._thread.submit(self._until_done, fn, *args)

    def wait(self) -> None:
        """Until the last transaction is committed (its error is raised here; one given up
        at a stop is not an error: it was never committed)."""
        pending, self._pending = self._pending, None
        if pending is not None:
            try:
                pending.result()
            except _GivenUp:
                pass

    def close(self) -> None:
        self.wait()
        self._thread.shutdown(wait=True)

    def _until_done(self, fn, *args) -> None:
        for attempt in itertools.count():
            if self._given_up:
                raise _GivenUp
            try:
                fn(*args)
            except (OSError, sqlite3.Error) as exc:
                if not out_of_space(exc):
                    raise
                self._wait_for_room(exc, attempt)
                continue
            if attempt:
                log.warning("the outbox is written again (after %d attempts)", attempt + 1)
            self.disk_full = False
            return

    def _wait_for_room(self, exc: Exception, attempt: int) -> None:
        if attempt == 0:
            log.error("the outbox's disk is full (%s): the agent holds its input (nothing "
                      "is lost) and tries the write again every %gs until there is room",
                      exc, self.retry)
        self.disk_full = True
        if self.stop.wait(self.retry):
            self._given_up = True
            log.warning("stopped while the outbox's disk is full: the last chunk is not "
                        "committed, and the next start reads it again")
            raise _GivenUp from None
