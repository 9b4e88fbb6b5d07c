"""``acep agent --config agent.toml --check``: is this device ready to run the agent?

What a person installing the agent runs before enabling the service, and what the systemd
unit runs as ``ExecStartPre`` (``examples/systemd``). It loads the config as the agent does
(a config error: exit 2), prints one ``ok``, ``WARN`` or ``FAIL`` line per check, and exits
1 if any check failed, else 0. Nothing is written. The checks are listed in docs/WIRE.md,
"Agent" (its opening paragraphs).
"""

from __future__ import annotations

import datetime as dt
import http.client
import json
import os
import ssl
import stat
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass

from ..logs import duration
from ..wire import LOOPBACK, PatternRef
from .config import AgentConfig, ConfigError, KeyFileError, load_config, read_key_file
from .outbox_reader import OutboxReader, read_summary
from .rebuild import rebuild
from .resume import copy_path, read_copy
from .sketches import device_key_option, fitting
from .transport import answer_opener, redirect_text, timed
from .uplink import CLOCK_SLACK, answer_json, error_body, error_text, tls_context

__all__ = ["Check", "checks", "check", "HTTP_TIMEOUT"]

HTTP_TIMEOUT = 5.0  # seconds at most per request (collector.timeout when smaller)
MIN_FREE = 64 << 20  # bytes free beside the outbox below which the check warns
# an outbox larger than this is not read through by PRAGMA quick_check (minutes on an SD card)
QUICK_CHECK_MAX = 1 << 30


@dataclass(frozen=True)
class Check:
    """One line of the report: ``level`` is ``"ok"``, ``"WARN"`` or ``"FAIL"``."""

    level: str
    what: str
    why: str = ""

    def line(self) -> str:
        if self.level == "ok":
            return f"ok  {self.what}" + (f" ({self.why})" if self.why else "")
        return f"{self.level} {self.what}: {self.why}"


def check(config_path: str, out=None) -> int:
    """Run every check on the config at ``config_path`` and print one line each on ``out``
    (stdout): 0 when none failed, 1 when one did, 2 for a config error (on stderr)."""
    out = out or sys.stdout
    try:
        cfg = load_config(config_path)
    except ConfigError as e:
        print(f"acep agent: config error: {e}", file=sys.stderr)
        return 2
    failed = False
    for c in checks(cfg):
        print(c.line(), file=out, flush=True)
        failed = failed or c.level == "FAIL"
    return 1 if failed else 0


def checks(cfg: AgentConfig) -> Iterator[Check]:
    """The checks of a loaded config, in the order they are printed (see the module
    docstring). Reads only."""
    yield Check("ok", f"config {cfg.config_path or '(parsed)'}",
                f"device {cfg.device_id}, pattern {cfg.pattern.id}")
    matcher = None
    for c in _pattern(cfg):
        if isinstance(c, Check):
            yield c
        else:
            matcher = c
    yield _source(cfg)
    yield _outbox(cfg)
    yield _room(cfg)
    yield from _written(cfg)
    keys: dict[str, bytes | None] = {}
    yield from _keys(cfg, keys)
    published = None
    if cfg.collector_url is not None:
        for c in _collector(cfg):
            if isinstance(c, Check):
                yield c
            else:
                published = c
    if cfg.sketch is not None:
        yield from _sketch(cfg, matcher, keys, published)


# --------------------------------------------------------------------------- the checks


def _pattern(cfg: AgentConfig):
    from acep import Matcher

    p = cfg.pattern
    what = f"pattern {p.id}"
    try:
        m = Matcher(p.text, window=p.window, k=p.k, where=list(p.where), partition=p.partition)
    except (ValueError, TypeError) as e:
        yield Check("FAIL", what, f"does not compile: {e}")
        return
    yield Check("ok", what, f"{p.text!r}, window {p.window:g}, k {p.k}, "
                            f"{'partition ' + m.partition if m.partition else 'one partition'}")
    yield m


