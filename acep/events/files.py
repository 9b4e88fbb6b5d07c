"""Opening an event file through :mod:`acep.storage` (a path or an object storage URI),
its failures as :class:`EventError` naming the file.
"""

from __future__ import annotations

from .. import storage
from .model import EventError


def _open_binary(source: str):
    try:
        return storage.open_binary(source)
    except OSError as e:
        raise EventError(f"cannot read ({_why(e)})", source) from None


def _kind(source: str) -> str | None:
    try:
        return storage.kind(source)
    except OSError as e:
        raise EventError(f"cannot read ({_why(e)})", source) from None


def _arrow_source(source: str):
    """What pyarrow's readers take for ``source``: the path, or a remote file opened (it
    closes when the reader is done with it)."""
    try:
        return storage.open_arrow(source)
    except OSError as e:
        raise EventError(f"cannot read ({_why(e)})", source) from None


def _why(e: OSError) -> str:
    return e.reason if isinstance(e, storage.StorageError) else e.strerror or str(e)
