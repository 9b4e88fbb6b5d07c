"""``acep demo``, ``acep sample`` and ``acep backend``: the whole loop on one machine, the
matcher on the embedded flights, and which kernel runs."""

from __future__ import annotations

import argparse
import json
import math

from .._output import tag_value
from .._text import counted
from ..arguments import UsageError, path_arg, real_number, whole_number
from ..matcher import MatchBatch, Matcher, bundles


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """Register ``acep demo``, ``acep sample`` and ``acep backend`` on ``sub``."""
    demo = sub.add_parser(
        "demo", help="the whole loop on one machine: collector, Spark trainer, agent, report",
        description="Start a collector on loopback, train a history sketch with Spark on the "
                    "first days of the embedded week of flights, run an agent on the rest at "
                    "a tenth of the unconstrained operations, and report bundle recall "
                    "(needs pip install 'acep[demo]' and Java 17).")
    demo.add_argument("--workdir", type=path_arg,
                      help="where everything is written (default: a new "
                           "temporary directory, kept)")
    demo.add_argument("--data", type=path_arg,
                      help="a flights Parquet file instead of the embedded week")
    demo.add_argument("--train-days", type=_days, default=4.0,
                      help="days of the stream to train on (default 4)")
    demo.add_argument("--budget", type=_share, default=0.10,
                      help="the agent's share of the unconstrained operations, in (0, 1] "
                           "(default 0.10)")
    demo.add_argument("--cores", type=whole_number(1, "cores"),
                      help="cores of the local Spark session")
    demo.set_defaults(run=run_demo)
    sample = sub.add_parser("sample", help="match a pattern on the embedded flights sample "
                                           "(the device side alone)")
    sample.add_argument("--limit", type=whole_number(0, "matches to print"), default=10,
                        help="matches to print")
    sample.set_defaults(run=run_sample)
    backend = sub.add_parser("backend", help="say which matcher kernel runs")
    backend.add_argument("--all", action="store_true",
                         help="one line per compiled module (kernel, exact core, JSON Lines "
                              "reader, lines writer, collector listing): compiled or python")
    backend.set_defaults(run=run_backend)


# acep demo --budget: a share of the unconstrained operations
_share = real_number("share", lambda v: 0 < v <= 1, "in (0, 1]")
_days = real_number("days", lambda v: 0 < v < math.inf, "> 0")  # acep demo --train-days


def run_backend(args: argparse.Namespace) -> int:
    """``acep backend``: the kernel's backend; with ``--all`` every compiled module's."""
    if not args.all:
        print(_backend_name())
        return 0
    from .._backend import modules

    for what, name, compiled in modules():
        print(f"{what:<18} {'compiled' if compiled else 'python':<9} {name}")
    return 0


def _backend_name() -> str:
    from .. import backend

    return backend()


def run_demo(args: argparse.Namespace) -> int:
    """The end-to-end loop (``trainer.demo``): its input checked before any process starts,
    Ctrl-C, SIGTERM and failures (Spark's too) one line."""
    from trainer.demo import DemoInputError
    from trainer.demo import main as demo_main
    from trainer.spark import check_installed, run_command, terminate_on_sigterm

    def run(args) -> int:
        try:
            import aiohttp  # noqa: F401 - the collector's server
            import pyarrow  # noqa: F401
            import pyspark  # noqa: F401
        except ImportError as exc:
            raise UsageError(f"the demo needs {exc.name!r}: pip install 'acep[demo]'") \
                from None
        check_installed()
        with terminate_on_sigterm():
            return demo_main(args.workdir, args.data, args.budget, args.train_days,
                             args.cores)

    return run_command("acep demo", run, args, (UsageError, DemoInputError))


def run_sample(args: argparse.Namespace) -> int:
    """Match rising departure delays at each airport on the embedded flights sample."""
    from ..demo import DEMO, demo_events

    batch = demo_events()
    matcher = Matcher(DEMO["pattern"], DEMO["window"], DEMO["k"], where=DEMO["where"],
                      partition="origin")
    found = MatchBatch.concat([matcher.match_batch(batch), matcher.flush()])
    print(f"# pattern {DEMO['pattern']!r} where {' and '.join(DEMO['where'])}")
    print(f"# within {DEMO['window'] / 3600:g} h, k = {DEMO['k']}, partitioned by origin airport;"
          f" {len(batch):,} flights of January 2001, types = delay classes")
    matches = sorted(found.to_matches(), key=lambda m: (m.point, str(m.partition)))
    for m in matches[: args.limit]:
        print(json.dumps({"partition": m.partition, "start": tag_value(m.start, True),
                          "point": tag_value(m.point, True), "errors": m.errors,
                          "events": [tag_value(t, True) for t in m.tags]}))
    exact = sum(m.errors == 0 for m in matches)
    print(f"# {counted(len(matches), 'match point')} ({exact:,} exact, {len(matches) - exact:,} "
          f"missing one event) in {counted(len(bundles(found, DEMO['window'])), 'bundle')}; "
          f"{matcher.kernel_name} kernel, {counted(matcher.stats['created'], 'match node')} "
          "created")
    return 0
