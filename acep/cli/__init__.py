"""acep: approximate complex-event matching on small devices, with history-guided shedding.

One console script for every part of DESIGN.md: the matcher and the exact engine, the
history tools, the device agent, the collector, the Spark trainer and the demo. Each
command's parser and work live in a module of its own (``history.cli`` for ``acep history``);
:func:`main` runs the one named and turns its errors into one line and an exit code.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from history.cli import add_history_parser

from .. import __version__, storage
from .._backend import KernelUnavailable, UnknownKernel
from .._signals import Terminated, terminate_on_sigterm
from ..arguments import UsageError
from ..events import EventError
from ..pattern import PatternError
from ..shedding import BudgetError
from . import demo, exact, match
from .passthrough import add_edge_parsers

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``acep`` command ``argv`` names (default: ``sys.argv[1:]``); its exit code."""
    parser = _parser()
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help(sys.stderr)
        return 2
    try:
        with terminate_on_sigterm():  # a line and 143, and finally blocks run
            return args.run(args)
    except PatternError as exc:
        print(f"acep: {storage.redact_text(str(exc))}", file=sys.stderr)
        return 2
    except (UsageError, BudgetError) as exc:
        print(f"{_command(args)}: {storage.redact_text(str(exc))}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader went away (`acep match ... | head`): not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except (KernelUnavailable, UnknownKernel) as exc:  # ACEP_KERNEL, --backend
        said = str(exc).replace("backend='python'", "--backend python")  # as the CLI takes it
        print(f"{_command(args)}: {said}", file=sys.stderr)
        return 2
    except (EventError, ValueError, OSError, MemoryError) as exc:
        print(f"acep: error: {storage.redact_text(str(exc))}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as exc:
        term = isinstance(exc, Terminated)
        print(f"{_command(args)}: {'terminated' if term else 'interrupted'}", file=sys.stderr)
        return 143 if term else 130


def _command(args: argparse.Namespace) -> str:
    """The command's name as the user typed it (``acep history build``)."""
    return " ".join(filter(None, ("acep", args.command, getattr(args, "history_command", None))))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="acep", description=__doc__.splitlines()[0].strip())
    parser.add_argument("--version", action="version", version=f"acep {__version__}")
    sub = parser.add_subparsers(dest="command")
    match.add_parser(sub)
    exact.add_parser(sub)
    demo.add_parsers(sub)
    add_history_parser(sub)
    add_edge_parsers(sub)
    return parser
