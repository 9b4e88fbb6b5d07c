"""The Parquet archive of uploaded windows: the trainer's input.

One file per batch, ``ROOT/date=YYYY-MM-DD/device=ID/part-<seq>.parquet``, holding the
events of the batch's match windows; a redelivered batch maps to the same path. A file is
written under a temporary ``.``-name, fsynced and renamed into place
(``acep.storage.durably``). :meth:`Archive.compact` merges a closed day's small files. The
layout and compaction are in docs/WIRE.md, "Collector (as built)", Archive and Compaction.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

from acep import storage
from acep.events import partition_key

from ..wire import ARCHIVE_RESERVED

__all__ = ["Archive", "ArchiveMissing", "archive_path", "encode", "COMPACT_ROWS", "COMPACTED"]

COMPACT_ROWS = 1 << 20  # rows of a compacted file at most (about 4 Spark read tasks)
ROW_GROUP_ROWS = 1 << 16  # rows per row group of a compacted file
COMPACTED = b"acep.compacted"  # metadata key: the names of the files a compacted one replaced


def archive_path(root: str | Path, batch) -> Path:
    """Where ``batch`` (an ``UploadBatch``) is archived under ``root``."""
    day = dt.datetime.fromtimestamp(batch.created_at, dt.UTC).strftime("%Y-%m-%d")
    return Path(root) / f"date={day}" / f"device={batch.device}" / f"part-{batch.seq:020d}.parquet"


class ArchiveMissing(FileNotFoundError):
    """The archive's root directory is not there (moved, deleted, its disk unmounted)."""


