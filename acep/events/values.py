"""Value conversion: a record's values to the columns of a batch, and back to text.

Numbers become float64 (NaN when missing), integers beyond 2**53 stay exact ``int`` in an
object column, text stays text; tags are numbers or timestamps (seconds since the epoch).
The reading contract is in ``docs/DESIGN.md`` (Events and readers).
"""

from __future__ import annotations

import hashlib
import math
import numbers
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from .spec import TypeClasses


def _is_number(v: object) -> bool:
    return isinstance(v, numbers.Real)  # bool counts: True -> 1.0


def _float_or_nan(v: object) -> float:
    try:
        return float(v)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        return math.nan


def _missing(v: object) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def _py(v: object) -> object:
    return v.item() if isinstance(v, np.generic) else v


def _text(v: object) -> str:
    if isinstance(v, str):
        return v
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


def as_object_column(values: np.ndarray) -> np.ndarray:
    """A float64 column as objects (floats, None for NaN), to join an object column."""
    out = np.empty(len(values), dtype=object)
    out[:] = [None if v != v else v for v in values.tolist()]
    return out


EXACT_INT = 2**53  # float64 holds every integer up to this exactly: beyond, ids stay int


def _fits_float(v: object) -> bool:
    kind = type(v)  # JSON's own kinds first: the ABC checks cost a device ~8% of a read
    if kind is float:
        return True
    if kind is int:
        return -EXACT_INT <= v <= EXACT_INT
    return _is_number(v) and (not isinstance(v, numbers.Integral) or isinstance(v, bool)
                              or -EXACT_INT <= v <= EXACT_INT)


def _cell(v: object) -> object:
    """One value of an object column: numbers as numbers (ints exact), the rest as text."""
    if v is None or isinstance(v, str):
        return v
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, numbers.Integral):
        return int(v)
    if _is_number(v):
        return float(v)
    return _text(v)


def _column_from_values(values: list) -> np.ndarray:
    """float64 (NaN = missing) when every present value is a number that float64 holds
    exactly, else objects (see :func:`_cell`): a text value never turns the numbers of its
    column into text, and a big integer id stays exact."""
    if all(v is None or _fits_float(v) for v in values):
        return np.array([math.nan if v is None else float(v) for v in values], np.float64)
    out = np.empty(len(values), dtype=object)
    out[:] = [_cell(v) for v in values]
    return out


def iso_texts(seconds: np.ndarray) -> list[str]:
    """ISO 8601 UTC texts: whole seconds as before, a fraction in milliseconds or, when it
    needs them, microseconds."""
    micros = np.round(np.asarray(seconds, dtype=np.float64) * 1e6).astype(np.int64)
    frac = micros % 1_000_000
    stamps = micros.astype("datetime64[us]")
    if not frac.any():
        return np.datetime_as_string(stamps, unit="s").tolist()
    unit = np.where(frac == 0, 0, np.where(frac % 1000 == 0, 1, 2))
    out = np.datetime_as_string(stamps, unit="s").astype(object)
    for code, name in ((1, "ms"), (2, "us")):
        pick = unit == code
        if pick.any():
            out[pick] = np.datetime_as_string(stamps[pick], unit=name)
    return out.tolist()


def tag_text(t: float, is_time: bool) -> str:
    """A tag as messages show it: ISO 8601 UTC text for a timestamp, else the number."""
    return iso_texts(np.array([t], dtype=np.float64))[0] if is_time else f"{t:g}"


def partition_key(v: object) -> object:
    """The key of a partition attribute's value: an integral number as ``int`` (7 and 7.0
    are one key, printed as 7), other numbers as ``float``, text as itself; None when
    missing (None, NaN)."""
    if isinstance(v, np.generic):
        v = v.item()
    if v is None or isinstance(v, str):
        return v
    if isinstance(v, float):
        if v != v:
            return None
        return int(v) if v.is_integer() else v
    return int(v) if isinstance(v, numbers.Integral) else v


