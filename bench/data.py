"""Datasets for the benchmarks: the flights stream (fetched on first use) and synthetic data.

The flights stream is ``flights-3m.parquet`` from the npm package ``vega-datasets@3.2.1``:
3,000,000 US flights sorted by departure. :func:`flights_path` finds it (an explicit path,
the ``ACEP_FLIGHTS`` environment variable, or a cache file) and otherwise downloads the
package with ``npm pack`` and keeps that one file in the cache.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import numpy as np

from acep.events import PRESETS, EventBatch, EventError, read_all
from acep.utils import one_line

__all__ = ["DataError", "flights_path", "check_flights", "fetch_flights", "read_flights",
           "read_flights_table", "synthetic_uniform", "prefix", "as_dicts"]

FLIGHTS_PACKAGE = "vega-datasets@3.2.1"
FLIGHTS_MEMBER = "package/data/flights-3m.parquet"
FLIGHTS_SHA256 = "dbeb920c90f59b6ccaff823dcc3d08f25a97fa1ce128d93f40be4e931f5900b0"
FLIGHTS_ENV = "ACEP_FLIGHTS"
FLIGHTS_COLUMNS = ("date", "delay", "distance", "origin", "destination")  # what they read


class DataError(RuntimeError):
    """A dataset is missing, unreadable or cannot be obtained; the message names the file and
    says what to do."""


# --------------------------------------------------------------------------- flights


def default_cache() -> Path:
    """``$XDG_CACHE_HOME/acep/flights-3m.parquet`` (``~/.cache/acep/...`` by default)."""
    root = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(root) / "acep" / "flights-3m.parquet"


def flights_path(path: str | os.PathLike | None = None) -> Path:
    """The flights Parquet file: ``path``, else ``$ACEP_FLIGHTS``, else the cache file.

    The cache file is downloaded (about 60 MB with npm) when it is missing.
    """
    given = path if path is not None else os.environ.get(FLIGHTS_ENV)
    if given:
        found = Path(given).expanduser()
        if not found.is_file():
            origin = "" if path is not None else f" (from ${FLIGHTS_ENV})"
            what = "is not a file" if found.exists() else "does not exist"
            raise DataError(f"flights data {found}{origin} {what}")
        return check_flights(found)
    cached = default_cache()
    if not cached.is_file():
        fetch_flights(cached)
    return check_flights(cached)


def check_flights(path: Path) -> Path:
    """``path`` if its footer reads as Parquet with the flights' columns, else DataError: a
    benchmark checks this before any work, not minutes later in a worker."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        schema = pq.read_schema(path)
    except (OSError, pa.ArrowException) as e:
        raise DataError(f"{path}: not a readable Parquet file ({one_line(e)})") from None
    missing = [c for c in FLIGHTS_COLUMNS if c not in schema.names]
    if missing:
        raise DataError(f"{path}: no column {', '.join(missing)} (it has "
                        f"{', '.join(schema.names) or 'none'}; the flights have "
                        f"{', '.join(FLIGHTS_COLUMNS)})")
    return path


def fetch_flights(dest: Path) -> Path:
    """Download ``flights-3m.parquet`` with ``npm pack`` into ``dest``; return ``dest``."""
    npm = shutil.which("npm")
    if npm is None:
        raise DataError(f"npm is not installed, so the flights data cannot be downloaded; "
                        f"pass --data PATH (or set ${FLIGHTS_ENV}) to a copy of "
                        f"flights-3m.parquet from the npm package {FLIGHTS_PACKAGE}")
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="acep-flights-") as work:
        _say(f"downloading {FLIGHTS_PACKAGE} with npm (about 60 MB) ...")
        tarball = _npm_pack(npm, Path(work))
        _say(f"extracting {FLIGHTS_MEMBER} ...")
        partial = dest.with_name(dest.name + ".part")
        _extract_member(tarball, FLIGHTS_MEMBER, partial)
        _check_digest(partial)
        partial.replace(dest)
    _say(f"flights data cached at {dest}")
    return dest


def _npm_pack(npm: str, workdir: Path) -> Path:
    try:  # --loglevel=error, not --silent: that hides the error too
        subprocess.run([npm, "pack", FLIGHTS_PACKAGE, "--loglevel=error"], cwd=workdir,
                       check=True, capture_output=True, text=True)
    except subprocess.CalledProcessError as e:
        raise DataError(f"`npm pack {FLIGHTS_PACKAGE}` failed ({_npm_reason(e)}); pass "
                        f"--data PATH to a local copy of flights-3m.parquet") from None
    tarballs = sorted(workdir.glob("*.tgz"))
    if not tarballs:
        raise DataError(f"`npm pack {FLIGHTS_PACKAGE}` made no tarball; pass --data PATH")
    return tarballs[0]


