"""argparse types, option groups and input checks shared by every ``acep`` command.

The commands of :mod:`acep.cli`, ``history.cli``, the collector, the agent and its outbox
and the Spark jobs take them from here. An empty value is what an unset shell variable gives
(``--spec "$SPEC"``, ``--pattern-id "$ID"``), which a command would take as the option not
given: each type refuses it by the option's name, exit 2.
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Iterator
from contextlib import contextmanager

from .events import EventSpec, not_an_attribute, read_events
from .ids import ID_RULE, valid_id
from .matcher import Pattern
from .shedding import CONTEXT_FEATURES, MAX_BINS
from .units import WITHIN_UNITS, within_seconds

__all__ = ["path_arg", "text_arg", "id_arg", "whole_number", "real_number", "EVENTS_HELP",
           "SPEC_HELP", "UsageError", "refused", "load_spec", "open_events",
           "check_predicate_attributes", "Window", "parse_window", "add_pattern_options",
           "burst_type", "ratios_type", "BINS_HELP", "bins_type", "context_type",
           "add_fit_options", "fit_options"]

EVENTS_HELP = ("events: .jsonl/.csv/.parquet/.msgpack (a path, or a URI such as "
               "s3://bucket/key), or - for stdin")
SPEC_HELP = ("event spec: a JSON/TOML file or a preset (flights) (default: the tag in column t, "
             "the type in column type, every other column an attribute)")


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


class UsageError(ValueError):
    """Input a command refuses before its work: one line naming the option, exit 2."""


@contextmanager
def refused(option: str = "") -> Iterator[None]:
    """A file the command line names that does not load in the block (``OSError`` or
    ``ValueError``) is a :class:`UsageError`, prefixed with ``option``: found before the
    work, exit 2 (README, Exit codes)."""
    try:
        yield
    except UsageError:
        raise
    except (OSError, ValueError) as exc:
        said = exc.strerror if isinstance(exc, OSError) and exc.strerror and exc.filename \
            else exc  # "[Errno 2] No such file or directory: 'x'" names the file twice
        text = f"{exc.filename}: {said}" if said is not exc else str(exc)
        raise UsageError(f"{option} {text}" if option else text) from None


def load_spec(spec: str | None) -> EventSpec | None:
    """``--spec``: the preset or file it names (None when none is given); one that is
    neither, or does not load, is a :class:`UsageError`."""
    if not spec:
        return None
    with refused("--spec:"):
        return EventSpec.load(spec)


def open_events(path: str, spec: EventSpec | None, **options) -> Iterator:
    """:func:`acep.events.read_events`; what it checks at once (the file is there, its
    format, a Parquet file's footer and columns) is a :class:`UsageError`: no event is read
    yet. Bad events come later, while iterating (exit 1)."""
    with refused():
        return read_events(path, spec, **options)


def check_predicate_attributes(pattern: Pattern, spec: EventSpec,
                               said: str = "--where") -> None:
    """Refuse, before any event is read, a predicate over a column ``spec`` never reads as
    an attribute (``said``: whose predicates they are)."""
    for name in pattern.predicates.columns:
        why = not_an_attribute(spec, name)
        if why is not None:
            raise UsageError(f"{said}: {why}")


class Window(float):
    """A window in seconds or tag units that remembers the text it was given as."""

    text: str = ""
    has_unit: bool = False


def parse_window(text: str) -> Window:
    """``10`` (tag units), ``500ms``, ``90s``, ``15min``, ``2h``, ``1d`` (seconds for timestamp
    tags); the units of the query language's ``WITHIN``."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-z]*)\s*", text.lower())
    if not m or m.group(2) not in WITHIN_UNITS:
        raise argparse.ArgumentTypeError(
            f"bad window {text!r}: a number, optionally with a unit (ms, s, min, h, d)")
    try:
        window = Window(within_seconds(m.group(1), m.group(2)))
    except ValueError:  # beyond the largest float (400 digits)
        number = m.group(1)
        shown = number if len(number) <= 15 else f"{number[:12]}... ({len(number)} digits)"
        raise argparse.ArgumentTypeError(f"bad window {shown}: too large a window (at most "
                                         "1.8e+308 seconds)") from None
    window.text, window.has_unit = text.strip(), bool(m.group(2))
    return window


def add_pattern_options(p: argparse.ArgumentParser) -> None:
    """``--pattern``, ``--window``, ``-k``, ``--partition`` and ``--where`` of ``acep match``
    and ``acep history build``."""
    p.add_argument("--pattern", "-p", required=True, type=text_arg,
                   help="regular expression over event types, e.g. 'a (b|c) d b'")
    p.add_argument("--window", "-w", required=True, type=parse_window,
                   help="window: tag units, or a duration like 2h for timestamp tags")
    p.add_argument("-k", type=whole_number(0, "letters that may be missing", 64), default=0,
                   help="error bound (letters that may be missing, 0..64; default 0)")
    p.add_argument("--partition", type=text_arg,
                   help="attribute to partition by (equivalence test; default: none, one "
                        "partition)")
    p.add_argument("--where", action="append", default=[], type=text_arg,
                   help="predicate, e.g. 'd.price > a.price'; repeatable")


# --burst (history build, evaluate, acep train): the devices' bucket depth, a Budget's least
burst_type = real_number("bucket depth", lambda v: 1 <= v < math.inf, "of events >= 1")


def ratios_type(text: str) -> list[float]:
    """``--budgets`` and ``--fit``: comma-separated budget ratios, each in (0, 100]."""
    items = text.split(",")
    if any(not x.strip() for x in items):
        raise argparse.ArgumentTypeError(f"{text!r} has an empty item")
    try:
        ratios = [float(x) for x in items]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a comma-separated list of numbers") from None
    if not all(0 < r <= 100 for r in ratios):
        raise argparse.ArgumentTypeError(f"budget ratios must be in (0, 100], got {text!r}")
    return ratios


BINS_HELP = (f"bins per time of a match vector (quantiles of the data; 1: no time bins; "
             f"at most {MAX_BINS}: the cells grow with its square; default 8)")
bins_type = whole_number(1, "bins", MAX_BINS)  # --bins of acep history build and acep train


def context_type(text: str) -> tuple[str, ...]:
    """``--context``: comma-separated event-context features (docs/SHEDDING.md 13)."""
    names = tuple(x.strip() for x in text.split(","))
    unknown = [x for x in names if x not in CONTEXT_FEATURES]
    if unknown or len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(
            f"{text!r}: give some of {', '.join(CONTEXT_FEATURES)}, each once")
    return names


def add_fit_options(parser: argparse.ArgumentParser, events: str) -> None:
    """``--fit RATIOS`` and ``--burst N`` of ``acep history build`` and ``acep train``."""
    parser.add_argument("--fit", metavar="RATIOS", type=ratios_type,
                        help=f"fit the sketch's reserves to these budgets on {events} "
                             "(comma-separated fractions of their unconstrained operations "
                             "per event, e.g. 0.1,0.25; docs/SHEDDING.md section 10; "
                             "default: no fit)")
    parser.add_argument("--burst", type=burst_type, default=64.0,
                        help="the devices' bucket depth in events, for --fit (default 64)")
    parser.add_argument("--search", type=whole_number(0, "cells to search"), default=0, metavar="K",
                        help="with --fit, also tune the K most visited cells of each budget's "
                             "two best tables by coordinate search on the training events and "
                             "keep the better (one replay per table, cell and value tried: "
                             "slower; more bundles found under tight budgets; default 0 = off)")


def fit_options(args: argparse.Namespace, writes_sketch: bool, missing: str) -> list[float]:
    """The ``--fit`` ratios of ``args`` (from :func:`add_fit_options`), checked against the
    sketch they fit (``missing``: what to say when none is written) and ``--search``; a
    :class:`UsageError` when they do not go together."""
    ratios = list(args.fit or [])
    if ratios and not writes_sketch:
        raise UsageError(f"--fit fits a sketch: {missing}")
    if args.search and not ratios:
        raise UsageError("--search tunes the fitted reserves: it needs --fit")
    return ratios
