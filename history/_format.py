"""Versioned msgpack documents with numpy arrays as raw bytes, decoded with limits.

Arrays are ``{"dtype": "<i4", "shape": [n], "data": <bytes>}``. Only the dtypes listed in
``DTYPES`` are accepted, so a file can never ask for object arrays; nothing is pickled.
Every problem raises the caller's error class with the name of the bad field.

An unsigned document is *sealed*: an envelope ``{"format", "version", "crc32", "payload"}``
whose ``crc32`` is the CRC-32 of the ``payload`` bytes (the document's msgpack), checked
before the payload is decoded, so a bit flipped on disk is refused rather than read as a
wrong count.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Mapping

import msgpack
import numpy as np

DTYPES = frozenset({"|u1", "<i4", "<i8", "<u4", "<f4", "<f8"})


class FormatError(ValueError):
    """A history or sketch document that cannot be accepted; the message names the field."""


def pack_array(a: np.ndarray) -> dict:
    a = np.ascontiguousarray(a)
    dtype = a.dtype.newbyteorder("<") if a.dtype.byteorder == ">" else a.dtype
    a = a.astype(dtype, copy=False)
    if a.dtype.str not in DTYPES:
        raise TypeError(f"cannot store arrays of dtype {a.dtype}")
    return {"dtype": a.dtype.str, "shape": list(a.shape), "data": a.tobytes()}


def unpack_array(doc: Mapping, name: str, error: type[FormatError], *, dtype: str | None = None,
                 ndim: int | None = None) -> np.ndarray:
    """Decode field ``name`` of ``doc`` as an array, checking dtype, shape and length."""
    value = doc.get(name)
    if not isinstance(value, Mapping) or set(value) != {"dtype", "shape", "data"}:
        raise error(f"field {name!r}: not an array (dtype, shape, data)")
    kind, shape, data = value["dtype"], value["shape"], value["data"]
    if not isinstance(kind, str) or kind not in DTYPES or (dtype is not None and kind != dtype):
        raise error(f"field {name!r}: dtype {kind!r} where {dtype or sorted(DTYPES)} is expected")
    if (not isinstance(shape, list) or not all(type(s) is int and s >= 0 for s in shape)
            or (ndim is not None and len(shape) != ndim)):
        raise error(f"field {name!r}: bad shape {shape!r}")
    if not isinstance(data, bytes):
        raise error(f"field {name!r}: data is not bytes")
    item = np.dtype(kind).itemsize
    expected = item * math.prod(shape)  # exact: a product past int64 must not wrap to 0
    if len(data) != expected:
        raise error(f"field {name!r}: {len(data)} bytes of data for shape {shape} "
                    f"(expected {expected})")
    return np.frombuffer(data, dtype=kind).reshape(shape).copy()


def take_array(doc: dict, name: str, error: type[FormatError], *, dtype: str | None = None,
               ndim: int | None = None) -> np.ndarray:
    """:func:`unpack_array`, then the field leaves ``doc``: its bytes are freed as each array
    is made rather than after the last (a history's arrays are most of its payload)."""
    array = unpack_array(doc, name, error, dtype=dtype, ndim=ndim)
    del doc[name]
    return array


def dumps(doc: dict) -> bytes:
    return msgpack.packb(doc, use_bin_type=True)


def loads(data: bytes, error: type[FormatError], what: str, max_bytes: int,
          max_containers: int | None = None) -> dict:
    """Unpack one msgpack map, refusing oversized input before reading it, and with
    ``max_containers`` one of more maps and lists than that as they are built (a byte
    of msgpack is an empty map: 1 MiB of them is 80 MB of dicts)."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise error(f"{what}: expected bytes, got {type(data).__name__}")
    if len(data) > max_bytes:
        raise error(f"{what} is {len(data)} bytes, above the limit of {max_bytes} bytes")
    hooks = {} if max_containers is None else dict.fromkeys(
        ("object_hook", "list_hook"), _counter(max_containers, error, what))
    try:  # msgpack reads any buffer in place: bytes(view) would copy a history's payload
        doc = msgpack.unpackb(data, raw=False, strict_map_key=True, use_list=True,
                              max_bin_len=max_bytes, max_str_len=1 << 16,
                              max_array_len=1 << 24, max_map_len=1 << 10, max_ext_len=0,
                              **hooks)
    except FormatError:
        raise
    except Exception as exc:  # msgpack raises several unrelated types for malformed input
        raise error(f"{what} is not valid msgpack ({type(exc).__name__}: {exc})") from None
    if not isinstance(doc, dict):
        raise error(f"{what}: top level is {type(doc).__name__}, not a map")
    return doc


def loads_envelope(data: bytes, error: type[FormatError], what: str, max_bytes: int) -> dict:
    """:func:`loads` of a sealed envelope, with its ``payload`` a memoryview of ``data``
    rather than a copy (a history's payload is most of its file, up to 1 GiB). Input that is
    not an envelope of scalars (a version 1 history, damaged bytes) goes through
    :func:`loads`, so it is refused with the same messages."""
    view = memoryview(data)
    span = None if len(view) > max_bytes else _payload_span(view)
    if span is None:
        return loads(data, error, what, max_bytes)
    value, start, end = span
    doc = loads(bytes(view[:value]) + b"\xc4\x00" + bytes(view[end:]), error, what, max_bytes)
    doc["payload"] = view[start:end]
    return doc


_SCALARS = {0xC0: 1, 0xC2: 1, 0xC3: 1, 0xCA: 5, 0xCB: 9, 0xCC: 2, 0xCD: 3, 0xCE: 5,
            0xCF: 9, 0xD0: 2, 0xD1: 3, 0xD2: 5, 0xD3: 9}  # nil, bools, floats, ints: sizes
_SIZED = {0xC4: 1, 0xC5: 2, 0xC6: 4, 0xD9: 1, 0xDA: 2, 0xDB: 4}  # bin, str: length bytes
_BINS = (0xC4, 0xC5, 0xC6)
_PAYLOAD_KEY = b"\xa7payload"


def _payload_span(view: memoryview) -> tuple[int, int, int] | None:
    """``(value, start, end)`` of the one bin ``payload`` of a msgpack map of scalars that
    fills ``view`` (its header at ``value``, its bytes ``start:end``), or None."""
    try:
        pos, entries = _map_header(view)
        found = []
        for _ in range(entries):
            value = _scalar_end(view, pos)
            end = _scalar_end(view, value)
            if view[pos:value] == _PAYLOAD_KEY:
                found.append((value, _scalar_start(view, value), end))
            pos = end
    except (IndexError, ValueError):
        return None
    return found[0] if pos == len(view) and len(found) == 1 and view[found[0][0]] in _BINS \
        else None


def _map_header(view: memoryview) -> tuple[int, int]:
    """``(where the first key starts, entries)`` of the map at the start of ``view``."""
    b = view[0]
    if 0x80 <= b <= 0x8F:
        return 1, b & 0x0F
    if b in (0xDE, 0xDF):
        n = 2 if b == 0xDE else 4
        entries = int.from_bytes(view[1:1 + n], "big")
        if entries > 1 << 10:  # loads' limit: its message
            raise ValueError(entries)
        return 1 + n, entries
    raise ValueError(b)


def _scalar_start(view: memoryview, pos: int) -> int:
    """Where the bytes of the str or bin at ``pos`` start (past its header)."""
    b = view[pos]
    return pos + 1 + (_SIZED[b] if b in _SIZED else 0)


def _scalar_end(view: memoryview, pos: int) -> int:
    """Where the msgpack scalar at ``pos`` ends (ValueError: a map, list or ext)."""
    b = view[pos]
    if b <= 0x7F or b >= 0xE0:
        return pos + 1
    if 0xA0 <= b <= 0xBF:
        return pos + 1 + (b & 0x1F)
    if b in _SCALARS:
        return pos + _SCALARS[b]
    if b in _SIZED:
        n = _SIZED[b]
        return pos + 1 + n + int.from_bytes(view[pos + 1:pos + 1 + n], "big")
    raise ValueError(b)


def _counter(most: int, error: type[FormatError], what: str):
    """A msgpack hook that raises ``error`` at the map or list after the ``most``-th."""
    seen = 0

    def count(obj):
        nonlocal seen
        seen += 1
        if seen > most:
            raise error(f"{what} holds more than {most} maps and lists")
        return obj
    return count


def sealed(fmt: str, version: int, doc: dict) -> bytes:
    """The envelope of ``doc`` with the CRC-32 of its msgpack (see the module docstring)."""
    payload = dumps(doc)
    return dumps({"format": fmt, "version": version, "crc32": zlib.crc32(payload),
                  "payload": payload})


def unsealed(envelope: Mapping, error: type[FormatError]) -> bytes | memoryview:
    """The payload of an envelope whose header was checked, once its CRC-32 matches (a
    memoryview from :func:`loads_envelope` stays one)."""
    payload, stored = envelope.get("payload"), envelope.get("crc32")
    if not isinstance(payload, (bytes, memoryview)):
        raise error("field 'payload': not bytes")
    if isinstance(stored, bool) or not isinstance(stored, int) or not 0 <= stored < 1 << 32:
        raise error(f"field 'crc32': {stored!r} is not a CRC-32")
    actual = zlib.crc32(payload)
    if actual != stored:
        raise error(f"checksum mismatch: the file is damaged (expected {stored:08x}, "
                    f"got {actual:08x})")
    return payload


def check_header(doc: Mapping, fmt: str, version: int | tuple[int, ...],
                 error: type[FormatError]) -> int:
    """The document's version, once its format is ``fmt`` and its version one of ``version``."""
    versions = version if isinstance(version, tuple) else (version,)
    if doc.get("format") != fmt:
        raise error(f"field 'format': {doc.get('format')!r}, expected {fmt!r}")
    found = doc.get("version")
    if type(found) is not int or found not in versions:
        known = " and ".join(map(str, versions))
        raise error(f"field 'version': unsupported version {found!r} "
                    f"(this reader knows version{'s' if len(versions) > 1 else ''} {known})")
    return found


def field(doc: Mapping, name: str, kinds: type | tuple, error: type[FormatError]):
    """A scalar field of one of ``kinds`` (bool is never accepted as a number)."""
    value = doc.get(name)
    if isinstance(value, bool) or not isinstance(value, kinds):
        raise error(f"field {name!r}: {value!r} is not {_kind_names(kinds)}")
    return value


def context_field(tree) -> dict:
    """The ``context`` field of a file for an ``acep.shedding.ContextTree`` (none: empty)."""
    if tree is None:
        return {}
    return {"context": {"feature": list(tree.feature), "threshold": list(tree.threshold),
                        "left": list(tree.left), "right": list(tree.right)}}


def optional_context(doc: Mapping, error: type[FormatError]):
    """The ``acep.shedding.ContextTree`` of the optional ``context`` field (None if absent)."""
    from acep.shedding import ContextTree
    from acep.utils import ParameterError

    if "context" not in doc:
        return None
    value = doc["context"]
    names = ("feature", "threshold", "left", "right")
    if not isinstance(value, Mapping) or sorted(value) != sorted(names) or not all(
            isinstance(value[n], list) and all(isinstance(x, (int, float)) for x in value[n])
            for n in names):
        raise error("field 'context': not a map of the lists feature, threshold, left, right")
    try:
        return ContextTree(*(value[n] for n in names))
    except ParameterError as exc:
        raise error(f"field 'context': {exc}") from None


def optional_name(doc: Mapping, name: str, error: type[FormatError]) -> tuple[str | None, bool]:
    """``(value, present)`` of a field holding a name or nil; an absent field (a file written
    before the field existed) gives ``(None, False)``."""
    if name not in doc:
        return None, False
    value = doc[name]
    if value is not None and (not isinstance(value, str) or not 0 < len(value) <= 256):
        raise error(f"field {name!r}: {value!r} is not a name (1-256 characters) or nil")
    return value, True


def _kind_names(kinds) -> str:
    kinds = kinds if isinstance(kinds, tuple) else (kinds,)
    return " or ".join(k.__name__ for k in kinds)
