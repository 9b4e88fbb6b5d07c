"""argparse types shared by the command lines of every ``acep`` command (``acep.cli``, the
collector, the agent and its outbox, the Spark jobs)."""

from __future__ import annotations

import argparse

__all__ = ["path_arg"]


def path_arg(text: str) -> str:
    """The type of every option or argument that names a file, a directory, a preset or a
    URI: any text but an empty one. That is what an unset shell variable gives (``--spec
    "$SPEC"``), which a command would take as the option not given (no spec, no key, a
    temporary directory) or as the current directory: refused by the option's name, exit 2."""
    if not text:
        raise argparse.ArgumentTypeError("an empty path (an unset shell variable?)")
    return text
