"""``acep train``: the command line of :func:`trainer.train.train`.

::

    acep train flights.parquet --spec flights -p "late late+ verylate" -w 1h -k 1 \\
        --partition origin -o rising.history --sketch rising.sketch --key-file fleet.key
    acep train --archive /srv/acep/archive --pattern-id rising \\
        --sketch rising.sketch --key-file fleet.key \\
        --publish http://127.0.0.1:8765 --token-file admin.token
"""

from __future__ import annotations

import argparse
import json
import sys

from acep import storage
from acep.arguments import (
    BINS_HELP,
    UsageError,
    add_fit_options,
    bins_type,
    fit_options,
    id_arg,
    load_spec,
    parse_window,
    path_arg,
    refused,
    text_arg,
    whole_number,
)

__all__ = ["main"]


def chunk_length(text: str) -> float:
    """The argparse type of ``--chunk``: a window above 0 (``2h``, or tag units)."""
    window = parse_window(text)
    if window <= 0:
        raise argparse.ArgumentTypeError(f"the chunk length must be > 0, got {text!r}")
    return window


def _parser() -> argparse.ArgumentParser:
    from .sources import add_bad_file_option, add_day_options

    p = argparse.ArgumentParser(
        prog="acep train",
        description="Train a history graph and a signed sketch on Spark from event files or "
                    "the collector's archive (a local Spark session unless --master). "
                    "The options, the outputs and --publish are checked before Spark starts "
                    "(one line, exit 2); the same command run again writes the same files "
                    "over the last run's.")
    p.add_argument("inputs", nargs="*", type=path_arg,
                   help="event files (.parquet/.csv/.jsonl/.msgpack) or "
                        "directories of them; local, or URIs such as "
                        "s3://bucket/dir")
    p.add_argument("--archive", metavar="DIR", type=path_arg,
                   help="the collector's Parquet archive instead (a directory, or a copy "
                        "of it in object storage: s3://bucket/archive; needed when no event "
                        "files are given)")
    p.add_argument("--pattern-id", metavar="ID", type=id_arg,
                   help="the archive's pattern to train, and the id to publish the sketch "
                        "under (needed with --publish, and for an archive of several "
                        "patterns; default: the archive's only one)")
    p.add_argument("--when-finds-drop", metavar="DB", type=path_arg,
                   help="retrain only when the finds of the pattern's devices fell since its "
                        "sketch was published (the collector's database, which records "
                        "their heartbeats), on the uploads from the first day they fell; "
                        "else say why and exit 0 (docs/TRAINING.md, When to retrain; "
                        "default: train whenever run)")
    p.add_argument("--pattern-hash", metavar="PREFIX", type=text_arg,
                   help="the definition of the archived pattern to train, when devices "
                        "uploaded several under its id (a prefix of the hash the refusal "
                        "lists; default: its only definition)")
    p.add_argument("--spec", type=path_arg,
                   help="event spec of the files: a JSON/TOML file or a preset "
                        "(flights; default: columns t and type, every other "
                        "column an attribute)")
    p.add_argument("--pattern", "-p", type=text_arg,
                   help="ACEP pattern (needed for event files; default for an archive: the "
                        "archived one)")
    p.add_argument("--window", "-w", type=parse_window,
                   help="window, e.g. 3600 or 1h (needed with --pattern)")
    p.add_argument("-k", type=whole_number(0, "missing letters"), default=None,
                   help="error bound (default 0)")
    p.add_argument("--where", action="append", default=None, type=text_arg,
                   help="predicate, e.g. 'c.v > a.v' (repeatable; default: none)")
    p.add_argument("--partition", type=text_arg,
                   help="attribute to partition by (default: none, or the attribute of an "
                        "equivalence test [attr] in --where)")
    bins = p.add_mutually_exclusive_group()
    bins.add_argument("--bins", type=bins_type, default=8, help=BINS_HELP)
    bins.add_argument("--bins-from", metavar="HISTORY", type=path_arg,
                      help="reuse the bins of a history file built for the same pattern, "
                           "window, k, predicates and partition (one pass instead of two; "
                           "default: chosen from the data)")
    add_fit_options(p, "the training events, every device's stream under its own bucket")
    p.add_argument("--output", "-o", metavar="FILE", type=path_arg,
                   help="write the history graph here (default: not written; an earlier "
                        "file is replaced whole)")
    p.add_argument("--sketch", metavar="FILE", type=path_arg,
                   help="write the signed sketch here (needs --key-file; default: not "
                        "written; an earlier file is replaced whole)")
    p.add_argument("--key-file", metavar="FILE", type=path_arg,
                   help="the secret key that signs the sketch, the collector's "
                        "--sketch-key-file (needed with --sketch and --publish)")
    p.add_argument("--publish", metavar="URL", type=path_arg,
                   help="PUT the sketch to this collector (needs --key-file, --token-file "
                        "and --pattern-id; the collector and token are checked before the "
                        "job; default: not published)")
    p.add_argument("--token-file", metavar="FILE", type=path_arg,
                   help="an admin token of the collector, acep serve --add-admin (needed "
                        "with --publish)")
    p.add_argument("--ca-file", metavar="FILE", type=path_arg,
                   help="for an https --publish URL: the CA certificate (PEM) that signed "
                        "the collector's (default: the system's CAs)")
    p.add_argument("--publish-unchecked", action="store_true",
                   help="publish even if no pattern definition the devices uploaded under "
                        "--pattern-id fits the sketch (e.g. a definition not deployed yet)")
    p.add_argument("--quarantine", metavar="DIR", type=path_arg,
                   help="write bad rows here (Parquet): a new or empty directory, or an "
                        "earlier quarantine (replaced, by an empty one when there are no bad "
                        "rows; default: none, the first bad rows are printed and all "
                        "counted)")
    p.add_argument("--master", type=text_arg, help="Spark master (default local[CORES])")
    p.add_argument("--cores", type=whole_number(1, "cores"),
                   help="cores of the local session (default: all this process may use)")
    p.add_argument("--chunk", type=chunk_length,
                   help="time chunk length, e.g. 2h or tag units (default: about 4 units of "
                        "work per core, and at least 20 windows)")
    p.add_argument("--key-groups", type=whole_number(1, "key groups"),
                   help="equivalence-key groups (default: enough for about 4 units of work "
                        "per core with the chunks)")
    p.add_argument("--no-progress", action="store_true",
                   help="no progress on stderr (default: each Spark step's tasks)")
    add_day_options(p)
    add_bad_file_option(p)
    return p


