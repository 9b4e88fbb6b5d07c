"""The device agent, the msgpack wire format and the collector service (DESIGN.md).

The wire format (:mod:`edge.wire`, ``docs/WIRE.md``), the durable outbox
(:mod:`edge.outbox`) and the device agent (:mod:`edge.agent`: config, sources, budget
control, uplink; its MQTT source in :mod:`edge.mqtt`; its sketch in :mod:`edge.sketches`,
its progress in :mod:`edge.resume`, its outbox writes in :mod:`edge.commits`).
The collector is :mod:`edge.collector` (server side: aiohttp, pyarrow).
"""

import importlib

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

# The agent's and the outbox's names load on first use: `python -m edge.agent` (or
# edge.outbox) must not find the module already imported by its own package (runpy would
# then run a second copy of it, and warns).
_LAZY = {"Agent": "agent", "main": "agent", "WallClockBudget": "budgeting",
         "Backoff": "outbox", "Due": "outbox", "Outbox": "outbox", "OutboxFull": "outbox",
         "AgentConfig": "config", "ConfigError": "config", "load_config": "config",
         "FileSource": "sources", "IteratorSource": "sources", "StdinSource": "sources",
         "MqttSource": "mqtt", "Uplink": "uplink", "Uploader": "uplink"}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'edge' has no attribute {name!r}")
