"""The device agent, the msgpack wire format and the collector service (DESIGN.md).

Built so far: the wire format (:mod:`edge.wire`, ``docs/WIRE.md``) and the durable outbox
(:mod:`edge.outbox`). The agent and the collector are not built yet.
"""

from .outbox import Backoff, Due, Outbox, OutboxFull
from .wire import (
    Condenser,
    Limits,
    PatternRef,
    SummaryBatch,
    UploadBatch,
    WireError,
    batch_from_matches,
    batch_id,
    decode,
    decode_batch,
    decode_condensed,
    encode_batch,
    encode_condensed,
    pattern_hash,
)

__all__ = [
    "Backoff", "Due", "Outbox", "OutboxFull", "Condenser", "Limits", "PatternRef",
    "SummaryBatch", "UploadBatch", "WireError", "batch_from_matches", "batch_id", "decode",
    "decode_batch", "decode_condensed", "encode_batch", "encode_condensed", "pattern_hash",
]