def _source(cfg: AgentConfig) -> Check:
    s = cfg.source
    if s.kind == "stdin":
        return Check("ok", "source standard input")
    if s.kind == "mqtt":
        return _mqtt(cfg)
    if s.kind == "iterator":
        return Check("FAIL", "source", 'source.kind = "iterator" is for the Python API '
                                       "(Agent(config, events=...)); acep agent cannot run it")
    what, path = f"source {s.path}", s.path
    folder = os.path.dirname(path) or "."
    if os.path.exists(path):
        if os.path.isdir(path):
            return Check("FAIL", what, "is a directory, not a file")
        if not os.access(path, os.R_OK):
            return Check("FAIL", what, "cannot be read by this user")
        try:
            with open(path, "rb") as fh:
                fh.read(1)
        except OSError as e:
            return Check("FAIL", what, f"cannot be read: {e.strerror or e}")
        return Check("ok", what, f"readable, {os.path.getsize(path)} bytes")
    if not os.path.isdir(folder):
        return Check("FAIL", what, f"the directory {folder} does not exist")
    if not os.access(folder, os.R_OK | os.X_OK):
        return Check("FAIL", what, f"does not exist, and this user cannot read its directory "
                                   f"{folder} to see it appear")
    if not s.follow:
        return Check("FAIL", what, "does not exist (source.follow = false: the agent would "
                                   "have nothing to read)")
    return Check("WARN", what, "does not exist yet; the agent waits for it to appear "
                               "(source.follow = true)")


def _mqtt(cfg: AgentConfig) -> Check:
    """Connect to the broker as the agent would (another client id, a clean session)."""
    from .mqtt import import_paho, probe  # paho-mqtt is an optional extra

    s = cfg.source
    what = (f"source mqtt{'s' if s.tls else ''}://{s.host}:{s.port} topics "
            f"{', '.join(s.topics)} (qos {s.qos}, client id {s.client_id})")
    try:
        import_paho()
    except ImportError as e:
        return Check("FAIL", what, str(e))
    why = probe(s, min(cfg.timeout, HTTP_TIMEOUT))
    if why is not None:
        return Check("FAIL", what, why)
    if not s.tls and s.password is not None and s.host not in LOOPBACK:
        return Check("WARN", what, "the broker answers, but the password travels in clear "
                                   "(set source.tls = true)")
    return Check("ok", what, "the broker accepts the connection")


def _dir_writable(folder: str) -> str | None:
    """Why the agent could not create files in ``folder`` (None: it can)."""
    if not os.path.isdir(folder):
        return f"the directory {folder} does not exist"
    if not os.access(folder, os.W_OK | os.X_OK):
        why = "read-only file system" if _read_only_fs(folder) else "no write permission"
        return f"the directory {folder} is not writable ({why})"
    return None


def _read_only_fs(folder: str) -> bool:
    try:
        return bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def _outbox(cfg: AgentConfig) -> Check:
    path = cfg.outbox.path
    what = f"outbox {path}"
    why = _dir_writable(os.path.dirname(path) or ".")
    if why:  # SQLite writes the -wal and -shm files beside the database
        return Check("FAIL", what, why)
    if not os.path.exists(path):
        behind = _behind_copy(path, {})
        if behind:
            return Check("WARN", what, f"missing; {behind}")
        return Check("ok", what, "not created yet; the agent creates it, its directory is "
                                 "writable")
    if not os.access(path, os.R_OK | os.W_OK):
        return Check("FAIL", what, "exists but this user cannot read and write it")
    try:
        s = read_summary(path)
    except ValueError as e:
        return Check("FAIL", what, str(e).removeprefix(path + ": "))
    except Exception as e:  # sqlite3.Error, OSError: not SQLite, unreadable
        return Check("FAIL", what, f"cannot be read: {e}")
    damage = _damage(path, cfg)
    if damage:
        level, text = damage if isinstance(damage, tuple) else ("FAIL", damage)
        return Check(level, what, text)
    behind = _behind_copy(path, s["state"])
    if behind:
        return Check("WARN", what, behind)
    consumed = s["state"].get("consumed")
    done = "" if consumed is None else f", {consumed} events consumed"
    return Check("ok", what, f"{_n(s['pending'], 'batch')} pending ({s['pending_bytes']} "
                             f"bytes), {_n(s['dead'], 'dead letter')}{done}; checksums "
                             "verified")