def _npm_reason(failed: subprocess.CalledProcessError) -> str:
    """npm's error code and first message line, without its stack trace, fields and advice
    (``npm error code E404`` / ``npm error 404 Not Found - GET https://...``)."""
    lines = [re.sub(r"^npm (error|ERR!) ?", "", line).rstrip()
             for line in (failed.stderr or "").splitlines()]
    code = next((line[5:] for line in lines if line.startswith("code ")), None)
    message = next((line for line in lines if line and not line[0].isspace()
                    and not re.match(r"(code|errno|syscall) |[{}]|A complete log", line)), None)
    reason = ": ".join(x for x in (code, message) if x)
    return reason or f"exit status {failed.returncode}, nothing on stderr"


def _extract_member(tarball: Path, member: str, dest: Path) -> None:
    """Copy one regular-file member out of ``tarball`` to ``dest`` (no other paths touched)."""
    with tarfile.open(tarball, "r:gz") as tar:
        try:
            info = tar.getmember(member)
        except KeyError:
            raise DataError(f"{tarball.name} has no {member}; pass --data PATH") from None
        source = tar.extractfile(info) if info.isfile() else None
        if source is None:
            raise DataError(f"{member} in {tarball.name} is not a regular file")
        with source, open(dest, "wb") as out:
            shutil.copyfileobj(source, out, length=1 << 20)


def _sha256(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def is_published(path: str | os.PathLike) -> bool:
    """Whether ``path`` is the flights file the published figures were measured on (its
    SHA-256: a slice or another year is not)."""
    return _sha256(path) == FLIGHTS_SHA256


def _check_digest(path: Path) -> None:
    found = _sha256(path)
    if found != FLIGHTS_SHA256:
        path.unlink()
        raise DataError(f"the downloaded flights data has SHA-256 {found}, "
                        f"not {FLIGHTS_SHA256}; pass --data PATH to a trusted copy")


def _say(message: str) -> None:
    print(f"[bench.data] {message}", file=sys.stderr, flush=True)


def read_flights(path: str | os.PathLike) -> EventBatch:
    """The flights stream as one batch: types are delay classes, tags seconds since epoch."""
    import pyarrow as pa

    try:
        return read_all(path, PRESETS["flights"], batch_size=1 << 20)
    except EventError as e:  # past the footer: a bad value
        raise DataError(str(e)) from None
    except (OSError, pa.ArrowException) as e:  # a corrupt page
        raise DataError(f"{path}: cannot be read ({one_line(e)})") from None


def read_flights_table(path: str | os.PathLike, columns: list[str] | None = None):
    """The flights as a pyarrow table (``columns``: only these); DataError names a file
    whose pages cannot be read."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return pq.read_table(path, columns=columns)
    except (OSError, pa.ArrowException) as e:
        raise DataError(f"{path}: cannot be read ({one_line(e)})") from None


# --------------------------------------------------------------------------- synthetic


def synthetic_uniform(n: int, types: tuple[str, ...] = ("a", "b", "c", "d"),
                      seed: int = 0) -> EventBatch:
    """``n`` events of uniformly random types; tag = index, so windows count events."""
    rng = np.random.default_rng(seed)
    codes = rng.integers(0, len(types), size=n).astype(np.int32)
    return EventBatch(type_codes=codes, type_names=list(types),
                      tags=np.arange(n, dtype=np.float64), columns={}, position=0,
                      source="<synthetic uniform>")


# --------------------------------------------------------------------------- helpers


def prefix(batch: EventBatch, n: int) -> EventBatch:
    """The first ``n`` events of ``batch`` (views, no copies)."""
    lines = None if batch.lines is None else batch.lines[:n]
    return EventBatch(batch.type_codes[:n], batch.type_names, batch.tags[:n],
                      {name: column[:n] for name, column in batch.columns.items()},
                      batch.position, batch.source, lines, batch.tag_is_time)


def as_dicts(batch: EventBatch, attrs: tuple[str, ...] = ()) -> list[dict]:
    """Row dicts ``{"type", "t", attr...}`` for :func:`acep.reference.acep_match`."""
    names = batch.type_names
    columns = [batch.columns[a].tolist() for a in attrs]
    rows = []
    for i, (code, tag) in enumerate(zip(batch.type_codes.tolist(), batch.tags.tolist())):
        row = {"type": names[code], "t": tag}
        row.update((a, column[i]) for a, column in zip(attrs, columns))
        rows.append(row)
    return rows
