"""The deadlines of one upload: how long its body, its answer and the upload as a whole may take.

A :class:`Deadline` is a time budget that each byte received earns a little more of
(:data:`ANSWER_MIN_RATE`); the body's and the upload's say which limit ran out when they
expire (:class:`BodyTimeout`, :class:`UploadTimeout`: retried like timeouts). The rules
are in ``docs/WIRE.md`` (Agent, Uploads).
"""

from __future__ import annotations

import time

__all__ = ["Deadline", "BodyDeadline", "UploadDeadline", "AnswerTimeout", "BodyTimeout",
           "UploadTimeout", "ANSWER_MIN_RATE"]

# bytes/s an answer's body, and a request's, must keep up past collector.answer_timeout (each
# byte buys 1/rate s more): the collector's --body-min-rate default, 8 kbit/s; a sketch of
# sketch.max_bytes (1 MiB) over 100 kbit/s takes 84 s, a trickle of a byte a second buys
# nothing
ANSWER_MIN_RATE = 1024.0


class AnswerTimeout(TimeoutError):
    """No whole answer in the time a :class:`Deadline` gave it: retried as a timeout."""


class BodyTimeout(TimeoutError):
    """A request's body not across in the time a :class:`BodyDeadline` gave it: retried
    as a timeout."""


class Deadline:
    """When an answer must have come whole: ``seconds`` from :meth:`restart` (the request
    across the link), and 1/:data:`ANSWER_MIN_RATE` s more per byte of its body
    (:meth:`earn`). ``name`` is the setting that gave ``seconds``, for the message."""

    def __init__(self, seconds: float, name: str | None = None):
        self.seconds, self.name = float(seconds), name
        self.bound: Deadline | None = None  # the upload's (UploadDeadline), when sooner
        self.restart()

    def restart(self) -> None:
        self.started = time.monotonic()
        self.at, self.earned = self.started + self.seconds, 0

    def earn(self, n: int) -> None:
        self.at += n / ANSWER_MIN_RATE
        self.earned += n
        if self.bound is not None:
            self.bound.earn(n)

    def binding(self) -> Deadline:
        """This deadline, or its ``bound`` when that comes sooner."""
        if self.bound is not None and self.bound.at < self.at:
            return self.bound.binding()
        return self

    def left(self) -> float:
        """Seconds left; the :meth:`binding` deadline's error when none are."""
        deadline = self.binding()
        left = deadline.at - time.monotonic()
        if left <= 0:
            raise deadline.expired()
        return left

    def wait(self, timeout: float) -> float:
        """``timeout``, or the seconds left when fewer (:meth:`left`)."""
        return min(timeout, self.left())

    def expired(self) -> AnswerTimeout:
        said = f"no whole answer within {self.seconds:g} s"
        if self.name:
            said += f" ({self.name})"
        if self.earned:
            said += (f", and its body came slower than {ANSWER_MIN_RATE:g} bytes/s "
                     f"({self.earned} bytes in {time.monotonic() - self.started:.1f} s)")
        return AnswerTimeout(said)


class BodyDeadline(Deadline):
    """When a request's ``size`` bytes of body must have got across (handed to the kernel
    in pieces, and acknowledged by the collector where that can be asked: :func:`_drain`):
    ``seconds`` and 1/:data:`ANSWER_MIN_RATE` s more per byte, from :meth:`restart` (the
    connection made, or the body's start after ``100 Continue``). A collector that keeps
    its receive window almost shut holds an upload no longer than that."""

    def __init__(self, seconds: float, size: int, name: str | None = None):
        self.size, self.base = size, float(seconds)
        self.moved = -float("inf")  # when the body last moved: sent, or acknowledged in part
        super().__init__(self.base + size / ANSWER_MIN_RATE, name)

    def expired(self) -> BodyTimeout:
        given = f"{self.name}, {self.base:g} s" if self.name else f"{self.base:g} s"
        return BodyTimeout(
            f"the body did not get across within {self.seconds:g} s ({given}, and "
            f"{1024 / ANSWER_MIN_RATE:g} s per KiB of its {self.size} bytes): the collector "
            f"took it slower than {ANSWER_MIN_RATE:g} bytes/s")


class UploadTimeout(TimeoutError):
    """An upload not over in the time an :class:`UploadDeadline` gave it (its resends
    after a ``417`` or ``415`` included): retried as a timeout."""


class UploadDeadline(Deadline):
    """When one upload, all its requests included, must be over:
    :meth:`Uplink.upload_bound` seconds from its start (``named``: the Uplink's timeouts
    gave them, not a request's own, for the message); nothing restarts it."""

    def __init__(self, seconds: float, size: int, named: bool = True):
        self.size = size
        super().__init__(seconds, "collector.timeout, the wait for 100 Continue, twice "
                         "collector.answer_timeout" if named else None)

    def expired(self) -> UploadTimeout:
        given = f"{self.name} and " if self.name else ""
        return UploadTimeout(
            f"the upload did not end within {self.seconds:g} s ({given}1 s per KiB of its "
            f"{self.size} bytes), its resends after a 417 or 415 included")
