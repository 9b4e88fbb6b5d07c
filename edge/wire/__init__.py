"""The uplink wire format: versioned msgpack upload batches, decoded with limits.

docs/WIRE.md is the contract. Two kinds of document share one header: ``"matches"``
(:class:`UploadBatch`: matches with the events of their windows) and ``"summary"``
(:class:`SummaryBatch`: counts per partition and time slot, the frequency operator of
[M07] Ma & Taylor). Every decode error is a :class:`WireError` naming the bad field. The
package: :mod:`~edge.wire.model`, :mod:`~edge.wire.encode`, :mod:`~edge.wire.decode` and
:mod:`~edge.wire.batches`; every name other modules use is imported here.
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