def _behind_copy(path: str, state: dict) -> str | None:
    """Why the outbox at ``path`` (its progress ``state``) is behind the copy of its
    progress, and what the agent does about it; None when it is not."""
    copy = read_copy(copy_path(path))
    if copy is None or int(copy.get("consumed", 0)) <= int(state.get("consumed", 0)):
        return None
    source = (copy.get("source") or {}).get("path", "the source")
    return (f"{int(state.get('consumed', 0))} events consumed, its copy {copy_path(path)} "
            f"says {int(copy['consumed'])}: the outbox was lost, emptied or replaced; the "
            f"agent resumes {source} from the copy (the batches pending in the lost outbox "
            "are lost; none is uploaded twice)")


def _damage(path: str, cfg: AgentConfig) -> str | tuple[str, str] | None:
    """What is damaged in the outbox at ``path``: the file's pages (SQLite's quick_check,
    when the file is small enough for it to be cheap), batch bodies that do not match their
    checksum (level and text: a WARN when the agent can rebuild each from its events).
    None when nothing is."""
    step = "SQLite's quick_check of"
    try:
        with OutboxReader(path) as box:
            pages = box.quick_check() if os.path.getsize(path) <= QUICK_CHECK_MAX else []
            step = "reading the batches of"
            bad = box.damaged()
    except Exception as e:  # sqlite3.DatabaseError: pages too damaged to be read
        return f"damaged: {step} {path} failed: {e}"
    if pages:
        said = [p for p in pages if not p.startswith("***")][:3]  # "*** in database main ***"
        return f"damaged: SQLite's quick_check of {path} says: {'; '.join(said)}"
    if not bad:
        return None
    fates = [_fate(b, cfg) for b in bad]
    named = "; ".join(f"{b.batch_id} ({b.table}; {b.about or 'contents not recorded'}; "
                      f"{fate or 'rebuildable'})" for b, fate in zip(bad[:5], fates))
    more = f" and {len(bad) - 5} more" if len(bad) > 5 else ""
    text = f"{_n(len(bad), 'batch')} damaged (body does not match its checksum): {named}{more}"
    if not any(fates):
        return ("WARN", f"{text}; the agent rebuilds them from their events file before it "
                        "sends them (the disk may be failing)")
    return (f"{text}; the agent never sends them: it rebuilds those it can from their "
            "events file and moves the others to the dead letters")


def _fate(bad, cfg: AgentConfig) -> str | None:
    """Why the damaged batch ``bad`` cannot be rebuilt (reading only), None when it can."""
    if bad.table != "pending":
        return "a dead letter: not rebuilt"
    if bad.recipe is None:
        return "how it was made was not recorded: not rebuildable"
    p = cfg.pattern
    ref = PatternRef(p.id, p.text, p.window, p.k, tuple(p.where), p.partition)
    try:
        rebuild(json.loads(bad.recipe), bad.crc, device=cfg.device_id,
                seq=int(bad.batch_id.rsplit("/", 1)[1]), pattern=ref)
    except Exception as e:  # Lost, and a recipe this version cannot read
        return f"not rebuildable: {e}"
    return None


def _room(cfg: AgentConfig) -> Check:
    """Free space where the outbox is: a full disk holds the agent's input (WIRE.md, Agent,
    "Full disk") until there is room."""
    folder = os.path.dirname(os.path.abspath(cfg.outbox.path))
    what = f"free space ({folder})"
    try:
        st = os.statvfs(folder)
    except OSError as e:
        return Check("WARN", what, f"cannot be read: {e.strerror or e}")
    free = st.f_bavail * st.f_frsize
    if free < MIN_FREE:
        return Check("WARN", what, f"{free / 2**20:.0f} MiB (under {MIN_FREE / 2**20:.0f} MiB): "
                                   "when it fills, the agent holds its input until there is "
                                   "room; caps on the outbox: outbox.max_bytes")
    return Check("ok", what, f"{free / 2**20:,.0f} MiB")


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 'es' if noun.endswith('ch') else 's'}"


