"""The device agent, the msgpack wire format and the collector service (DESIGN.md).

The wire format (:mod:`edge.wire`, ``docs/WIRE.md``), the durable outbox
(:mod:`edge.outbox`) and the device agent (:mod:`edge.agent`: config, sources, budget
control, uplink). The collector is :mod:`edge.collector` (server side: aiohttp, pyarrow).
"""

from .agent import Agent, main
from .budgeting import WallClockBudget
from .config import AgentConfig, ConfigError, load_config
from .outbox import Backoff, Due, Outbox, OutboxFull
from .sources import FileSource, IteratorSource, StdinSource
from .uplink import Uplink, Uploader
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
    "Agent", "main", "WallClockBudget", "AgentConfig", "ConfigError", "load_config", "FileSource",
    "IteratorSource", "StdinSource", "Uplink", "Uploader", "Backoff", "Due", "Outbox",
    "OutboxFull", "Condenser", "Limits", "PatternRef", "SummaryBatch", "UploadBatch", "WireError",
    "batch_from_matches", "batch_id", "decode", "decode_batch", "decode_condensed",
    "encode_batch", "encode_condensed", "pattern_hash",
]
