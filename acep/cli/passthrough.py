"""``acep agent``, ``outbox``, ``serve``, ``train`` and ``exact-batch``: commands with parsers
of their own in ``edge`` and ``trainer``, started with the rest of the command line."""

from __future__ import annotations

import argparse
import sys


def add_edge_parsers(sub: argparse._SubParsersAction) -> None:
    """Subcommands with their own parsers: ``acep agent``, ``acep outbox`` and ``acep serve``
    (``edge``), ``acep train`` and ``acep exact-batch`` (``trainer``)."""
    for name, module, text in (("agent", "edge.agent", "run the device agent (--config F)"),
                               ("outbox", "edge.agent.outbox_cli",
                                "the agent's outbox: status (what is pending), and list, "
                                "export, requeue or discard its dead letters"),
                               ("serve", "edge.collector", "run the collector service"),
                               ("train", "trainer.cli", "train a history sketch on Spark"),
                               ("exact-batch", "trainer.exact",
                                "exact NFA^b matching of an archive on Spark")):
        p = sub.add_parser(name, help=text, add_help=False, prefix_chars="\0")
        p.add_argument("args", nargs=argparse.REMAINDER)
        p.set_defaults(run=lambda args, module=module: _edge_main(module, args.args))


_EXTRAS = {"edge.collector": "server", "trainer.cli": "spark", "trainer.exact": "spark"}


def _edge_main(module: str, argv: list[str]) -> int:
    import importlib

    try:
        entry = importlib.import_module(module).main
    except ImportError as exc:  # a device install has no server or Spark packages
        if module not in _EXTRAS or not exc.name or exc.name.startswith(("acep", "edge",
                                                                          "history", "trainer")):
            raise
        print(f"acep: {module} needs {exc.name!r}, which is not installed: pip install "
              f"\"acep[{_EXTRAS[module]}]\"", file=sys.stderr)
        return 2
    return entry(argv)
