"""Throttling of failed authentications at the collector, per client.

Every token checked costs a lookup in the database thread that stores the uploads. So
:class:`AuthThrottle` counts the ``401`` answers per client (:func:`client_of`: an address,
an IPv6 one as its /64): after ``failures`` of them within ``window`` seconds, the client's
requests that need a token are answered ``429`` unchecked for ``window`` seconds. A check
counts as a failure from its start (:meth:`AuthThrottle.reserve`) until it ends well
(:meth:`AuthThrottle.release`). The rules and what they bound are in docs/WIRE.md,
"The collector's HTTP API", Throttled guessing.
"""

from __future__ import annotations

import ipaddress
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["AuthThrottle", "DEFAULT_FAILURES", "DEFAULT_WINDOW", "MAX_ADDRESSES", "client_of"]

DEFAULT_FAILURES = 20  # refused tokens of one client ...
DEFAULT_WINDOW = 60.0  # ... within this many seconds throttle it for as long
MAX_ADDRESSES = 10_000  # clients; about 2 MB of records at most
IPV6_CLIENT_PREFIX = 64  # bits of an IPv6 address that name its client


def client_of(address: str | None) -> str:
    """The client a peer address counts as: an IPv6 address's /64 network (``2001:db8::/64``),
    an IPv4-mapped IPv6 address's IPv4 address, an IPv4 address itself; ``?`` for none
    (a Unix socket), and text that is no IP address as it is."""
    if not address:
        return "?"
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.ip_network((ip, IPV6_CLIENT_PREFIX), strict=False))
    return str(ip)


@dataclass
class _Record:
    """One client's refused tokens: since when they count, how many, the last one, and
    until when the client is throttled (0: it is not)."""

    since: float
    failures: int = 0
    last: float = 0.0
    until: float = 0.0


class AuthThrottle:
    """The refused tokens of each client, its checks under way, and which clients are
    throttled (clients: :func:`client_of`).

    Call :meth:`retry_after` before checking a request's token (a number: answer ``429``
    with that ``Retry-After``, check nothing), then :meth:`reserve` (False: check nothing
    yet, wait for a :meth:`release`), and when the check ends :meth:`failed` if the token
    is refused and :meth:`release` in any case. ``clock``: seconds, monotonic."""

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
        self.checking: dict[str, int] = {}  # checks reserved and not yet released

    def retry_after(self, client: str) -> int | None:
        """Whole seconds until a token of ``client`` is checked again; None: now."""
        record = self.records.get(client)
        if record is None:
            return None
        left = record.until - self.clock()
        return max(math.ceil(left), 1) if left > 0 else None

    def reserve(self, client: str) -> bool:
        """Begin a check of a token of ``client``, counted as a failure until released;
        False (begin none) while its failures and checks under way are at the limit."""
        if not self.failures:
            return True
        record = self._current(client, self.clock())
        under_way = self.checking.get(client, 0)
        if (record.failures if record else 0) + under_way >= self.failures:
            return False
        self.checking[client] = under_way + 1
        return True

    def release(self, client: str) -> None:
        """End a check that :meth:`reserve` began (after :meth:`failed`, if refused)."""
        left = self.checking.pop(client, 0) - 1
        if left > 0:
            self.checking[client] = left

    def failed(self, client: str) -> bool:
        """Count a refused token of ``client``; True when that throttles it."""
        if not self.failures:
            return False
        now = self.clock()
        record = self._current(client, now) or _Record(since=now)
        self.records.pop(client, None)
        begins = record.until <= now and record.failures + 1 >= self.failures
        record.failures += 1
        record.last = now
        if begins:  # a late failure (checked before the throttle began) does not extend it
            record.until = now + self.window
        self.records[client] = record
        self._bound(now)
        return begins

    def _current(self, client: str, now: float) -> _Record | None:
        """The record of ``client`` whose failures still count, if any."""
        record = self.records.get(client)
        if record is None or now - record.since >= self.window or 0 < record.until <= now:
            return None
        return record

    def _bound(self, now: float) -> None:
        """Drop the clients quiet for a window (their count would start again, and no
        throttle outlasts a window), then the oldest beyond ``capacity``."""
        while self.records:
            client, record = next(iter(self.records.items()))
            if now - record.last < self.window and len(self.records) <= self.capacity:
                return
            del self.records[client]

    def gauges(self) -> dict[str, int]:
        """The numbers ``/metrics`` shows."""
        now = self.clock()
        return {"auth_failing_addresses": sum(now - r.last < self.window
                                              for r in self.records.values()),
                "auth_throttled_addresses": sum(r.until > now for r in self.records.values())}
