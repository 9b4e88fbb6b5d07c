"""A copy of the archive in object storage, kept up to date while the collector serves
(``acep serve --archive archive --mirror s3://bucket/archive``).

A cluster's executors read the copy (``acep train --archive s3a://bucket/archive``). The
collector's archive stays on its disk; :class:`Mirror` follows it file by file in a thread
of its own, so a slow or unreachable store never holds an upload. What is copied and
deleted when, and the retries, are in docs/WIRE.md, "Collector (as built)", Mirror.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import Counter
from pathlib import Path

from acep import storage

from ..logs import LogLimiter
from .archive import compacted_names

__all__ = ["Mirror", "MAX_BACKOFF"]

log = logging.getLogger("acep.collector.mirror")

MAX_BACKOFF = 60.0  # seconds between two tries of a step that keeps failing, at most


class Mirror:
    """Keeps ``uri`` (a URI or a path) a copy of the archive under ``root``.

    :meth:`put` and :meth:`delete` take paths relative to the root (``date=D/device=X/
    name``) and return at once; :meth:`start` runs the thread that makes them, after the
    comparison at start; :meth:`step` makes one (the thread's loop, or a test's)."""

    def __init__(self, root: str | Path, uri: str, metrics: Counter | None = None):
        self.root, self.uri = Path(root), uri
        self.shown = storage.redact(uri)  # in the log: no credentials of the URI
        self.metrics = metrics if metrics is not None else Counter()
        self.errors = LogLimiter(log, what="mirror failures")
        self._todo: dict[str, tuple[str, int, float]] = {}  # rel -> (op, number, since)
        self._numbers = itertools.count()
        self._cond = threading.Condition()
        self._compared = False
        self._stopping = False
        self._since = time.time()
        self._thread: threading.Thread | None = None

    # ----------------------------------------------------------------- the collector's side

    def put(self, rels: list[str]) -> None:
        """Copy these archive files (after those asked before)."""
        self._add("put", rels)

    def delete(self, rels: list[str]) -> None:
        """Delete these files from the mirror (after what was asked before)."""
        self._add("delete", rels)

    def _add(self, op: str, rels: list[str], *, keep: bool = False,
             first: bool = False) -> None:
        now = time.time()
        with self._cond:
            new = {}
            for rel in rels:
                if keep and rel in self._todo:
                    continue
                self._todo.pop(rel, None)  # the latest word on a file goes last
                new[rel] = (op, next(self._numbers), now)
            self._todo = {**new, **self._todo} if first else {**self._todo, **new}
            self._cond.notify_all()

    def gauges(self) -> dict[str, float]:
        with self._cond:
            since = [t for _, _, t in self._todo.values()]
            if not self._compared:
                since.append(self._since)
            return {"mirror_pending_files": len(self._todo),
                    "mirror_lag_seconds": time.time() - min(since) if since else 0.0}

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="collector-mirror",
                                        daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop after the step under way (at most ``timeout`` seconds); what is left is
        found again by the comparison at the next start."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)
        if not self._compared:
            log.warning("mirror %s: not compared with the archive yet; the next start "
                        "does it", self.shown)
        elif self._todo:
            log.warning("mirror %s: %d archive changes not made yet; the next start makes "
                        "them", self.shown, len(self._todo))

    def held_days(self) -> set[str] | None:
        """The archive's days (``YYYY-MM-DD``) with a change not made yet, which retention
        keeps until it is (a file to copy; a file to delete, whose day on the disk tells
        the next start to delete it if this one is lost); None before the first
        comparison (every day)."""
        with self._cond:
            if not self._compared:
                return None
            return {rel.split("/", 1)[0][len("date="):] for rel in self._todo}

    def idle(self) -> bool:
        """True when the mirror is up to date with every change asked for."""
        with self._cond:
            return self._compared and not self._todo

    # ----------------------------------------------------------------- the thread

    def _run(self) -> None:
        failures = 0
        while True:
            with self._cond:
                while self._compared and not self._todo and not self._stopping:
                    self._cond.wait()
                if self._stopping:
                    return
            if self.step():
                failures = 0
                continue
            failures += 1
            with self._cond:
                self._cond.wait_for(lambda: self._stopping,
                                    min(MAX_BACKOFF, 2.0 ** (failures - 1)))

    def step(self) -> bool:
        """Make the comparison (first) or the oldest change asked for; False when it
        failed (counted and logged; it is tried again)."""
        with self._cond:
            todo = None if not self._compared else next(iter(self._todo.items()), None)
        what = "comparing the archive with it" if todo is None else f"{todo[1][0]} {todo[0]}"
        try:
            if todo is None:
                self._compare()
            else:
                self._make(todo[0], todo[1][0])
        except Exception as exc:  # noqa: BLE001 - the thread must live: a bug is retried too
            self.metrics["mirror_failures"] += 1
            known = isinstance(exc, (OSError, ValueError))  # StorageError, ArrowInvalid
            self.errors.error("mirror %s: %s failed (tried again): %s", self.shown, what,
                              storage.redact_text(str(exc) if known
                                                  else f"{type(exc).__name__}: {exc}"),
                              exc_info=None if known else exc)
            return False
        with self._cond:
            if todo is None:
                self._compared = True
            elif self._todo.get(todo[0]) == todo[1]:  # not asked again meanwhile
                del self._todo[todo[0]]
        return True

    def _make(self, rel: str, op: str) -> None:
        local, dest = self.root / rel, storage.join(self.uri, rel)
        if op == "put":
            try:
                size = storage.put_file(local, dest)
            except FileNotFoundError:
                if local.exists():  # the mirror's side is missing (a bucket, say)
                    raise
                return  # compacted or pruned since: nothing to copy
            self.metrics["mirror_files_copied"] += 1
            self.metrics["mirror_bytes_copied"] += size
            return
        if rel.rpartition("/")[2].startswith("compact-"):
            self._forget_replaced(rel, dest)
        if storage.delete_file(dest):
            self.metrics["mirror_files_deleted"] += 1

    def _forget_replaced(self, rel: str, dest: str) -> None:
        """A compacted file about to be deleted from the mirror: the files it lists go too
        when a local compacted file replaced them (a copy left over when the collector
        stopped between a compaction's copy and its deletions, then compacted again); not
        those retention deleted from the disk, nor those still there."""
        folder = rel.rpartition("/")[0]
        replaced = {n for p in (self.root / folder).glob("compact-*.parquet")
                    for n in _replaced(p)}
        self._add("delete", [f"{folder}/{n}" for n in self._remote_names(dest) or ()
                             if n in replaced and not (self.root / folder / n).exists()],
                  keep=True)

    @staticmethod
    def _remote_names(dest: str) -> list[str] | None:
        """The names the mirror's compacted file ``dest`` lists; None when it is gone."""
        try:
            with storage.arrow_file(dest) as source:
                return compacted_names(source)
        except FileNotFoundError:  # not copied (it was replaced before its turn came)
            return None

    def _compare(self) -> None:
        """Queue what the mirror lacks (missing, or another size), then the deletions of
        the files it holds whose batches are all in local files (a local compacted file
        replaced it; or it is a compacted file of a compaction cut off, deleted here,
        every file it lists still here or replaced here) and of copies cut off."""
        remote = storage.sizes(self.uri)
        local = {p.relative_to(self.root).as_posix(): p
                 for p in self.root.glob("date=*/device=*/*.parquet")
                 if not p.name.startswith(".")}
        puts = sorted(rel for rel, p in local.items() if remote.get(rel) != _size(p))
        here: dict[str, set[str]] = {}  # folder -> the names whose batches are in local files
        for rel, path in local.items():
            folder, _, name = rel.rpartition("/")
            here.setdefault(folder, set()).update(
                [name, *(_replaced(path) if name.startswith("compact-") else ())])
        deletes = []
        for rel in sorted(set(remote) - set(local)):
            folder, _, name = rel.rpartition("/")
            if not _archive_shaped(rel):
                continue
            if name.startswith(".") or name in here.get(folder, ()):  # cut off; replaced
                deletes.append(rel)
            elif name.startswith("compact-") and folder in here and _within(
                    self._remote_names(storage.join(self.uri, rel)), here[folder]):
                deletes.append(rel)  # a compaction cut off: its batches are in files here
        # its copies before the changes asked since the start: a deletion asked then (a
        # leftover of a compaction cut off) may count on a copy only it knows is missing
        self._add("put", puts, keep=True, first=True)
        self._add("delete", deletes, keep=True)
        if puts or deletes:
            log.info("mirror %s: %d archive files to copy, %d to delete", self.shown,
                     len(puts), len(deletes))


def _within(names: list[str] | None, here: set[str]) -> bool:
    return bool(names) and here.issuperset(names)


def _archive_shaped(rel: str) -> bool:
    names = rel.split("/")
    return len(names) == 3 and names[0].startswith("date=") and names[1].startswith("device=")


def _size(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return None


def _replaced(path: Path) -> list[str]:
    try:
        return compacted_names(path)
    except FileNotFoundError:
        return []
