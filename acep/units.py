"""Duration units, shared by the command line's ``--window`` and the query language's
``WITHIN`` (``docs/EXACT.md`` 2.2). ``m`` means minutes, as it always has on the command line.
"""

from __future__ import annotations

from fractions import Fraction

__all__ = ["UNITS", "WITHIN_UNITS", "within_seconds"]

# The command line's table ("" is a bare number: tag units).
UNITS: dict[str, int] = {"": 1, "s": 1, "sec": 1, "second": 1, "seconds": 1, "m": 60, "min": 60,
                         "minute": 60, "minutes": 60, "h": 3600, "hour": 3600, "hours": 3600,
                         "d": 86400, "day": 86400, "days": 86400}

# WITHIN also knows milliseconds (EXACT.md 2.2, UNIT).
WITHIN_UNITS: dict[str, Fraction] = {
    **{name: Fraction(seconds) for name, seconds in UNITS.items()},
    "ms": Fraction(1, 1000), "millisecond": Fraction(1, 1000), "milliseconds": Fraction(1, 1000),
}


def within_seconds(number: str, unit: str = "") -> float | None:
    """``number`` (a decimal literal) times ``unit`` (case-insensitive, "" for tag units) in
    seconds, rounded once from the exact product; None when the unit is unknown. A product
    beyond the largest float raises ``ValueError``."""
    factor = WITHIN_UNITS.get(unit.lower())
    if factor is None:
        return None
    try:
        return float(Fraction(number) * factor)
    except OverflowError:
        raise ValueError(f"{number}{' ' + unit if unit else ''} is too large a window "
                         f"(at most {_LARGEST:.3g} seconds)") from None


_LARGEST = 1.7976931348623157e308
