"""``acep serve`` / ``python -m edge.collector``: the options, their checks before
anything is opened, and :func:`main`, which runs an admin command
(:mod:`edge.collector.admin`) or serves.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import math
import os
import sqlite3
import ssl
import sys
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from acep import storage
from acep.arguments import id_arg, path_arg, text_arg

from ..logs import LOG_LEVELS
from ..wire import LOOPBACK
from .admin import TOOLS, run_tool, tool_failed
from .admission import DEFAULT_MAX_WAIT, DEFAULT_PER_DEVICE
from .archive import Archive
from .bodies import DEFAULT_BODY_IDLE, DEFAULT_BODY_MIN_RATE
from .clock import DEFAULT_MAX_AHEAD, first_day_kept, midnight, utc_day
from .guards import DEFAULT_MIN_FREE
from .server import DEFAULT_IDLE_TIMEOUT, DEFAULT_PORT, ListenError, serve, server_tls
from .service import DEFAULT_MAX_BODY, Collector
from .store import RESTORE, Store, damaged, open_store
from .throttle import DEFAULT_FAILURES, DEFAULT_WINDOW

log = logging.getLogger("acep.collector")

MAX_RETAIN_DAYS = 36500  # --retain-days at most: the day it names must be a date


def _at_least_zero(unit: str):
    """An argparse type: a finite number >= 0 of ``unit``."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or value < 0:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number of {unit} >= 0")
        return value
    return parse


_seconds = _at_least_zero("seconds")
_rate = _at_least_zero("bytes per second")


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port (0 to 65535)")
    return value


