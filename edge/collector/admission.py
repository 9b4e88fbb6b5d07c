"""Admission of uploads at the collector: who may start an upload now, and who is told to
come back later.

Two limits keep the queue behind the exact re-check shorter than the agents' patience: at
most ``per_device`` uploads of one device at a time (``429``), and an expected wait of at
most ``max_wait`` seconds (``503``). The wait is PIE's queue-delay estimate (RFC 8033,
section 4.2): the backlog of decoded bytes over the departure rate. Both answers carry
``Retry-After``. The rules are in docs/WIRE.md, "The collector's HTTP API", Overload.
"""

from __future__ import annotations

import math
import random
import time
from collections import Counter
from dataclasses import dataclass

__all__ = ["Admission", "Refusal", "DEFAULT_MAX_WAIT", "DEFAULT_PER_DEVICE"]

DEFAULT_MAX_WAIT = 5.0  # seconds: half the agents' default request timeout (10 s)
DEFAULT_PER_DEVICE = 1
PRIOR_RATE = 1 << 20  # bytes/s assumed before the first measurement (a slow single board)
SAMPLE_BYTES = 1 << 20  # a departure-rate sample spans at least this many bytes ...
SAMPLE_SECONDS = 0.25  # ... and this long
WEIGHT = 0.25  # of a new sample in the departure rate's moving average
MAX_RETRY_AFTER = 60


@dataclass(frozen=True)
class Refusal:
    """Why an upload is not admitted: its HTTP ``status`` (429 or 503), ``retry_after``
    (whole seconds) and the ``reason`` sent to the device."""

    status: int
    retry_after: int
    reason: str


class Admission:
    """The backlog of admitted uploads, its departure rate and the two limits.

    Call :meth:`admit` before reading an upload's body and, when it returns None,
    :meth:`arrived` once the body is in and :meth:`done` exactly once when the upload is
    answered (whatever the answer). A body on its way (a device on a thin link takes
    minutes) is not in the backlog: the collector has no work with it yet, and counted it
    would hold up other devices' uploads for as long as it takes to arrive.
    ``saturated``: with this many uploads admitted the collector is busy all the time (one
    per re-check worker and one for the database thread). Fewer are always admitted (the
    collector has idle hands; PIE does not drop below two packets either), and the
    departure rate is measured over the time with at least this many only: fewer would
    measure how often devices send, not how fast the collector answers. ``max_wait`` 0
    turns the wait limit off (the per-device one stays)."""

    def __init__(self, max_wait: float = DEFAULT_MAX_WAIT,
                 per_device: int = DEFAULT_PER_DEVICE, saturated: int = 3,
                 clock=time.monotonic, rng: random.Random | None = None):
        if max_wait < 0 or not math.isfinite(max_wait):
            raise ValueError(f"max_wait must be a finite number of seconds >= 0, not {max_wait}")
        if per_device < 1:
            raise ValueError(f"per_device must be at least 1, not {per_device}")
        self.max_wait, self.per_device = float(max_wait), int(per_device)
        self.saturated = max(int(saturated), 1)
        self.clock, self.rng = clock, rng or random.Random()
        self.uploads = Counter()  # device -> its uploads admitted and not yet answered
        self.arriving = 0  # uploads admitted whose bodies are on their way
        self.pending = 0  # uploads whose bodies have arrived, not yet answered
        self.backlog = 0  # their bytes
        self.rate: float | None = None  # bytes/s, None before the first sample
        self._busy_since: float | None = None  # while saturated
        self._sample_seconds = 0.0  # saturated time of the sample so far (before busy_since)
        self._sample_bytes = 0

    def expected_wait(self, extra: int = 0) -> float:
        """Seconds an upload of ``extra`` bytes admitted now can expect to wait."""
        return (self.backlog + extra) / (self.rate or PRIOR_RATE)

    def admit(self, device: str, nbytes: int) -> Refusal | None:
        """None when ``device``'s upload of ``nbytes`` (its Content-Length, 0 when unknown:
        a gzipped body's decoded size is not known before it is read, and one body weighs
        little beside a backlog of ``max_wait``) is admitted; else the :class:`Refusal`."""
        if self.uploads[device] >= self.per_device:
            wait = max(self.expected_wait(), 1.0)
            return Refusal(429, self._seconds(wait), (
                f"device {device!r} has {self.uploads[device]} upload(s) being processed "
                f"(at most {self.per_device} at a time): send it again after that"))
        wait = self.expected_wait(nbytes)
        if self.max_wait and self.pending >= self.saturated and wait > self.max_wait:
            # unmeasured, the wait is a guess: ask again soon, when the rate is known
            known = wait if self.rate is not None else 1.0
            return Refusal(503, self._seconds(known * (1.0 + self.rng.random())), (
                f"collector busy: an upload now would wait about {wait:.1f} s (above "
                f"--max-wait {self.max_wait:g} s); send it again after Retry-After"))
        self.uploads[device] += 1
        self.arriving += 1
        return None

    def arrived(self, nbytes: int) -> None:
        """The body of an admitted upload is in, ``nbytes`` once decoded (the re-check's
        work, whatever the coding on the wire): it waits for the collector from now on
        (the backlog)."""
        self.arriving -= 1
        self.pending += 1
        self.backlog += max(int(nbytes), 0)
        if self.pending == self.saturated:
            self._busy_since = self.clock()

    def done(self, device: str, nbytes: int | None, worked: bool = True) -> None:
        """An admitted upload was answered: its body of ``nbytes`` (as :meth:`arrived`)
        had arrived (None: it never did, a body refused or cut off); ``worked``: it was
        decoded and re-checked. One answered without that work (a duplicate known by its
        digest, a body refused) left the backlog at once: counted in the departure rate it
        would make the rate look far higher than the re-check's, let in more than
        ``max_wait`` worth, and so cause the very timeouts and resent duplicates that
        inflate it further."""
        self.uploads[device] -= 1
        if self.uploads[device] <= 0:
            del self.uploads[device]
        if nbytes is None:
            self.arriving -= 1
            return
        self.backlog = max(self.backlog - int(nbytes), 0)
        if self._busy_since is not None and worked:
            self._sample_bytes += int(nbytes)
            self._measure()
        self.pending -= 1
        if self.pending < self.saturated and self._busy_since is not None:
            self._sample_seconds += self.clock() - self._busy_since
            self._busy_since = None

    def _measure(self) -> None:
        now = self.clock()
        seconds = self._sample_seconds + now - self._busy_since
        if self._sample_bytes < SAMPLE_BYTES or seconds < SAMPLE_SECONDS:
            return
        sample = self._sample_bytes / seconds
        self.rate = sample if self.rate is None else (1 - WEIGHT) * self.rate + WEIGHT * sample
        self._busy_since, self._sample_seconds, self._sample_bytes = now, 0.0, 0

    def _seconds(self, wait: float) -> int:
        return min(max(round(wait), 1), MAX_RETRY_AFTER)

    def gauges(self) -> dict[str, float]:
        """The numbers ``/metrics`` shows."""
        return {"uploads_pending": self.pending, "pending_bytes": self.backlog,
                "uploads_arriving": self.arriving,
                "expected_wait_seconds": round(self.expected_wait(), 3),
                "departure_rate_bytes": round(self.rate or 0.0, 1)}
