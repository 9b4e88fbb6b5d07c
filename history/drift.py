"""When to retrain a device's sketch: its matches per event fell (docs/TRAINING.md)."""

from __future__ import annotations

import math

__all__ = ["FindsDrop"]


class FindsDrop:
    """Tells, one period at a time, whether a device's matches per event have fallen.

    The first period with events is the reference: what the sketch finds as shipped. A
    later period has fallen when its matches per event are significantly below ``1 - drop``
    times the reference's, by a one-sided test of two Poisson rates (the period's matches,
    given both periods' total, are binomial). A trainer then retrains the sketch from the
    uploads since the first fallen period (``acep train --since``), once they hold enough
    matches to train on (docs/TRAINING.md, "When to retrain").

    Parameters
    ----------
    drop : float
        The relative fall in matches per event that matters, in [0, 1).
    alpha : float
        The test's level, in (0, 1).

    Attributes
    ----------
    reference : tuple of int or None
        The reference period's (matches, events); None until a period has events.
    last_p_value : float
        The p-value :meth:`update` computed for the last period (see :meth:`p_value`): 1.0
        before there is a reference, for the reference itself and for a period with no
        events. A caller that reports it reads it here instead of calling ``p_value``.

    Examples
    --------
    >>> from history import FindsDrop
    >>> trigger = FindsDrop()
    >>> trigger.update(300, 100_000)  # the first period: the reference
    False
    >>> trigger.update(290, 100_000)  # about as many as before
    False
    >>> trigger.update(150, 100_000)  # half as many
    True
    >>> trigger.last_p_value < trigger.alpha
    True
    """

    def __init__(self, drop: float = 0.1, alpha: float = 0.01):
        if not 0 <= drop < 1:
            raise ValueError(f"drop must be in [0, 1), not {drop!r}")
        if not 0 < alpha < 1:
            raise ValueError(f"alpha must be in (0, 1), not {alpha!r}")
        self.drop, self.alpha = drop, alpha
        self.reference: tuple[int, int] | None = None  # (matches, events)
        self.last_p_value: float = 1.0

    def update(self, matches: int, events: int) -> bool:
        """Records one period's matches and events; True when its finds have fallen."""
        if matches < 0 or events < 0 or matches > events:
            raise ValueError(f"a period has 0 <= matches <= events, not {matches} of {events}")
        self.last_p_value = 1.0
        if events == 0:
            return False
        if self.reference is None:
            self.reference = (matches, events)
            return False
        self.last_p_value = self.p_value(matches, events)
        return self.last_p_value < self.alpha

    def p_value(self, matches: int, events: int) -> float:
        """The chance of so few matches in ``events`` if the rate were ``1 - drop`` times
        the reference's (1.0 before there is a reference)."""
        if self.reference is None:
            return 1.0
        ref_matches, ref_events = self.reference
        scaled = events * (1 - self.drop)
        share = scaled / (ref_events + scaled)
        return binomial_cdf(matches, ref_matches + matches, share)


def binomial_cdf(k: int, n: int, p: float) -> float:
    """P(X <= k) for X ~ Binomial(n, p), as the regularized incomplete beta function
    I_{1-p}(n - k, k + 1).

    At most O(sqrt(n)) steps of a continued fraction (2 ms at n = 10^9), not k + 1 terms;
    relative error about n log(n) 1e-16, from the log-gamma terms (1e-8 at n = 5 * 10^6).
    """
    if k >= n or p <= 0.0:
        return 1.0
    if p >= 1.0:
        return 0.0
    a, b = n - k, k + 1  # I_q(a, b) with q = 1 - p
    log_q, log_p = math.log1p(-p), math.log(p)
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                     + a * log_q + b * log_p)
    if 1.0 - p < (a + 1) / (a + b + 2):  # where the fraction converges fast
        return min(1.0, front * _beta_fraction(a, b, 1.0 - p) / a)
    return max(0.0, 1.0 - front * _beta_fraction(b, a, p) / b)


_TINY, _EPS = 1e-300, 1e-15


def _beta_fraction(a: int, b: int, x: float) -> float:
    """The continued fraction of I_x(a, b) by the modified Lentz method (Numerical Recipes
    6.4), for x below (a + 1) / (a + b + 2)."""
    c, d = 1.0, _nonzero(1.0 - (a + b) * x / (a + 1))
    d = 1.0 / d
    h = d
    for m in range(1, 100 + 10 * math.isqrt(max(a, b))):
        for aa in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                   -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 / _nonzero(1.0 + aa * d)
            c = _nonzero(1.0 + aa / c)
            h *= d * c
        if abs(d * c - 1.0) < _EPS:
            return h
    raise ArithmeticError(f"the incomplete beta fraction did not converge (a={a}, b={b}, x={x})")


def _nonzero(v: float) -> float:
    return v if abs(v) >= _TINY else _TINY
