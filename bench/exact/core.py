"""The compiled core of the shared-buffer engine beside ``shared.py`` (issue 43).

Both through ``Engine.run`` on the same parsed events, verbose output: ``core="off"`` (the
pure-Python engine, ``acep.nfab.shared``) and ``core="auto"`` (``acep.nfab.core``, compiled
when built), best of the repeats, garbage collector off; the matches are checked equal.
The queries follow the issue's table: Q1 and Q2 of SASE, and next-match over 10 symbols.
"""

from __future__ import annotations

import gc
import time

import numpy as np

from acep.events import Event
from acep.nfab.core import core_module, core_name
from acep.nfab.engine import Engine
from acep.nfab.query import parse_query

from .stock import stock_ticker

QUERIES = {  # name -> (query, stream)
    "Q1": ("PATTERN SEQ(Stock+ a[], Stock b) WHERE partition_contiguity(a[], b) "
           "{ [symbol] and a[i].price > a[i-1].price and b.price < a[a.LEN].price } WITHIN 500",
           "ticker"),
    "Q2": ("PATTERN SEQ(stock1 a, stock2 b, stock3 c) WHERE skip_till_next_match(a, b, c) "
           "{ [price] } WITHIN 10000", "three types"),
    "next-match, 10 symbols": (
        "PATTERN SEQ(Stock a, Stock+ b[], Stock c) WHERE skip_till_next_match(a, b[], c) "
        "{ [symbol] and a.volume < 100 and b[i].price > b[i-1].price and c.volume > 900 } "
        "WITHIN 100", "ticker"),
}
STREAMS = {
    "ticker": "bench/exact/stock.py: 10 symbols, p = 0.7, seed 2008",
    "three types": "types stock1..stock3 uniform, price uniform in 1..1000, seed 2008",
}


def three_types(n: int, seed: int = 2008) -> list[Event]:
    """``n`` events of types stock1..stock3 with a uniform price (Q2's stream)."""
    rng = np.random.default_rng(seed)
    kinds = rng.integers(1, 4, n).tolist()
    prices = rng.integers(1, 1001, n).tolist()
    return [Event(f"stock{k}", float(i), {"price": p}) for i, (k, p) in
            enumerate(zip(kinds, prices))]


def _best(engine: Engine, events: list[Event], repeats: int) -> tuple[float, list]:
    best, found = float("inf"), []
    for _ in range(repeats):
        gc.collect()
        gc.disable()
        try:
            start = time.perf_counter()
            found = engine.run(events)
            best = min(best, time.perf_counter() - start)
        finally:
            gc.enable()
    return best, found


def compiled_core(n: int, repeats: int) -> dict:
    """Events/s of ``shared.py`` and of the core on each query, and their ratio."""
    streams = {"ticker": stock_ticker(n, 10, 0.7, 2008), "three types": three_types(n)}
    rows = []
    for name, (text, stream) in QUERIES.items():
        events = streams[stream]
        query = parse_query(text)
        row = {"query": name, "text": text, "stream": STREAMS[stream], "events": n}
        outputs = {}
        for system, core in (("shared", "off"), ("core", "auto")):
            engine = Engine(query, engine="shared", core=core)
            seconds, outputs[system] = _best(engine, events, repeats)
            row[system] = {"events_per_s": n / max(seconds, 1e-9), "seconds": seconds,
                           "ran": engine.core}
        row["matches"] = len(outputs["core"])
        row["same_matches"] = outputs["core"] == outputs["shared"]
        row["speedup"] = row["shared"]["seconds"] / max(row["core"]["seconds"], 1e-9)
        rows.append(row)
    return {"core": core_name(core_module()), "repeats": repeats, "rows": rows}


def core_table(results: dict) -> list[str]:
    """The README's table of :func:`compiled_core`."""
    section = results.get("compiled_core")
    if not section:
        return ["(not measured in this run)"]
    lines = [f"core: {section['core']}", "",
             "| query | events | matches | shared.py events/s | core events/s | speedup | "
             "same matches |", "|---|---:|---:|---:|---:|---:|:---:|"]
    for r in section["rows"]:
        lines.append(f"| {r['query']} | {r['events']:,} | {r['matches']:,} | "
                     f"{r['shared']['events_per_s']:,.0f} | {r['core']['events_per_s']:,.0f} "
                     f"| {r['speedup']:.1f}x | {'yes' if r['same_matches'] else '**no**'} |")
    return lines
