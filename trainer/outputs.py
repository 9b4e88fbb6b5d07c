"""What the jobs write: refuse, before the work, any output that is not safe to write.

Spark's ``write.mode("overwrite")`` deletes whatever is at the path first. So an output
directory (``acep exact-batch --out``, ``--quarantine`` of both commands) must be absent,
empty, or an earlier output of the same kind: Spark's ``_SUCCESS`` beside nothing but part
files, their ``.crc`` checksums and the job's own ``extra`` files. It may not be a file, an
input, inside an input or contain one, and a local one must be in a directory a file can be
made in (it is written beside itself, then renamed).

An output file (``-o``, ``--sketch``; ``--json`` and ``--plot`` of ``acep history``) goes in
an existing directory a file can be made in (a probe file is written and removed); it may
not be a directory or an input (symbolic links followed). No two outputs may overlap.
"""

from __future__ import annotations

import atexit
import os
import shutil
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath

from acep import storage

__all__ = ["OutputError", "check_outputs", "absolute", "replacing", "abandoned",
           "remove_abandoned"]

_ABANDONED: set[str] = set()  # staging directories of writes an interrupt broke off


class OutputError(ValueError):
    """An output path the job refuses to replace."""


def check_outputs(outputs: dict[str, str | os.PathLike | None],
                  inputs: Iterable[str | os.PathLike], extra: Iterable[str] = (),
                  files: dict[str, str | os.PathLike | None] | None = None) -> None:
    """Raise :class:`OutputError` unless every output directory of ``outputs`` (option name
    -> path, None for not given) may be replaced and every output file of ``files`` may be
    written: see the module docstring. Outputs may not overlap each other either."""
    given = {name: os.fspath(p) for name, p in outputs.items() if p is not None}
    sources = [os.fspath(p) for p in inputs]
    written = {name: os.fspath(p) for name, p in (files or {}).items() if p is not None}
    for name, path in {**given, **written}.items():
        if path == "":  # an unset shell variable ("$OUT"): it would fail after the work
            raise OutputError(f"{name}: an empty path; give a file name")
    for name, path in written.items():
        _check_file(name, path, sources, {**given, **written})
    for name, path in given.items():
        where = f"{name} {path}"
        if os.path.exists(path) and not os.path.isdir(path):
            raise OutputError(f"{where}: an existing file; the output is a directory of "
                              "Parquet files that would replace it")
        why = _unwritable_parent(path)
        if why is not None:
            raise OutputError(f"{where}: {why}")
        for src in sources:
            if _overlap(path, src):
                raise OutputError(f"{where}: would replace the input {src} (give a "
                                  "directory outside the input)")
        for other, other_path in given.items():
            if other != name and _overlap(path, other_path):
                raise OutputError(f"{where}: overlaps {other} {other_path}")
        why = _not_earlier_output(path, set(extra))
        if why is not None:
            raise OutputError(f"{where}: a directory that is not empty and not an earlier "
                              f"output of this command ({why}); give a new or empty "
                              "directory")


def _check_file(name: str, path: str, sources: list[str], outputs: dict[str, str]) -> None:
    where = f"{name} {path}"
    if storage.is_uri(path):
        raise OutputError(f"{where}: a local path is needed (the file is written here, "
                          "not by Spark)")
    if os.path.isdir(path):
        raise OutputError(f"{where}: a directory; give a file name")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise OutputError(f"{where}: no such directory {parent}")
    why = storage.unwritable(parent)
    if why is not None:
        raise OutputError(f"{where}: cannot write in the directory {parent} ({why})")
    for src in sources:
        if not storage.is_uri(src) and Path(path).resolve() == Path(src).resolve():
            raise OutputError(f"{where}: would replace the input {src}")
    for other, other_path in outputs.items():
        if other != name and _overlap(path, other_path):
            raise OutputError(f"{where}: overlaps {other} {other_path}")


