"""The collector's upkeep while it serves: ``--retain-days`` deletes old batches and
archive days, ``--compact`` merges small archive files (the mirror follows both).
:class:`Maintenance` is a part of :class:`~edge.collector.service.Collector`.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
import time
from collections import Counter

from .archive import compacted_names
from .clock import first_day_kept, midnight, utc_day
from .store import damaged

MAINTAIN_EVERY = 3600.0  # seconds between --retain-days and --compact passes

log = logging.getLogger("acep.collector")


class Maintenance:
    """The collector's retention and compaction passes."""

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
        day = first_day_kept(today or utc_day(time.time()), self.retain_days)
        gone = {"batches": 0, "matches": 0, "summaries": 0}
        if self.mirror is not None:  # while the database still says which files are live
            for folder in await asyncio.to_thread(self.archive.device_folders, day.isoformat()):
                done = await self._compact_folder(folder, merge=False)
                self.metrics["compaction_leftovers"] += done["leftovers"]
        while some := await self.run(self.store.prune_chunk, midnight(day)):
            for table, n in some.items():
                gone[table] += n
        gone["archive_files"] = await self.run(self._prune_archive, day.isoformat())
        gone["finds"] = await self.run(self.store.prune_finds, day.isoformat())
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
        today = today or utc_day(time.time())
        before = today.isoformat()
        # not the days retention deletes (a day the mirror holds back included)
        first = first_day_kept(today, self.retain_days)
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
