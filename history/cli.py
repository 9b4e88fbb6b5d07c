"""``acep history build``, ``inspect`` and ``evaluate``: the command line of the history
package (docs/SHEDDING.md sections 6, 10 and 11); :mod:`acep.cli` registers it."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from acep import storage
from acep.arguments import (
    BINS_HELP,
    EVENTS_HELP,
    SPEC_HELP,
    UsageError,
    add_fit_options,
    add_pattern_options,
    bins_type,
    burst_type,
    check_predicate_attributes,
    context_type,
    fit_options,
    load_spec,
    open_events,
    path_arg,
    ratios_type,
    refused,
    text_arg,
    whole_number,
)
from acep.events import EventError, EventSpec
from acep.matcher import Pattern
from acep.utils import counted, one_line

__all__ = ["add_history_parser"]

leaves_type = whole_number(2, "context leaves", 64)  # --context-leaves


def add_history_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``acep history`` and its commands ``build``, ``inspect`` and ``evaluate``
    on ``sub``."""
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
    add_pattern_options(build)
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


def _add_evaluate_parser(hsub: argparse._SubParsersAction) -> None:
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


def run_history_build(args: argparse.Namespace) -> int:
    """``acep history build FILE``: the history graph of an unconstrained run over the
    events, and with ``--sketch`` its signed sketch, fitted to ``--fit`` budgets."""
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
    check_predicate_attributes(Pattern.compile(args.pattern, args.where), spec or EventSpec())
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
    print(f"acep: history of {counted(sum(map(len, batches)), 'event')}: "
          f"{counted(graph.n_cells, 'cell')}, {counted(graph.n_bundles, 'bundle')}, {size:,} bytes "
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


def run_history_evaluate(args: argparse.Namespace) -> int:
    """``acep history evaluate SKETCH FILE``: one table row per budget and policy, printed
    as it is measured (and ``--json``)."""
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
    check_predicate_attributes(Pattern.compile(sketch.pattern, list(sketch.where)),
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


def run_history(args: argparse.Namespace) -> int:
    """``acep history inspect FILE``: a history's or a sketch's size and top match vectors,
    and ``--plot``."""
    from history import inspection

    _check_outputs({"--plot": args.plot}, args.file, args.key_file)
    why = args.plot and inspection.plot_problem(args.plot)
    if why:
        raise UsageError(f"--plot {why}")
    with refused():
        loaded, size = inspection.load(args.file, args.plot, args.key_file)
    print(inspection.show(loaded, size, args.top, args.plot))
    return 0
