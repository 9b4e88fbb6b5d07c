"""Rate-limited logging, for messages one bad input (or one bad device) could repeat
thousands of times a second; and the unexpected errors of a background job of the agent
said once per streak."""

from __future__ import annotations

import logging
import time

from acep.utils import one_line

__all__ = ["LogLimiter", "Crashes", "Failing", "LOG_LEVELS", "one_line", "duration"]

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


class Crashes:
    """The unexpected errors in a row (a bug, an answer no code path expects) of one
    background job of the agent: the uploads, the metrics, the sketch checks. Such an error
    must not end the job's thread (the agent would go on for days without it, saying
    nothing): the thread catches it, calls :meth:`failed`, waits and tries again.

    The first error of a streak is logged at ERROR with its traceback and ``then`` (what
    happens now); the next ones at debug level with when the job tries again, and the end
    of the streak (:meth:`ended`) at info level. ``streak`` counts them; :meth:`failed`
    returns ``"unexpected error: <type>: <message>"`` for the metrics (``upload_error``,
    ``sketch_error``, ``metrics_error``)."""

    def __init__(self, logger: logging.Logger, job: str, then: str):
        self.log, self.job, self.then = logger, job, then
        self.streak = 0

    def failed(self, exc: BaseException, wait: float) -> str:
        """Say ``exc`` (once per streak); the job tries again in ``wait`` seconds."""
        self.streak += 1
        error = f"unexpected error: {type(exc).__name__}: {one_line(exc)}"
        if self.streak == 1:
            self.log.error("%s failed (%s); %s", self.job, error, self.then, exc_info=exc)
        else:
            self.log.debug("%s still fail (%s); next try in %.1fs", self.job, error, wait)
        return error

    def ended(self) -> None:
        """The job ran through without one: the streak is over (said at info level, if
        there was one)."""
        if self.streak:
            self.log.info("%s no longer fail unexpectedly (after %d failed attempt%s)",
                          self.job, self.streak, "s" if self.streak > 1 else "")
            self.streak = 0


class Failing:
    """Why a job of the agent fails now and since when: the metrics' ``<job>_error`` and
    ``<job>_failing_since`` (the Unix time the streak of failures began; None while the
    job works), which the collector's ``/metrics`` turns into a 0/1 gauge and a time to
    alert on."""

    def __init__(self):
        self.why: str | None = None
        self.since: float | None = None

    def set(self, why: str | None) -> None:
        """The job fails for ``why`` now (None: it works)."""
        if why is None:
            self.since = None
        elif self.why is None:
            self.since = time.time()
        self.why = why


def duration(seconds: float) -> str:
    """``seconds`` in the largest unit that fits: ``"2.0 hours"``, ``"45 s"``."""
    for unit, size in (("years", 365.25 * 86400), ("days", 86400), ("hours", 3600),
                       ("minutes", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.0f} s"
