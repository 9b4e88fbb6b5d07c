"""Writing batches: :func:`encode_batch` (``"matches"``) and :func:`encode_condensed`
(``"summary"``), numeric columns as little-endian bytes, values checked as plain.
"""

from __future__ import annotations

import numbers

import msgpack
import numpy as np

from acep.ids import ID_RULE, valid_id

from .model import FORMAT, VERSION, Header, SummaryBatch, UploadBatch


def _bin(a, dtype: str) -> bytes:
    return np.ascontiguousarray(np.asarray(a).astype(dtype, copy=False)).tobytes()


def _dict_encode(values) -> tuple[list, bytes]:
    """Dictionary encoding: distinct values (first-seen order) and int32 codes."""
    index: dict = {}
    codes = [index.setdefault(wire_value(v), len(index)) for v in plain_list(values)]
    return list(index), _bin(np.array(codes, dtype=np.int64), "<i4")


_MSGPACK_INTS = (-(1 << 63), 1 << 64)  # the integers msgpack holds: [-2**63, 2**64)


def wire_value(v):
    """A partition key or a value of a mixed column as sent: itself, but an integer that
    msgpack cannot hold (beyond 64 bits) as its decimal text."""
    if type(v) is int and not _MSGPACK_INTS[0] <= v < _MSGPACK_INTS[1]:
        return str(v)
    return v


_PLAIN = (str, int, float, type(None))


def plain_list(values) -> list:
    """:func:`plain` of each value; one type check per value when they are plain."""
    values = list(values)
    if all(type(v) in _PLAIN for v in values):
        return values
    return [plain(v) for v in values]


def plain(v):
    """A partition key as Python's ``str``, ``int``, ``float`` or None (a numpy scalar
    unwrapped); ``TypeError`` for anything else."""
    v = v.item() if isinstance(v, np.generic) else v
    if v is not None and not isinstance(v, (str, int, float)) or isinstance(v, bool):
        raise TypeError(f"partition key {v!r} is not str, int, float or None")
    return v


def _header_doc(h: Header, kind: str) -> dict:
    p = h.pattern
    return {
        "format": FORMAT, "version": VERSION, "kind": kind,
        "device": h.device, "seq": int(h.seq), "batch_id": h.batch_id,
        "created_at": float(h.created_at), "tag_is_time": bool(h.tag_is_time),
        "pattern": {"id": p.id, "text": p.text, "window": float(p.window), "k": int(p.k),
                    "where": list(p.where), "partition_by": p.partition_by, "hash": p.hash},
    }


def _check_header_values(h: Header) -> None:
    if not valid_id(h.device):
        raise ValueError(f"device id {h.device!r} must match {ID_RULE}")
    if type(h.seq) is not int or not 0 <= h.seq < 1 << 63:
        raise ValueError(f"seq {h.seq!r} must be an int in [0, 2**63)")


def encode_batch(batch: UploadBatch) -> bytes:
    """The msgpack bytes of an upload batch of matches (``kind = "matches"``)."""
    _check_header_values(batch)
    doc = _header_doc(batch, "matches")
    names, codes = _dict_encode(batch.partition)
    doc["matches"] = {
        "partitions": names, "partition": codes,
        "point": _bin(batch.point, "<f8"), "start": _bin(batch.start, "<f8"),
        "errors": _bin(batch.errors, "<i4"), "trajectory_ptr": _bin(batch.trajectory_ptr, "<i8"),
        "trajectory": _bin(batch.trajectory, "<i8"),
    }
    doc["events"] = {
        "position": _bin(batch.event_position, "<i8"), "tag": _bin(batch.event_tag, "<f8"),
        "type_names": list(batch.type_names), "type": _bin(batch.event_type, "<i4"),
        "columns": [_encode_column(name, col) for name, col in batch.columns.items()],
    }
    return msgpack.packb(doc, use_bin_type=True)


def _encode_column(name: str, col: np.ndarray) -> dict:
    col = np.asarray(col)
    if col.dtype != object:
        return {"name": name, "kind": "f8", "data": _bin(col, "<f8")}
    index: dict = {}
    values = col.tolist()
    # acep's text columns hold str or None: encode in one pass, then check the distinct
    # values only (a number, NaN included, or a str subclass sends it the slow way)
    codes = [-1 if v is None else index.setdefault(v, len(index)) for v in values]
    if not all(type(v) is str for v in index):
        return _encode_mixed(name, values)
    return {"name": name, "kind": "text", "values": list(index),
            "codes": _bin(np.array(codes, dtype=np.int64), "<i4")}


def _encode_mixed(name: str, values: list) -> dict:
    """A column of numbers and text (or of integers beyond 2**53): each value with its
    kind, so 7 and "7" are two values and a partition key finds its events by kind."""
    index: dict = {}
    codes = []
    for v in map(_mixed_value, values):
        codes.append(-1 if v is None else index.setdefault((type(v), v), len(index)))
    return {"name": name, "kind": "mixed", "values": [v for _, v in index],
            "codes": _bin(np.array(codes, dtype=np.int64), "<i4")}


def _mixed_value(v):
    """str, int or float as sent (None: missing, as NaN is)."""
    v = v.item() if isinstance(v, np.generic) else v
    if v is None or isinstance(v, str):
        return None if v is None else str(v)
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, numbers.Integral):
        return wire_value(int(v))
    if isinstance(v, numbers.Real):
        return None if v != v else float(v)
    return str(v)


def encode_condensed(batch: SummaryBatch) -> bytes:
    """The msgpack bytes of a condensed batch (``kind = "summary"``)."""
    _check_header_values(batch)
    doc = _header_doc(batch, "summary")
    names, codes = _dict_encode(batch.partition)
    doc["summary"] = {
        "slot": float(batch.slot), "origin": float(batch.origin),
        "partitions": names, "partition": codes,
        "slot_index": _bin(batch.slot_index, "<i8"), "matches": _bin(batch.matches, "<i8"),
        "bundles": _bin(batch.bundles, "<i8"), "first": _bin(batch.first, "<f8"),
        "last": _bin(batch.last, "<f8"), "min_errors": _bin(batch.min_errors, "<i4"),
    }
    return msgpack.packb(doc, use_bin_type=True)