def _unwritable(folder: str) -> str | None:
    """Why the collector cannot write files in ``folder`` (made if missing), or None."""
    try:
        Path(folder).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return f"cannot write there ({exc.strerror or exc})"
    why = storage.unwritable(folder)
    return None if why is None else f"cannot write there ({why})"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="acep serve", description=(
        "The collector: devices POST msgpack batches; matches go to the database, "
        "their windows to a Parquet archive, each re-checked by the exact engine."))
    p.add_argument("--db", required=True, type=path_arg,
                   help="database: a SQLite file path or sqlite:///PATH")
    p.add_argument("--archive", type=path_arg,
                   help="directory of the Parquet archive (needed to serve)")
    p.add_argument("--host", default="127.0.0.1", type=text_arg,
                   help="address to bind (default 127.0.0.1; 0.0.0.0: every interface)")
    p.add_argument("--port", type=_port, default=DEFAULT_PORT,
                   help=f"port (default {DEFAULT_PORT}; 0 picks a free one, printed)")
    p.add_argument("--tls-cert", metavar="PEM", type=path_arg,
                   help="serve HTTPS with this certificate chain (with --tls-key); the "
                        "agents set collector.ca_file to the CA that signed it")
    p.add_argument("--tls-key", metavar="PEM", type=path_arg, help="the private key of --tls-cert")
    p.add_argument("--metrics-token-file", metavar="PATH", type=path_arg,
                   help="GET /metrics answers only a request with 'Authorization: Bearer "
                        "<the token in this file>' (401 otherwise; Prometheus: "
                        "authorization: {credentials_file: ...}); /health stays open. "
                        "Without it /metrics is open, device ids included")
    p.add_argument("--max-body", type=int, default=DEFAULT_MAX_BODY,
                   help="largest request body in bytes (default 16 MiB)")
    p.add_argument("--recheck-workers", type=int, default=2,
                   help="processes that decode and re-check batches in parallel (default 2; "
                        "0: all ingest work in the database thread)")
    p.add_argument("--sketch-key-file", type=path_arg,
                   help="the key that signs sketches (PUT is refused "
                        "without it)")
    p.add_argument("--min-free", type=int, default=DEFAULT_MIN_FREE >> 20, metavar="MIB",
                   help="refuse uploads (507, Retry-After: the agents keep them) while the "
                        "database's or the archive's file system has less free space than "
                        f"this (default {DEFAULT_MIN_FREE >> 20} MiB; 0: until it is full)")
    p.add_argument("--max-wait", type=_seconds, default=DEFAULT_MAX_WAIT, metavar="SECONDS",
                   help="refuse an upload (503, Retry-After) before reading it when it would "
                        "wait longer than this behind the uploads already admitted (default "
                        f"{DEFAULT_MAX_WAIT:g}: half the agents' default timeout; 0: no limit)")
    p.add_argument("--device-uploads", type=int, default=DEFAULT_PER_DEVICE, metavar="N",
                   help="uploads of one device processed at a time; another one is refused "
                        f"(429, Retry-After) (default {DEFAULT_PER_DEVICE}: the agent sends "
                        "one at a time, so a second is its retry of one still queued)")
    p.add_argument("--auth-failures", type=int, default=DEFAULT_FAILURES, metavar="N",
                   help="after N requests from one client address (of an IPv6 client: its "
                        "/64) refused for a wrong or missing token (401) within "
                        "--auth-window, answer its requests that need a token 429 "
                        "(Retry-After) for --auth-window seconds without checking the "
                        "token, a correct one too; /health stays open (default "
                        f"{DEFAULT_FAILURES}; 0: off, say behind a proxy that limits them, "
                        "whose address every client would share)")
    p.add_argument("--auth-window", type=_seconds, default=DEFAULT_WINDOW, metavar="SECONDS",
                   help="the window of --auth-failures, and how long a client address "
                        "(IPv6: /64) that reached it is throttled (default "
                        f"{DEFAULT_WINDOW:g}; above 0)")
    p.add_argument("--idle-timeout", type=_seconds, default=DEFAULT_IDLE_TIMEOUT,
                   metavar="SECONDS",
                   help="close a connection that has not sent a whole request head this "
                        "long after it opened or after its last answer: one that sends "
                        "nothing or trickles its headers, an idle keep-alive one (default "
                        f"{DEFAULT_IDLE_TIMEOUT:g}; above 0)")
    p.add_argument("--body-idle-timeout", type=_seconds, default=DEFAULT_BODY_IDLE,
                   metavar="SECONDS",
                   help="refuse a request body (408) when no byte of it arrives for this "
                        "long: a pause between two reads, not the whole body (default "
                        f"{DEFAULT_BODY_IDLE:g}; above 0)")
    p.add_argument("--body-min-rate", type=_rate, default=DEFAULT_BODY_MIN_RATE,
                   metavar="BYTES",
                   help="refuse a request body (408) that arrives at fewer bytes per second "
                        "than this, counted after a grace of --body-idle-timeout seconds "
                        "(each byte buys 1/BYTES s more), so a device on a thin link takes "
                        "as long as its body needs while a client that trickles gives its "
                        f"upload's place back (default {DEFAULT_BODY_MIN_RATE}: 8 kbit/s; "
                        "0: no minimum, the idle timeout alone)")
    p.add_argument("--max-clock-ahead", type=_seconds, default=DEFAULT_MAX_AHEAD,
                   metavar="SECONDS",
                   help="refuse (400) a batch created more than this far ahead of the "
                        "collector's clock: a device whose clock is wrong; the agent keeps "
                        f"it as a dead letter (default {DEFAULT_MAX_AHEAD:g}: a day)")
    p.add_argument("--retain-days", type=int, metavar="N",
                   help="while serving, delete the batches created before the day N days "
                        "ago (UTC, by the device's clock: the day of the archive's date= "
                        "folder; as --prune-before that day), at the start and every hour, "
                        "and refuse (400) a batch created before it (a device whose clock "
                        "is wrong; the agent keeps it as a dead letter); acep train --since "
                        "Nd reads the days kept")
    p.add_argument("--compact", action="store_true",
                   help="while serving, merge each device's small archive files of the days "
                        "before today into files of up to a million rows, at the start and "
                        "every hour (the trainer reads far fewer files)")
    p.add_argument("--mirror", metavar="URI", type=path_arg,
                   help="keep a copy of the archive here while serving, for a cluster's "
                        "trainer to read: s3://bucket/prefix (also gs://, hdfs://, a path); "
                        "each stored batch's file is copied, compactions follow, retention "
                        "leaves it alone; what is missing is copied at the start")
    p.add_argument("--accept-missing-archive", action="store_true",
                   help="serve although --archive lacks files of the batches stored last "
                        "(the start looks at the newest few): their events are lost, say "
                        "an archive restored from an older copy (--check-archive lists "
                        "them); without it the collector refuses to start, as on an empty "
                        "mount point or a wrong path")
    p.add_argument("--log-level", default="INFO", type=str.upper, choices=LOG_LEVELS,
                   help="DEBUG, INFO (default: start, retention, refused and failed "
                        "requests), WARNING or ERROR; logged on stderr")
    p.add_argument("--access-log", action="store_true",
                   help="also log one line per request (at INFO)")
    tools = p.add_mutually_exclusive_group()
    tools.add_argument("--add-device", metavar="ID", type=id_arg,
                       help="register a device, print its new token once and exit (a known "
                            "device gets a new token; its old one is refused at once)")
    tools.add_argument("--add-admin", metavar="NAME", type=id_arg,
                       help="register an admin (may PUT sketches), print its token and exit")
    tools.add_argument("--rotate-token", metavar="ID", type=text_arg,
                       help="print a new token for a registered device or admin; its current "
                            "one stays valid until the new one is first used (7 days at "
                            "most), so the device is never refused meanwhile; exit")
    tools.add_argument("--revoke-device", metavar="ID", type=text_arg,
                       help="refuse the token of a device or admin from now on (also on the "
                            "running collector) and exit; its stored batches stay")
    tools.add_argument("--list-devices", action="store_true",
                       help="one JSON line per device: role, when its token was issued, its "
                            "batches, when the last one arrived, when it was last seen and "
                            "its last heartbeat's status; exit")
    tools.add_argument("--prune-before", metavar="YYYY-MM-DD", type=text_arg,
                       help="delete the batches created before this UTC day (by the device's "
                            "clock: the day of the archive's date= folder), their matches "
                            "and summaries, and with --archive its days before it; print "
                            "how many; exit (the collector may be running)")
    tools.add_argument("--backup", metavar="FILE", type=path_arg,
                       help="copy the database to FILE, a new file, consistent also while "
                            "the collector runs (SQLite's online backup; not cp), checked "
                            "(a damaged database gives none); print its size and batches; "
                            "exit")
    tools.add_argument("--check-archive", action="store_true",
                       help="compare the database with --archive (after a restore from a "
                            "backup): one JSON line per archive file no batch is in (with "
                            "the batches the database lacks) and per file it names that is "
                            "missing, then a summary; exit 0 when they agree, 1 when not; "
                            "writes nothing (the collector may be running)")
    return p


