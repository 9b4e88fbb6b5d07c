"""The Parquet archive of uploaded windows: the trainer's input.

Layout: ``ROOT/date=YYYY-MM-DD/device=ID/part-<seq>.parquet``, one file per batch, holding
the events of the batch's match windows (``position``, ``tag``, ``type`` and the attribute
columns) with ``batch_id`` and ``pattern_id``. The date is the UTC day of the batch's
``created_at``, so a redelivered batch maps to the same path whatever day it arrives
(idempotent: the file is rewritten with the same content, never added twice).

A file is written to a temporary name in its directory, fsynced and renamed into place, so
a killed collector leaves either no file or a whole one; readers skip ``*.tmp`` names
(pyarrow's dataset discovery ignores files starting with ``.``, and the temporary file
starts with one).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import threading
from pathlib import Path

import numpy as np

__all__ = ["Archive", "archive_path", "encode"]


def archive_path(root: str | Path, batch) -> Path:
    """Where ``batch`` (an ``UploadBatch``) is archived under ``root``."""
    day = dt.datetime.fromtimestamp(batch.created_at, dt.timezone.utc).strftime("%Y-%m-%d")
    return Path(root) / f"date={day}" / f"device={batch.device}" / f"part-{batch.seq:020d}.parquet"


class Archive:
    """Appends upload batches' window events to a partitioned Parquet archive."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        # a collector killed mid-write leaves its temporary file; the batch was not
        # stored, so the device sends it again and it is written anew
        for stale in self.root.glob("date=*/device=*/.part-*.tmp"):
            try:
                stale.unlink()
            except OSError:
                pass

    def write(self, batch) -> Path:
        """Write (or rewrite, identically) the archive file of ``batch``; its path."""
        return self.put(archive_path(self.root, batch).relative_to(self.root), encode(batch))

    def put(self, relative: str | Path, data: bytes) -> Path:
        """Write the bytes of an archive file (:func:`encode`) at ``relative`` under the
        root: a temporary name, fsync, rename, fsync of the directory."""
        path = self.root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        finally:
            if tmp.exists():
                tmp.unlink()
        _fsync_dir(path.parent)
        return path


    def prune(self, day: str) -> int:
        """Delete the days before ``day`` (``YYYY-MM-DD``, UTC: the batches created before
        it, as :meth:`Store.prune` does); how many files were removed."""
        removed = 0
        for folder in sorted(self.root.glob("date=*")):
            if folder.is_dir() and folder.name[len("date="):] < day:
                removed += sum(1 for f in folder.rglob("*") if f.is_file())
                shutil.rmtree(folder)
        return removed


def encode(batch) -> bytes:
    """The Parquet bytes of ``batch``'s archive file (no file is touched: the collector's
    worker processes encode, its database thread writes)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    n = len(batch.event_position)
    types = pa.DictionaryArray.from_arrays(
        pa.array(np.asarray(batch.event_type, dtype=np.int32)),
        pa.array(list(batch.type_names), type=pa.string()))
    arrays = {
        "batch_id": pa.array([batch.batch_id] * n, type=pa.string()),
        "pattern_id": pa.array([batch.pattern.id] * n, type=pa.string()),
        "position": pa.array(np.asarray(batch.event_position, dtype=np.int64)),
        "tag": pa.array(np.asarray(batch.event_tag, dtype=np.float64)),
        "type": types,
    }
    for name, col in batch.columns.items():
        if name in arrays:
            name = f"attr_{name}"
        if col.dtype == object:
            arrays[name] = pa.array(col.tolist(), type=pa.string())
        else:
            arrays[name] = pa.array(np.asarray(col, dtype=np.float64))
    meta = {"acep.pattern": json.dumps({
        "id": batch.pattern.id, "text": batch.pattern.text, "window": batch.pattern.window,
        "k": batch.pattern.k, "where": list(batch.pattern.where),
        "partition_by": batch.pattern.partition_by, "hash": batch.pattern.hash}),
        "acep.tag_is_time": json.dumps(bool(batch.tag_is_time))}
    sink = pa.BufferOutputStream()
    pq.write_table(pa.table(arrays).replace_schema_metadata(meta), sink)
    return sink.getvalue().to_pybytes()


def warm_up() -> None:
    """Write a one-row Parquet table in memory. pyarrow's first write costs about a
    quarter of a second (it sets up its writers and codecs); a collector worker pays it at
    start rather than on its first upload."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"tag": pa.array([0.0]), "type": pa.array(["a"])}),
                   pa.BufferOutputStream())


def _fsync_dir(path: Path) -> None:
    """Make the rename durable (POSIX); a no-op where directories cannot be opened."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