def _written(cfg: AgentConfig) -> Iterator[Check]:
    """The directories of the other files the agent writes."""
    files = [("metrics.path", cfg.metrics.path)]
    if cfg.sketch is not None:
        files.append(("sketch.save_path", cfg.sketch.save_path))
        if cfg.sketch.download:
            files.append(("sketch.path", cfg.sketch.path))
    for key, path in files:
        if path is None:
            continue
        what = f"{key} {path}"
        why = _dir_writable(os.path.dirname(path) or ".")
        if why is None and os.path.exists(path) and not os.access(path, os.W_OK):
            why = "exists but this user cannot write it"
        yield Check("FAIL", what, why) if why else Check("ok", what, "writable")


def _keys(cfg: AgentConfig, keys: dict) -> Iterator[Check]:
    """The secrets: readable, and not by every user. Fills ``keys`` (path: bytes or None)."""
    files = [("device.token_file", cfg.token_file),
             ("source.password_file", cfg.source.password_file)]
    if cfg.sketch is not None:
        files += [("sketch.key_file", cfg.sketch.key_file),
                  ("sketch.device_key_file", cfg.sketch.device_key_file)]
    for key, path in files:
        if path is None:
            continue
        what = f"{key} {path}"
        try:
            keys[path] = read_key_file(path, key, _secret(key))
        except KeyFileError as e:  # the agent's own words: e.option and e.path are in what
            keys[path] = None
            yield Check("FAIL", what, e.why)
            continue
        yield _private(what, path)
    if cfg.token is not None and cfg.token_file is None and cfg.config_path:
        c = _private(f"device.token in {cfg.config_path}", cfg.config_path)
        if c.level == "WARN":
            yield Check("WARN", c.what, c.why + ", or move the token to device.token_file")


def _secret(key: str) -> str:
    return {"device": "token", "source": "password"}.get(key.split(".")[0], "key")


def _private(what: str, path: str) -> Check:
    mode = stat.S_IMODE(os.stat(path).st_mode)
    if mode & stat.S_IROTH:
        return Check("WARN", what, f"every user can read it (mode {mode:04o}); "
                                   f"chmod o-r {path}")
    return Check("ok", what, f"readable, mode {mode:04o}")