def _bad_mirror(mirror: str, archive: str) -> str | None:
    """Why ``--mirror`` cannot be used (None: it can be tried): a filesystem this
    collector cannot write, or a folder that holds the archive or is inside it."""
    try:
        storage.check_scheme(mirror)
    except storage.StorageError as exc:
        return exc.reason
    local = urllib.parse.urlsplit(mirror).path if mirror.startswith("file://") else \
        None if storage.is_uri(mirror) else mirror
    if local is not None:
        a, m = os.path.realpath(archive), os.path.realpath(local)
        if os.path.commonpath([a, m]) in (a, m):
            where = "the archive itself" if m == a else "inside the archive" \
                if os.path.commonpath([a, m]) == a else "a folder the archive is in"
            return f"is {where} ({archive}); the mirror must be another place"
    return None


def _missing_archive(store: Store, archive: str) -> str | None:
    """Why the collector must not make ``archive``: it is missing while the database names
    files in it (a disk not mounted, a path mistyped or moved); None otherwise."""
    if os.path.exists(archive):
        return None
    files = store.archive_file_count()
    if not files:
        return None
    return (f"no such directory, but the database names {files} archive "
            f"file{'s' if files != 1 else ''} in it (a disk not mounted? moved?); make it by "
            "hand if the archive is lost (and serve with --accept-missing-archive), then "
            "--check-archive says what is missing")


