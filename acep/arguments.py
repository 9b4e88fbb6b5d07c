"""argparse types shared by the command lines of every ``acep`` command (``acep.cli``, the
collector, the agent and its outbox, the Spark jobs). An empty value is what an unset shell
variable gives (``--spec "$SPEC"``, ``--pattern-id "$ID"``), which a command would take as
the option not given: each type refuses it by the option's name, exit 2."""

from __future__ import annotations

import argparse
import math

from .ids import ID_RULE, valid_id

__all__ = ["path_arg", "text_arg", "id_arg", "whole_number", "real_number"]


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


def whole_number(minimum: int, what: str, maximum: int | None = None):
    """An argparse type: a whole number of ``what``, at least ``minimum`` (and at most
    ``maximum``). Every count or size option uses it: ``int`` alone takes -1."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of {what}") \
                from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"the {what} must be >= {minimum}, got {value}")
        if maximum is not None and value > maximum:
            raise argparse.ArgumentTypeError(f"the {what} must be <= {maximum}, got {value}")
        return value
    return parse


def real_number(what: str, inside, bounds: str):
    """An argparse type: a number of ``what`` for which ``inside(value)`` holds (said as
    ``bounds``); NaN and text are refused with it."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not inside(value):
            raise argparse.ArgumentTypeError(f"the {what} must be a number {bounds}, got {text!r}")
        return value
    return parse
