"""Device and pattern ids: the one rule the collector, the agent's config and ``acep train
--publish`` check (docs/WIRE.md). The ids name archive folders, batch ids and sketch URLs."""

from __future__ import annotations

import re

__all__ = ["ID_RULE", "valid_id"]

ID_RULE = "[A-Za-z0-9._-]{1,64}"  # device and pattern ids alike
_ID_RE = re.compile(ID_RULE + r"\Z")


def valid_id(value: object) -> bool:
    """Whether ``value`` is a device or pattern id: 1-64 letters, digits, '.', '_', '-'."""
    return isinstance(value, str) and _ID_RE.match(value) is not None