class Archive:
    """Appends upload batches' window events to a partitioned Parquet archive."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        # a collector killed mid-write leaves its temporary file: a batch's (it was not
        # stored, so the device sends it again and it is written anew) or a compaction's
        for stale in self.root.glob("date=*/device=*/.*.tmp"):
            try:
                stale.unlink()
            except OSError:
                pass

    def write(self, batch) -> Path:
        """Write (or rewrite, identically) the archive file of ``batch``; its path."""
        return self.put(archive_path(self.root, batch).relative_to(self.root), encode(batch))

    def put(self, relative: str | Path, data: bytes) -> Path:
        """Write the bytes of an archive file (:func:`encode`) at ``relative`` under the
        root: a temporary name, fsync, rename, fsync of the directory. A root that is gone
        is :class:`ArchiveMissing`, never made again: it may be a disk not mounted."""
        path = self.root / relative
        why = self.missing()
        if why is not None:
            raise ArchiveMissing(why)
        folder = self.root
        for part in Path(relative).parent.parts:
            folder = folder / part
            folder.mkdir(exist_ok=True)
        storage.write_durably(path, data)
        return path

    def missing(self) -> str | None:
        """Why the root cannot be written to when it is not a directory any more; else
        None."""
        if self.root.is_dir():
            return None
        return (f"the archive directory {self.root} is missing (moved, deleted or its disk "
                "not mounted); put it back")


    def device_folders(self, before: str, since: str = "") -> list[Path]:
        """The ``date=D/device=X`` folders of the days from ``since`` to before ``before``
        (ISO days)."""
        return sorted(f for f in self.root.glob("date=*/device=*")
                      if f.is_dir() and since <= f.parent.name[len("date="):] < before)

    def compact(self, files: list[Path]) -> list[tuple[Path, list[Path]]]:
        """Merge the small ones among ``files`` (live files of one device folder, below
        ``COMPACT_ROWS // 2`` rows) into compacted files: per pattern definition and
        schema, in name order, each of at most ``COMPACT_ROWS`` rows. Writes them (fsynced,
        renamed into place) and deletes nothing; ``[(new file, the files it holds)]``. A
        run of one file is left as it is."""
        import pyarrow.parquet as pq

        groups: dict[tuple, list] = defaultdict(list)
        for path in sorted(files):
            with pq.ParquetFile(path) as parquet:
                rows, schema = parquet.metadata.num_rows, parquet.schema_arrow
            if rows >= COMPACT_ROWS // 2:
                continue
            kept = {k: v for k, v in (schema.metadata or {}).items() if k != COMPACTED}
            key = (tuple(sorted(kept.items())), schema.remove_metadata().to_string())
            groups[key].append((path, rows, schema.with_metadata(kept)))
        done = []
        for members in groups.values():
            for run in _runs(members):
                paths = [p for p, _, _ in run]
                if len(paths) > 1:
                    done.append((self._merge(paths, run[0][2]), paths))
        return done

    def _merge(self, paths: list[Path], schema) -> Path:
        """One compacted file of ``paths`` (same schema), beside them."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        folder = paths[0].parent
        path = folder / f"compact-{time.time_ns()}.parquet"
        while path.exists():
            path = folder / f"compact-{time.time_ns()}.parquet"
        replaced = [name for p in paths for name in [p.name, *(
            compacted_names(p) if p.name.startswith("compact-") else [])]]
        schema = schema.with_metadata({**(schema.metadata or {}),
                                       COMPACTED: json.dumps(replaced)})
        with storage.durably(path) as tmp, pq.ParquetWriter(tmp, schema) as writer:
            pending, rows = [], 0
            for p in paths:
                pending.append(pq.read_table(p))
                rows += pending[-1].num_rows
                if rows >= ROW_GROUP_ROWS or p is paths[-1]:
                    table = pa.concat_tables(pending).unify_dictionaries()
                    writer.write_table(table, row_group_size=ROW_GROUP_ROWS)
                    pending, rows = [], 0
        return path

    def prune(self, day: str, keep: frozenset[str] | set[str] = frozenset()) -> int:
        """Delete the days before ``day`` (``YYYY-MM-DD``, UTC: the batches created before
        it, as :meth:`Store.prune` does) but those in ``keep``; how many files were
        removed."""
        removed = 0
        for folder in sorted(self.root.glob("date=*")):
            if folder.is_dir() and folder.name[len("date="):] < day and \
                    folder.name[len("date="):] not in keep:
                removed += sum(1 for f in folder.rglob("*") if f.is_file())
                try:
                    shutil.rmtree(folder)
                except OSError as exc:  # its filename is relative to a folder inside
                    raise OSError(exc.errno, exc.strerror, str(folder)) from None
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
        if name in ARCHIVE_RESERVED:
            name = f"attr_{name}"
        if name in arrays:  # edge.wire refuses such a batch: never overwrite a column
            raise ValueError(f"attribute {name!r} collides with an archive column")
        if col.dtype == object:  # text, or mixed: one type per Parquet column
            arrays[name] = pa.array([v if v is None or type(v) is str else _text(v)
                                     for v in col.tolist()], type=pa.string())
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


def _text(number) -> str | None:
    """A number of a mixed column as ``acep match`` prints it (7.0 as "7", big integers
    exact), as the trainer reads a mixed column of any input; None for NaN."""
    key = partition_key(number)
    return None if key is None else str(key)


def warm_up() -> None:
    """Write a one-row Parquet table in memory. pyarrow's first write costs about a
    quarter of a second (it sets up its writers and codecs); a collector worker pays it at
    start rather than on its first upload."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"tag": pa.array([0.0]), "type": pa.array(["a"])}),
                   pa.BufferOutputStream())


def _runs(members: list[tuple]) -> list[list[tuple]]:
    """``(path, rows, schema)`` in order, cut into runs of at most ``COMPACT_ROWS`` rows."""
    runs, rows = [[]], 0
    for m in members:
        if runs[-1] and rows + m[1] > COMPACT_ROWS:
            runs.append([])
            rows = 0
        runs[-1].append(m)
        rows += m[1]
    return runs


def compacted_names(path) -> list[str]:
    """The names of the files a compacted file replaced, and of those they replaced in
    turn (none for a batch's file); ``path`` as pyarrow's readers take it."""
    import pyarrow.parquet as pq

    raw = (pq.read_schema(path).metadata or {}).get(COMPACTED)
    return json.loads(raw) if raw else []