@contextmanager
def replacing(directory: str) -> Iterator[str]:
    """A new hidden directory beside ``directory`` for the block to write the output in;
    when the block ends well it replaces ``directory``, so an interrupted or failed job
    leaves an earlier output whole. A URI (only Spark writes there) is written in place.
    A failed block's directory is removed at once, an interrupted one's by
    :func:`remove_abandoned`: the job's tasks may still be writing in it."""
    if storage.is_uri(directory):
        yield directory
        return
    parent, name = os.path.split(os.path.abspath(directory))
    staging, old = (os.path.join(parent, f".{name}.{os.getpid()}.{end}")
                    for end in ("new", "old"))
    try:
        yield staging
        if os.path.exists(directory):
            os.rename(directory, old)
        os.rename(staging, directory)
    except KeyboardInterrupt:
        # Spark's tasks may write on in it, and fail loudly if it goes: remove_abandoned
        _ABANDONED.add(staging)
        raise
    finally:
        for leftover in (old,) if staging in _ABANDONED else (staging, old):
            shutil.rmtree(leftover, ignore_errors=True)


def abandoned() -> bool:
    """Whether an interrupt broke off a write whose staging directory may come back."""
    return bool(_ABANDONED)


@atexit.register
def remove_abandoned() -> None:
    """Remove the staging directories of the writes an interrupt broke off: once Spark has
    stopped (its tasks make their folders again while they run), else when Python exits."""
    while _ABANDONED:
        shutil.rmtree(_ABANDONED.pop(), ignore_errors=True)


def _unwritable_parent(path: str) -> str | None:
    """Why the local output directory ``path`` cannot be made or replaced where it is, or
    None: it is written beside itself and renamed (:func:`replacing`), in its parent or
    the nearest one that exists (Spark makes the others). Found after the job, it would
    fail the job's last step and lose its work."""
    if storage.is_uri(path):
        return None
    parent = os.path.dirname(os.path.abspath(path))
    while not os.path.isdir(parent):
        if os.path.exists(parent):
            return f"{parent} is not a directory"
        parent = os.path.dirname(parent)
    why = storage.unwritable(parent)
    return None if why is None else f"cannot write in the directory {parent} ({why})"


def absolute(path: str | os.PathLike | None) -> str | None:
    """``path`` as an absolute path in the current directory (None stays None; a URI such as
    ``hdfs://...``, which only Spark can write, stays as it is). Spark writes an output in
    the JVM, which takes a relative path in the directory it started in: a caller that
    changed directory since would find the output elsewhere."""
    if path is None:
        return None
    return storage.absolute(path)


def _overlap(a: str, b: str) -> bool:
    """One is the other or inside it (a URI, ``s3://bucket/dir``, against URIs alone)."""
    uris = storage.is_uri(a) + storage.is_uri(b)
    if uris == 1:
        return False
    pa, pb = (PurePosixPath(a), PurePosixPath(b)) if uris else \
        (Path(a).resolve(), Path(b).resolve())
    return pa == pb or pa in pb.parents or pb in pa.parents


def _not_earlier_output(path: str, extra: set[str]) -> str | None:
    """None when ``path`` is absent, empty or a whole earlier output; else why not."""
    if storage.is_uri(path) or not os.path.isdir(path):  # a URI: only Spark looks there
        return None
    names = sorted(os.listdir(path))
    if not names:
        return None
    for name in names:
        if not (name in extra or name == "_SUCCESS" or _is_part(name)
                or (name.startswith(".") and name.endswith(".crc") and
                    (name[1:-4] == "_SUCCESS" or name[1:-4] in extra or _is_part(name[1:-4])))):
            return f"it holds {name!r}"
        if os.path.isdir(os.path.join(path, name)):
            return f"it holds the directory {name!r}"
    return None if "_SUCCESS" in names else "it has no _SUCCESS"


def _is_part(name: str) -> bool:
    return name.startswith("part-") and name.endswith(".parquet")
