"""acep: approximate complex-event matching on small devices, with history-guided shedding.

One console script for every part of DESIGN.md: the matcher and the exact engine, the
history tools, the device agent, the collector, the Spark trainer and the demo.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import numpy as np

from . import __version__, storage
from ._backend import KernelUnavailable, UnknownKernel
from ._output import bundle_lines, match_lines
from ._signals import Terminated, terminate_on_sigterm
from ._text import one_line
from .arguments import path_arg, real_number, text_arg, whole_number
from .events import (
    EventError,
    EventSpec,
    _format_of,
    file_size_hint,
    iso_texts,
    not_an_attribute,
    read_all,
    read_events,
)
from .matcher import MatchBatch, Matcher, Pattern, bundles
from .pattern import PatternError, symbols
from .shedding import MAX_BINS, BudgetError
from .units import WITHIN_UNITS as _UNITS
from .units import within_seconds

EVENTS_HELP = ("events: .jsonl/.csv/.parquet/.msgpack (a path, or a URI such as "
               "s3://bucket/key), or - for stdin")
SPEC_HELP = ("event spec: a JSON/TOML file or a preset (flights) (default: the tag in column t, "
             "the type in column type, every other column an attribute)")


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


def _command(args) -> str:
    """The command's name as the user typed it (``acep history build``)."""
    return " ".join(filter(None, ("acep", args.command, getattr(args, "history_command", None))))


class Window(float):
    """A window in seconds or tag units that remembers the text it was given as."""

    text: str = ""
    has_unit: bool = False


