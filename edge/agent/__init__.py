"""The device agent: the program that runs on a device (``acep agent``, DESIGN.md).

:mod:`~edge.agent.loop` is the agent itself, :mod:`~edge.agent.cli` its command line; it
reads :mod:`~edge.agent.config`, takes events from :mod:`~edge.agent.sources` (or
:mod:`~edge.agent.mqtt`), keeps its batches in the :mod:`~edge.agent.outbox` and sends them
through :mod:`~edge.agent.uplink`. The wire format it shares with the collector is
:mod:`edge.wire` (``docs/WIRE.md``).
"""

from .budgeting import WallClockBudget
from .cli import main
from .config import AgentConfig, ConfigError, load_config
from .loop import Agent
from .mqtt import MqttSource
from .outbox import Outbox, OutboxFull
from .outbox_reader import Backoff, Due
from .sources import FileSource, IteratorSource, StdinSource
from .uplink import Uplink
from .uploader import Uploader

__all__ = [
    "Agent", "main", "WallClockBudget", "AgentConfig", "ConfigError", "load_config",
    "FileSource", "IteratorSource", "StdinSource", "MqttSource", "Uplink", "Uploader",
    "Backoff", "Due", "Outbox", "OutboxFull",
]
