"""Does the database agree with the archive? (``acep serve --db DB --archive DIR
--check-archive``, read-only.)

They disagree after a restore. Each disagreement is one JSON line: an archive file no
stored batch is in, or a file the database names that is missing. A collector may serve
meanwhile: what differs is looked at twice. The procedure and the output are in
docs/WIRE.md, "Collector (as built)", Restore.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

from .archive import compacted_names
from .store import Store

__all__ = ["compare", "newest_missing"]

UNNAMED = "no batch of the database is in it"
SETTLE = 1.0  # seconds before what differs is looked at again (a batch in flight commits)
NEWEST = 3  # archive files of the batches stored last that the collector's start looks at


def compare(store: Store, root: str | Path) -> Iterator[dict]:
    """One dict per disagreement between ``store`` and the archive under ``root``, then a
    summary (``ok``: none)."""
    root = Path(root)
    present = _listing(root)
    named = store.archive_names()
    unnamed = sorted(set(present) - set(named))
    missing = sorted(set(named) - set(present))
    if unnamed or missing:  # the second look, once a batch in flight has been committed
        time.sleep(SETTLE)
        unnamed = [rel for rel in unnamed if rel not in store.archive_names(unnamed)]
        missing = [rel for rel in missing if not (root / rel).exists()]
    found = [doc for doc in (_unnamed(store, root, rel) for rel in unnamed) if doc]
    yield from found
    holders = _holders(root, {rel.rpartition("/")[0] for rel in missing})
    for rel in missing:
        yield {"file": rel, "problem": "missing", "batches": named[rel],
               "rows_in": holders.get(rel)}
    lost = sum(len(doc.get("batches_not_in_database", ())) for doc in found)
    yield {"ok": not found and not missing, "files": len(present), "files_named": len(named),
           "not_named": len(found), "missing": len(missing), "batches_not_in_database": lost}


def newest_missing(store: Store, root: str | Path, since: float | None = None
                   ) -> tuple[list[str], int]:
    """The files of the ``NEWEST`` batches stored last (of those created from ``since`` on:
    retention deletes the others) that are not under ``root``, nor named by a compacted
    file beside them (a database restored from a backup names files merged since), and how
    many files were looked at. A look the database's size does not change: a collector's
    start, which must not begin a new archive on an empty mount point."""
    root = Path(root)
    newest = [name for name, created in store.newest_archive_files(NEWEST)
              if since is None or created >= since]
    gone = [name for name in newest if not (root / name).exists()]
    held = _holders(root, {name.rpartition("/")[0] for name in gone}) if gone else {}
    return [name for name in gone if name not in held], len(newest)


def _listing(root: Path) -> list[str]:
    """The archive's files (paths under ``root``), not the hidden ones being written."""
    return [p.relative_to(root).as_posix() for p in root.glob("date=*/device=*/*.parquet")
            if not p.name.startswith(".")]


def _unnamed(store: Store, root: Path, rel: str) -> dict | None:
    """What a file no stored batch is in holds: the batch ids the database lacks. None
    when a batch is in it by now (stored meanwhile)."""
    import pyarrow.parquet as pq

    try:
        ids = pq.read_table(root / rel, columns=["batch_id"]).column("batch_id").unique()
    except FileNotFoundError:  # compacted or pruned meanwhile
        return None
    except Exception as exc:  # noqa: BLE001 - any unreadable file is named with its reason
        return {"file": rel, "problem": f"{UNNAMED}; not readable as an archive file "
                                        f"({type(exc).__name__}: {exc})"}
    ids = sorted(str(i) for i in ids.to_pylist())
    known = store.known_batches(ids)
    if store.archive_names([rel]):
        return None
    return {"file": rel, "problem": UNNAMED, "batches": len(ids),
            "batches_not_in_database": [i for i in ids if i not in known]}


def _holders(root: Path, folders: set[str]) -> dict[str, str]:
    """{path: the compacted file that lists it} in ``folders``."""
    out = {}
    for folder in sorted(folders):
        for path in sorted((root / folder).glob("compact-*.parquet")):
            try:
                names = compacted_names(path)
            except Exception:  # noqa: BLE001 - unreadable: it holds nothing we can name
                continue
            rel = path.relative_to(root).as_posix()
            out.update({f"{folder}/{name}": rel for name in names})
    return out