def read_metrics_token(path: str) -> bytes:
    """The token of ``--metrics-token-file``: the file's text without surrounding
    whitespace, one word of printable ASCII (what a header carries). An ``OSError`` naming
    the file and the problem."""
    from history.sketch import read_key

    token = read_key(path, "metrics token")
    bad = next(((i, b) for i, b in enumerate(token) if not 0x21 <= b <= 0x7E), None)
    if bad is not None:
        i, byte = bad
        what = {0x20: "a space", 0x09: "a tab", 0x0A: "a line break",
                0x0D: "a line break"}.get(byte, f"the byte 0x{byte:02x}")
        raise OSError(f"{path}: the metrics token file holds {what} at character {i + 1}: "
                      "a bearer token is one word of printable ASCII (python -c 'import "
                      "secrets; print(secrets.token_urlsafe(32))' makes one)")
    return token


def _archive_behind(store: Store, args: argparse.Namespace) -> str | None:
    """Why the collector must not serve ``--archive``: it lacks files of the batches stored
    last (an empty mount point, a wrong path, an old copy), which ``--accept-missing-archive``
    lets it start without (said on stderr); None when they are there."""
    first = first_day_kept(utc_day(time.time()), args.retain_days)
    from .consistency import newest_missing

    gone, looked = newest_missing(store, args.archive,
                                  None if first is None else midnight(first))
    if not gone:
        return None
    why = (f"{gone[0]} is missing ({len(gone)} of the {looked} files of the batches stored "
           f"last are: a disk not mounted? a wrong path? an older copy?); acep serve --db "
           f"{args.db} --archive {args.archive} --check-archive lists what the database names "
           "that is not there")
    if args.accept_missing_archive:
        print(f"acep serve: warning: --archive {args.archive}: {why}; serving without them "
              "(--accept-missing-archive)", file=sys.stderr)
        return None
    return f"{why}; --accept-missing-archive serves without them (lost)"


@dataclass
class _Serving:
    """What serving needs from the options beside the database and the archive."""

    key: bytes | None
    metrics_token: bytes | None
    tls: ssl.SSLContext | None


class _Refused(Exception):
    """An option serving cannot use; the message names it."""


def _serving_options(args: argparse.Namespace) -> _Serving:
    """The options of a serving collector that need neither the database nor the archive,
    checked before either is opened, so that a refusal leaves no new database behind;
    :class:`_Refused` naming the option otherwise."""
    if not args.archive:
        raise _Refused("--archive DIR is needed to serve")
    if args.max_body < 1:
        raise _Refused("--max-body must be positive")
    for flag, value in (("--body-idle-timeout", args.body_idle_timeout),
                        ("--idle-timeout", args.idle_timeout),
                        ("--auth-window", args.auth_window)):
        if value <= 0:
            raise _Refused(f"{flag} must be above 0")
    for flag, value, least in (("--recheck-workers", args.recheck_workers, 0),
                               ("--min-free", args.min_free, 0),
                               ("--device-uploads", args.device_uploads, 1),
                               ("--auth-failures", args.auth_failures, 0),
                               ("--retain-days", args.retain_days, 1)):
        if value is not None and value < least:
            raise _Refused(f"{flag} must be {least} or more")
    if args.retain_days is not None and args.retain_days > MAX_RETAIN_DAYS:
        raise _Refused(f"--retain-days must be at most {MAX_RETAIN_DAYS} (100 years)")
    if args.mirror is not None and (why := _bad_mirror(args.mirror, args.archive)):
        raise _Refused(f"--mirror {storage.redact(args.mirror)}: {why}")
    key = metrics_token = None
    if args.sketch_key_file:
        from history.sketch import read_key

        try:
            key = read_key(args.sketch_key_file, "sketch key")
        except OSError as exc:
            raise _Refused(f"--sketch-key-file {exc}") from None
    if args.metrics_token_file:
        try:
            metrics_token = read_metrics_token(args.metrics_token_file)
        except OSError as exc:
            raise _Refused(f"--metrics-token-file {exc}") from None
    try:
        tls = server_tls(args.tls_cert, args.tls_key)
    except ValueError as exc:
        raise _Refused(str(exc)) from None
    return _Serving(key, metrics_token, tls)


