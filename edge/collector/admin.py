"""The collector's admin commands (``acep serve --add-device`` and the others of
``TOOLS``): each does its work on the database, prints, and exits.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sqlite3
import sys
from pathlib import Path

from .archive import Archive
from .clock import midnight
from .store import BackupError, Store, check_backup_target, damaged

# the maintenance tools (a mutually exclusive group); the first two may create the database
TOOLS = ("add_device", "add_admin", "rotate_token", "revoke_device", "list_devices",
         "prune_before", "backup", "check_archive")


def _prune(store: Store, args: argparse.Namespace) -> int:
    try:
        day = dt.date.fromisoformat(args.prune_before)
    except ValueError:
        print(f"acep serve: --prune-before {args.prune_before!r} is not a day (YYYY-MM-DD)",
              file=sys.stderr)
        return 2
    if args.archive and not os.path.isdir(args.archive):  # a typo: prune nothing at all
        print(f"acep serve: --archive {args.archive}: no such directory (nothing pruned)",
              file=sys.stderr)
        return 2
    gone = store.prune(midnight(day))
    if args.archive:
        gone["archive_files"] = Archive(args.archive).prune(day.isoformat())
    print(json.dumps({"before": day.isoformat(), **gone}))
    return 0


def _backup(store: Store, target: str) -> int:
    """``--backup``: the copy's size and batches, or one line naming what is wrong: exit 2
    for a FILE refused before the copy (or a damaged database), 1 for a copy that failed
    while it was written (a full disk)."""
    try:
        check_backup_target(Path(target))
    except OSError as exc:
        print(f"acep serve: --backup: {exc}", file=sys.stderr)
        return 2
    try:
        print(json.dumps(store.backup(target)))
        return 0
    except BackupError as exc:  # the --db file is damaged: a file the command line names
        print(f"acep serve: --backup: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # the system's name the temporary file: name the target
        why = f"{target}: {exc.strerror}" if exc.errno else str(exc)
    except sqlite3.DatabaseError as exc:
        if damaged(exc):
            raise
        why = f"{target}: {exc}"
    print(f"acep serve: --backup: {why}", file=sys.stderr)
    return 1


def _check_archive(store: Store, archive: str | None) -> int:
    """``--check-archive``: the disagreements of the database and the archive, one JSON
    line each, then the summary; 0 when there are none, 1 when there are."""
    if not archive:
        print("acep serve: --check-archive needs --archive DIR", file=sys.stderr)
        return 2
    if not os.path.isdir(archive):
        print(f"acep serve: --archive {archive}: no such directory", file=sys.stderr)
        return 2
    from .consistency import compare

    for line in compare(store, archive):
        print(json.dumps(line), flush=True)
    return 0 if line["ok"] else 1


def tool_failed(tool: str, exc: sqlite3.Error | OSError, db: str) -> int:
    """One line for an admin command whose work failed after its checks (a full disk, a
    file system mounted read-only, a lock held too long), exit 1 (README, Exit codes)."""
    if isinstance(exc, sqlite3.Error):
        why = f"{db}: {exc}"
    else:
        why = f"{exc.filename}: {exc.strerror}" if exc.filename and exc.strerror else str(exc)
    print(f"acep serve: --{tool.replace('_', '-')}: {why}", file=sys.stderr)
    return 1


def _unknown(device_id: str, db: str) -> int:
    """An id that names no device: a bad option value, exit 2 (README, Exit codes)."""
    print(f"acep serve: no device {device_id!r} is registered in {db}", file=sys.stderr)
    return 2


def run_tool(store: Store, args: argparse.Namespace) -> int:
    """``--add-device``, ``--add-admin``, ``--rotate-token``, ``--revoke-device``,
    ``--list-devices``, ``--prune-before``, ``--backup``, ``--check-archive``."""
    if args.prune_before is not None:
        return _prune(store, args)
    if args.backup is not None:
        return _backup(store, args.backup)
    if args.check_archive:
        return _check_archive(store, args.archive)
    if args.list_devices:
        for device in store.devices():
            print(json.dumps(device))
        return 0
    if args.rotate_token is not None:
        token = store.rotate_token(args.rotate_token)
        if token is None:
            return _unknown(args.rotate_token, args.db)
        print(token)
        return 0
    if args.revoke_device is not None:
        if not store.revoke_device(args.revoke_device):
            return _unknown(args.revoke_device, args.db)
        print(f"revoked {args.revoke_device}: its token is refused from now on")
        return 0
    name = args.add_device if args.add_device is not None else args.add_admin
    print(store.add_device(name, "device" if args.add_device is not None else "admin"))
    return 0
