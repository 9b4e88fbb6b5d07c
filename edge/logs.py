"""Rate-limited logging, for messages one bad input (or one bad device) could repeat
thousands of times a second."""

from __future__ import annotations

import logging
import time

__all__ = ["LogLimiter", "LOG_LEVELS"]

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")  # --log-level of acep agent and acep serve


class LogLimiter:
    """At most ``burst`` messages per ``period`` seconds, then one line saying how many
    ``what`` were left out (the counts are in the metrics)."""

    def __init__(self, logger: logging.Logger, burst: int = 20, period: float = 60.0,
                 what: str = "bad lines or events"):
        self.log, self.burst, self.period, self.what = logger, int(burst), float(period), what
        self.started, self.logged, self.left_out = time.monotonic(), 0, 0

    def warning(self, msg: str, *args) -> None:
        self.emit(logging.WARNING, msg, *args)

    def error(self, msg: str, *args, exc_info=None) -> None:
        self.emit(logging.ERROR, msg, *args, exc_info=exc_info)

    def emit(self, level: int, msg: str, *args, exc_info=None) -> None:
        now = time.monotonic()
        if now - self.started >= self.period:
            if self.left_out:
                self.log.log(level, "%d more %s were not logged in the last %.0f s",
                             self.left_out, self.what, now - self.started)
            self.started, self.logged, self.left_out = now, 0, 0
        if self.logged < self.burst:
            self.logged += 1
            self.log.log(level, msg, *args, exc_info=exc_info)
        else:
            self.left_out += 1
