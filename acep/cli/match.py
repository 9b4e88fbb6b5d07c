"""``acep match``: find approximate matches of a pattern in a file (docs/DESIGN.md)."""

from __future__ import annotations

import argparse
import math
import sys
import time

from .._output import bundle_lines, match_bytes, match_lines
from .._text import counted
from ..arguments import (
    EVENTS_HELP,
    SPEC_HELP,
    add_pattern_options,
    check_predicate_attributes,
    load_spec,
    open_events,
    path_arg,
    whole_number,
)
from ..events import EventError, EventSpec, file_size_hint
from ..matcher import MatchBatch, Matcher, Pattern, bundles
from ..pattern import symbols


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``acep match`` on ``sub``."""
    match = sub.add_parser("match", help="find approximate matches of a pattern in a file",
                           description="Print one JSON line per match (or per bundle).")
    match.add_argument("file", type=path_arg, help=EVENTS_HELP)
    add_pattern_options(match)
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


def run_match(args: argparse.Namespace) -> int:
    """``acep match FILE``: print each batch's matches as they are found (or the bundles at
    the end), then one summary line on stderr."""
    pattern = Pattern.compile(args.pattern, args.where)
    matcher = Matcher(pattern, args.window, args.k, partition=args.partition,
                      merge=not args.no_merge, all_trajectories=args.all_trajectories,
                      on_bad_event=args.on_bad_event, backend=args.backend,
                      max_entries=args.max_entries if args.no_merge or args.all_trajectories
                      else None)
    spec = load_spec(args.spec)
    check_predicate_attributes(pattern, spec or EventSpec())
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


def _warn_unit_on_numbers(window: float, batch) -> None:
    """A duration such as 2h means seconds; on numeric tags that is rarely what was meant."""
    if getattr(window, "has_unit", False) and len(batch) and not batch.tag_is_time:
        print(f"acep: warning: the window {window.text!r} is a duration, but the tags are "
              f"numbers, not timestamps: it is taken as {float(window):g} tag units",
              file=sys.stderr)


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
        binary = getattr(sys.stdout, "buffer", None)  # none on a StringIO
        if binary is None:
            sys.stdout.write(match_lines(found))
        else:  # the writer's bytes as they are: no text decoded and encoded again
            sys.stdout.flush()
            binary.write(match_bytes(found))
            binary.flush()
        sys.stdout.flush()  # a reader of a live pipe sees each batch's matches at once

    def finish(self, window: float) -> None:
        if not self.bundles_only:
            return
        merged = MatchBatch.concat(self.found)
        found = bundles(merged, window)
        self.n_bundles = len(found)
        sys.stdout.write(bundle_lines(found, merged.tag_is_time))


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
    what = f"{counted(out.n_bundles, 'bundle')} from {counted(out.n_matches, 'match')}" \
        if out.bundles_only else counted(out.n_matches, "match")
    bad = "" if skipped is None else f"; {counted(skipped, 'bad event')} skipped"
    print(f"acep: {counted(n_events, 'event')}, {what} in {counted(s['partitions'], 'partition')}, "
          f"{seconds:.2f} s ({rate:,.0f} events/s, {matcher.kernel_name} kernel); match nodes: "
          f"{s['created']:,} created, {s['merged']:,} merged, {s['expired']:,} expired, "
          f"{s['peak_live']:,} live at peak{bad}", file=sys.stderr)


def _warn_unseen_types(pattern: Pattern, seen: set) -> None:
    missing = [t for t in symbols(pattern.node) if t not in seen]
    if missing:
        print(f"acep: warning: pattern types {missing} never occur in the input (types seen: "
              f"{sorted(seen)[:12]}); separate type names with spaces: 'a b c', not 'abc'",
              file=sys.stderr)