def _pattern(args, archived: bool):
    from .train import PatternSpec

    if args.pattern is None:
        if not archived:
            raise UsageError("--pattern and --window are needed for event files")
        if any(x is not None for x in (args.window, args.k, args.where, args.partition)):
            raise UsageError("--window, -k, --where, --partition go with --pattern")
        return None
    if args.window is None:
        raise UsageError("--window is needed with --pattern")
    return PatternSpec(args.pattern, float(args.window), args.k or 0, tuple(args.where or ()),
                       args.partition)


def _check(args) -> None:
    from .sources import archive_days

    if bool(args.inputs) == bool(args.archive):
        raise UsageError("give event files or --archive DIR (one of the two)")
    args.since, args.before = archive_days(args.archive, args.since, args.before)
    if all(x is None for x in (args.output, args.sketch, args.publish)):
        raise UsageError("nothing to write: give --output, --sketch or --publish")
    if (args.sketch or args.publish) and not args.key_file:
        raise UsageError("--sketch and --publish need --key-file (sketches are signed)")
    if args.publish and not (args.token_file and args.pattern_id):
        raise UsageError("--publish needs --token-file and --pattern-id")
    if args.publish_unchecked and not args.publish:
        raise UsageError("--publish-unchecked goes with --publish")
    if args.ca_file and not (args.publish or "").lower().startswith("https://"):
        raise UsageError("--ca-file verifies an https:// --publish URL")
    if args.ca_file:
        from .publish import collector_tls

        try:
            collector_tls(args.publish, args.ca_file)  # before the job: it publishes last
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    if args.archive and args.spec:
        raise UsageError("--spec is for event files; the archive has its own columns")
    if args.pattern_hash and not args.archive:
        raise UsageError("--pattern-hash goes with --archive")
    if args.when_finds_drop and not (args.archive and args.pattern_id):
        raise UsageError("--when-finds-drop needs --archive and --pattern-id")


def _check_outputs(args) -> None:
    """Every output, before Spark starts: the files are written after the whole job."""
    from .outputs import check_outputs

    read = [args.archive] if args.archive else list(args.inputs)
    read += [f for f in (args.key_file, args.token_file, args.ca_file) if f]
    check_outputs({"--quarantine": args.quarantine}, read,
                  files={"-o": args.output, "--sketch": args.sketch})


def _read_secret(path: str, what: str) -> bytes:
    from history.sketch import read_key

    try:
        return read_key(path, what)
    except OSError as exc:
        raise UsageError(str(exc)) from None


