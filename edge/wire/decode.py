"""Reading batches with limits: :func:`decode` and its kinds, every error a
:class:`~edge.wire.model.WireError` naming the bad field (``docs/WIRE.md``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

import msgpack
import numpy as np

from acep.ids import ID_RULE, valid_id

from .model import (
    FORMAT,
    KINDS,
    VERSION,
    Limits,
    PatternRef,
    SummaryBatch,
    UploadBatch,
    WireError,
    batch_id,
)

_HASH_RE = re.compile(r"[0-9a-f]{64}\Z")
# created_at names the archive's date=YYYY-MM-DD directory: 1970-01-01 .. 9999-12-31 UTC
_CREATED_AT_MAX = 253402300800.0


def decode(data, limits: Limits | None = None) -> UploadBatch | SummaryBatch:
    """Decode either kind of batch; anything not acceptable raises :class:`WireError`."""
    limits = limits or Limits()
    doc = _unpack(data, limits)
    header = _decode_header(doc, limits)
    kind = header.pop("kind")
    if kind == "matches":
        return _decode_matches(doc, header, limits)
    return _decode_summary(doc, header, limits)


def decode_batch(data, limits: Limits | None = None) -> UploadBatch:
    """Decode a ``"matches"`` batch (a summary batch is refused)."""
    out = decode(data, limits)
    if not isinstance(out, UploadBatch):
        raise WireError("field 'kind': 'summary' where 'matches' is expected")
    return out


def redate(data, created_at: float, limits: Limits | None = None) -> bytes:
    """The batch ``data`` with its ``created_at`` set to ``created_at`` and all else as it
    was (``acep outbox requeue --redate``: a dead letter refused for the device's clock
    when it was made; its events keep their own tags); :class:`WireError` for a body that
    is not a valid batch."""
    limits = limits or Limits()
    decode(data, limits)
    if not 0.0 <= created_at < _CREATED_AT_MAX:
        raise WireError(f"created_at {created_at:g} is outside [0, {_CREATED_AT_MAX:.0f})")
    doc = _unpack(data, limits)
    doc["created_at"] = float(created_at)
    return msgpack.packb(doc, use_bin_type=True)


def decode_condensed(data, limits: Limits | None = None) -> SummaryBatch:
    """Decode a ``"summary"`` batch (a matches batch is refused)."""
    out = decode(data, limits)
    if not isinstance(out, SummaryBatch):
        raise WireError("field 'kind': 'matches' where 'summary' is expected")
    return out


def _unpack(data, limits: Limits) -> dict:
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise WireError(f"body: expected bytes, got {type(data).__name__}")
    data = bytes(data)
    if len(data) > limits.max_bytes:
        raise WireError(f"body: {len(data)} bytes, above the limit of {limits.max_bytes}")
    if not data:
        raise WireError("body: empty")
    containers = _Containers(limits)
    unpacker = msgpack.Unpacker(
        raw=False, strict_map_key=True, use_list=True, max_buffer_size=limits.max_bytes,
        max_bin_len=limits.max_bytes, max_str_len=limits.max_str_len,
        max_array_len=max(limits.max_matches, limits.max_events, limits.max_types,
                          limits.max_partitions, limits.max_columns, limits.max_slots),
        max_map_len=64, max_ext_len=0, object_hook=containers, list_hook=containers)
    unpacker.feed(data)
    try:
        doc = unpacker.unpack()
    except msgpack.OutOfData:
        raise WireError("body: truncated msgpack") from None
    except WireError:
        raise
    except Exception as exc:  # msgpack raises several unrelated types for malformed input
        raise WireError(f"body: not valid msgpack ({type(exc).__name__}: {exc})") from None
    if unpacker.tell() != len(data):
        raise WireError(f"body: {len(data) - unpacker.tell()} trailing bytes after the document")
    _check_depth(doc, limits.max_depth)
    if not isinstance(doc, dict):
        raise WireError(f"body: top level is {type(doc).__name__}, not a map")
    return doc


class _Containers:
    """The msgpack hook of maps and lists: counts them as they are built and refuses the
    document past the most a batch holds (the document, its pattern and ``where``, the
    matches or summary and their partitions, the events, their type names and columns:
    8; and a map and a list of values per column). A body of empty maps would otherwise
    be a dict per byte: 16 MiB of them, 1.5 GB and 20 s of a re-check worker."""

    def __init__(self, limits: Limits):
        self.columns = limits.max_columns
        self.most, self.seen = 8 + 2 * limits.max_columns, 0

    def __call__(self, obj):
        self.seen += 1
        if self.seen > self.most:
            raise WireError(f"body: more than {self.most} maps and lists (a batch has 8, and "
                            f"2 per column: {self.columns} columns at most)")
        return obj


def _check_depth(doc, max_depth: int) -> None:
    stack = [(doc, 1)]
    while stack:
        obj, depth = stack.pop()
        if isinstance(obj, (dict, list)):
            if depth > max_depth:
                raise WireError(f"body: nested deeper than {max_depth} levels")
            children = obj.values() if isinstance(obj, dict) else obj
            stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list)))


def _field(doc: Mapping, name: str, kinds, where: str = ""):
    """A scalar field of one of ``kinds`` (bool is never accepted as a number)."""
    full = f"{where}.{name}" if where else name
    if name not in doc:
        raise WireError(f"field {full!r}: missing")
    value = doc[name]
    kinds = kinds if isinstance(kinds, tuple) else (kinds,)
    if (isinstance(value, bool) and bool not in kinds) or not isinstance(value, kinds):
        names = " or ".join("null" if k is type(None) else k.__name__ for k in kinds)
        raise WireError(f"field {full!r}: {type(value).__name__} where {names} is expected")
    return value


def _number(doc: Mapping, name: str, where: str = "", finite: bool = True) -> float:
    value = float(_field(doc, name, (int, float), where))
    if finite and not math.isfinite(value):
        raise WireError(f"field {(where + '.' if where else '') + name!r}: not finite")
    return value


def _map(doc: Mapping, name: str, keys: set, where: str = "") -> dict:
    value = _field(doc, name, dict, where)
    full = f"{where}.{name}" if where else name
    extra, missing = set(value) - keys, keys - set(value)
    if extra:
        raise WireError(f"field {full!r}: unknown keys {sorted(extra)}")
    if missing:
        raise WireError(f"field {full + '.' + sorted(missing)[0]!r}: missing")
    return value


def _array(doc: Mapping, name: str, dtype: str, where: str, n: int | None = None,
           limit: int | None = None) -> np.ndarray:
    data = _field(doc, name, bytes, where)
    full = f"{where}.{name}"
    size = np.dtype(dtype).itemsize
    if len(data) % size:
        raise WireError(f"field {full!r}: {len(data)} bytes is not a multiple of {size}")
    count = len(data) // size
    if n is not None and count != n:
        raise WireError(f"field {full!r}: {count} values where {n} are expected")
    if limit is not None and count > limit:
        raise WireError(f"field {full!r}: {count} values, above the limit of {limit}")
    return np.frombuffer(data, dtype=dtype).astype(dtype[1:], copy=True)


def _str_list(doc: Mapping, name: str, where: str, limit: int, kinds=(str,),
              unique: bool = True) -> list:
    value = _field(doc, name, list, where)
    full = f"{where}.{name}"
    if len(value) > limit:
        raise WireError(f"field {full!r}: {len(value)} entries, above the limit of {limit}")
    for i, v in enumerate(value):
        if isinstance(v, bool) or not isinstance(v, kinds):
            raise WireError(f"field {full + f'[{i}]'!r}: {type(v).__name__} is not allowed")
    if unique and len({value_key(v) for v in value}) != len(value):
        raise WireError(f"field {full!r}: duplicate entries")
    return value


def value_key(v):
    """A hashable key of ``v`` that tells ``1``, ``1.0`` and ``True`` apart, NaN equal to NaN."""
    return ("nan",) if isinstance(v, float) and v != v else (type(v).__name__, v)


def _codes(doc: Mapping, name: str, where: str, n: int, n_values: int,
           missing_ok: bool = False) -> np.ndarray:
    codes = _array(doc, name, "<i4", where, n)
    low = -1 if missing_ok else 0
    if len(codes) and (codes.min() < low or codes.max() >= n_values):
        raise WireError(f"field {where + '.' + name!r}: code out of range [{low}, {n_values})")
    return codes


def _decode_header(doc: dict, limits: Limits) -> dict:
    fmt = _field(doc, "format", str)
    if fmt != FORMAT:
        raise WireError(f"field 'format': {fmt!r}, expected {FORMAT!r}")
    version = _field(doc, "version", int)
    if version != VERSION:
        raise WireError(f"field 'version': unsupported version {version} "
                        f"(this reader knows version {VERSION})")
    kind = _field(doc, "kind", str)
    if kind not in KINDS:
        raise WireError(f"field 'kind': {kind!r} is not one of {list(KINDS)}")
    body = "matches events" if kind == "matches" else "summary"
    allowed = {"format", "version", "kind", "device", "seq", "batch_id", "created_at",
               "tag_is_time", "pattern", *body.split()}
    if set(doc) - allowed:
        raise WireError(f"body: unknown top-level keys {sorted(set(doc) - allowed)}")
    device = _field(doc, "device", str)
    if not valid_id(device):
        raise WireError(f"field 'device': {device!r} does not match {ID_RULE}")
    seq = _field(doc, "seq", int)
    if not 0 <= seq < 1 << 63:
        raise WireError(f"field 'seq': {seq} is outside [0, 2**63)")
    bid = _field(doc, "batch_id", str)
    if bid != batch_id(device, seq):
        raise WireError(f"field 'batch_id': {bid!r} is not {batch_id(device, seq)!r}")
    created_at = _number(doc, "created_at")
    if not 0.0 <= created_at < _CREATED_AT_MAX:
        raise WireError(f"field 'created_at': {created_at:g} is outside [0, "
                        f"{_CREATED_AT_MAX:.0f}): Unix seconds from 1970-01-01 to 9999-12-31 "
                        "UTC (not milliseconds)")
    tag_is_time = _field(doc, "tag_is_time", bool)
    p = _map(doc, "pattern", {"id", "text", "window", "k", "where", "partition_by", "hash"})
    ref = PatternRef(
        id=_field(p, "id", str, "pattern"), text=_field(p, "text", str, "pattern"),
        window=_number(p, "window", "pattern"), k=_field(p, "k", int, "pattern"),
        where=tuple(_str_list(p, "where", "pattern", 64, unique=False)),
        partition_by=_field(p, "partition_by", (str, type(None)), "pattern"))
    if not valid_id(ref.id):
        raise WireError(f"field 'pattern.id': {ref.id!r} does not match {ID_RULE}")
    if ref.window < 0 or ref.k < 0:
        raise WireError("field 'pattern.window' or 'pattern.k': negative")
    digest = _field(p, "hash", str, "pattern")
    if not _HASH_RE.match(digest) or digest != ref.hash:
        raise WireError("field 'pattern.hash': does not match the pattern's definition")
    return {"kind": kind, "device": device, "seq": seq, "pattern": ref,
            "created_at": created_at, "tag_is_time": tag_is_time}


_PARTITION_KINDS = (str, int, float, type(None))
_COLUMN_KINDS = {"f8": None, "text": (str,), "mixed": (str, int, float)}  # kind: its values
# the archive's own columns: an attribute of one of these names is archived as attr_<name>
# (and the trainer reads it back as <name>), so an attribute named attr_<name> is refused
ARCHIVE_RESERVED = ("batch_id", "pattern_id", "position", "tag", "type")


def _decode_matches(doc: dict, header: dict, limits: Limits) -> UploadBatch:
    m = _map(doc, "matches", {"partitions", "partition", "point", "start", "errors",
                              "trajectory_ptr", "trajectory"})
    point = _array(m, "point", "<f8", "matches", limit=limits.max_matches)
    n = len(point)
    start = _array(m, "start", "<f8", "matches", n)
    errors = _array(m, "errors", "<i4", "matches", n)
    names = _str_list(m, "partitions", "matches", limits.max_partitions, _PARTITION_KINDS)
    _finite_keys(names, "matches.partitions")
    codes = _codes(m, "partition", "matches", n, len(names))
    ptr = _array(m, "trajectory_ptr", "<i8", "matches", n + 1)
    traj = _array(m, "trajectory", "<i8", "matches", limit=limits.max_trajectory)
    if ptr[0] != 0 or ptr[-1] != len(traj) or np.any(np.diff(ptr) < 1):
        raise WireError("field 'matches.trajectory_ptr': not 0, increasing by at least 1, "
                        "ending at len(trajectory)")

    e = _map(doc, "events", {"position", "tag", "type_names", "type", "columns"})
    pos = _array(e, "position", "<i8", "events", limit=limits.max_events)
    n_ev = len(pos)
    tag = _array(e, "tag", "<f8", "events", n_ev)
    type_names = _str_list(e, "type_names", "events", limits.max_types)
    types = _codes(e, "type", "events", n_ev, len(type_names))
    if np.any(np.diff(pos) <= 0) or (n_ev and pos[0] < 0):
        raise WireError("field 'events.position': not non-negative and strictly increasing")
    if not np.all(np.isfinite(tag)):
        raise WireError("field 'events.tag': not finite")
    columns = _decode_columns(e, n_ev, limits)

    window = header["pattern"].window
    _check_matches(point, start, errors, ptr, traj, pos, tag, window)
    _check_partitions(names, codes, columns, header["pattern"].partition_by)
    _check_tag_order(pos, tag, columns, header["pattern"].partition_by)
    return UploadBatch(**header, partition=[names[c] for c in codes], point=point,
                       start=start, errors=errors, trajectory_ptr=ptr, trajectory=traj,
                       event_position=pos, event_tag=tag, event_type=types,
                       type_names=type_names, columns=columns)


def _decode_columns(e: dict, n_ev: int, limits: Limits) -> dict[str, np.ndarray]:
    cols = _field(e, "columns", list, "events")
    if len(cols) > limits.max_columns:
        raise WireError(f"field 'events.columns': {len(cols)} columns, above the limit of "
                        f"{limits.max_columns}")
    out: dict[str, np.ndarray] = {}
    for i, c in enumerate(cols):
        where = f"events.columns[{i}]"
        if not isinstance(c, dict):
            raise WireError(f"field {where!r}: {type(c).__name__} where dict is expected")
        kind = _field(c, "kind", str, where)
        keys = {"name", "kind", "data"} if kind == "f8" else {"name", "kind", "values", "codes"}
        if kind not in _COLUMN_KINDS or set(c) != keys:
            raise WireError(f"field {where!r}: kind {kind!r} with keys {sorted(c)} is not "
                            "an f8 (name, kind, data), text or mixed (name, kind, values, "
                            "codes) column")
        name = _field(c, "name", str, where)
        if name in out:
            raise WireError(f"field {where + '.name'!r}: duplicate column {name!r}")
        if name.startswith("attr_") and name[len("attr_"):] in ARCHIVE_RESERVED:
            raise WireError(f"field {where + '.name'!r}: attribute {name!r} is not taken: the "
                            f"archive keeps attribute {name[len('attr_'):]!r} under that "
                            "name (rename it on the device)")
        if kind == "f8":
            out[name] = _array(c, "data", "<f8", where, n_ev)
        else:
            values = _str_list(c, "values", where, limits.max_events, _COLUMN_KINDS[kind])
            _no_nan(values, f"{where}.values")
            codes = _codes(c, "codes", where, n_ev, len(values), missing_ok=True)
            col = np.empty(n_ev, dtype=object)
            col[:] = [None if k < 0 else values[k] for k in codes.tolist()]
            out[name] = col
    return out


def _finite_keys(keys: list, where: str) -> None:
    """A partition key is a finite number, a text or nil: the matcher keys no partition by
    NaN or infinity, and the database stores keys as JSON, which has neither."""
    for i, v in enumerate(keys):
        if isinstance(v, float) and not math.isfinite(v):
            raise WireError(f"field '{where}[{i}]': {v!r} is not a partition key (a finite "
                            "number, a text or nil)")


def _no_nan(values: list, where: str) -> None:
    for i, v in enumerate(values):
        if isinstance(v, float) and v != v:
            raise WireError(f"field '{where}[{i}]': NaN is no value (a missing value is code "
                            "-1)")


def _check_matches(point, start, errors, ptr, traj, pos, tag, window) -> None:
    if not (np.all(np.isfinite(point)) and np.all(np.isfinite(start))):
        raise WireError("field 'matches.point' or 'matches.start': not finite")
    if np.any(errors < 0):
        raise WireError("field 'matches.errors': negative")
    if np.any(start > point) or np.any(point - start > window):
        raise WireError("field 'matches.start': not within the window before the point")
    idx = np.searchsorted(pos, traj)
    idx_c = np.minimum(idx, max(len(pos) - 1, 0))
    if len(traj) and (not len(pos) or np.any(pos[idx_c] != traj)):
        raise WireError("field 'matches.trajectory': a position that is not among the events")
    if len(point):
        if np.any(np.diff(traj)[_inside(ptr, len(traj))] <= 0):
            raise WireError("field 'matches.trajectory': positions of a match not increasing")
        if np.any(tag[idx_c[ptr[1:] - 1]] != point):
            raise WireError("field 'matches.point': not the tag of the trajectory's last event")
        first = tag[idx_c[ptr[:-1]]]
        if len(wrong := np.flatnonzero(first != start)):
            i = int(wrong[0])
            raise WireError(f"field 'matches.start': match {i}: {start[i]!r} is not the tag "
                            f"of the trajectory's first event ({first[i]!r})")


def _check_tag_order(pos, tag, columns: dict, attr: str | None) -> None:
    """Within a partition, tags do not go back in stream order: the device's matcher
    refuses such an event, and the exact re-check cannot run over one."""
    codes = _partition_codes(columns, attr, len(tag))
    if codes is None:
        return
    order = np.lexsort((np.arange(len(tag)), codes))  # by partition, then position
    c, t = codes[order], tag[order]
    back = np.flatnonzero((np.diff(t) < 0) & (c[1:] == c[:-1]) & (c[1:] >= 0))
    if len(back):
        j, k = order[back[0]], order[back[0] + 1]
        raise WireError(f"field 'events.tag': the event at position {int(pos[k])} has tag "
                        f"{tag[k]!r}, before the tag {tag[j]!r} of the event at position "
                        f"{int(pos[j])} in its partition: tags go back in time")


def _partition_codes(columns: dict, attr: str | None, n: int) -> np.ndarray | None:
    """A code per event for its partition (-1: no key; numbers by value, as the re-check
    groups them), or None when the events do not carry the attribute."""
    if attr is None:
        return np.zeros(n, dtype=np.int64)
    col = columns.get(attr)
    if col is None:
        return None
    if col.dtype != object:
        _, codes = np.unique(col, return_inverse=True)
        return np.where(np.isnan(col), -1, codes)
    keys: dict = {}
    return np.array([-1 if v is None or v != v else
                     keys.setdefault(partition_group_key(v), len(keys))
                     for v in col.tolist()], dtype=np.int64)


def _check_partitions(names: list, codes: np.ndarray, columns: dict, attr: str | None
                      ) -> None:
    """Each match's partition is a value of the events' partition attribute (numbers by
    value: 3 is 3.0), when the events carry it: else the re-check finds no events."""
    col = None if attr is None else columns.get(attr)
    if col is None or not len(codes):
        return
    values = np.unique(col) if col.dtype != object else col
    present = {partition_group_key(v) for v in values.tolist()}
    for k in np.unique(codes).tolist():
        if partition_group_key(names[k]) not in present:
            raise WireError(f"field 'matches.partitions[{k}]': {names[k]!r} is no value of "
                            f"the events' partition attribute {attr!r}")


def partition_group_key(v):
    """A partition value as the collector groups events by it (the re-check too): numbers
    by value (3 == 3.0; integers exactly, so two 64-bit ids a float would round to one
    stay two), NaN as one, never equal to a bool or text."""
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
        return ("num", int(v))
    if isinstance(v, (float, np.floating)):
        return ("num", float(v)) if v == v else ("nan",)
    return (type(v).__name__, v)


def _inside(ptr: np.ndarray, n: int) -> np.ndarray:
    """Mask over ``diff(trajectory)``: True where both neighbours belong to one match."""
    mask = np.ones(max(n - 1, 0), dtype=bool)
    cut = ptr[1:-1] - 1
    mask[cut[cut < len(mask)]] = False
    return mask


def _decode_summary(doc: dict, header: dict, limits: Limits) -> SummaryBatch:
    s = _map(doc, "summary", {"slot", "origin", "partitions", "partition", "slot_index",
                              "matches", "bundles", "first", "last", "min_errors"})
    slot = _number(s, "slot", "summary")
    if slot <= 0:
        raise WireError("field 'summary.slot': not positive")
    origin = _number(s, "origin", "summary")
    index = _array(s, "slot_index", "<i8", "summary", limit=limits.max_slots)
    n = len(index)
    names = _str_list(s, "partitions", "summary", limits.max_partitions, _PARTITION_KINDS)
    _finite_keys(names, "summary.partitions")
    codes = _codes(s, "partition", "summary", n, len(names))
    matches = _array(s, "matches", "<i8", "summary", n)
    bundles = _array(s, "bundles", "<i8", "summary", n)
    first = _array(s, "first", "<f8", "summary", n)
    last = _array(s, "last", "<f8", "summary", n)
    min_errors = _array(s, "min_errors", "<i4", "summary", n)
    if np.any(matches < 1) or np.any(bundles < 0) or np.any(bundles > matches):
        raise WireError("field 'summary.matches' or 'summary.bundles': counts out of range "
                        "(1 <= matches, 0 <= bundles <= matches)")
    if not (np.all(np.isfinite(first)) and np.all(np.isfinite(last))) or np.any(first > last):
        raise WireError("field 'summary.first' or 'summary.last': not finite or first > last")
    if np.any(slot_of(first, origin, slot) != index) or np.any(
            slot_of(last, origin, slot) != index):
        raise WireError("field 'summary.first' or 'summary.last': outside the row's slot")
    if np.any(min_errors < 0):
        raise WireError("field 'summary.min_errors': negative")
    if len({(value_key(names[c]), i) for c, i in zip(codes.tolist(), index.tolist())}) != n:
        raise WireError("field 'summary.slot_index': duplicate (partition, slot) rows")
    return SummaryBatch(**header, slot=slot, origin=origin,
                        partition=[names[c] for c in codes], slot_index=index,
                        matches=matches, bundles=bundles, first=first, last=last,
                        min_errors=min_errors)


def slot_of(x: np.ndarray, origin: float, slot: float) -> np.ndarray:
    """The index of the slot of width ``slot`` from ``origin`` that each tag of ``x`` is in."""
    return np.floor((np.asarray(x, dtype=float) - origin) / slot).astype(np.int64)
