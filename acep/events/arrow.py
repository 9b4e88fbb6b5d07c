"""Arrow formats: Parquet and CSV read through pyarrow (``pip install "acep[files]"``), the
CSV's lines counted by :mod:`acep._csvlines`, and Arrow columns converted to a batch's.
"""

from __future__ import annotations

import contextlib
import csv
import io
from collections.abc import Iterator

import numpy as np

from .._csvlines import LineTap
from .._text import one_line
from .chunks import _add, _Chunk
from .files import _arrow_source, _open_binary
from .model import EventError, TextCodes, text_column
from .spec import EventSpec, TypeClasses, _attribute_names, _needed_columns, _type_column
from .values import (
    EXACT_INT,
    _classify,
    _column_from_values,
    _float_or_nan,
    _TagKind,
    _tags_from_values,
    _text,
)


def _pyarrow(fmt: str, source: str):
    try:
        import pyarrow
    except ImportError:
        raise EventError(f"reading {fmt} needs pyarrow (pip install 'acep[files]')",
                         source) from None
    return pyarrow


def _check_columns(spec: EventSpec, names: list[str], source: str) -> None:
    for name in _needed_columns(spec) or [c for c in (spec.tag, _type_column(spec)) if c]:
        if name not in names:
            raise EventError(f"no such column (columns: {', '.join(names)})", source,
                             field=name)


def _parquet_file(source: str, spec: EventSpec):
    """The opened ``pyarrow.parquet.ParquetFile``, its columns checked against the spec."""
    _pyarrow("Parquet", source)
    import pyarrow.parquet as pq

    opened = _arrow_source(source)
    try:
        pf = pq.ParquetFile(opened)
    except Exception as e:  # noqa: BLE001 - pyarrow raises several kinds for a bad file
        raise EventError(f"not a readable Parquet file ({e})", source) from None
    _check_columns(spec, pf.schema_arrow.names, source)
    text = _text_attributes(spec, pf.schema_arrow)
    if not text:
        return pf
    # read from the file's own dictionaries: no hashing, one str object per distinct text
    return pq.ParquetFile(opened, metadata=pf.metadata, read_dictionary=text)


def _text_attributes(spec: EventSpec, schema) -> list[str]:
    """The attributes that are text columns (top-level) of an Arrow schema."""
    names = _attribute_names(spec, schema.names)
    return [n for n in names if n in schema.names and _is_text(schema.field(n).type)]


def _parquet_chunks(source: str, spec: EventSpec, batch_size: int) -> Iterator[_Chunk]:
    pf = _parquet_file(source, spec)
    batches = pf.iter_batches(batch_size=batch_size, columns=_needed_columns(spec))
    return _arrow_chunks(_parquet_batches(batches, source), spec, source, batch_size)


def _parquet_batches(batches: Iterator, source: str) -> Iterator[tuple[object, None]]:
    """``(record batch, None)`` of a Parquet file's reader; a page that does not decode (a
    corrupt file, past its readable footer) is an EventError naming the file, in one line."""
    import pyarrow as pa

    try:
        for rb in batches:
            yield rb, None
    except (OSError, pa.ArrowException) as e:
        raise EventError(f"unreadable Parquet data ({one_line(e)})",
                         source) from None


def _csv_chunks(source: str, spec: EventSpec, batch_size: int) -> Iterator[_Chunk]:
    pa = _pyarrow("CSV", source)
    import pyarrow.csv as pcsv

    with io.TextIOWrapper(_open_binary(source), newline="", encoding="utf-8-sig",
                          errors="replace") as f:
        header = next(csv.reader(f), [])
    _check_columns(spec, header, source)
    types = {spec.type: pa.string()} if isinstance(spec.type, str) else {}
    convert = pcsv.ConvertOptions(column_types=types, strings_can_be_null=True,
                                  include_columns=_needed_columns(spec))
    return _arrow_chunks(_csv_batches(source, convert), spec, source, batch_size)


