"""The uplink wire format: versioned msgpack upload batches, decoded with limits.

``docs/WIRE.md`` is the contract. Two kinds of document share one header:

* ``"matches"`` (:class:`UploadBatch`): every match with its trajectory, plus the events of
  the match windows, deduplicated and in columns, so the collector can re-check each window
  with the exact engine.
* ``"summary"`` (:class:`SummaryBatch`): the condensed variant for thin links, one row per
  (partition, time slot) with counts of matches and bundles and the first/last match point
  (a time-based frequency operator over jumping windows, Ma & Taylor).

Numeric columns travel as little-endian raw bytes of a fixed dtype per field; nothing is
pickled, there are no ext types, and every decode error is a :class:`WireError` that names
the bad field. The device side imports only numpy and msgpack.

The package: the data model (:mod:`~edge.wire.model`), writing (:mod:`~edge.wire.encode`),
reading with limits (:mod:`~edge.wire.decode`) and building batches on the device
(:mod:`~edge.wire.batches`); every name other modules use is imported here.
"""

from acep.ids import ID_RULE, valid_id

from .batches import Condenser, batch_from_matches, derived_seq, split_body, sub_batch
from .decode import (
    ARCHIVE_RESERVED,
    decode,
    decode_batch,
    decode_condensed,
    partition_group_key,
    redate,
)
from .encode import encode_batch, encode_condensed, plain_list, wire_value
from .model import (
    FORMAT,
    KINDS,
    LOOPBACK,
    VERSION,
    Limits,
    PatternRef,
    SummaryBatch,
    UploadBatch,
    WireError,
    batch_id,
    pattern_hash,
    sketch_etag,
)

__all__ = [
    "FORMAT", "VERSION", "WireError", "Limits", "PatternRef", "UploadBatch", "SummaryBatch",
    "Condenser", "ARCHIVE_RESERVED", "partition_group_key", "pattern_hash", "batch_id",
    "encode_batch", "decode_batch", "encode_condensed", "decode_condensed", "decode",
    "batch_from_matches", "redate", "ID_RULE", "valid_id", "derived_seq", "sub_batch",
    "split_body", "KINDS", "LOOPBACK", "sketch_etag", "wire_value", "plain_list",
]
