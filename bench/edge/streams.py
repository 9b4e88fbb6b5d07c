"""The event streams of the edge benchmark, as JSON Lines files an agent can follow.

The full run writes a slice of the flights Parquet file (:mod:`bench.data`) as JSON Lines,
one event per line in the shape ``acep`` reads (``type``, ``t`` as an ISO timestamp and the
attributes). The quick run without ``--data`` uses the 20,000 flights embedded in the
package (``acep/data/flights-sample.jsonl.gz``), repeated with shifted times if more are
asked for, so the test needs no download and no shared file.
"""

from __future__ import annotations

import gzip
import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import acep

from .. import data

__all__ = ["PATTERN", "SAMPLE", "write_flights_jsonl", "write_sample_jsonl", "write_stream",
           "pattern_table"]

SAMPLE = Path(acep.__file__).with_name("data") / "flights-sample.jsonl.gz"

# The benchmark's pattern: a delay that builds up at one airport within an hour, with a
# predicate the collector's exact re-check translates (a sequence of single types, +).
PATTERN = {"id": "buildup", "text": "ontime late+ verylate", "window": 3600.0, "k": 1,
           "partition": "origin", "where": ["verylate.delay > late.delay + 30"]}


def pattern_table() -> str:
    """The ``[pattern]`` section of an agent.toml for :data:`PATTERN`."""
    where = ", ".join(json.dumps(w) for w in PATTERN["where"])
    return (f'[pattern]\nid = "{PATTERN["id"]}"\ntext = "{PATTERN["text"]}"\n'
            f'window = {PATTERN["window"]}\nk = {PATTERN["k"]}\n'
            f'partition = "{PATTERN["partition"]}"\nwhere = [{where}]\n')


def write_flights_jsonl(parquet: Path, dest: Path, n: int | None) -> int:
    """The first ``n`` flights (all if None) of ``parquet`` as JSON Lines; returns the count."""
    names = ("early", "ontime", "late", "verylate")
    table = data.read_flights_table(parquet, list(data.FLIGHTS_COLUMNS))
    if n is not None:
        table = table.slice(0, n)
    written = 0
    with open(dest, "w") as out:
        for rb in table.to_batches(max_chunksize=1 << 16):
            cols = rb.to_pydict()
            lines = []
            for date, delay, dist, origin, dest_ in zip(cols["date"], cols["delay"],
                                                        cols["distance"], cols["origin"],
                                                        cols["destination"]):
                kind = names[(delay >= 0) + (delay >= 15) + (delay >= 60)]
                lines.append(json.dumps({"type": kind, "t": _iso(date), "delay": delay,
                                         "distance": dist, "origin": origin,
                                         "destination": dest_}))
            out.write("\n".join(lines) + "\n")
            written += len(lines)
    return written


def _iso(value) -> str:
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%dT%H:%M:%S")
    return str(value)


def write_sample_jsonl(dest: Path, n: int) -> int:
    """``n`` events from the embedded 20,000-flight sample, repeated a year later each time
    it runs out (times stay increasing); returns the count."""
    with gzip.open(SAMPLE, "rt") as fh:
        rows = [json.loads(line) for line in fh if line.strip()]
    written = 0
    with open(dest, "w") as out:
        lap = 0
        while written < n:
            shift = timedelta(days=366 * lap)
            for row in rows[:n - written]:
                t = datetime.fromisoformat(row["t"]) + shift
                out.write(json.dumps({**row, "t": t.strftime("%Y-%m-%dT%H:%M:%S")}) + "\n")
            written = min(n, written + len(rows))
            lap += 1
    return written


def flights_source(path: str | None) -> Path:
    """The flights Parquet file (:func:`bench.data.flights_path`)."""
    return data.flights_path(path)


_ = timezone  # timestamps are naive UTC, as in the Parquet file


def write_stream(dest: Path, data_path: str | None, quick: bool, n: int | None) -> dict:
    """The stream as JSON Lines: flights (``--data`` or the cache) or, in quick mode without
    ``--data``, the embedded sample."""
    if quick and data_path is None:
        count = write_sample_jsonl(dest, n or 20_000)
        return {"source": "acep/data/flights-sample.jsonl.gz", "events": count}
    parquet = data.flights_path(data_path)
    count = write_flights_jsonl(parquet, dest, n)
    return {"source": parquet.name, "events": count}