def parse_window(text: str) -> Window:
    """``10`` (tag units), ``500ms``, ``90s``, ``15min``, ``2h``, ``1d`` (seconds for timestamp
    tags); the units of the query language's ``WITHIN``."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-z]*)\s*", text.lower())
    if not m or m.group(2) not in _UNITS:
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


def _warn_unit_on_numbers(window: float, batch) -> None:
    """A duration such as 2h means seconds; on numeric tags that is rarely what was meant."""
    if getattr(window, "has_unit", False) and len(batch) and not batch.tag_is_time:
        print(f"acep: warning: the window {window.text!r} is a duration, but the tags are "
              f"numbers, not timestamps: it is taken as {float(window):g} tag units",
              file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
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


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="acep", description=__doc__.splitlines()[0].strip())
    parser.add_argument("--version", action="version", version=f"acep {__version__}")
    sub = parser.add_subparsers(dest="command")
    match = sub.add_parser("match", help="find approximate matches of a pattern in a file",
                           description="Print one JSON line per match (or per bundle).")
    match.add_argument("file", type=path_arg, help=EVENTS_HELP)
    _add_pattern_options(match)
    match.add_argument("--spec", type=path_arg, help=SPEC_HELP)
    match.add_argument("--bundles", action="store_true", help="print match bundles instead")
    match.add_argument("--all-trajectories", action="store_true",
                       help="print every trajectory (small inputs; turns merging off)")
    match.add_argument("--max-entries", type=whole_number(1024, "entries"), default=10_000_000,
                       help="with --all-trajectories or --no-merge: stop with an error "
                            "rather than hold more match nodes, or matched events of one "
                            "batch, than this (their number can multiply with every event "
                            "without merging; default %(default)s)")
    match.add_argument("--no-merge", action="store_true",
                       help="turn dominance merging off (Algorithm 1 as written)")
    match.add_argument("--on-bad-event", choices=("error", "skip"), default="error")
    match.add_argument("--batch-size", type=whole_number(1, "events per batch"), default=65536)
    match.add_argument("--backend", choices=("compiled", "python"), default=None)
    match.add_argument("--no-progress", action="store_true")
    match.set_defaults(run=run_match)
    exact = sub.add_parser("exact", help="run a SASE+ query with the exact engine on a file",
                           description="Print one JSON line per match (verbose) or per group "
                                       "of matches that end at the same event (compact; the "
                                       "postpone engine: per start and end event).")
    exact.add_argument("query", type=path_arg,
                       help="query file (SASE+ text, docs/EXACT.md section 2)")
    exact.add_argument("events", type=path_arg, help=EVENTS_HELP)
    exact.add_argument("--engine", choices=("auto", "runs", "shared", "postpone"),
                       default="auto",
                       help="runs: the basic run algorithm; shared: the shared-buffer "
                            "runtime; postpone: postponing (skip_till_any_match); auto: "
                            "postpone for skip_till_any_match, shared otherwise")
    exact.add_argument("--output", choices=("verbose", "compact"), default="verbose",
                       help="verbose: one line per match; compact: one line per end event "
                            "(postpone: per start and end event, with the candidates)")
    exact.add_argument("--spec", type=path_arg, help=SPEC_HELP)
    exact.add_argument("--max-entries", type=whole_number(1, "entries"), default=1_000_000,
                       help="stop with an error rather than hold more partial and complete "
                            "matches at once than this (about 1 KB each; under "
                            "skip_till_any_match a Kleene component's matches multiply "
                            "with its events; default %(default)s)")
    exact.set_defaults(run=run_exact)
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
    backend.set_defaults(run=lambda args: print(_backend_name()) or 0)
    _add_history_parser(sub)
    _add_edge_parsers(sub)
    return parser


def _add_edge_parsers(sub) -> None:
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


def _add_pattern_options(p: argparse.ArgumentParser) -> None:
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


# acep demo --budget: a share of the unconstrained operations
_share = real_number("share", lambda v: 0 < v <= 1, "in (0, 1]")
_days = real_number("days", lambda v: 0 < v < math.inf, "> 0")  # acep demo --train-days
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


def _backend_name() -> str:
    from . import backend

    return backend()


def run_match(args) -> int:
    pattern = Pattern.compile(args.pattern, args.where)
    matcher = Matcher(pattern, args.window, args.k, partition=args.partition,
                      merge=not args.no_merge, all_trajectories=args.all_trajectories,
                      on_bad_event=args.on_bad_event, backend=args.backend,
                      max_entries=args.max_entries if args.no_merge or args.all_trajectories
                      else None)
    spec = load_spec(args.spec)
    _check_predicate_attributes(pattern, spec or EventSpec())
    out = _Printer(args.bundles)
    started, n_events, seen_types, unreadable = time.perf_counter(), 0, set(), []
    batches = open_events(args.file, spec, batch_size=args.batch_size,
                          on_bad_event=args.on_bad_event, bad_events=unreadable)
    progress = _progress(args.file, args.no_progress)
    try:
        for batch in batches:
            if not n_events:
                _warn_unit_on_numbers(args.window, batch)
            seen_types.update(batch.type_names)
            out.add(matcher.match_batch(batch))
            n_events += len(batch)
            progress.update(len(batch))
        out.add(matcher.flush())
    except EventError as exc:  # what was accepted before the bad event still counts
        out.add(getattr(exc, "matches", None))
        out.add(matcher.flush())
        out.finish(args.window)
        raise
    finally:
        progress.close()
    out.finish(args.window)
    skipped = matcher.stats["skipped"] + len(unreadable) \
        if args.on_bad_event == "skip" else None
    _summary(matcher, n_events, out, time.perf_counter() - started, skipped)
    _warn_unseen_types(pattern, seen_types)
    return 0


def _check_predicate_attributes(pattern: Pattern, spec: EventSpec,
                                said: str = "--where") -> None:
    """Refuse, before any event is read, a predicate over a column ``spec`` never reads as
    an attribute (``said``: whose predicates they are)."""
    for name in pattern.predicates.columns:
        why = not_an_attribute(spec, name)
        if why is not None:
            raise UsageError(f"{said}: {why}")


class _Printer:
    """Prints matches as they come, or collects points for bundles at the end."""

    def __init__(self, bundles_only: bool):
        self.bundles_only = bundles_only
        self.found: list[MatchBatch] = []
        self.n_matches = 0
        self.n_bundles = 0

    def add(self, found: MatchBatch | None) -> None:
        if found is None or not len(found):
            return
        self.n_matches += len(found)
        if self.bundles_only:
            self.found.append(found)
            return
        sys.stdout.write(match_lines(found))
        sys.stdout.flush()  # a reader of a live pipe sees each batch's matches at once

    def finish(self, window: float) -> None:
        if not self.bundles_only:
            return
        merged = MatchBatch.concat(self.found)
        found = bundles(merged, window)
        self.n_bundles = len(found)
        sys.stdout.write(bundle_lines(found, merged.tag_is_time))


def _tag(t: float, is_time: bool):
    """A tag as JSON output shows it: ISO text for timestamps, else the number."""
    if is_time:
        return iso_texts(np.array([t], dtype=np.float64))[0]
    return int(t) if float(t).is_integer() else t


def _progress(path: str, disabled: bool):
    """A progress bar on stderr that appears only after a second of work, and only on a
    terminal (a log file would fill with its redraws)."""
    try:
        from tqdm import tqdm
    except ImportError:
        disabled = True
    if disabled or path == "-" or not sys.stderr.isatty():
        return _NoProgress()
    return tqdm(total=file_size_hint(path), unit=" events", unit_scale=True, delay=1.0,
                file=sys.stderr, leave=False)


class _NoProgress:
    def update(self, n: int) -> None:
        pass

    def close(self) -> None:
        pass


def _summary(matcher: Matcher, n_events: int, out: _Printer, seconds: float,
             skipped: int | None) -> None:
    """The stderr line of ``acep match``; ``skipped``: the bad events skipped, None when
    none may be (``--on-bad-event error``)."""
    s = matcher.stats
    rate = n_events / seconds if seconds > 0 else math.inf
    what = f"{_count(out.n_bundles, 'bundle')} from {_count(out.n_matches, 'match')}" \
        if out.bundles_only else _count(out.n_matches, "match")
    bad = "" if skipped is None else f"; {_count(skipped, 'bad event')} skipped"
    print(f"acep: {_count(n_events, 'event')}, {what} in {_count(s['partitions'], 'partition')}, "
          f"{seconds:.2f} s ({rate:,.0f} events/s, {matcher.kernel_name} kernel); match nodes: "
          f"{s['created']:,} created, {s['merged']:,} merged, {s['expired']:,} expired, "
          f"{s['peak_live']:,} live at peak{bad}", file=sys.stderr)


def _count(n: int, noun: str) -> str:
    """``1 match``, ``2 matches``, ``12,000 events``."""
    plural = noun + ("es" if noun.endswith(("ch", "s")) else "s")
    return f"{n:,} {noun if n == 1 else plural}"


def _warn_unseen_types(pattern: Pattern, seen: set) -> None:
    missing = [t for t in symbols(pattern.node) if t not in seen]
    if missing:
        print(f"acep: warning: pattern types {missing} never occur in the input (types seen: "
              f"{sorted(seen)[:12]}); separate type names with spaces: 'a b c', not 'abc'",
              file=sys.stderr)


def run_exact(args) -> int:
    """``acep exact QUERY_FILE EVENTS_FILE``: the exact engine on one file (a finite window).
    At a bad event, the matches of the events before it are printed first (a match depends
    only on events up to its last one), then the error names the event."""
    from .nfab import ExactLimitError, load_query

    try:
        query = load_query(args.query)
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise UsageError(f"query file {args.query}: {reason}") from None
    spec = load_spec(args.spec)
    make_engine = _exact_engine(query, args)
    read = _check_query_attributes(query, spec or EventSpec())
    started = time.perf_counter()
    batch, bad = _read_accepted(args.events, spec)
    if _format_of(args.events) == "csv":
        _csv_numbers(batch, read)
    try:
        engine, found, bad = _run_exact_until_bad(make_engine, batch, bad)
        seconds = time.perf_counter() - started
        out = _ExactPrinter(query, batch)
        if args.output == "verbose":
            lines = [json.dumps(out.match(m)) for m in found]
        else:  # a postponed record's count() may enumerate its matches
            lines = [json.dumps(out.record(r)) for r in found]
    except ExactLimitError as exc:
        raise _limit_located(exc, batch) from None
    if lines:
        sys.stdout.write("\n".join(lines) + "\n")
        sys.stdout.flush()  # a reader of a live pipe sees each batch's matches at once
    if bad is not None:
        raise bad
    s = engine.stats
    what = _count(s["records"], "record") if args.output == "compact" else \
        _count(s["matches"], "match")
    work = _count(s["main_runs"], "main run") if engine.engine == "postpone" else \
        f"{_count(s['runs_created'], 'run')} created"
    print(f"acep: {_count(s['events'], 'event')}, {what}, {work}, {seconds:.2f} s "
          f"({query.strategy.value}, {engine.engine} engine)", file=sys.stderr)
    seen = set(batch.type_names)
    missing = sorted({c.type for c in query.positive if c.type not in seen})
    if missing:
        print(f"acep: warning: query types {missing} never occur in the input (types seen: "
              f"{sorted(seen)[:12]}); is the event type read from the right column (--spec)?",
              file=sys.stderr)
    return 0


def _read_accepted(path: str, spec) -> tuple:
    """The events of ``path`` up to the first unreadable one, and that error (or None)."""
    from .events import EventBatch

    batches, bad = [], None
    parts = open_events(path, spec)
    try:
        for part in parts:
            batches.append(part)
    except EventError as exc:
        bad = exc
        if spec is None and exc.field == "type":  # e.g. Query 2's attribute called type
            bad = EventError(f"{exc.message} (the event type is read from column 'type'; for "
                             "events with an attribute called type, pass --spec with "
                             '{"type": "<type column>"})', exc.source, exc.line, exc.field,
                             exc.position)
    if batches or bad is not None:
        return EventBatch.concat(batches), bad
    return read_all(path, spec), None  # an empty input, named by its source


def _exact_engine(query, args):
    """A maker of fresh engines for the options, checked before any event is read."""
    from .nfab import Engine

    def make() -> Engine:
        return Engine(query, output=args.output, engine=args.engine,
                      max_entries=args.max_entries)

    try:
        make()
    except ValueError as exc:  # e.g. --engine postpone under skip_till_next_match
        raise UsageError(f"--engine {args.engine}: {exc}") from None
    return make


def _check_query_attributes(query, spec: EventSpec) -> set[str]:
    """The attributes the query reads. One that the spec never gives (not among its
    attributes, or its tag or type column) is an error before any event is read, as
    ``--where`` is."""
    from .nfab.compile import compile_query
    from .nfab.runs import needed_attributes

    needed = needed_attributes(compile_query(query))
    for c in query.components:
        for name in sorted(needed.get(c.var, ())):
            why = not_an_attribute(spec, name)
            if why is not None:
                raise UsageError(f"the query reads {c.var}.{name}, but {why}"
                                 f"{_attribute_hint(spec, c.var, name)}")
    return set().union(*needed.values())


def _attribute_hint(spec: EventSpec, var: str, name: str) -> str:
    if name == spec.tag:
        return f" (the query reads the tag as {var}.t)"
    if spec.attributes is None and name == spec.type:
        return ' (--spec with {"type": "<the type column>"})'
    return ""


_CSV_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")


def _csv_numbers(batch, names: set[str]) -> None:
    """A CSV value has no kind of its own: one that reads as a number is a number, also in a
    column that pyarrow reads as text because another value of it is text (else ``99`` and
    ``100`` there would compare as text)."""
    for name in names & batch.columns.keys():
        column = batch.columns[name]
        if column.dtype == object:
            out = np.empty(len(column), dtype=object)
            out[:] = [_csv_number(v) for v in column]
            batch.columns[name] = out


def _csv_number(value):
    if not isinstance(value, str) or not _CSV_NUMBER.fullmatch(value):
        return value
    if value.lstrip("+-").isdigit():
        return int(value)  # exact beyond 2**53, as an integer column keeps it
    number = float(value)
    return number if math.isfinite(number) else value


def _run_exact_until_bad(make_engine, batch, bad):
    """The engine over ``batch``; when the engine refuses an event, it runs again over the
    events before it. Returns (engine, outputs, the first bad event's error or None)."""
    engine = make_engine()
    try:
        return engine, engine.run(batch), bad
    except EventError as exc:  # positions are the file's accepted events: name the line
        located = _located(exc, batch)
    engine = make_engine()
    if located.position is None:
        return engine, [], located
    return engine, engine.run(batch.slice(0, located.position)), located


class _ExactPrinter:
    """JSON objects of exact matches: tags as ``acep match`` shows them, per variable."""

    def __init__(self, query, batch):
        from .nfab.ast import Kind

        self.components = [(c.var, c.kind is Kind.ONE) for c in query.positive]
        self.tags, self.is_time = batch.tags, batch.tag_is_time
        self._texts: dict | None = None
        self._at: list | None = None

    def _tag_at(self, position: int):
        """The tag of the event at ``position`` as JSON shows it (all formatted at once)."""
        if self._at is None:
            self._format_tags()
        return self._at[position]

    def _tag(self, t: float):
        if self._texts is None:
            self._format_tags()
        text = self._texts.get(t)
        return _tag(t, self.is_time) if text is None else text

    def _format_tags(self) -> None:
        """Every tag's text in one vectorised call, each distinct tag formatted once."""
        distinct, inverse = np.unique(np.asarray(self.tags, dtype=np.float64),
                                      return_inverse=True)
        if self.is_time:
            texts = iso_texts(distinct)
        else:
            texts = [int(t) if t.is_integer() else t for t in distinct.tolist()]
        self._texts = dict(zip(distinct.tolist(), texts))
        table = np.empty(len(texts), dtype=object)
        table[:] = texts
        self._at = table[inverse.reshape(-1)].tolist()

    def match(self, m) -> dict:
        events, positions = {}, {}
        for (var, single), block in zip(self.components, m.positions):
            tags = [self._tag_at(p) for p in block]
            events[var] = tags[0] if single else tags
            positions[var] = block[0] if single else list(block)
        partition = None if m.partition is None else [_plain(v) for v in m.partition]
        if partition is not None and len(partition) == 1:
            partition = partition[0]
        values = None if m.values is None else {k: _plain(v) for k, v in m.values.items()}
        return {"start": self._tag(m.start), "end": self._tag(m.end),
                "partition": partition, "events": events, "positions": positions,
                "values": values}

    def record(self, r) -> dict:
        """A compact record: a group of whole matches (run engine), or a collapsed record of
        the postponing engine, shown by its candidates per variable, not expanded."""
        end = self._tag_at(r.end_position)
        if not hasattr(r, "candidates"):
            return {"end": end, "end_position": r.end_position, "count": r.count(),
                    "matches": [self.match(m) for m in r.expand()]}
        return {"start": self._tag_at(r.start_position), "end": end,
                "start_position": r.start_position, "end_position": r.end_position,
                "count": r.count(),
                "candidates": {var: [c.position for c in block]
                               for (var, _), block in zip(self.components, r.candidates)}}


def _plain(value):
    """A value as JSON shows it: integral floats as integers, NaN and infinities as null."""
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        return int(value) if value.is_integer() else value
    return value


def _limit_located(exc, batch) -> MemoryError:
    """The engine's limit error with the file and line of the event it had reached."""
    pos = exc.position
    line = batch.line_of(pos) if 0 <= pos < len(batch) else None
    where = batch.source if line is None else f"{batch.source}, line {line}"
    return MemoryError(f"{where}: {exc}".replace("(max_entries)", "(--max-entries)"))


def _located(exc: EventError, batch) -> EventError:
    """An engine's EventError (a position in the input) with the file and line of that event."""
    pos, message, field = exc.position, exc.message, exc.field
    known = pos is not None and 0 <= pos < len(batch)
    if known and field == "t" and pos > 0:  # the engines name the tag "t": the input may not
        tag, previous = (_tag(float(batch.tags[p]), batch.tag_is_time) for p in (pos, pos - 1))
        message = (f"tag {tag} goes back in time (the event before has {previous}; the exact "
                   "engine needs tags that never decrease over the whole input)")
        field = batch.tag_field
    elif field not in (None, "t") and field not in batch.columns:  # a misspelt attribute?
        names = sorted(batch.columns)
        shown = ", ".join(names[:12]) + (", ..." if len(names) > 12 else "")
        message += f" (no event of the input has it; attributes: {shown or 'none'})"
    return EventError(message, batch.source, batch.line_of(pos) if known else None, field, pos)


def _add_history_parser(sub) -> None:
    """``acep history build``, ``inspect`` and ``evaluate``: the history package
    (docs/SHEDDING.md sections 6, 10 and 11)."""
    history = sub.add_parser("history", help="build, inspect and evaluate history graphs and "
                                             "their signed sketches")
    hsub = history.add_subparsers(dest="history_command", required=True)
    inspect = hsub.add_parser("inspect", help="size, top match vectors and a plot of a history",
                              description="Print a saved history graph's size (cells, bundles, "
                                          "edges, bytes on disk and as a sketch) and its top "
                                          "match vectors; a signed sketch with --key-file.")
    inspect.add_argument("file", type=path_arg,
                         help="a history graph file (or a sketch, with --key-file)")
    inspect.add_argument("--top", type=whole_number(0, "match vectors to list"), default=10,
                         help="match vectors to list (default 10)")
    inspect.add_argument("--plot", metavar="PNG", type=path_arg,
                         help="write visits and success rate by "
                              "state and remaining window")
    inspect.add_argument("--key-file", type=path_arg, help="the sketch's signing key (a file)")
    inspect.set_defaults(run=run_history)
    build = hsub.add_parser("build", help="learn a history from an unconstrained run on a file",
                            description="Run the pattern without a budget over the events, "
                                        "record every match node's outcome and save the "
                                        "history graph (and, with --sketch, a signed sketch).")
    build.add_argument("file", type=path_arg, help=EVENTS_HELP)
    _add_pattern_options(build)
    build.add_argument("--spec", type=path_arg, help=SPEC_HELP)
    build.add_argument("--bins", type=bins_type, default=8,
                       help=BINS_HELP)
    build.add_argument("--context", type=context_type, default=(), metavar="FEATURES",
                       help="split every cell by a decision tree over the event's context: "
                            "act (the partition's recent events), idle (time since its "
                            "last one); needs scikit-learn (default: none, cells as the "
                            "bins make them; docs/SHEDDING.md 13)")
    build.add_argument("--context-leaves", type=leaves_type, default=4, metavar="N",
                       help="the context tree's leaves at most (2-64, default 4)")
    build.add_argument("--output", "-o", required=True, type=path_arg,
                       help="the history file to write")
    build.add_argument("--sketch", type=path_arg,
                       help="also write the signed sketch here (needs --key-file)")
    build.add_argument("--key-file", type=path_arg, help="the signing key of the sketch (a file)")
    add_fit_options(build, "the same events")
    build.set_defaults(run=run_history_build)
    _add_evaluate_parser(hsub)


def _add_evaluate_parser(hsub) -> None:
    """``acep history evaluate`` (docs/SHEDDING.md section 11)."""
    ev = hsub.add_parser("evaluate", help="bundle recall of a sketch and the baselines under "
                                          "budgets, on events of your own",
                         description="Run the sketch's pattern without a budget over the "
                                     "events (the ground truth), then under each budget with "
                                     "each policy, and print bundle recall, match-point "
                                     "recall, precision and the operations spent.")
    ev.add_argument("sketch", type=path_arg,
                    help="a signed sketch (acep history build --sketch, acep train)")
    ev.add_argument("file", type=path_arg, help=EVENTS_HELP)
    ev.add_argument("--key-file", required=True, type=path_arg,
                    help="the sketch's signing key (a file)")
    ev.add_argument("--partition", type=text_arg,
                    help="the attribute to partition by (default: the one the sketch "
                         "records; another is refused)")
    ev.add_argument("--spec", type=path_arg, help=SPEC_HELP)
    ev.add_argument("--budgets", type=ratios_type, default="0.05,0.1,0.25,0.5,1",
                    metavar="RATIOS",
                    help="comma-separated fractions of the events' unconstrained operations "
                         "per event (default 0.05,0.1,0.25,0.5,1)")
    ev.add_argument("--burst", type=burst_type, default=64.0,
                    help="the devices' bucket depth in events (default 64)")
    ev.add_argument("--policies", metavar="NAMES", type=text_arg,
                    help="comma-separated, from keep-first, random, oldest-first, completion, "
                         "pspice, hspice, hybrid (these four need --history), history (the "
                         "sketch, "
                         "learning off), history+rl, hindsight (offline reference: slow on "
                         "long streams) (default: all but hindsight, and completion, pspice, "
                         "hspice and hybrid only with --history)")
    ev.add_argument("--history", metavar="FILE", type=path_arg,
                    help="the history graph the sketch was made from, for the completion, "
                         "pspice, hspice and hybrid baselines")
    ev.add_argument("--json", metavar="FILE", type=path_arg, help="also write every figure here")
    ev.set_defaults(run=run_history_evaluate)


BINS_HELP = (f"bins per time of a match vector (quantiles of the data; 1: no time bins; "
             f"at most {MAX_BINS}: the cells grow with its square; default 8)")
bins_type = whole_number(1, "bins", MAX_BINS)  # --bins of acep history build and acep train
leaves_type = whole_number(2, "context leaves", 64)


def context_type(text: str) -> tuple[str, ...]:
    """``--context``: comma-separated event-context features (docs/SHEDDING.md 13)."""
    from acep.shedding import CONTEXT_FEATURES

    names = tuple(x.strip() for x in text.split(","))
    unknown = [x for x in names if x not in CONTEXT_FEATURES]
    if unknown or len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(
            f"{text!r}: give some of {', '.join(CONTEXT_FEATURES)}, each once")
    return names


def add_fit_options(parser, events: str) -> None:
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


def run_history_build(args) -> int:
    from history.build import build_history
    from history.sketch import Sketch, key_id, oversized, read_key

    if args.sketch and not args.key_file:
        raise UsageError("--sketch needs --key-file (sketches are signed)")
    _check_outputs({"-o": args.output, "--sketch": args.sketch}, args.file, args.key_file,
                   _spec_file(args.spec))
    with refused("--key-file"):
        key = read_key(args.key_file) if args.sketch else None  # before the work, not after
    ratios = fit_options(args, bool(args.sketch), "it needs --sketch")
    spec = load_spec(args.spec)
    # the pattern and its predicates before the events: a typo is not found after a long read
    _check_predicate_attributes(Pattern.compile(args.pattern, args.where), spec or EventSpec())
    batches = _read_named(args.file, spec)
    if not sum(map(len, batches)):  # as acep train: an empty history is no use to a device
        raise UsageError(f"{args.file}: no events to build a history from")
    started = time.perf_counter()
    # canonical: the bytes (and the sketch's min-hashes) of `acep train` on the same events
    try:
        graph = build_history(args.pattern, batches, args.window, args.k, where=args.where,
                              partition=args.partition, n_bins=args.bins, context=args.context,
                              context_leaves=args.context_leaves).canonical()
    except ImportError as exc:  # the context tree's scikit-learn
        raise UsageError(f"--context: {exc}") from None
    seconds = time.perf_counter() - started
    sketch = Sketch.from_graph(graph) if args.sketch else None
    if ratios:  # a fit refused (a bucket that holds no operation) leaves every output as it was
        sketch = _fit(sketch, batches, ratios, args)
    # both made before either is renamed into place: the history first, the sketch last
    history, signed = graph.to_bytes(), sketch.to_bytes(key) if sketch is not None else None
    size = storage.write_durably(args.output, history)
    if signed is not None:
        storage.write_durably(args.sketch, signed)
    print(f"acep: history of {_count(sum(map(len, batches)), 'event')}: "
          f"{_count(graph.n_cells, 'cell')}, {_count(graph.n_bundles, 'bundle')}, {size:,} bytes "
          f"-> {args.output} ({seconds:.1f} s)",
          file=sys.stderr)
    if signed is not None:
        print(f"acep: sketch signed with key {key_id(key)}, {len(signed):,} bytes -> "
              f"{args.sketch}", file=sys.stderr)
        if (why := oversized(len(signed), sketch.n_cells)) is not None:
            print(f"acep: warning: {why}", file=sys.stderr)
    return 0


def _read_named(path: str, spec) -> list:
    """The event batches of ``path``; pyarrow's errors on corrupt data gain the file name."""
    batches = open_events(path, spec)
    try:
        return list(batches)
    except EventError:
        raise
    except (OSError, ValueError) as exc:
        if isinstance(exc, OSError) and exc.filename:
            raise
        raise ValueError(f"{path}: cannot be read ({one_line(exc)})") from None


def _check_outputs(files: dict[str, str | None], *inputs: str | None) -> None:
    """Refuse (:class:`UsageError`) an output file that may not be written (``files``: option
    -> path or None), before the work: ``acep train``'s check (``trainer.outputs``)."""
    from trainer.outputs import OutputError, check_outputs

    try:  # an empty path too: an unset shell variable ("$OUT")
        check_outputs({}, [f for f in inputs if f and f != "-"], files=files)
    except OutputError as exc:
        raise UsageError(str(exc)) from None


def _spec_file(spec: str | None) -> str | None:
    """``--spec`` when it names a file (an input), None for a preset or none."""
    return spec if spec and os.path.isfile(spec) else None


def fit_options(args, writes_sketch: bool, missing: str) -> list[float]:
    """The ``--fit`` ratios of ``args`` (from :func:`add_fit_options`), checked against the
    sketch they fit (``missing``: what to say when none is written) and ``--search``; a
    :class:`UsageError` when they do not go together."""
    ratios = list(args.fit or [])
    if ratios and not writes_sketch:
        raise UsageError(f"--fit fits a sketch: {missing}")
    if args.search and not ratios:
        raise UsageError("--search tunes the fitted reserves: it needs --fit")
    return ratios


def _fit(sketch, batches, ratios, args):
    from acep.events import EventBatch
    from history.fit import describe, fit_budgets

    events = batches[0] if len(batches) == 1 else EventBatch.concat(batches)
    started = time.perf_counter()
    sketch, report = fit_budgets(sketch, events, ratios, partition=args.partition,
                                 burst=args.burst, search=args.search)
    for line in describe(report):
        print(f"acep: {line}", file=sys.stderr)
    print(f"acep: fitted in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    return sketch


def run_history_evaluate(args) -> int:
    from acep.events import EventBatch
    from history.evaluate import POLICIES, evaluate, format_header, format_row, graph_mismatch
    from history.fit import SKETCH_PARTITION, matcher_args
    from history.graph import HistoryGraph
    from history.inspection import expect_kind
    from history.policies import GRAPH_POLICIES
    from history.sketch import Sketch, read_key

    _check_outputs({"--json": args.json}, args.sketch, args.file, args.key_file, args.history,
                   _spec_file(args.spec))
    with refused("--key-file"):
        key = read_key(args.key_file)
    with refused():
        expect_kind(args.sketch, "sketch")
        sketch = Sketch.load(args.sketch, key, max_bytes=None, key_from="--key-file")
    graph = None
    if args.history:
        with refused("--history"):
            expect_kind(args.history, "history")
            graph = HistoryGraph.load(args.history)
    why = graph_mismatch(sketch, graph) if graph is not None else None
    if why is not None:  # before the events are read
        raise UsageError(f"--history {args.history} was built for another definition than "
                         f"the sketch {args.sketch}: {why}")
    policies = [p.strip() for p in args.policies.split(",") if p.strip()] \
        if args.policies else None
    unknown = [p for p in policies or () if p not in POLICIES]
    if unknown or policies == []:  # before the events are read
        raise UsageError(f"--policies {args.policies!r}: unknown {', '.join(unknown) or '(none)'}"
                         f"; choose from {', '.join(POLICIES)}")
    needing = [p for p in policies or () if p in GRAPH_POLICIES]
    if needing and graph is None:
        raise UsageError(f"--policies {','.join(needing)} "
                         f"need{'s' if len(needing) == 1 else ''} --history (the history graph "
                         "the sketch was made from)")
    partition = SKETCH_PARTITION if args.partition is None else args.partition
    try:
        matcher_args(sketch, partition)  # a --partition the sketch does not fit: now
    except ValueError as e:
        raise UsageError(f"--partition: {e}") from None
    spec = load_spec(args.spec)
    _check_predicate_attributes(Pattern.compile(sketch.pattern, list(sketch.where)),
                                spec or EventSpec(), "the sketch's predicates")
    batches = _read_named(args.file, spec)
    if not sum(map(len, batches)):
        raise UsageError(f"{args.file}: no events to evaluate the sketch on")
    events = batches[0] if len(batches) == 1 else EventBatch.concat(batches)
    shown = []

    def show(row: dict, truth: dict) -> None:
        if not shown:
            print("\n".join(format_header(truth)), flush=True)
        shown.append(row)
        print(format_row(row), flush=True)

    result = evaluate(sketch, events, args.budgets, partition=partition, burst=args.burst,
                      policies=policies, graph=graph, on_row=show)
    if args.json:
        figures = {"sketch": args.sketch, "events": args.file, "burst": args.burst, **result}
        storage.write_durably(args.json, json.dumps(figures, indent=1).encode())
        print(f"acep: figures -> {args.json}", file=sys.stderr)
    return 0


def run_history(args) -> int:
    from history import inspection  # the history package is not needed by the rest of acep

    _check_outputs({"--plot": args.plot}, args.file, args.key_file)
    why = args.plot and inspection.plot_problem(args.plot)
    if why:
        raise UsageError(f"--plot {why}")
    with refused():
        loaded, size = inspection.load(args.file, args.plot, args.key_file)
    print(inspection.show(loaded, size, args.top, args.plot))
    return 0


def run_demo(args) -> int:
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


def run_sample(args) -> int:
    """Match rising departure delays at each airport on the embedded flights sample."""
    from .demo import DEMO, demo_events

    batch = demo_events()
    matcher = Matcher(DEMO["pattern"], DEMO["window"], DEMO["k"], where=DEMO["where"],
                      partition="origin")
    found = MatchBatch.concat([matcher.match_batch(batch), matcher.flush()])
    print(f"# pattern {DEMO['pattern']!r} where {' and '.join(DEMO['where'])}")
    print(f"# within {DEMO['window'] / 3600:g} h, k = {DEMO['k']}, partitioned by origin airport;"
          f" {len(batch):,} flights of January 2001, types = delay classes")
    matches = sorted(found.to_matches(), key=lambda m: (m.point, str(m.partition)))
    for m in matches[: args.limit]:
        print(json.dumps({"partition": m.partition, "start": _tag(m.start, True),
                          "point": _tag(m.point, True), "errors": m.errors,
                          "events": [_tag(t, True) for t in m.tags]}))
    exact = sum(m.errors == 0 for m in matches)
    print(f"# {_count(len(matches), 'match point')} ({exact:,} exact, {len(matches) - exact:,} "
          f"missing one event) in {_count(len(bundles(found, DEMO['window'])), 'bundle')}; "
          f"{matcher.kernel_name} kernel, {_count(matcher.stats['created'], 'match node')} "
          "created")
    return 0


if __name__ == "__main__":
    sys.exit(main())
