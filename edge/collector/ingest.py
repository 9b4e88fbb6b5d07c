"""How the collector stores a batch: decoded, re-checked (in a worker process or the
database thread), its archive file written, then its rows committed with a group's.
:class:`Ingest` is a part of :class:`~edge.collector.service.Collector`.
"""

from __future__ import annotations

import gc
import hashlib
import time

from ..wire import Limits, UploadBatch, WireError, decode
from .archive import archive_path
from .archive import encode as encode_archive
from .clock import ClockBounds
from .recheck import recheck_batch
from .store import Prepared, prepare


class Ingest:
    """The collector's database-thread work: storing batches, finding duplicates."""

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
                 clock: ClockBounds = ClockBounds()  # noqa: B008 - frozen, immutable
                 ) -> Prepared | tuple[int, dict]:
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


def warm_worker(parent: int) -> None:
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