def run(args) -> int:
    from history.fit import describe
    from history.graph import HistoryGraph
    from history.sketch import Sketch, key_id, oversized

    from .sources import print_quarantined
    from .train import train

    _check(args)
    _check_outputs(args)
    decided = _when_finds_drop(args) if args.when_finds_drop else None
    if decided is not None and not decided.retrain:
        print(f"acep train: not retrained: {decided.why}", file=sys.stderr)
        print(json.dumps({"retrained": False, "why": decided.why, "finds": decided.days}))
        return 0
    try:
        ratios = fit_options(args, bool(args.sketch or args.publish),
                             "give --sketch or --publish")
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    pattern = _pattern(args, bool(args.archive))
    if pattern is not None:
        pattern.n_states  # noqa: B018 - compiles the pattern: a bad one fails before Spark
    key = _read_secret(args.key_file, "key") if args.key_file else None
    token = _read_secret(args.token_file, "token").decode() if args.token_file else None
    if args.publish:
        _check_publisher(args, token)
    with refused("--bins-from"):
        bins_from = HistoryGraph.load(args.bins_from) if args.bins_from else None
    spec = load_spec(args.spec)
    result = train([args.archive] if args.archive else args.inputs, pattern, spec=spec,
                   archive=bool(args.archive), pattern_id=args.pattern_id,
                   pattern_hash=args.pattern_hash, bins_from=bins_from,
                   n_bins=args.bins, master=args.master, cores=args.cores, chunk=args.chunk,
                   key_groups=args.key_groups, quarantine=args.quarantine,
                   show_progress=not args.no_progress, fit=ratios, burst=args.burst,
                   search=args.search, days=(args.since, args.before),
                   skip_bad_files=args.skip_bad_files)
    graph, stats = result.graph, dict(result.stats)
    if key is not None:
        sketch = result.sketch or Sketch.from_graph(graph)
        data = sketch.to_bytes(key)
        stats["sketch_bytes"], stats["sketch_key_id"] = len(data), key_id(key)
        if (why := oversized(len(data), sketch.n_cells)) is not None:
            print(f"acep train: warning: {why}", file=sys.stderr)
    _write_pair(args, graph, data if key is not None else None, stats)
    if ratios:
        for line in describe(stats["fit"]):
            print(f"acep train: {line}", file=sys.stderr)
    print_quarantined("acep train", result.quarantined, stats["bad_rows"], args.quarantine,
                      result.skipped)
    if args.publish:
        stats["published"] = _publish(args, data, token)
    if decided is not None:
        stats.update(retrained=True, why=decided.why, finds=decided.days)
    print(json.dumps(stats))
    return 0


def _when_finds_drop(args):
    """``--when-finds-drop``: the rule of :func:`history.drift.when_to_retrain` on the
    collector's database; a retrain reads the archive from the first day the finds fell
    (or from ``--since``, if later)."""
    import datetime as dt

    from edge.collector.store import fleet_finds
    from history.drift import when_to_retrain

    try:
        fleet = fleet_finds(args.when_finds_drop, args.pattern_id)
    except ValueError as exc:
        raise UsageError(f"--when-finds-drop: {exc}") from None
    today = dt.datetime.now(dt.UTC).date().isoformat()
    decided = when_to_retrain(fleet.finds, fleet.published, fleet.uploaded, today)
    if decided.retrain:
        if decided.since is not None and (args.since is None or decided.since > args.since):
            args.since = decided.since
        if args.since and args.before and args.since >= args.before:
            raise UsageError(f"--when-finds-drop: the uploads to train on start on "
                             f"{args.since}, not before --before {args.before}")
        print(f"acep train: retraining: {decided.why}", file=sys.stderr)
    return decided


def _write_pair(args, graph, sketch: bytes | None, stats: dict) -> None:
    """``-o`` then ``--sketch``, both made before either is renamed into place: a kill
    between the two renames (docs/TRAINING.md, Output) is one fsync long."""
    history = graph.to_bytes() if args.output else None
    if history is not None:
        stats["history_bytes"] = storage.write_durably(args.output, history)
    if sketch is not None and args.sketch:
        storage.write_durably(args.sketch, sketch)


def _check_publisher(args, token: str) -> None:
    """Before the job: the collector answers and takes the token to publish (exit 2)."""
    from .publish import check_publisher

    try:
        check_publisher(args.publish, token, args.ca_file)
    except RuntimeError as exc:
        raise UsageError(f"--publish: {exc} (checked before training)") from None


def _publish(args, data: bytes, token: str) -> dict:
    """The sketch PUT to the collector; a refusal says where the sketch is kept."""
    from .publish import publish_sketch

    try:
        return publish_sketch(args.publish, args.pattern_id, data, token,
                              unchecked=args.publish_unchecked, ca_file=args.ca_file)
    except RuntimeError as exc:
        kept = f"the sketch is saved in {args.sketch}" if args.sketch else \
            "the sketch is not saved (--sketch FILE keeps it)"
        raise RuntimeError(f"{exc}; {kept}") from None


def main(argv: list[str] | None = None) -> int:
    from acep.events import EventError
    from acep.pattern import PatternError
    from acep.shedding import BudgetError
    from history.graph import HistoryFormatError

    from .outputs import OutputError
    from .sources import SourceError
    from .spark import run_command

    return run_command("acep train", run, _parser().parse_args(argv),
                       (UsageError, SourceError, OutputError, PatternError, EventError,
                        HistoryFormatError, BudgetError))
