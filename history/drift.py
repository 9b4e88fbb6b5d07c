"""When to retrain a device's sketch: its matches per event fell (docs/TRAINING.md)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

__all__ = ["FindsDrop", "Retrain", "when_to_retrain", "MIN_MATCHES"]

MIN_MATCHES = 50  # the fewest uploaded matches a retrain from the uploads trains on


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


@dataclass(frozen=True)
class Retrain:
    """What :func:`when_to_retrain` decided: retrain or not, from which day, and why."""

    retrain: bool
    since: str | None  # the first UTC day to train on (None: every day)
    why: str
    days: list[dict] = field(default_factory=list)  # day, events, matches, p_value, fell


def when_to_retrain(finds: Sequence[tuple[str, int, int]], published: str | None,
                    uploaded: Mapping[str, int], today: str, drop: float = 0.1,
                    alpha: float = 0.01, min_matches: int = MIN_MATCHES) -> Retrain:
    """Whether the fleet's finds fell since its sketch was published, and the first day to
    train on: the rule of docs/TRAINING.md ("When the finds drop").

    The days after ``published`` and before ``today`` (whole UTC days) are the periods of a
    :class:`FindsDrop`; the first with events is the reference. From the first day that
    fell, the uploads since it began are trained on once they hold ``min_matches``.

    Parameters
    ----------
    finds : sequence of (day, events, matches)
        The devices' events read and matches found per UTC day (``YYYY-MM-DD``), as the
        collector records them from the heartbeats.
    published : str or None
        The UTC day the sketch in use was published; None when none was: retrain.
    uploaded : mapping of day to int
        Matches the collector received per UTC day.
    today : str
        The UTC day now; it is not whole, so not a period.
    drop, alpha : float
        The fall that matters and the test's level (:class:`FindsDrop`).
    min_matches : int
        The fewest uploaded matches to train on.

    Returns
    -------
    Retrain

    Examples
    --------
    >>> from history.drift import when_to_retrain
    >>> finds = [("2026-03-01", 100_000, 300), ("2026-03-02", 100_000, 290),
    ...          ("2026-03-03", 100_000, 150)]
    >>> decided = when_to_retrain(finds, "2026-02-28", {"2026-03-03": 150}, "2026-03-04")
    >>> decided.retrain, decided.since
    (True, '2026-03-03')
    """
    if published is None:
        return Retrain(True, None, "no sketch of the pattern is published yet")
    trigger, days, fell_on = FindsDrop(drop, alpha), [], None
    for day, events, matches in sorted(finds):
        if not published < day < today:
            continue
        fell = trigger.update(int(matches), int(events))
        days.append({"day": day, "events": int(events), "matches": int(matches),
                     "p_value": trigger.last_p_value, "fell": fell})
        fell_on = fell_on or (day if fell else None)
    if fell_on is None:
        return Retrain(False, None, _steady(trigger, days, published), days)
    since = sum(n for day, n in uploaded.items() if day >= fell_on)
    p = next(d["p_value"] for d in days if d["day"] == fell_on)
    if since < min_matches:
        return Retrain(False, fell_on, f"the finds fell on {fell_on} (p = {p:.2g}), but the "
                       f"uploads since hold {since} matches, fewer than {min_matches}", days)
    return Retrain(True, fell_on, f"the finds fell on {fell_on} (p = {p:.2g}); training on "
                   f"the {since} matches uploaded since", days)


def _steady(trigger: FindsDrop, days: list[dict], published: str) -> str:
    if trigger.reference is None:
        return f"no whole day with events since the sketch was published on {published}"
    rate = trigger.reference[0] / trigger.reference[1]
    last = days[-1]
    return (f"the finds have not dropped since the sketch was published on {published} "
            f"({len(days)} days; matches per event {rate:.3g} on the first, "
            f"{last['matches'] / max(last['events'], 1):.3g} on {last['day']})")
