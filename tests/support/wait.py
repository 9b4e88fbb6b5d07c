"""Polling with a deadline: the tests wait for what a process or a thread does, never sleep."""

from __future__ import annotations

import time
from collections.abc import Callable

WAIT = 45.0  # seconds: the default deadline of one wait on a loaded 2-core machine


def wait_for(condition: Callable, what: str | Callable[[], str], timeout: float = WAIT,
             every: float = 0.05):
    """Poll ``condition`` until it returns a true value, and return that value.

    After ``timeout`` seconds it fails with an AssertionError naming ``what`` (a text, or a
    function that makes it then, to show a log as it is at the failure).
    """
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            said = what() if callable(what) else what
            raise AssertionError(f"timed out after {timeout:g}s waiting for {said}")
        time.sleep(every)
    return value


def eventually(condition: Callable, timeout: float, every: float = 0.02) -> bool:
    """Poll ``condition`` for at most ``timeout`` seconds; whether it became true."""
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(every)
    return bool(condition())
