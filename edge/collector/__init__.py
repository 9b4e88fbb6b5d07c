"""The collector: the aiohttp service devices upload their matches to (``docs/WIRE.md``).

``python -m edge.collector`` (or ``acep serve``, :mod:`edge.collector.cli`) runs it; the
:class:`Collector` (:mod:`edge.collector.service`) is composed of one part per concern,
and the other modules are what only the server uses (store, archive, re-check, admission,
metrics). The names below load on first use, so that ``edge.collector.store`` or
``edge.collector.archive`` import without aiohttp.
"""

import importlib

__all__ = ["Collector", "make_app", "main", "serve", "DEFAULT_PORT", "DEFAULT_MAX_BODY"]

_LAZY = {"Collector": "service", "DEFAULT_MAX_BODY": "service", "ClockBounds": "clock",
         "prepare_rows": "ingest", "make_app": "server", "serve": "server",
         "server_tls": "server", "ListenError": "server", "DEFAULT_PORT": "server",
         "main": "cli", "read_metrics_token": "cli"}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'edge.collector' has no attribute {name!r}")
