"""The device agent, the msgpack wire format and the collector service (DESIGN.md).

The device agent is :mod:`edge.agent` (config, sources, budget control, outbox, uplink),
the wire format it shares with the collector :mod:`edge.wire` (``docs/WIRE.md``). The
collector is :mod:`edge.collector` (server side: aiohttp, pyarrow); importing :mod:`edge`
loads none of it.
"""

from .agent import (
    Agent,
    AgentConfig,
    Backoff,
    ConfigError,
    Due,
    FileSource,
    IteratorSource,
    MqttSource,
    Outbox,
    OutboxFull,
    StdinSource,
    Uplink,
    Uploader,
    WallClockBudget,
    load_config,
    main,
)
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
    "IteratorSource", "StdinSource", "MqttSource", "Uplink", "Uploader", "Backoff", "Due",
    "Outbox", "OutboxFull", "Condenser", "Limits", "PatternRef", "SummaryBatch", "UploadBatch",
    "WireError",
    "batch_from_matches", "batch_id", "decode", "decode_batch", "decode_condensed",
    "encode_batch", "encode_condensed", "pattern_hash",
]
