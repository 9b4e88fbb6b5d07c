"""The outbox's command line: ``acep outbox PATH status | list | export | requeue | discard``.

``status`` sums up what an agent's outbox holds; the others list, export, resend or delete
its dead letters (batches the collector refused for good). Reads go through an
:class:`~edge.agent.outbox_reader.OutboxReader`, so an agent running on the same file is not
disturbed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sqlite3
import sys
import time
from collections.abc import Callable

from .outbox import Outbox, OutboxError
from .outbox_reader import OutboxReader, Reads

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """``acep outbox PATH status | list | export DIR | requeue [ID ...] | discard (ID ... |
    --all)``: what an agent's outbox holds, and its dead letters."""
    ap = argparse.ArgumentParser(prog="acep outbox",
                                 description="what is pending in an agent's outbox, and list, "
                                             "export, resend or delete its dead letters "
                                             "(batches the collector refused for good)")
    from acep.arguments import path_arg, text_arg

    ap.add_argument("path", type=path_arg, help="the agent's outbox file (outbox.path)")
    sub = ap.add_subparsers(dest="command", required=True, metavar="ACTION",
                            prog="acep outbox PATH")
    sub.add_parser("status", help="one JSON line: pending batches (count, bytes, the oldest "
                                  "with its attempts and last error, next due) and dead "
                                  "letters (count, bytes)")
    sub.add_parser("list", help="one JSON line per dead letter: id, bytes, reason, ...")
    ex = sub.add_parser("export", help="write each dead letter's body to "
                                       "DIR/<device>_<seq>.msgpack")
    ex.add_argument("dir", type=path_arg)
    for name, text in (("requeue", "send these dead letters again (all without ids)"),
                       ("discard", "delete these dead letters for good")):
        p = sub.add_parser(name, help=text)
        p.add_argument("ids", nargs="*", type=text_arg)
        if name == "discard":
            p.add_argument("--all", action="store_true", help="every dead letter")
        else:
            p.add_argument("--redate", action="store_true",
                           help="date them now first (their created_at: the collector "
                                "refuses a batch dated far ahead or before the first day "
                                "its retention keeps, as a device whose clock was wrong "
                                "dates them); their events keep their own times")
    args = ap.parse_args(argv)
    box = _opened(args.path, args.command in ("status", "list", "export"))
    if isinstance(box, str):
        print(f"{ap.prog}: {box}", file=sys.stderr)
        return 2
    with box:
        if args.command == "status":
            print(json.dumps(box.summary()))
        elif args.command == "list":
            for d in box.dead_letters():
                print(json.dumps(d.__dict__))
        elif args.command == "export":
            try:
                os.makedirs(args.dir, exist_ok=True)
            except OSError as e:  # a file there, or a directory that takes no new one
                print(f"{ap.prog} export: {args.dir}: {e.strerror or e}", file=sys.stderr)
                return 2
            for d in box.dead_letters():
                path = os.path.join(args.dir, d.batch_id.replace("/", "_") + ".msgpack")
                with open(path, "wb") as fh:
                    fh.write(box.dead_body(d.batch_id) or b"")
                print(path)
        elif args.command == "requeue":
            unknown = _not_dead(box, args.ids)
            try:
                n = box.requeue(args.ids or None, rewrite=_redating() if args.redate else None)
            except OutboxError as e:
                print(f"{ap.prog} requeue: {e}; nothing requeued", file=sys.stderr)
                return 1
            print(f"requeued {n} dead letters{' dated now' if args.redate else ''}")
            return _say_not_dead(ap.prog, unknown)
        else:
            if not args.ids and not args.all:
                print(f"{ap.prog} discard: name the ids, or --all", file=sys.stderr)
                return 2
            unknown = [] if args.all else _not_dead(box, args.ids)
            print(f"discarded {box.discard(None if args.all else args.ids)} dead letters")
            return _say_not_dead(ap.prog, unknown)
    return 0


def _opened(path: str, read_only: bool) -> Reads | str:
    """The outbox at ``path`` (an :class:`OutboxReader` when ``read_only``: an agent that
    has it open, or a user who may only read it, is not disturbed), or why it cannot be."""
    if not os.path.exists(path):
        return f"{path}: no such outbox"
    if os.path.isdir(path):
        return f"{path}: not an outbox (a directory)"
    try:
        if read_only:
            return OutboxReader(path)
        why = _not_an_outbox(path)
        # else Outbox() would add its tables to any SQLite file (and set it to WAL mode)
        return f"{path}: not an outbox ({why})" if why else Outbox(path)
    except (ValueError, OutboxError) as e:
        return str(e)
    except sqlite3.Error as e:
        return f"{path}: not an outbox ({e})"
    except OSError as e:
        return f"{path}: cannot be read ({e.strerror or e})"


def _redating() -> Callable[[str, bytes], bytes]:
    """``requeue --redate``'s rewrite: each body dated now (:func:`edge.wire.redate`)."""
    from ..wire import WireError, redate

    now = time.time()

    def rewrite(batch_id: str, body: bytes) -> bytes:
        try:
            return redate(body, now)
        except WireError as e:
            raise OutboxError(f"{batch_id}: not a batch this version can date ({e})") from None
    return rewrite


def _not_dead(box: Outbox, ids: list[str]) -> list[str]:
    """The ``ids`` that are not dead letters, each with what it is instead."""
    out = []
    for bid in ids:
        status = box.status(bid)
        if status != "dead":
            out.append(f"{bid} ({status or 'unknown'})")
    return out


def _say_not_dead(prog: str, unknown: list[str]) -> int:
    """1 (after saying which) when some ids named were not dead letters, else 0."""
    if not unknown:
        return 0
    print(f"{prog}: not dead letters, left alone: {', '.join(unknown)}", file=sys.stderr)
    return 1


def _not_an_outbox(path: str) -> str | None:
    """Why the file at ``path`` is not an outbox, or None. Reads, never writes."""
    try:
        with contextlib.closing(sqlite3.connect(path)) as db:
            found = db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' "
                               "AND name = 'pending'").fetchone()
    except sqlite3.DatabaseError as exc:  # not SQLite at all, or unreadable
        return str(exc)
    return None if found else "no table 'pending'"

