"""Throttling of failed authentications at the collector, per client address
(``docs/WIRE.md``, Security, "Throttled guessing").

Every token the collector checks costs a lookup in its database thread, the one that
stores the uploads. A client that sends wrong (or no) tokens as fast as the collector
answers would guess for free and slow down every device. So the collector counts the
requests it refuses with ``401`` per client address: after ``failures`` of them within
``window`` seconds, the address is *throttled* for ``window`` seconds. While it is, every
request of it that needs a token is answered ``429`` with ``Retry-After`` before its token
is looked at, a correct one included: a token checked while throttled would be a guess
answered (``200`` against ``401``), and the limit would stop nothing. The count starts
again when the throttle ends, or ``window`` seconds after an address's first counted
failure.

What this bounds and what it does not:

- the guesses of one address: ``failures`` per ``window`` seconds, plus the requests
  already past the check when the limit is reached (one per connection it holds open);
- the table: at most ``capacity`` addresses. Addresses are kept in the order of their
  last failure; those quiet for a whole window are dropped first, and beyond
  ``capacity`` the one with the oldest last failure, throttled or not (a client with
  more addresses than that gets ``failures`` guesses from each anyway);
- devices behind one NAT or proxy share an address, and so its limit: one of them with
  a wrong token uses it up for all (their agents hold their uploads for ``Retry-After``,
  as after any ``429``). ``failures`` 0 turns the throttle off.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["AuthThrottle", "DEFAULT_FAILURES", "DEFAULT_WINDOW", "MAX_ADDRESSES"]

DEFAULT_FAILURES = 20  # refused tokens of one address ...
DEFAULT_WINDOW = 60.0  # ... within this many seconds throttle it for as long
MAX_ADDRESSES = 10_000  # about 2 MB of records at most


@dataclass
class _Record:
    """One address's refused tokens: since when they count, how many, the last one, and
    until when the address is throttled (0: it is not)."""

    since: float
    failures: int = 0
    last: float = 0.0
    until: float = 0.0


class AuthThrottle:
    """The refused tokens of each client address and which addresses are throttled.

    Call :meth:`retry_after` before checking a request's token (a number: answer ``429``
    with that ``Retry-After``, check nothing) and :meth:`failed` when the token is
    refused. ``clock``: seconds, monotonic."""

    def __init__(self, failures: int = DEFAULT_FAILURES, window: float = DEFAULT_WINDOW,
                 capacity: int = MAX_ADDRESSES, clock: Callable[[], float] = time.monotonic):
        if failures < 0:
            raise ValueError(f"failures must be 0 (off) or more, not {failures}")
        if not window > 0 or not math.isfinite(window):
            raise ValueError(f"window must be a finite number of seconds > 0, not {window}")
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, not {capacity}")
        self.failures, self.window = int(failures), float(window)
        self.capacity, self.clock = int(capacity), clock
        self.records: dict[str, _Record] = {}  # in the order of their last failure

    def retry_after(self, address: str) -> int | None:
        """Whole seconds until a token of ``address`` is checked again; None: now."""
        record = self.records.get(address)
        if record is None:
            return None
        left = record.until - self.clock()
        return max(math.ceil(left), 1) if left > 0 else None

    def failed(self, address: str) -> bool:
        """Count a refused token of ``address``; True when that throttles it."""
        if not self.failures:
            return False
        now = self.clock()
        record = self.records.pop(address, None)
        if record is None or now - record.since >= self.window or 0 < record.until <= now:
            record = _Record(since=now)
        begins = record.until <= now and record.failures + 1 >= self.failures
        record.failures += 1
        record.last = now
        if begins:  # a late failure (checked before the throttle began) does not extend it
            record.until = now + self.window
        self.records[address] = record
        self._bound(now)
        return begins

    def _bound(self, now: float) -> None:
        """Drop the addresses quiet for a window (their count would start again, and no
        throttle outlasts a window), then the oldest beyond ``capacity``."""
        while self.records:
            address, record = next(iter(self.records.items()))
            if now - record.last < self.window and len(self.records) <= self.capacity:
                return
            del self.records[address]

    def gauges(self) -> dict[str, int]:
        """The numbers ``/metrics`` shows."""
        now = self.clock()
        return {"auth_failing_addresses": sum(now - r.last < self.window
                                              for r in self.records.values()),
                "auth_throttled_addresses": sum(r.until > now for r in self.records.values())}