def main(argv: list[str] | None = None) -> int:
    """``python -m edge.collector`` / ``acep serve``."""
    args = _parser().parse_args(argv)
    tool = next((name for name in TOOLS if getattr(args, name) not in (None, False)), None)
    serving = None
    if tool is None:
        try:
            serving = _serving_options(args)
        except _Refused as exc:
            print(f"acep serve: {exc}", file=sys.stderr)
            return 2
    try:
        store = open_store(args.db, create=tool in (None, "add_device", "add_admin"))
    except ValueError as exc:
        print(f"acep serve: --db: {exc}", file=sys.stderr)
        return 2
    if tool is not None:
        try:
            return run_tool(store, args)
        except sqlite3.DatabaseError as exc:
            if not damaged(exc):
                return tool_failed(tool, exc, store.path)
            print(f"acep serve: --db: {store.path}: damaged ({exc}); {RESTORE}",
                  file=sys.stderr)
            return 2
        except OSError as exc:
            return tool_failed(tool, exc, store.path)
        finally:
            store.close()
    try:
        why = _missing_archive(store, args.archive) or _archive_behind(store, args) \
            or _unwritable(args.archive)
    except sqlite3.DatabaseError as exc:
        if not damaged(exc):
            raise
        print(f"acep serve: --db: {store.path}: damaged ({exc}); {RESTORE}", file=sys.stderr)
        return 2
    if why:
        print(f"acep serve: --archive {args.archive}: {why}", file=sys.stderr)
        return 2
    key, metrics_token, tls = serving.key, serving.metrics_token, serving.tls
    if tls is None and args.host not in LOOPBACK:
        print(f"acep serve: warning: plain HTTP on {args.host}: device tokens travel in "
              "clear; give --tls-cert and --tls-key, or put a TLS proxy in front",
              file=sys.stderr)
    logging.basicConfig(level=args.log_level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    collector = Collector(store, Archive(args.archive), max_body=args.max_body,
                          sketch_key=key, recheck_workers=args.recheck_workers,
                          min_free=args.min_free << 20, retain_days=args.retain_days,
                          compact=args.compact, max_wait=args.max_wait,
                          device_uploads=args.device_uploads, mirror=args.mirror,
                          max_ahead=args.max_clock_ahead, body_idle=args.body_idle_timeout,
                          body_min_rate=args.body_min_rate, metrics_token=metrics_token,
                          auth_failures=args.auth_failures, auth_window=args.auth_window)
    log.info("database %s, archive %s, %d re-check workers, uploads refused below %d MiB "
             "free%s, %d at a time per device, bodies refused after %g s without a byte%s, "
             "%s, %s",
             store.path, collector.archive.root, args.recheck_workers, args.min_free,
             f" or when they would wait over {args.max_wait:g} s" if args.max_wait else "",
             args.device_uploads, args.body_idle_timeout,
             f" or below {args.body_min_rate:g} bytes/s" if args.body_min_rate else "",
             f"keeping {args.retain_days} days" if args.retain_days
             else "keeping everything (no --retain-days)",
             "compacting closed days" if args.compact else "no compaction")
    if args.mirror:
        log.info("mirroring the archive to %s", storage.redact(args.mirror))
    if metrics_token is not None:
        log.info("GET /metrics needs the token of %s", args.metrics_token_file)
    if args.auth_failures:
        log.info("an address (IPv6: a /64) that sends %d wrong or missing tokens within "
                 "%g s has no token checked for %g s (429)", args.auth_failures, args.auth_window,
                 args.auth_window)
    try:
        asyncio.run(serve(collector, args.host, args.port,
                          ready=lambda line: print(line, flush=True), tls=tls,
                          access_log=args.access_log, idle_timeout=args.idle_timeout))
    except ListenError as exc:
        print(f"acep serve: {exc}", file=sys.stderr)
        return 2
    finally:
        collector.close()
    print(json.dumps({"stopped": True, **{k: v for k, v in collector.metrics.items()}}),
          file=sys.stderr)
    return 0
