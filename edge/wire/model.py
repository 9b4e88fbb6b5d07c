"""The wire format's data model: the batches, the pattern they came from, the limits a
reader applies, and :class:`WireError` (``docs/WIRE.md``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field

import msgpack
import numpy as np

FORMAT = "acep.upload"
VERSION = 1
KINDS = ("matches", "summary")
LOOPBACK = ("127.0.0.1", "localhost", "::1")  # collector hosts plain HTTP never leaves


def sketch_etag(data: bytes) -> str:
    """The ETag of a published sketch (``GET /v1/sketches/{id}``): the hex SHA-256 of its
    signed bytes. The collector sends it; an agent compares the sketch it holds with it."""
    return hashlib.sha256(data).hexdigest()


class WireError(ValueError):
    """An upload that cannot be accepted; the message names the bad field."""


@dataclass(frozen=True)
class Limits:
    """What a reader accepts. The defaults suit a collector; a device may lower them."""

    max_bytes: int = 16 << 20
    max_matches: int = 1 << 20
    max_events: int = 1 << 22
    max_trajectory: int = 1 << 24
    max_columns: int = 256
    max_types: int = 1 << 16
    max_partitions: int = 1 << 20
    max_slots: int = 1 << 20
    max_str_len: int = 4096
    max_depth: int = 6

    def __post_init__(self):
        for name, value in self.__dict__.items():
            if type(value) is not int or value < 1:
                raise ValueError(f"Limits.{name} must be a positive int, not {value!r}")


@dataclass(frozen=True)
class PatternRef:
    """Which pattern produced the matches; ``hash`` is :func:`pattern_hash` of the rest."""

    id: str
    text: str
    window: float
    k: int
    where: tuple[str, ...] = ()
    partition_by: str | None = None

    @property
    def hash(self) -> str:
        return pattern_hash(self.text, self.window, self.k, self.where, self.partition_by)


def pattern_hash(text: str, window: float, k: int, where: Sequence[str] = (),
                 partition_by: str | None = None) -> str:
    """SHA-256 (hex) of the canonical msgpack of the pattern's definition."""
    doc = [text, float(window), int(k), list(where), partition_by]
    return hashlib.sha256(msgpack.packb(doc, use_bin_type=True)).hexdigest()


def batch_id(device: str, seq: int) -> str:
    """The idempotency key: device id and its monotonically increasing sequence number."""
    return f"{device}/{seq}"


@dataclass
class Header:
    """What both kinds of batch carry: who sent it, its number, its pattern, when."""

    device: str
    seq: int
    pattern: PatternRef
    created_at: float
    tag_is_time: bool

    @property
    def batch_id(self) -> str:
        return batch_id(self.device, self.seq)


@dataclass
class UploadBatch(Header):
    """Matches (columns; ``trajectory[trajectory_ptr[i]:trajectory_ptr[i+1]]`` are the event
    positions of match i) and the events of their windows (sorted by position)."""

    partition: list = field(default_factory=list)
    point: np.ndarray = field(default_factory=lambda: np.zeros(0))
    start: np.ndarray = field(default_factory=lambda: np.zeros(0))
    errors: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))
    trajectory_ptr: np.ndarray = field(default_factory=lambda: np.zeros(1, np.int64))
    trajectory: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    event_position: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    event_tag: np.ndarray = field(default_factory=lambda: np.zeros(0))
    event_type: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))
    type_names: list[str] = field(default_factory=list)
    columns: dict[str, np.ndarray] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.point)


@dataclass
class SummaryBatch(Header):
    """Per (partition, slot) rows; slot j covers tags ``[origin + j*slot, origin + (j+1)*slot)``.
    ``bundles`` counts the bundles whose first point lies in the slot."""

    slot: float = 1.0
    origin: float = 0.0
    partition: list = field(default_factory=list)
    slot_index: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    matches: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    bundles: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    first: np.ndarray = field(default_factory=lambda: np.zeros(0))
    last: np.ndarray = field(default_factory=lambda: np.zeros(0))
    min_errors: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))

    def __len__(self) -> int:
        return len(self.slot_index)
