"""Days and the ``created_at`` bounds of the collector: the first day ``--retain-days``
keeps, and how far ahead of the collector's clock a batch may be.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

# seconds a batch's created_at may be ahead of the collector's clock (Kafka refuses records
# an hour ahead, KIP-937): a day, so time zones mistaken for UTC pass, a year 2100 does not
DEFAULT_MAX_AHEAD = 86400.0


@dataclass(frozen=True)
class ClockBounds:
    """The ``created_at`` a batch may have: at most ``max_ahead`` seconds ahead of the
    collector's clock, and not before the first day ``--retain-days`` keeps (a batch
    retention would delete at once: a device whose clock starts at 1970, a Raspberry Pi
    without a real-time clock before NTP has set it)."""

    max_ahead: float = DEFAULT_MAX_AHEAD
    retain_days: int | None = None

    def first_day(self, today: dt.date) -> dt.date | None:
        """The first day (UTC) retention keeps on ``today``; None: every day."""
        return first_day_kept(today, self.retain_days)

    def refusal(self, created_at: float, now: float) -> str | None:
        """What is wrong with ``created_at``, or None."""
        when = f"{dt.datetime.fromtimestamp(created_at, dt.UTC):%Y-%m-%d %H:%M:%S} UTC"
        ahead = created_at - now
        if ahead > self.max_ahead:
            return (f"field 'created_at': {when} is {ahead / 86400:.2f} days ahead of the "
                    f"collector's clock (more than --max-clock-ahead {self.max_ahead:g} s; "
                    "is the device's clock set?)")
        first = self.first_day(utc_day(now))
        if first is not None and created_at < midnight(first):
            return (f"field 'created_at': {when} is before {first.isoformat()}, the first "
                    f"day the collector keeps (--retain-days {self.retain_days}): retention "
                    "would delete the batch at once (is the device's clock set?)")
        return None


def midnight(day: dt.date) -> float:
    """The start of ``day`` (UTC), in seconds since the epoch."""
    return dt.datetime.combine(day, dt.time(), dt.UTC).timestamp()


def first_day_kept(today: dt.date, retain_days: int | None) -> dt.date | None:
    """The first day (UTC) ``--retain-days`` keeps on ``today``; None: every day."""
    return None if retain_days is None else today - dt.timedelta(days=retain_days)


def utc_day(when: float) -> dt.date:
    """The day (UTC) of ``when``, in seconds since the epoch."""
    return dt.datetime.fromtimestamp(when, dt.UTC).date()
