"""SIGTERM as an interrupt, for the commands that end with it (exit 143, docs/CLI.md)."""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager

__all__ = ["Terminated", "terminate_on_sigterm"]


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised as an interrupt so that ``finally`` blocks stop what a job started."""


@contextmanager
def terminate_on_sigterm():
    """While the block runs (in the main thread), SIGTERM raises :class:`Terminated`: the
    default action would end the process at once, leave its child processes running and
    its hidden temporary files beside the outputs."""
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread may set a handler
        return

    def raise_terminated(signum, frame):
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
