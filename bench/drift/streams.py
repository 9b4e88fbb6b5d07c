"""The drift benchmark's streams: each a training stream (the old regime), a test stream that
drifts, and a ``new_regime`` training stream (what a trainer would ship once the drift is
known).

- ``switch``: sensor events (``bench.shedding.workloads.sensors``) with planted motifs
  ``a b c d e`` and planted *decoys* ``a b c`` (chains that start like a motif and never
  end one). Before the switch motifs have short gaps and decoys long ones; after it the
  other way round. A sketch of the old regime keeps the decoys' chains and sheds the
  motifs'.
- ``gradual``: the same two regimes, the test stream moving from one to the other in
  equal steps.
- ``flights-place``: flights of the hub airports, then of the regional ones: a device
  moved from a hub to the regional airports (``flights_place``).
- ``flights-weather``: flights of the storm days, then of the calm ones: a sketch trained
  on the winter's worst days, kept into an ordinary spring (``flights_weather``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from acep.demo import demo_events
from acep.events import EventBatch

from .. import data
from ..shedding.workloads import PLANTED, TEST, TRAIN, SensorSpec, between, rebase, sensors

SENSORS = 100
DECOY = 3  # a decoy is the motif's first three letters: a b c


@dataclass(frozen=True)
class Regime:
    """One phase of the synthetic streams: motifs and decoys with their gap ranges."""

    motif_gap: tuple[float, float]
    decoy_gap: tuple[float, float]
    motif_every: float = 60.0  # mean time between motifs in one sensor
    decoy_every: float = 6.0  # mean time between decoys in one sensor
    noise: tuple[float, ...] = SensorSpec((0, 0)).noise  # a b c d e x

    def sensor_spec(self) -> SensorSpec:
        return SensorSpec(self.motif_gap, self.noise, self.motif_every)


OLD = Regime((0.1, 0.5), (1.6, 2.4))  # fast motifs, slow decoys
NEW = Regime((1.6, 2.4), (0.1, 0.5))  # slow motifs, fast decoys


def blend(a: Regime, b: Regime, x: float) -> Regime:
    """The regime ``x`` of the way from ``a`` to ``b`` (gap ranges moved linearly)."""
    def mix(p, q):
        return tuple(float((1 - x) * u + x * v) for u, v in zip(p, q))
    return Regime(mix(a.motif_gap, b.motif_gap), mix(a.decoy_gap, b.decoy_gap),
                  (1 - x) * a.motif_every + x * b.motif_every,
                  (1 - x) * a.decoy_every + x * b.decoy_every, mix(a.noise, b.noise))


def regime_stream(duration: float, regimes: tuple[Regime, ...], seed: int) -> EventBatch:
    """Sensor events over ``[0, duration)``, the regimes splitting it evenly: the noise and
    motifs of ``sensors`` with the decoys added (``planted`` 0: they are noise)."""
    base = sensors(duration, tuple(r.sensor_spec() for r in regimes), SENSORS, seed)
    rng = np.random.default_rng(seed + 7919)
    span = duration / len(regimes)
    parts = [_decoys(rng, i * span, span, r) for i, r in enumerate(regimes)]
    tags = np.concatenate([base.tags, *(p[0] for p in parts)])
    codes = np.concatenate([base.type_codes, *(p[1] for p in parts)]).astype(np.int32)
    names = np.array([f"s{i:03d}" for i in range(SENSORS)], dtype=object)
    who = np.concatenate([base.columns["sensor"], *(names[p[2]] for p in parts)])
    planted = np.concatenate([base.columns[PLANTED], *(np.zeros(len(p[0]), np.int8)
                                                       for p in parts)])
    order = np.argsort(tags, kind="stable")
    return EventBatch(codes[order], base.type_names, tags[order],
                      {"sensor": who[order], PLANTED: planted[order]}, 0,
                      "<synthetic sensors with decoys>")


def _decoys(rng, t0: float, span: float, r: Regime):
    """(tags, type codes, sensor ids) of the decoys ``a b c`` of one phase."""
    count = rng.poisson(span * SENSORS / r.decoy_every)
    starts = t0 + rng.random(count) * span
    gaps = rng.uniform(*r.decoy_gap, size=(count, DECOY - 1))
    times = starts[:, None] + np.concatenate([np.zeros((count, 1)), gaps.cumsum(1)], axis=1)
    keep = times[:, -1] < t0 + span
    who = np.repeat(rng.integers(0, SENSORS, count)[keep], DECOY)
    return times[keep].ravel(), np.tile(np.arange(DECOY), int(keep.sum())), who


def synthetic(kind: str, duration: float, seed: int, steps: int = 8) -> dict:
    """Train, test and new-regime streams of ``switch`` or ``gradual``; ``switch`` (the
    share of the test stream after which it is in the new regime, or the middle of a
    gradual drift)."""
    if kind == "switch":
        test = regime_stream(duration, (OLD, NEW), seed + 1)
        note = f"test: old regime for {duration / 2:g} time units, then the new one"
    else:
        moves = tuple(blend(OLD, NEW, i / (steps - 1)) for i in range(steps))
        test = regime_stream(duration, moves, seed + 1)
        note = f"test: {steps} equal phases moving linearly from the old regime to the new"
    return {"train": regime_stream(duration, (OLD,), seed), "test": test,
            "new_regime": regime_stream(duration, (NEW,), seed + 2), "switch": 0.5,
            "source": f"synthetic sensors with decoys, {duration:g} time units, {SENSORS} "
                      f"sensors, seeds {seed} (train), {seed + 1} (test), {seed + 2} (new "
                      f"regime); {note}; old {asdict(OLD)}, new {asdict(NEW)}"}


# --------------------------------------------------------------------------- flights

HUBS = 20  # the busiest origins of the training period: the hubs


def flights_place(path: str | None) -> dict:
    """A device moved from the hubs to the regional airports: trained on the hubs (the
    ``HUBS`` busiest origins), tested on the hubs for the first half of the test period
    and on every other origin after; the new regime is the regional origins in the
    training period. Periods: January-March / April-June 2001, or the two halves of the
    embedded sample (quick runs)."""
    if path is None:
        events = demo_events()
        half = len(events) // 2
        train, test = rebase(events, 0, half), rebase(events, half, len(events))
        where = "embedded sample (acep/data/flights-sample.jsonl.gz), halves"
    else:
        events = data.read_flights(data.flights_path(path))
        train, test = between(events, *TRAIN), between(events, *TEST)
        where = f"flights-3m.parquet ({data.FLIGHTS_PACKAGE}), 2001-01..03 / 2001-04..06"
    hubs = busiest(train, HUBS)
    middle = (float(test.tags[0]) + float(test.tags[-1])) / 2
    at_hub = np.isin(test.columns["origin"], hubs)
    moved = np.where(test.tags < middle, at_hub, ~at_hub)
    return {"train": select(train, np.isin(train.columns["origin"], hubs)),
            "test": select(test, moved),
            "new_regime": select(train, ~np.isin(train.columns["origin"], hubs)),
            "switch": 0.5, "hubs": hubs,
            "source": f"{where}; train: the {HUBS} busiest origins of the training period; "
                      "test: those until the middle of the test period, every other origin "
                      "after; new regime: the other origins in the training period"}


STORMY = 0.9  # storm days: the late share of the day in the top decile of the data's days
CALM = 0.5  # calm days: at most the median late share
STORM_DAYS = 19  # the test stream's storm days are those of its first 19 days
MIN_UNIT = 100  # flights a day (an hour in the sample) needs to be rated


def flights_weather(path: str | None) -> dict:
    """A sketch trained on storm days, run on calm ones: trained on the storm days of
    January-March 2001 (the day's share of late departures, 15 minutes or more, in the
    top decile of the data's days), tested on the storm days of the first ``STORM_DAYS``
    days of April, then on the calm days (at most the median share) after; the new regime
    is the calm days of January-March. Every airport throughout. Quick runs: the hours of
    the embedded sample (above / at most the median share), its halves as the periods."""
    train, test, switch, where, unit = _weather_periods(path)
    shown = select(test[0], np.where(test[0].tags < switch, test[1], test[2]))
    span = float(shown.tags[-1]) - float(shown.tags[0])
    return {"train": select(train[0], train[1]), "test": shown,
            "new_regime": select(train[0], train[2]),
            "switch": (switch - float(shown.tags[0])) / span if span > 0 else 0.5,
            "source": f"{where}; train: the storm {unit}s of the training period; "
                      f"test: its storm {unit}s until the switch, the calm ones after; "
                      f"new regime: the calm {unit}s of the training period"}


def _weather_periods(path: str | None) -> tuple:
    """((train, storm, calm), (test, storm, calm), switch tag, description, unit name) of
    :func:`flights_weather`: the periods, with the masks of their storm and calm units."""
    if path is None:
        events = demo_events()
        a, b, c, d = 0, len(events) // 2, len(events) // 2, len(events)
        storm, calm = late_units(events, 3600.0, CALM, CALM)
        unit, where = "hour", ("embedded sample (acep/data/flights-sample.jsonl.gz), halves; "
                               "storm hours: late share above the median hour's, calm: at "
                               "most it")
    else:
        events = data.read_flights(data.flights_path(path))
        a, b = (int(i) for i in np.searchsorted(events.tags, TRAIN))
        c, d = (int(i) for i in np.searchsorted(events.tags, TEST))
        storm, calm = late_units(events, 86400.0, STORMY, CALM)
        unit, where = "day", (f"flights-3m.parquet ({data.FLIGHTS_PACKAGE}), 2001-01..03 / "
                              f"2001-04..06; storm days: late share in the top "
                              f"{1 - STORMY:.0%} of the days, calm: at most the median; "
                              f"switch {STORM_DAYS} days into the test period")
    train, test = rebase(events, a, b), rebase(events, c, d)
    switch = switch_time(test, 0.5) if path is None else TEST[0] + STORM_DAYS * 86400.0
    return (train, storm[a:b], calm[a:b]), (test, storm[c:d], calm[c:d]), switch, where, unit


def late_units(events: EventBatch, unit: float, stormy: float, calm: float) -> tuple:
    """(storm, calm) masks of the events: those of the time units (days, hours) whose share
    of late departures is above the ``stormy`` quantile of the units, or at most the
    ``calm`` one; units of fewer than ``MIN_UNIT`` flights are neither."""
    _, which, counts = np.unique((events.tags // unit).astype(np.int64), return_inverse=True,
                                 return_counts=True)
    late_codes = [events.type_names.index(t) for t in ("late", "verylate")]
    late = np.bincount(which, np.isin(events.type_codes, late_codes))
    share = late / counts
    rated = counts >= MIN_UNIT
    hi, lo = np.quantile(share[rated], [stormy, calm])
    storm, quiet = rated & (share > hi), rated & (share <= lo)
    return storm[which], quiet[which]


def busiest(events: EventBatch, n: int) -> list[str]:
    names, counts = np.unique(events.columns["origin"].astype(str), return_counts=True)
    return sorted(names[np.argsort(-counts, kind="stable")[:n]].tolist())


def select(events: EventBatch, keep: np.ndarray) -> EventBatch:
    """The events where ``keep`` holds, as a stream of their own."""
    idx = np.flatnonzero(keep)
    return EventBatch(events.type_codes[idx], events.type_names, events.tags[idx],
                      {k: v[idx] for k, v in events.columns.items()}, 0, events.source,
                      None, events.tag_is_time)


def switch_time(test: EventBatch, share: float) -> float:
    """The tag at ``share`` of the test stream's span: where the drift is marked."""
    lo, hi = float(test.tags[0]), float(test.tags[-1])
    return lo + share * (hi - lo)
