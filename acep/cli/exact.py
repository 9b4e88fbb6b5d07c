"""``acep exact``: a SASE+ query with the exact engine on one file (docs/EXACT.md)."""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time

import numpy as np

from .._output import tag_value
from .._text import counted
from ..arguments import (
    EVENTS_HELP,
    SPEC_HELP,
    UsageError,
    load_spec,
    open_events,
    path_arg,
    whole_number,
)
from ..events import EventError, EventSpec, format_of, iso_texts, not_an_attribute, read_all


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``acep exact`` on ``sub``."""
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


def run_exact(args: argparse.Namespace) -> int:
    """``acep exact QUERY_FILE EVENTS_FILE``: the exact engine on one file (a finite window).
    At a bad event, the matches of the events before it are printed first (a match depends
    only on events up to its last one), then the error names the event."""
    from ..nfab import ExactLimitError, load_query

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
    if format_of(args.events) == "csv":
        _csv_numbers(batch, read)
    try:
        engine, found, bad = _run_exact_until_bad(make_engine, batch, bad)
        seconds = time.perf_counter() - started
        _print(_ExactPrinter(query, batch), found, args.output)
    except ExactLimitError as exc:
        raise _limit_located(exc, batch) from None
    if bad is not None:
        raise bad
    s = engine.stats
    what = counted(s["records"], "record") if args.output == "compact" else \
        counted(s["matches"], "match")
    work = counted(s["main_runs"], "main run") if engine.engine == "postpone" else \
        f"{counted(s['runs_created'], 'run')} created"
    print(f"acep: {counted(s['events'], 'event')}, {what}, {work}, {seconds:.2f} s "
          f"({query.strategy.value}, {engine.engine} engine{_core_ran(engine)})",
          file=sys.stderr)
    seen = set(batch.type_names)
    missing = sorted({c.type for c in query.positive if c.type not in seen})
    if missing:
        print(f"acep: warning: query types {missing} never occur in the input (types seen: "
              f"{sorted(seen)[:12]}); is the event type read from the right column (--spec)?",
              file=sys.stderr)
    return 0


def _core_ran(engine) -> str:
    """What ran the shared-buffer or postponing engine, for the summary line."""
    if engine.core is None:  # the run engine has no core
        return ""
    return {"compiled": ", compiled core", "python": ", uncompiled core"}.get(
        engine.core, ", pure-Python engine")


def _print(out: _ExactPrinter, found, output: str) -> None:
    """The output lines: verbose ones in bulk where :func:`verbose_lines` can (no RETURN
    values), else a dict and ``json.dumps`` per match or record."""
    from ._exact_lines import verbose_lines

    texts = verbose_lines(found, out.components, out.tags, out.is_time) \
        if output == "verbose" else None
    if texts is None:
        show = out.match if output == "verbose" else out.record  # count() may enumerate
        lines = [json.dumps(show(x)) for x in found]
        texts = ["\n".join(lines) + "\n"] if lines else []
    for text in texts:
        sys.stdout.write(text)
    sys.stdout.flush()  # a reader of a live pipe sees each batch's matches at once


def _read_accepted(path: str, spec) -> tuple:
    """The events of ``path`` up to the first unreadable one, and that error (or None)."""
    from ..events import EventBatch

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
    from ..nfab import Engine

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
    from ..nfab.compile import compile_query
    from ..nfab.runs import needed_attributes

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
        from ..nfab.ast import Kind

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
        return tag_value(t, self.is_time) if text is None else text

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
        partition = plain_key(m.partition)
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


def plain_key(key):
    """A partition key as JSON shows it: None, one value bare, several a list."""
    if key is None:
        return None
    plain = [_plain(v) for v in key]
    return plain[0] if len(plain) == 1 else plain


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
        tag, previous = (tag_value(float(batch.tags[p]), batch.tag_is_time) for p in (pos, pos - 1))
        message = (f"tag {tag} goes back in time (the event before has {previous}; the exact "
                   "engine needs tags that never decrease over the whole input)")
        field = batch.tag_field
    elif field not in (None, "t") and field not in batch.columns:  # a misspelt attribute?
        names = sorted(batch.columns)
        shown = ", ".join(names[:12]) + (", ..." if len(names) > 12 else "")
        message += f" (no event of the input has it; attributes: {shown or 'none'})"
    return EventError(message, batch.source, batch.line_of(pos) if known else None, field, pos)
