"""The collector's answers when it cannot store: a full disk, a missing directory, a
damaged database, a failure inside. :class:`Guards` is a part of
:class:`~edge.collector.service.Collector`.
"""

from __future__ import annotations

import errno
import logging
import secrets
import shutil
import sqlite3

from aiohttp import web

from .archive import ArchiveMissing
from .store import RESTORE, damaged

DEFAULT_MIN_FREE = 64 << 20  # bytes: below it uploads are refused (507) before SQLite fills up
RETRY_AFTER = 60  # seconds, sent with 507: the agents hold their uploads that long

log = logging.getLogger("acep.collector")


def json_error(status: int, message: str) -> web.Response:
    """The JSON answer ``{"error": message, "status": status}`` with that status."""
    return web.json_response({"error": message, "status": status}, status=status)


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


class Guards:
    """The collector's disk and database guards, and its answer to a request that failed
    inside."""

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
        response = json_error(503, f"{why}; nothing was stored: send it again later")
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
        return json_error(507, why)
