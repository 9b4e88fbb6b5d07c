"""Waiting on a descriptor: which streams can be waited on, and can one be read in time?

``select.select`` refuses descriptors numbered ``FD_SETSIZE`` (1024) or more with
``ValueError: filedescriptor out of range``, and a process that holds many connections or
files (a fleet of uploaders in one process, an agent embedded in a larger program) has
them. ``poll`` has no such limit; it is absent only where ``select`` has none either.
"""

from __future__ import annotations

import io
import os
import select
import stat

__all__ = ["live_descriptor", "readable"]

_MAX_SECONDS = (2**31 - 1) / 1000.0  # poll takes whole milliseconds in an int


def readable(fd, timeout: float | None) -> bool:
    """True when ``fd`` (a descriptor number or an object with ``fileno()``) has something
    to read, or its end, within ``timeout`` seconds (None, or beyond 24 days: wait as long
    as it takes)."""
    if timeout is not None:
        timeout = None if timeout >= _MAX_SECONDS else max(0.0, timeout)
    if not hasattr(select, "poll"):  # Windows: select takes any socket there
        return bool(select.select([fd], [], [], timeout)[0])
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLPRI)
    return bool(poller.poll(None if timeout is None else timeout * 1000.0))


def live_descriptor(stream) -> int | None:
    """The descriptor of ``stream`` when it is a pipe, socket or terminal that
    :func:`readable` can wait on, else None (a regular file never waits; off POSIX, a
    stream is read as it comes)."""
    if os.name != "posix":
        return None
    try:
        fd = stream.fileno()
        return None if stat.S_ISREG(os.fstat(fd).st_mode) else fd
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return None
