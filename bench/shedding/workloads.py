"""Streams and workloads of the shedding benchmark.

Flights: the ``flights`` preset (type = delay class, tag = scheduled departure in seconds),
partitioned by ``origin``; trained on January-March 2001, tested on April-June. Without
``--data`` the quick mode uses the 20,000 flights embedded in ``acep`` (two days of January:
the first half trains, the second tests), so tests need no network.

Synthetic: seeded *sensor* streams. Each partition emits noise events at rate 1 per time unit
(types ``a b c`` common, ``d e`` rare, ``x`` filler) and, now and then, a planted motif
``a b c d e`` whose gaps are drawn from a range. The drift stream plants fast motifs in its
first half and slow ones in its second, with more noise ``d e`` events, so the cells that
lead to matches (remaining window, gap) change midway.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import UTC, datetime

import numpy as np

from acep.demo import demo_events
from acep.events import EventBatch

from .. import data

RISING = ("late.delay > ontime.delay", "verylate.delay > late.delay + 30")


@dataclass(frozen=True)
class Workload:
    """A pattern over a stream, with the window (in tag units) and error bound."""

    name: str
    stream: str  # "flights", "synthetic" or "drift"
    pattern: str
    window: float
    k: int
    where: tuple[str, ...] = ()
    partition: str | None = None
    note: str = ""

    def describe(self) -> dict:
        return {**asdict(self), "where": list(self.where)}

    def matcher_args(self) -> dict:
        return {"pattern": self.pattern, "window": self.window, "k": self.k,
                "where": list(self.where), "partition": self.partition}


WORKLOADS = (
    Workload("rising-delays", "flights", "ontime late late+ verylate", 3600.0, 1, RISING,
             "origin", "delays building up (acep demo), parameterized predicates: merging "
             "cannot collapse the nodes"),
    Workload("delay-wave", "flights", "late verylate late", 3600.0, 1, (), "origin",
             "a late flight, a very late one, a late one again within an hour"),
    Workload("rare-verylate", "flights", "verylate verylate verylate", 1800.0, 0, (), "origin",
             "selective: three very late departures (5% of flights) within 30 minutes"),
    Workload("sensors", "synthetic", "a b c d e", 10.0, 1, (), "sensor",
             "planted motifs in noise, gaps U(0.3, 1.8), 100 sensors"),
    Workload("sensors-drift", "drift", "a b c d e", 10.0, 1, (), "sensor",
             "the drift stream: fast motifs (gaps U(0.1, 0.6)) then slow ones "
             "(gaps U(1.6, 2.3)) and more noise d/e, switching at half the test stream"),
)
DRIFT_WORKLOAD = "sensors-drift"


# --------------------------------------------------------------------------- flights

def _utc(year: int, month: int) -> float:
    return datetime(year, month, 1, tzinfo=UTC).timestamp()


TRAIN = (_utc(2001, 1), _utc(2001, 4))
TEST = (_utc(2001, 4), _utc(2001, 7))


def rebase(batch: EventBatch, start: int, stop: int) -> EventBatch:
    """Events ``start..stop-1`` as a stream of their own (positions from 0)."""
    part = batch.slice(start, stop)
    return EventBatch(part.type_codes, part.type_names, part.tags, part.columns, 0,
                      part.source, part.lines, part.tag_is_time)


def between(batch: EventBatch, lo: float, hi: float, days: float | None = None) -> EventBatch:
    """The events with tags in ``[lo, hi)`` (``[lo, lo + days)`` when ``days`` is given)."""
    if days is not None:
        hi = min(hi, lo + days * 86400.0)
    i, j = np.searchsorted(batch.tags, [lo, hi], side="left")
    return rebase(batch, int(i), int(j))


def flights_split(path: str | None, days: float | None = None) -> dict:
    """Train and test streams of flights: Jan-Mar / Apr-Jun 2001, or the embedded sample.

    ``days`` keeps only the first days of each period (quick runs with ``--data``).
    """
    if path is None:
        sample = demo_events()
        half = len(sample) // 2
        return {"train": rebase(sample, 0, half), "test": rebase(sample, half, len(sample)),
                "source": "embedded sample (acep/data/flights-sample.jsonl.gz), "
                          "first half trains, second half tests"}
    batch = data.read_flights(data.flights_path(path))
    return {"train": between(batch, *TRAIN, days=days), "test": between(batch, *TEST, days=days),
            "source": f"flights-3m.parquet ({data.FLIGHTS_PACKAGE}), train 2001-01..03, "
                      f"test 2001-04..06" + (f", first {days:g} days of each" if days else "")}


# --------------------------------------------------------------------------- synthetic

@dataclass(frozen=True)
class SensorSpec:
    """One phase of the sensor generator."""

    gap: tuple[float, float]  # motif gaps drawn uniformly from this range
    noise: tuple[float, ...] = (0.25, 0.25, 0.25, 0.02, 0.02, 0.21)  # a b c d e x
    motif_every: float = 60.0  # mean time between motifs in one sensor


TYPES = ("a", "b", "c", "d", "e", "x")
PLANTED = "planted"  # the sensors' column: 1 for an event of a planted motif, 0 for noise
STEADY = SensorSpec((0.3, 1.8))
DRIFT = (SensorSpec((0.1, 0.6)), SensorSpec((1.6, 2.3), (0.22, 0.22, 0.22, 0.06, 0.06, 0.22)))


def sensors(duration: float, specs: tuple[SensorSpec, ...], sensors: int = 100,
            seed: int = 0) -> EventBatch:
    """Sensor events over ``[0, duration)``, the phases splitting it evenly; sorted by tag."""
    rng = np.random.default_rng(seed)
    span = duration / len(specs)
    parts = [_phase(rng, i * span, span, spec, sensors) for i, spec in enumerate(specs)]
    tags = np.concatenate([p[0] for p in parts])
    codes = np.concatenate([p[1] for p in parts])
    who = np.concatenate([p[2] for p in parts])
    planted = np.concatenate([p[3] for p in parts])
    order = np.argsort(tags, kind="stable")
    names = np.array([f"s{i:03d}" for i in range(sensors)], dtype=object)
    return EventBatch(codes[order].astype(np.int32), list(TYPES), tags[order],
                      {"sensor": names[who[order]], PLANTED: planted[order]}, 0,
                      "<synthetic sensors>")


def _phase(rng, t0: float, span: float, spec: SensorSpec, n: int):
    """Noise and motifs of one phase: (tags, type codes, sensor ids, planted: 1 for the
    events of a motif, 0 for noise)."""
    count = rng.poisson(span * n)
    tags = [t0 + rng.random(count) * span]
    codes = [rng.choice(len(TYPES), size=count, p=spec.noise)]
    who = [rng.integers(0, n, count)]
    motifs = rng.poisson(span * n / spec.motif_every)
    starts = t0 + rng.random(motifs) * span
    gaps = rng.uniform(*spec.gap, size=(motifs, 4))
    times = starts[:, None] + np.concatenate([np.zeros((motifs, 1)), gaps.cumsum(1)], axis=1)
    keep = times[:, -1] < t0 + span
    tags.append(times[keep].ravel())
    codes.append(np.tile(np.arange(5), int(keep.sum())))
    who.append(np.repeat(rng.integers(0, n, motifs)[keep], 5))
    planted = np.repeat(np.array([0, 1], np.int8), [count, 5 * int(keep.sum())])
    return np.concatenate(tags), np.concatenate(codes), np.concatenate(who), planted


def synthetic_split(workload: Workload, duration: float, seed: int) -> dict:
    """Train and test streams of a synthetic workload (different seeds); for the drift
    stream also ``retrain``, a stream of the drifted regime: what a trainer would ship once
    the drift is known, the reference RL is measured by (None for the others)."""
    retrain = None
    if workload.stream == "drift":
        train = sensors(duration, DRIFT[:1], seed=seed)
        test = sensors(duration, DRIFT, seed=seed + 1)
        retrain = sensors(duration, DRIFT[1:], seed=seed + 2)
        note = (f"train: phase 1 only; test: phase 1 for {duration / 2:g}, then phase 2; "
                f"retrained reference: phase 2 only, seed {seed + 2}")
    else:
        train = sensors(duration, (STEADY,), seed=seed)
        test = sensors(duration, (STEADY,), seed=seed + 1)
        note = "train and test: the same generator, seeds differ"
    return {"train": train, "test": test, "retrain": retrain, "source": f"synthetic sensors, "
            f"{duration:g} time units, 100 sensors, seed {seed}; {note}"}