@contextlib.contextmanager
def _open_csv(source: str, convert):
    """pyarrow's reader of the CSV and the :class:`LineTap` it reads the file through, which
    knows the line each row starts on (the tap is closed after the block)."""
    import pyarrow as pa
    import pyarrow.csv as pcsv

    with contextlib.closing(LineTap(_open_binary(source))) as tap:
        try:  # a value may hold a line break: the reader must not cut a block inside it
            reader = pcsv.open_csv(tap, convert_options=convert,
                                   parse_options=pcsv.ParseOptions(newlines_in_values=True))
        except (pa.ArrowException, OSError) as e:  # OSError: the tap's reading of the file
            raise EventError(f"unreadable CSV ({e})", source) from None
        yield reader, tap


_INFERRED = b"acep.inferred"  # a text column's type before a value did not fit it


def _csv_batches(source: str, convert):
    """The CSV's record batches, each with the line of each row. pyarrow infers each
    column's type from the first rows (about 1 MB), and a later value that does not fit
    ends its read: the rest is then read again as text, cast back batch by batch where it
    fits, so such a value is one bad event (``--on-bad-event skip`` goes on), not the end
    of the file."""
    import pyarrow as pa

    done = 0
    with _open_csv(source, convert) as (reader, tap):
        try:
            for rb in reader:
                done += rb.num_rows
                yield rb, tap.take(rb.num_rows)
            return
        except (pa.ArrowException, OSError) as e:
            if "conversion error" not in str(e):
                raise EventError(f"unreadable CSV ({e})", source) from None
    yield from _csv_as_text(source, reader.schema, done)


def _csv_as_text(source: str, inferred, skip: int):
    """The CSV's batches after its first ``skip`` rows, every column read as text and cast
    back to its ``inferred`` type where the batch's values fit it."""
    import pyarrow as pa
    import pyarrow.csv as pcsv

    as_text = pcsv.ConvertOptions(column_types={f.name: pa.string() for f in inferred},
                                  strings_can_be_null=True, include_columns=inferred.names)
    with _open_csv(source, as_text) as (reader, tap):
        try:
            for rb in reader:
                lines = tap.take(rb.num_rows)
                if skip >= rb.num_rows:
                    skip -= rb.num_rows
                    continue
                yield _cast_back(rb.slice(skip), inferred), None if lines is None \
                    else lines[skip:]
                skip = 0
        except (pa.ArrowException, OSError) as e:
            raise EventError(f"unreadable CSV ({e})", source) from None


def _cast_back(rb, inferred):
    import pyarrow as pa

    fields, arrays = [], []
    for name, text in zip(rb.schema.names, rb.columns):
        target = inferred.field(name).type
        try:
            arrays.append(text.cast(target))
            fields.append(pa.field(name, target))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            arrays.append(text)
            fields.append(pa.field(name, pa.string(), metadata={_INFERRED: str(target)}))
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))


def _arrow_chunks(batches, spec: EventSpec, source: str, batch_size: int) -> Iterator[_Chunk]:
    """Chunks of Arrow record batches, each with its rows' lines (or None), sliced to at
    most ``batch_size`` rows."""
    kind = _TagKind()
    for rb, lines in batches:
        for start in range(0, rb.num_rows, batch_size):
            yield _arrow_chunk(rb.slice(start, batch_size), spec,
                               None if lines is None else lines[start:start + batch_size],
                               kind, source)


def _arrow_chunk(rb, spec: EventSpec, lines: np.ndarray | None, kind: _TagKind,
                 source: str) -> _Chunk:
    cols = dict(zip(rb.schema.names, rb.columns))
    n = rb.num_rows
    problems: dict[int, tuple[str | None, str]] = {}
    if isinstance(spec.type, str):
        codes, names, bad = _types_from_arrow(cols[spec.type])
    else:
        column = spec.type.column
        codes, names, bad = _classes_from_arrow(cols[column], spec.type, source,
                                                rb.schema.field(column).metadata)
    _add(problems, _type_column(spec), bad)
    tags, is_time = None, False
    if spec.tag is not None:
        tags, is_time, bad = _tags_from_arrow(cols[spec.tag], kind, spec.tag, source)
        _add(problems, spec.tag, bad)
    columns, text_codes = {}, {}
    for a in _attribute_names(spec, cols):
        columns[a], encoded = _attribute_column(rb, a)
        if encoded is not None:
            text_codes[a] = encoded
    return _Chunk(n, lines, tags, is_time, codes, names, columns, problems, spec.tag,
                  text_codes)


