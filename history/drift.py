"""When to retrain a device's sketch: its matches per event fell (docs/TRAINING.md)."""

from __future__ import annotations

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
    """P(X <= k) for X ~ Binomial(n, p), by ``scipy.stats.binom`` (scipy comes with
    ``pip install "acep[learn]"``, not on a device; ``scipy.special.bdtr`` is off at
    hundreds of millions of trials)."""
    if k >= n or p <= 0.0:
        return 1.0
    if p >= 1.0:
        return 0.0
    try:
        from scipy.stats import binom
    except ImportError:
        raise ImportError('history.FindsDrop needs scipy: pip install "acep[learn]"') from None
    return float(binom.cdf(k, n, p))
