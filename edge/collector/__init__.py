"""The collector: the aiohttp service devices upload their matches to (``docs/WIRE.md``).

``python -m edge.collector`` (or ``acep serve``) runs it. :mod:`edge.collector.service`
holds the :class:`Collector`; the other modules are the parts only the server uses
(store, archive, re-check, admission, metrics). Its names load on first use, so that
``edge.collector.store`` or ``edge.collector.archive`` import without aiohttp.
"""

import importlib

__all__ = ["Collector", "make_app", "main", "serve", "DEFAULT_PORT", "DEFAULT_MAX_BODY"]

_LAZY = {name: "service" for name in (
    "Collector", "ClockBounds", "ListenError", "make_app", "main", "prepare_rows",
    "read_metrics_token", "serve", "server_tls", "DEFAULT_PORT", "DEFAULT_MAX_BODY")}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'edge.collector' has no attribute {name!r}")