def _fixed_numpy(arr, dtype) -> np.ndarray:
    """A copy of a fixed-width Arrow array's values (garbage under nulls). pyarrow's
    ``to_numpy`` would import pandas where it is installed: 0.3 s of a command's start."""
    if not len(arr) or arr.null_count == len(arr):
        return np.zeros(len(arr), dtype=dtype)
    size = np.dtype(dtype).itemsize
    return np.frombuffer(arr.buffers()[1], dtype=dtype, count=len(arr),
                         offset=arr.offset * size).copy()


def _null_mask(arr) -> np.ndarray:
    """True where an Arrow array is null."""
    if not arr.null_count:
        return np.zeros(len(arr), dtype=bool)
    if arr.null_count == len(arr):
        return np.ones(len(arr), dtype=bool)
    valid = np.unpackbits(np.frombuffer(arr.buffers()[0], dtype=np.uint8),
                          count=arr.offset + len(arr), bitorder="little")
    return valid[arr.offset:] == 0


def _indices(arr) -> np.ndarray:
    """The int32 indices of a dictionary array, -1 where null."""
    codes = _fixed_numpy(arr.indices, _numpy_type(arr.indices.type)).astype(np.int32)
    codes[_null_mask(arr.indices)] = -1
    return codes


def _plain_arrow(arr):
    import pyarrow as pa

    return arr.dictionary_decode() if pa.types.is_dictionary(arr.type) else arr


def _types_from_arrow(arr):
    import pyarrow as pa
    import pyarrow.compute as pc

    arr = _plain_arrow(arr)
    if not _is_text(arr.type):
        arr = arr.cast(pa.string())
    encoded = pc.dictionary_encode(arr)
    codes = _indices(encoded)
    names = encoded.dictionary.to_pylist()
    if "" in names:
        codes[codes == names.index("")] = -1
    bad = {i: "type is missing" for i in np.flatnonzero(codes < 0).tolist()}
    return codes, names, bad


def _classes_from_arrow(arr, classes: TypeClasses, source: str, field_metadata=None):
    arr = _plain_arrow(arr)
    if _is_text(arr.type) and _INFERRED in (field_metadata or {}):
        raw = arr.to_pylist()
        return _classify(np.array([_float_or_nan(v) for v in raw]), classes, raw)
    if not _is_numeric(arr.type):
        raise EventError(f"type classes need a numeric column, not {arr.type}", source,
                         field=classes.column)
    return _classify(_numeric_from_arrow(arr), classes)


def _numpy_type(t) -> np.dtype | None:
    """The numpy type of an Arrow integer, float32/64 or timestamp column's values (None:
    another type, converted by a cast). Casts go through pyarrow.compute, whose import
    costs a command about 0.1 s."""
    import pyarrow as pa

    if pa.types.is_integer(t):
        return np.dtype(f"{'i' if pa.types.is_signed_integer(t) else 'u'}{t.bit_width // 8}")
    if pa.types.is_float32(t) or pa.types.is_float64(t):
        return np.dtype(f"f{t.bit_width // 8}")
    if pa.types.is_timestamp(t):
        return np.dtype(np.int64)
    return None


def _numeric_from_arrow(arr) -> np.ndarray:
    """float64 of a numeric column; integers beyond 2**53 are rounded (tags, type classes)."""
    import pyarrow as pa

    dtype = _numpy_type(arr.type)
    if dtype is None:
        arr, dtype = arr.cast(pa.float64(), safe=False), np.float64
    out = _fixed_numpy(arr, dtype).astype(np.float64, copy=False)
    out[_null_mask(arr)] = np.nan
    return out


