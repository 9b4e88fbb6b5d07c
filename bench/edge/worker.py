"""One measured process: ``python -m bench.edge.worker {engine,agent} ...`` prints a JSON line.

``engine``: the bare engine, ``acep.Matcher`` over the JSON Lines file read by acep's own
reader in chunks of ``--chunk`` events (no budget), then a flush. ``agent``: the device agent
of ``--config`` exactly as ``python -m edge.agent --config ...`` runs it (``Agent(load_config
(...)).run()``). Both report the processing seconds (the interpreter's start and imports
excluded), the matches, and the peak resident memory (``VmHWM``) after the imports and
at the end. ``--no-pyarrow`` hides pyarrow, as on a device that installed ``acep`` without
extras. ``--profile N`` (agent) also reports the N functions with the most own time.
"""

from __future__ import annotations

import argparse
import json
import logging
import resource
import sys
import time


def peak_rss_mib() -> float:
    """This process's peak resident set size so far, in MiB: ``VmHWM`` of /proc/self/status.

    Not ``ru_maxrss``: Linux carries the parent's peak over ``fork``/``exec`` into it, so a
    child of a big parent would report at least the parent's size."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_engine(path: str, chunk: int) -> dict:
    """The bare engine over ``path``; matching time is also reported on its own."""
    import acep
    from acep.events import read_events

    from .streams import PATTERN

    rss0 = peak_rss_mib()
    m = acep.Matcher(PATTERN["text"], PATTERN["window"], PATTERN["k"], where=PATTERN["where"],
                     partition=PATTERN["partition"])
    matches, events, matching = 0, 0, 0.0
    started = time.perf_counter()
    for batch in read_events(path, batch_size=chunk):
        t0 = time.perf_counter()
        matches += len(m.match_batch(batch))
        matching += time.perf_counter() - t0
        events += len(batch)
    matches += len(m.flush())
    seconds = time.perf_counter() - started
    stats = m.stats
    return {"events": events, "matches": matches, "seconds": seconds,
            "matching_seconds": matching, "rss_after_imports_mib": rss0,
            "peak_rss_mib": peak_rss_mib(), "peak_live": int(stats["peak_live"]),
            "arena_bytes": int(stats["arena_capacity"] * stats["bytes_per_node"])}


def run_agent(config: str, profile: int) -> dict:
    """The agent of ``config`` to the end of its (non-followed) file."""
    from edge.agent import Agent
    from edge.agent.config import load_config

    logging.basicConfig(level="WARNING", stream=sys.stderr)
    rss0 = peak_rss_mib()
    agent = Agent(load_config(config))
    started = time.perf_counter()
    if profile:
        import cProfile
        import pstats

        prof = cProfile.Profile()
        metrics = prof.runcall(agent.run)
    else:
        metrics = agent.run()
    seconds = time.perf_counter() - started
    out = {"events": metrics["events_in"], "matches": metrics["matches"], "seconds": seconds,
           "rss_after_imports_mib": rss0, "peak_rss_mib": peak_rss_mib(),
           "retained_events": metrics["retained_events"], "batches_put": metrics["batches_put"],
           "bytes_put": metrics["bytes_put"],
           "events_sampled": metrics["events_sampled"]}
    if profile:
        out["profile"] = _top(pstats.Stats(prof), profile)
    return out


def _top(stats, n: int) -> list[dict]:
    """The ``n`` functions with the most own time: name, own and cumulative seconds."""
    rows = []
    for (file, line, name), (_cc, _nc, tt, ct, _callers) in stats.stats.items():
        where = file.split("/site-packages/")[-1].split("/work/main/")[-1]
        rows.append({"function": f"{where}:{line}({name})", "own_s": tt, "cum_s": ct})
    rows.sort(key=lambda r: -r["own_s"])
    total = sum(r["own_s"] for r in rows)
    return [{**r, "own_share": r["own_s"] / total} for r in rows[:n]]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.edge.worker")
    ap.add_argument("what", choices=("engine", "agent"))
    ap.add_argument("--events", help="engine: the JSON Lines file")
    ap.add_argument("--chunk", type=int, default=1000)
    ap.add_argument("--config", help="agent: the agent.toml")
    ap.add_argument("--profile", type=int, default=0)
    ap.add_argument("--no-pyarrow", action="store_true",
                    help="run as on a device without pyarrow (acep then factorizes partition "
                         "keys with a dict instead of mapping pyarrow's shared libraries)")
    args = ap.parse_args(argv)
    if args.no_pyarrow:
        sys.modules["pyarrow"] = None  # import pyarrow raises ImportError
    if args.what == "engine":
        out = run_engine(args.events, args.chunk)
    else:
        out = run_agent(args.config, args.profile)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
