"""Events and the readers that turn files into columnar event batches.

An event is a *type*, a *tag* (a number or a timestamp) and attributes: :class:`Event` in
row form, :class:`EventBatch` in columns. :func:`read_events` reads JSON Lines, CSV, Parquet
and msgpack files (or JSON Lines on stdin) in batches, as an :class:`EventSpec` maps their
columns. The reading contract (conversions, lines, bad events) is in ``docs/DESIGN.md``,
Events and readers.
"""

from .model import Event, EventBatch, EventError
from .reading import (
    RowChunk,
    file_size_hint,
    format_of,
    read_all,
    read_chunks,
    read_events,
)
from .rows import _live_lines as _live_lines  # its tests read a descriptor's lines
from .spec import PRESETS, EventSpec, TypeClasses, not_an_attribute
from .values import (
    EXACT_INT,
    as_object_column,
    iso_texts,
    partition_hash,
    partition_key,
    tag_text,
)

__all__ = [
    "EventError", "Event", "EventBatch", "TypeClasses", "EventSpec", "PRESETS",
    "read_events", "read_all", "read_chunks", "RowChunk", "file_size_hint", "partition_hash",
    "partition_key",
    "as_object_column", "EXACT_INT", "iso_texts", "tag_text", "not_an_attribute", "format_of",
]