def _attribute_from_arrow(arr) -> np.ndarray:
    """A numeric attribute: float64, or exact Python ints when an integer is beyond 2**53."""
    import pyarrow as pa

    if pa.types.is_integer(arr.type) and arr.null_count < len(arr):
        values = _fixed_numpy(arr, _numpy_type(arr.type))[~_null_mask(arr)]
        if values.min() < -EXACT_INT or values.max() > EXACT_INT:
            out = np.empty(len(arr), dtype=object)
            out[:] = arr.to_pylist()
            return out
    return _numeric_from_arrow(arr)


def _seconds_from_arrow(arr) -> np.ndarray:
    """Seconds since the epoch of a timestamp/date column, NaN where null."""
    import pyarrow as pa

    if pa.types.is_date32(arr.type):  # days
        seconds = _fixed_numpy(arr, np.int32) * 86400.0
    else:
        if pa.types.is_date(arr.type):
            arr = arr.cast(pa.timestamp("s"))
        scale = {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}[arr.type.unit]
        seconds = _fixed_numpy(arr, np.int64) / scale
    seconds[_null_mask(arr)] = np.nan
    return seconds


def _is_time(t) -> bool:
    import pyarrow as pa

    return pa.types.is_timestamp(t) or pa.types.is_date(t)


def _is_text(t) -> bool:
    import pyarrow as pa

    return pa.types.is_string(t) or pa.types.is_large_string(t)


def _is_numeric(t) -> bool:
    """Numbers, booleans (1/0) and all-null columns: read as float64."""
    import pyarrow as pa

    return (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)
            or pa.types.is_decimal(t) or pa.types.is_null(t))


def _tags_from_arrow(arr, kind: _TagKind, column: str, source: str):
    """(tags, is_time, reasons): typed columns at once, text columns value by value."""
    arr = _plain_arrow(arr)
    if _is_time(arr.type):
        tags, is_time = _seconds_from_arrow(arr), True
    elif _is_text(arr.type):
        tags, bad = _tags_from_values(arr.to_pylist(), kind)
        return tags, bool(kind.is_time), bad
    elif _is_numeric(arr.type):
        tags, is_time = _numeric_from_arrow(arr), False
    else:
        raise EventError(f"a tag column must hold numbers or timestamps, not {arr.type}",
                         source, field=column)
    raw = arr.to_pylist() if not np.isfinite(tags).all() else None
    bad = {}
    for i in np.flatnonzero(~np.isfinite(tags)).tolist():
        bad[i] = "tag is missing" if raw[i] is None else f"tag is not a finite number ({raw[i]})"
    return tags, is_time, bad


def _attribute_column(rb, name: str) -> tuple[np.ndarray, TextCodes | None]:
    """An attribute of a record batch, and its dictionary encoding if it is text; a CSV
    column read as text where its inferred type did not fit keeps its numbers as numbers,
    value by value, as JSON Lines do."""
    metadata = rb.schema.field(name).metadata or {}
    if _INFERRED not in metadata:
        return _column_from_arrow(rb.column(name))
    return _column_from_values([_number_or_text(v) for v in rb.column(name).to_pylist()]), None


def _number_or_text(v: str | None) -> object:
    for number in (int, float):
        try:
            return number(v)
        except (TypeError, ValueError):
            pass
    return v


def _column_from_arrow(arr) -> tuple[np.ndarray, TextCodes | None]:
    import pyarrow as pa

    if pa.types.is_dictionary(arr.type) and _is_text(arr.type.value_type):
        return _text_from_dictionary(arr)
    arr = _plain_arrow(arr)
    if _is_time(arr.type):
        return _seconds_from_arrow(arr), None
    if _is_numeric(arr.type):
        return _attribute_from_arrow(arr), None
    if _is_text(arr.type):
        return _text_from_dictionary(arr.dictionary_encode())
    out = np.empty(len(arr), dtype=object)
    out[:] = [None if v is None else _text(v) for v in arr.to_pylist()]
    return out, None


def _text_from_dictionary(arr) -> tuple[np.ndarray, TextCodes]:
    """A text column from a dictionary array: each distinct text one str object."""
    codes = _indices(arr)
    values = arr.dictionary.to_pylist()
    if None in values:  # a null in the dictionary itself: a missing value, code -1
        codes[np.isin(codes, [i for i, v in enumerate(values) if v is None])] = -1
    return text_column(codes, values)
