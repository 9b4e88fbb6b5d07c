"""argparse types shared by the command lines of every ``acep`` command (``acep.cli``, the
collector, the agent and its outbox, the Spark jobs). An empty value is what an unset shell
variable gives (``--spec "$SPEC"``, ``--pattern-id "$ID"``), which a command would take as
the option not given: each type refuses it by the option's name, exit 2."""

from __future__ import annotations

import argparse

from .ids import ID_RULE, valid_id

__all__ = ["path_arg", "text_arg", "id_arg"]


def path_arg(text: str) -> str:
    """The type of every option or argument that names a file, a directory, a preset or a
    URI: any text but an empty one (taken as no spec, no key, a temporary directory, or as
    the current directory)."""
    if not text:
        raise argparse.ArgumentTypeError("an empty path (an unset shell variable?)")
    return text


def text_arg(text: str) -> str:
    """The type of every other option whose value names or says something: a pattern, a
    predicate, an attribute, a Spark master, an address, a day, a registered id. Empty or
    blank, it would be taken as the option not given (no partition, the local Spark master,
    every interface) or fail later under another name."""
    if not text.strip():
        raise argparse.ArgumentTypeError(
            "an empty value (an unset shell variable?)" if not text else
            f"a blank value ({text!r})")
    return text


def id_arg(text: str) -> str:
    """The type of an option that gives a new device or pattern id (:mod:`acep.ids`): the
    ids the collector and the agents take."""
    text = text_arg(text)
    if not valid_id(text):
        raise argparse.ArgumentTypeError(f"{text!r} must match {ID_RULE} (the ids the "
                                         "collector and the agents take)")
    return text