def partition_hash(v: object) -> int:
    """A 64-bit hash of a partition key, as a signed int64, the same in every process:
    7 and 7.0 hash alike."""
    digest = hashlib.blake2b(repr(partition_key(v)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little", signed=True)


def _types_from_values(values: list) -> tuple[np.ndarray, list[str], dict[int, str]]:
    """Dictionary-encode type names; -1 and a reason for a missing or non-string type."""
    index: dict[str, int] = {}
    codes = np.full(len(values), -1, dtype=np.int32)
    bad = {}
    for i, v in enumerate(values):
        if isinstance(v, int) and not isinstance(v, bool):
            v = str(v)
        if isinstance(v, str) and v:
            codes[i] = index.setdefault(v, len(index))
        else:
            bad[i] = "type is missing" if v in (None, "") else f"type is not a string ({v!r})"
    return codes, list(index), bad


def _class_numbers(values: list) -> np.ndarray:
    """The numbers of ``values`` for type classes, NaN where there is none."""
    return np.array([_float_or_nan(v) if _is_number(v) else math.nan for v in values],
                    np.float64)


def _classify(numeric: np.ndarray, classes: TypeClasses, raw=None):
    """Type codes from classes of ``numeric``; reasons name the raw value where known."""
    j = np.searchsorted(np.asarray(classes.bins), numeric, side="right") - 1
    ok = (j >= 0) & (j < len(classes.labels)) & ~np.isnan(numeric)
    codes = np.where(ok, j, -1).astype(np.int32)
    bad = {}
    for i in np.flatnonzero(codes < 0).tolist():
        v = numeric[i] if raw is None else raw[i]
        if _missing(v):
            bad[i] = "value for the type classes is missing"
        elif not _is_number(v):
            bad[i] = f"value for the type classes is not a number ({v!r})"
        else:
            bad[i] = (f"value {float(v):g} is outside the type classes "
                      f"[{classes.bins[0]:g}, {classes.bins[-1]:g})")
    return codes, list(classes.labels), bad


def _tags_from_values(values: list, kind: _TagKind) -> tuple[np.ndarray, dict[int, str]]:
    tags = np.full(len(values), np.nan)
    bad = {}
    parsed: dict[str, tuple[float, bool]] = {}  # events often share a timestamp's text
    for i, v in enumerate(values):
        try:
            if type(v) is str:
                known = parsed.get(v)
                if known is None:
                    known = parsed[v] = _parse_tag(v)
                tags[i], is_time = known
            else:
                tags[i], is_time = _parse_tag(v)
        except ValueError as e:
            bad[i] = str(e)
            continue
        if kind.is_time is None:
            kind.is_time = is_time
        elif is_time != kind.is_time:
            first = "timestamps" if kind.is_time else "numbers"
            bad[i] = f"tag {v!r} does not match the earlier tags, which are {first}"
    return tags, bad


def _parse_tag(v: object) -> tuple[float, bool]:
    """(seconds or number, is_time) of one tag value; ValueError names the problem."""
    if v is None:
        raise ValueError("tag is missing")
    if isinstance(v, datetime):
        return _epoch(v), True
    if isinstance(v, str):
        f, is_time = _parse_text_tag(v)
    elif _is_number(v) and not isinstance(v, bool):
        f, is_time = _float_or_nan(v), False
    else:
        raise ValueError(f"tag is not a number ({v!r})")
    if not math.isfinite(f):
        raise ValueError(f"tag is not a finite number ({v!r})")
    return f, is_time


def _parse_text_tag(s: str) -> tuple[float, bool]:
    try:
        return float(s), False
    except ValueError:
        pass
    try:
        return _epoch(datetime.fromisoformat(s.strip().replace("Z", "+00:00"))), True
    except ValueError:
        raise ValueError(f"tag is not a number or ISO 8601 timestamp ({s!r})") from None


def _epoch(dt: datetime) -> float:
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp()


@dataclass
class _TagKind:
    """Whether the stream's tags are timestamps; fixed by the first good tag."""

    is_time: bool | None = None
