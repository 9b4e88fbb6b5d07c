"""The embedded demo: a sample of real US flights (the first 20,000 of January 2001).

Each flight is an event at its scheduled departure, typed by its departure delay
(early < 0 <= ontime < 15 <= late < 60 <= verylate minutes), partitioned by origin.
"""

from __future__ import annotations

import gzip
import json
from importlib import resources

from .events import EventBatch

SAMPLE = "flights-sample.jsonl.gz"

DEMO = {  # delays building up at an airport: on time, late twice or more, then very late
    "pattern": "ontime late late+ verylate",
    "where": ["late.delay > ontime.delay", "verylate.delay > late.delay + 30"],
    "window": 3 * 3600.0,
    "k": 1,
}


def demo_events() -> EventBatch:
    """The embedded flights sample as one event batch (tags: seconds since the epoch)."""
    with resources.files("acep").joinpath("data", SAMPLE).open("rb") as raw:
        with gzip.open(raw, "rt") as text:
            records = [json.loads(line) for line in text]
    return EventBatch.from_events(records, source=SAMPLE)