def _get(url: str, token: str | None, timeout: float, limit: int,
         context: ssl.SSLContext | None = None) -> tuple[int | None, bytes, str]:
    """``GET url``: (HTTP status, body up to ``limit`` + 1 bytes, error); status None when
    no whole answer came within ``timeout`` (the error says why: a certificate the CA does
    not vouch for, too). A redirect is not followed (the token would go along:
    :class:`edge.agent.transport.NoRedirects`)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    req = timed(urllib.request.Request(url, headers=headers, method="GET"), timeout)
    opener = answer_opener(context)
    try:
        with opener.open(req, timeout=timeout) as r:
            return r.status, r.read(limit + 1), ""
    except urllib.error.HTTPError as e:
        if 300 <= e.code < 400 and e.headers.get("Location"):
            return e.code, b"", redirect_text(e.headers["Location"])
        body = error_body(e)
        return e.code, body, error_text(body)
    except (urllib.error.URLError, OSError, TimeoutError) as e:
        return None, b"", str(getattr(e, "reason", e))
    except (http.client.HTTPException, ValueError) as e:  # a URL http.client refuses
        return None, b"", f"{type(e).__name__}: {e}"


def _collector(cfg: AgentConfig):
    """``/health``, then the token; yields Checks and, last, what ``GET
    /v1/sketches/{pattern.id}`` answered: (status, body) or None."""
    base = cfg.collector_url.rstrip("/")
    timeout = min(cfg.timeout, HTTP_TIMEOUT)
    context = tls_context(base, cfg.ca_file)
    host = urllib.parse.urlsplit(base).hostname or ""
    if context is None and host not in LOOPBACK:
        yield Check("WARN", f"collector {base}", "plain http: the device token travels in "
                                                 "clear (acep serve --tls-cert/--tls-key, "
                                                 "then https:// and collector.ca_file)")
    sent = time.time()
    status, body, error = _get(base + "/health", None, timeout, 1 << 16, context)
    if status != 200:
        why = f"not reachable: {error}" if status is None else f"/health answered HTTP " \
                                                                f"{status} {error}".rstrip()
        yield Check("FAIL", f"collector {base}", why)
        yield Check("FAIL", f"device token ({cfg.device_id})", "not checked: the collector "
                                                                "did not answer")
        return
    yield Check("ok", f"collector {base}", "/health answers")
    clock = _clock(body, (sent + time.time()) / 2)
    if clock is not None:
        yield clock
    path = "/v1/sketches/" + urllib.parse.quote(cfg.pattern.id, safe="")
    limit = cfg.sketch.max_bytes if cfg.sketch is not None else 1 << 16
    status, body, error = _get(base + path, cfg.token, timeout, limit, context)
    what = f"device token ({cfg.device_id})"
    if status in (401, 403):
        yield Check("FAIL", what, f"token refused (GET {path}: HTTP {status} {error}); check "
                                  "device.token or device.token_file, and that the device is "
                                  "registered (acep serve --add-device)")
    elif status in (200, 404):
        yield _whose(base, cfg, timeout, context, f"GET {path}: {status}"
                     f"{', no sketch published' if status == 404 else ''}")
    elif status is None:
        yield Check("FAIL", what, f"not checked: GET {path}: {error}")
    else:
        yield Check("FAIL", what, f"GET {path}: HTTP {status} {error}".rstrip())
    yield status, body


def _clock(health: bytes, now: float) -> Check | None:
    """This device's clock against the collector's (``/health``'s ``time``; None from a
    collector that does not say): a batch is dated by the device's clock, and the
    collector refuses one too far ahead or before the first day its retention keeps."""
    try:
        doc = answer_json(health)
        theirs, ahead_max = float(doc["time"]), float(doc["max_clock_ahead"])
        first = doc.get("first_day_kept")
    except (ValueError, TypeError, KeyError):
        return None
    ahead = now - theirs
    off = f"{duration(abs(ahead))} {'ahead of' if ahead > 0 else 'behind'} the collector's"
    mine = f"{dt.datetime.fromtimestamp(now, dt.UTC):%Y-%m-%d %H:%M:%S} UTC"
    if ahead > ahead_max:
        return Check("FAIL", "clock", f"{mine}, {off} (more than its --max-clock-ahead): it "
                                      "would refuse every batch; set the clock (NTP)")
    if isinstance(first, str) and mine[:10] < first:
        return Check("FAIL", "clock", f"{mine}, {off}: before {first}, the first day it "
                                      "keeps (--retain-days), so it would refuse every "
                                      "batch; set the clock (NTP)")
    if abs(ahead) > CLOCK_SLACK:
        return Check("WARN", "clock", f"{mine}, {off}: batches are dated by this clock "
                                      "(retention goes by it); set it (NTP)")
    return Check("ok", "clock", f"within {CLOCK_SLACK:g} s of the collector's")


def _whose(base: str, cfg: AgentConfig, timeout: float, context, seen: str) -> Check:
    """An accepted token: is it ``device.id``'s (``GET /v1/whoami``)? A token copied from
    another device is accepted, and then every batch is refused (403)."""
    what = f"device token ({cfg.device_id})"
    status, body, _ = _get(base + "/v1/whoami", cfg.token, timeout, 1 << 16, context)
    try:
        who = answer_json(body) if status == 200 else {}
    except ValueError:
        who = {}
    if not isinstance(who, dict) or "device" not in who:  # a collector without /v1/whoami
        return Check("ok", what, f"accepted ({seen})")
    if who["device"] != cfg.device_id:
        return Check("FAIL", what, f"the collector knows this token as {who['device']!r}, "
                                   f"not device.id {cfg.device_id!r}: it would refuse every "
                                   "batch (HTTP 403); use this device's own token")
    return Check("ok", what, f"accepted as {who['device']!r}, role {who.get('role')} "
                             f"({seen})")


def _sketch(cfg: AgentConfig, matcher, keys: dict, published) -> Iterator[Check]:
    sk = cfg.sketch
    key = keys.get(sk.key_file)
    if key is None:
        then = " and try again at each sketch check, with backoff, until it can be" \
            if sk.download and cfg.collector_url else ""
        yield Check("FAIL", "sketch", "cannot be verified: sketch.key_file cannot be read "
                                      f"(the agent would run oldest-first{then})")
        return
    if sk.download:
        status, body = published if published is not None else (None, b"")
        what = f"sketch {cfg.pattern.id} published by the collector"
        if status == 200:
            yield _verified(what, body, (key, "sketch.key_file"), cfg, matcher)
        elif status == 404:
            yield Check("WARN", what, "none published yet; the agent runs oldest-first until "
                                      "one is")
        if status != 200 and sk.path and os.path.exists(sk.path):
            yield _verified(f"sketch {sk.path} (the copy kept)", _read(sk.path, sk.max_bytes),
                            (key, "sketch.key_file"), cfg, matcher)
    else:
        what = f"sketch {sk.path}"
        if not os.path.exists(sk.path):
            yield Check("FAIL", what, "no such file (the agent would run oldest-first)")
        else:
            try:
                data = _read(sk.path, sk.max_bytes)
            except OSError as e:
                yield Check("FAIL", what, f"cannot be read: {e.strerror or e}")
            else:
                yield _verified(what, data, (key, "sketch.key_file"), cfg, matcher)
    if sk.save_path and os.path.exists(sk.save_path):
        device_key = keys.get(sk.device_key_file) if sk.device_key_file else key
        what = f"learned sketch {sk.save_path}"
        if device_key is None:
            yield Check("WARN", what, "not verified: sketch.device_key_file cannot be read")
            return
        try:
            data = _read(sk.save_path, sk.max_bytes)
        except OSError as e:
            yield Check("WARN", what, f"cannot be read ({e.strerror or e}); the agent starts "
                                      "from the original sketch")
            return
        c = _verified(what, data, (device_key, device_key_option(sk)), cfg, matcher)
        yield c if c.level == "ok" else Check("WARN", what, c.why + "; the agent starts from "
                                                                    "the original sketch")


def _read(path: str, max_bytes: int) -> bytes:
    with open(path, "rb") as fh:
        return fh.read(max_bytes + 1)


def _verified(what: str, data: bytes, key: tuple[bytes, str], cfg: AgentConfig,
              matcher) -> Check:
    """The agent's checks of a sketch: signature, size and format (``Sketch.from_bytes``
    with ``key``: the key and the option it came from), that it fits the pattern
    (``Sketch.mismatch`` with the matcher's partition), and that a history policy and its
    matcher can be built from it."""
    from acep import Matcher
    from acep.shedding import Budget
    from history.policies import HistoryPolicy
    from history.sketch import Sketch, SketchError

    sk, p = cfg.sketch, cfg.pattern
    try:
        sketch = Sketch.from_bytes(data, key[0], sk.max_bytes, key_from=key[1])
    except SketchError as e:
        return Check("FAIL", what, f"refused: {e} (the agent would run oldest-first)")
    if matcher is None:
        return Check("FAIL", what, "signature verified, but the pattern does not compile")
    try:
        fitting(sketch, p)  # the agent's own check
    except SketchError as e:
        return Check("FAIL", what, f"refused: {e} (the agent would run oldest-first)")
    b = cfg.budget
    budget = None if b.mode == "none" else Budget(b.ops_per_event or b.max_ops, b.burst)
    try:
        policy = HistoryPolicy(sketch, sk.learning_rate, sk.explore, defer=sk.defer,
                               budget=budget)
        Matcher(p.text, window=p.window, k=p.k, where=list(p.where), partition=p.partition,
                budget=budget, policy=policy, bins=policy.bins)
    except (ValueError, TypeError) as e:
        return Check("FAIL", what, f"refused: does not fit the pattern: {e}")
    return Check("ok", what, f"signature verified with key {sketch.signed_with} ({key[1]}"
                             f"{sketch.key_note}), fits pattern {p.id}, {sketch.n_cells} cells, "
                             f"{len(data)} bytes")
