"""The device agent: events in, matches under a budget, batches into the outbox, uploads.

Its command line, ``acep agent --config agent.toml [--once] [--check]`` (or ``python -m
edge.agent``): :func:`main` parses the options, sets up logging and signals and runs an
:class:`~edge.agent.loop.Agent`, or the read-only checks of :mod:`edge.agent.preflight`.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys

from acep.arguments import path_arg

from ..logs import LOG_LEVELS
from .config import ConfigError, load_config
from .loop import Agent

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Run ``acep agent --config agent.toml [--once] [--check]``; returns the exit code.

    Parameters
    ----------
    argv : list of str, optional
        The arguments (default: ``sys.argv[1:]``).

    Returns
    -------
    int
        0 when the source ended or the agent was stopped; 2 for a config error.

    Examples
    --------
    >>> from edge.agent import main
    >>> main(["--config", "missing.toml"])   # one line on stderr names the file
    2
    """
    ap = argparse.ArgumentParser(prog="acep agent", description=__doc__.splitlines()[0])
    ap.add_argument("--config", required=True, type=path_arg, help="the agent.toml")
    ap.add_argument("--once", action="store_true",
                    help="process what the source holds now, upload what is due, exit")
    ap.add_argument("--log-level", default="INFO", type=str.upper, choices=LOG_LEVELS,
                    help="DEBUG, INFO (default), WARNING or ERROR; logged on stderr")
    ap.add_argument("--check", action="store_true",
                    help="check the config, files, keys, sketch and collector; print one line "
                         "each (ok/WARN/FAIL), write nothing, exit 1 if any failed")
    args = ap.parse_args(argv)
    if args.check:  # edge/preflight.py: reads only
        from .preflight import check
        return check(args.config)
    logging.basicConfig(level=args.log_level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        agent = Agent(load_config(args.config))
    except ConfigError as e:
        print(f"acep agent: config error: {e}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, agent.stop)
    signal.signal(signal.SIGINT, agent.stop)
    try:
        agent.run(once=args.once)
    except ConfigError as e:  # paho-mqtt missing for source.kind = "mqtt"
        print(f"acep agent: config error: {e}", file=sys.stderr)
        return 2
    except FileNotFoundError as e:  # a file not followed (or --once) is read at once
        if e.filename != agent.cfg.source.path:
            raise
        print(f"acep agent: source.path {e.filename}: no such file (not followed: nothing "
              "to read)", file=sys.stderr)
        return 2
    return 0
