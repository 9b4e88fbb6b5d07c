"""The agent's outbox writes: one thread, in order, in groups, waiting out a full disk.

Each chunk's writes (its batches with the progress after them) are queued; the writer
thread commits everything queued since its last commit as one group, in one outbox
transaction, so a kill leaves a consistent outbox and one fsync serves every chunk of the
group. The agent matches the next chunks meanwhile, up to ``depth`` chunks ahead of the
disk; a slow disk (an SD card's fsync) then makes groups larger instead of holding the
agent at every chunk.

A group refused for want of space (a full SD card: :func:`edge.agent.outbox.out_of_space`)
is tried again every ``retry`` seconds until it commits; the agent waits behind it once
``depth`` chunks are queued, and takes no input meanwhile, so nothing is lost. A stop gives
it up, and every group after it, so the saved progress never passes an uncommitted chunk.
"""

from __future__ import annotations

import itertools
import logging
import sqlite3
import threading
from collections.abc import Callable

from .outbox import out_of_space

__all__ = ["Commits", "DEPTH"]

log = logging.getLogger("edge.agent")

DEPTH = 8  # chunks queued at most before the agent waits for the disk


class _GivenUp(Exception):
    """A group given up on: the disk was full when the agent stopped."""


class Commits:
    """Queued writes, committed in groups by a thread of their own.

    ``write(items)`` commits a group: the items queued by :meth:`submit`, in order, all or
    none (it raises when none is written)."""

    def __init__(self, stop: threading.Event, write: Callable[[list], None],
                 retry: float = 5.0, depth: int = DEPTH):
        self.stop, self.write, self.retry, self.depth = stop, write, float(retry), depth
        self.disk_full = False  # a group waits for room now
        self._given_up = False
        self._cond = threading.Condition()
        self._queue: list = []
        self._busy = False
        self._error: BaseException | None = None
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name="agent-outbox", daemon=True)
        self._thread.start()

    def submit(self, *item) -> None:
        """Queue ``item`` for the next group; wait first while ``depth`` items are queued.
        A group that failed since raises its error here (its items and the ones queued
        after them are dropped: they were never committed)."""
        with self._cond:
            if self._closed:
                raise RuntimeError("the outbox writer is closed")
            while len(self._queue) >= self.depth and self._error is None:
                self._cond.wait()
            self._raise()
            self._queue.append(item)
            self._cond.notify_all()

    def wait(self) -> None:
        """Until everything queued is committed (a failed group's error is raised here; one
        given up at a stop is not an error: it was never committed)."""
        with self._cond:
            while (self._queue or self._busy) and self._error is None:
                self._cond.wait()
            self._raise()

    def close(self) -> None:
        try:
            self.wait()
        finally:
            with self._cond:
                self._closed = True
                self._cond.notify_all()
            self._thread.join()

    def _raise(self) -> None:
        error, self._error = self._error, None
        if error is not None:
            raise error

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._cond.wait()
                if not self._queue:
                    return
                items, self._queue, self._busy = self._queue, [], True
                self._cond.notify_all()
            error = None
            try:
                self._until_done(items)
            except _GivenUp:
                pass
            except BaseException as exc:  # raised in the agent's thread, at its next call
                error = exc
            with self._cond:
                self._busy = False
                if error is not None:
                    self._error = error
                    self._queue.clear()
                self._cond.notify_all()

    def _until_done(self, items: list) -> None:
        for attempt in itertools.count():
            if self._given_up:
                raise _GivenUp
            try:
                self.write(items)
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
            log.warning("stopped while the outbox's disk is full: the last chunks are not "
                        "committed, and the next start reads them again")
            raise _GivenUp from None
