"""The agent's configuration: ``agent.toml`` read with tomllib and checked key by key.

Every problem raises :class:`ConfigError` whose message names the key (``budget.mode``,
``source.path``, ...), after the file's path when :func:`load_config` read it; the
``[pattern]`` is compiled as the agent's matcher will be. Relative paths are taken relative
to the config file's directory. ``examples/agent.toml`` shows every key, and the default of
each whose value there is another.
"""

from __future__ import annotations

import math
import os
import ssl
import tomllib
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

from acep import Matcher, storage
from acep.pattern import PatternError
from acep.shedding import Budget, smallest_burst
from history.policies import DEFER, EXPLORE, LEARNING_RATE
from history.sketch import read_key

from ..wire import ID_RULE, valid_id
from .uplink import ANSWER_TIMES

__all__ = ["ConfigError", "KeyFileError", "read_key_file", "AgentConfig", "PatternConfig",
           "SourceConfig", "BudgetConfig", "SketchConfig", "OutboxConfig", "CondensedConfig",
           "SampleConfig", "MetricsConfig", "load_config", "parse_config"]

SOURCES = ("file", "stdin", "iterator", "mqtt")
MQTT_KEYS = ("host", "port", "topics", "qos", "client_id", "username", "password_file",
             "tls", "ca_file", "cert_file", "key_file", "keepalive", "topic_field",
             "inflight")
BUDGET_MODES = ("none", "fixed", "wall-clock")
CAP_POLICIES = ("drop-oldest", "refuse-new")
# the longest wait a key may ask for: a year is more than any device needs, and far below
# what a socket or a thread's wait overflows at (about 292 years in seconds)
MAX_SECONDS = 365 * 86400.0
# metrics.interval at least: each interval writes a line of about 1 KiB (an idle agent at
# 1e-9 s wrote 41 MB in 10 s); once a second is more than any dashboard reads
MIN_METRICS_INTERVAL = 1.0


class ConfigError(ValueError):
    """A bad ``agent.toml``; the message names the key."""


class KeyFileError(OSError):
    """A secret's file (``device.token_file``, ``sketch.key_file``, ...) that is not set,
    cannot be read or holds nothing: ``option`` names the key, ``why`` what is wrong with
    ``path``."""

    def __init__(self, option: str, path: str | None, why: str):
        self.option, self.path, self.why = option, path, why
        super().__init__(f"{option}: {path}: {why}" if path else f"{option}: {why}")


def read_key_file(path: str | None, option: str, what: str = "key") -> bytes:
    """The secret in the file ``option`` names, read as the agent and ``acep agent --check``
    both read it, so that both word a problem alike (``sketch.key_file: PATH: cannot read
    the key file (Permission denied)``); :class:`KeyFileError` otherwise."""
    if path is None:
        raise KeyFileError(option, None, "not set")
    try:
        return read_key(path, what)
    except OSError as e:
        raise KeyFileError(option, path, str(e).removeprefix(f"{path}: ")) from None


@dataclass
class PatternConfig:
    id: str
    text: str
    window: float
    k: int = 0
    where: tuple[str, ...] = ()
    partition: str | None = None


@dataclass
class SourceConfig:
    kind: str = "file"
    path: str | None = None
    follow: bool = True
    batch_events: int = 1000
    batch_seconds: float = 1.0
    poll_seconds: float = 0.1
    # source.kind = "mqtt" (edge/agent/mqtt.py)
    host: str | None = None
    port: int = 1883
    topics: tuple[str, ...] = ()
    qos: int = 1
    client_id: str | None = None
    username: str | None = None
    password_file: str | None = None
    password: str | None = field(default=None, repr=False)
    tls: bool = False
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    keepalive: int = 60
    topic_field: str | None = None
    inflight: int = 20  # the broker's max_inflight_messages (mosquitto's default)


@dataclass
class BudgetConfig:
    mode: str = "none"
    ops_per_event: float = 0.0
    burst: float = 64.0
    target_utilization: float = 0.8
    max_lag: float = 2.0
    catch_up: float = 600.0
    min_ops: float = 0.5
    max_ops: float = 1e6
    policy: str = "oldest-first"


@dataclass
class SketchConfig:
    path: str | None = None
    download: bool = False
    key_file: str | None = None
    device_key_file: str | None = None
    max_bytes: int = 1 << 20
    learning_rate: float = LEARNING_RATE
    explore: float = EXPLORE
    defer: int = DEFER  # deferred window starts per partition and state (SHEDDING.md 8)
    save_path: str | None = None
    save_every: int = 100_000
    check_interval: float = 3600.0  # seconds between checks for a newly published sketch


@dataclass
class OutboxConfig:
    path: str = "agent-outbox.db"
    max_rows: int | None = None
    max_bytes: int | None = None
    policy: str = "drop-oldest"
    backoff_base: float = 1.0
    backoff_max: float = 300.0
    max_retained_events: int = 200_000


@dataclass
class CondensedConfig:
    enabled: bool = False
    slot: float = 60.0


@dataclass
class SampleConfig:
    """``[sample]``: the share of the stream's time uploaded whatever the matches (0: none)."""

    share: float = 0.0
    seed: int = 0


@dataclass
class MetricsConfig:
    path: str | None = None
    interval: float = 10.0


@dataclass
class AgentConfig:
    device_id: str
    token: str | None
    collector_url: str | None
    pattern: PatternConfig
    source: SourceConfig = field(default_factory=SourceConfig)
    budget: BudgetConfig = field(default_factory=BudgetConfig)
    sketch: SketchConfig | None = None
    outbox: OutboxConfig = field(default_factory=OutboxConfig)
    condensed: CondensedConfig = field(default_factory=CondensedConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    timeout: float = 10.0
    base_dir: str = "."
    drain_timeout: float = 30.0
    heartbeat: float = 300.0  # seconds between heartbeats to the collector (0: none)
    ca_file: str | None = None  # the CA the collector's certificate is verified with
    expect_continue: bool = True  # batches wait for "100 Continue" before their body
    compress: bool = True  # gzip bodies once the collector says it takes them
    token_file: str | None = None  # where device.token was read from (None: in agent.toml)
    config_path: str | None = None  # the file load_config read (None: parse_config alone)
    # seconds a whole answer may take (None: ANSWER_TIMES times timeout; edge.agent.uplink)
    answer_timeout: float | None = None
    # bytes a batch body may have: the collector's --max-body (batches are cut below it)
    max_body: int = 16 << 20
    # the seeded sample of the stream uploaded beside the match windows (share 0: none)
    sample: SampleConfig = field(default_factory=SampleConfig)


def _check_ca_file(ca_file: str, url: str | None) -> None:
    """``collector.ca_file`` is for an https collector, and must load as certificates."""
    if url is None or not url.lower().startswith("https://"):
        raise ConfigError(f"collector.ca_file: verifies an https collector, but collector.url "
                          f"is {url!r}")
    try:
        ssl.create_default_context(cafile=ca_file)
    except (OSError, ssl.SSLError) as e:
        raise ConfigError(f"collector.ca_file: {ca_file} is not a readable PEM certificate "
                          f"file ({e})") from None


def _check_url(url: str) -> None:
    """``collector.url``: an http(s) URL with a host (and a valid port), nothing the agent
    could not put in a request line, and no query or fragment (paths are appended to it)."""
    def bad(why: str) -> ConfigError:
        return ConfigError(f"collector.url: {url!r} {why}")

    if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in url):
        raise bad("contains a space or a control character")
    parts = urllib.parse.urlsplit(url)
    if parts.scheme.lower() not in ("http", "https"):
        raise bad("must start with http:// or https://")
    try:
        port = parts.port
    except ValueError as e:
        raise bad(f"has a bad port ({e})") from None
    if port == 0:
        raise bad("has a bad port (0)")
    if not parts.hostname:
        raise bad("has no host")
    if "@" in parts.netloc:  # a password here would be in every log line naming the URL
        raise ConfigError(f"collector.url: {storage.redact(url)!r} must not hold a user name "
                          "or password (user:password@): the collector takes a token, set "
                          "by device.token or device.token_file")
    if parts.query or parts.fragment or url.endswith(("?", "#")):
        raise bad("must not have a query or a fragment (the agent appends /v1/... to it)")


# what the agent's file source cannot read, by suffix and by the first bytes of the file
_NOT_JSONL = {".parquet": "Parquet", ".pq": "Parquet", ".csv": "CSV", ".msgpack": "msgpack",
              ".mpk": "msgpack", ".gz": "gzip", ".bz2": "bzip2", ".xz": "xz", ".zst": "zstd",
              ".zip": "zip"}
_MAGIC = {b"PAR1": "Parquet", b"\x1f\x8b": "gzip", b"BZh": "bzip2", b"\xfd7zXZ": "xz",
          b"\x28\xb5\x2f\xfd": "zstd", b"PK\x03\x04": "zip"}


def _check_bucket(budget: BudgetConfig) -> None:
    """A fixed budget whose bucket holds less than one operation keeps no match node at all
    (a node costs one): refused, naming the burst that would hold one."""
    depth = Budget(budget.ops_per_event, budget.burst).depth
    if depth < 1:
        raise ConfigError(
            f"budget.burst: a bucket of {budget.burst:g} events at budget.ops_per_event "
            f"{budget.ops_per_event:g} holds {depth:.3g} operations, less than the one a match "
            "node costs, so the agent would keep nothing; make budget.burst "
            f"{smallest_burst(budget.ops_per_event)} or more")


def _check_jsonl(path: str) -> None:
    """``source.path`` must be JSON Lines: the agent reads a file by byte offsets (to follow
    it and resume), so it neither decompresses nor reads the columnar formats."""
    if os.path.isdir(path):
        raise ConfigError(f"source.path: {path} is a directory; name the JSON Lines file in "
                          "it that the agent reads")
    kind = _NOT_JSONL.get(os.path.splitext(path)[1].lower())
    try:
        with open(path, "rb") as fh:
            head = fh.read(8)
    except OSError:  # not there yet (followed) or unreadable: --check says which
        head = b""
    kind = kind or next((k for magic, k in _MAGIC.items() if head.startswith(magic)), None)
    if kind is None:
        return
    how = ("decompress it first, or pipe it in with source.kind = \"stdin\" (zcat, ...)"
           if kind in ("gzip", "bzip2", "xz", "zstd", "zip") else
           "convert it to JSON Lines first (acep match reads CSV, Parquet and msgpack as "
           "they are)")
    raise ConfigError(f"source.path: {path} is {kind}, but the agent reads JSON Lines only "
                      f"(one JSON object per line, from a file or standard input): {how}")


def _check_pattern(p: PatternConfig) -> None:
    """The matcher the agent builds from ``[pattern]``, built once here, so that a mistake
    is named by its key."""
    try:
        Matcher(p.text, window=p.window, k=p.k, where=list(p.where), partition=p.partition)
    except PatternError as e:
        key = "pattern.text" if e.what == "pattern" else "pattern.where"
        raise ConfigError(f"{key}: {e.what} error at position {e.pos}: {e.message} "
                          f"(in {e.text!r})") from None
    except (ValueError, TypeError) as e:
        key = next((f"pattern.{k}" for k in ("partition", "window") if k in str(e)),
                   "pattern")
        raise ConfigError(f"{key}: {e}") from None


def _check_topic(topic) -> None:
    """A topic filter: not empty, and ``+`` or ``#`` only as a whole level (``#`` last)."""
    if not isinstance(topic, str) or not topic or "\0" in topic:
        raise ConfigError(f"source.topics: {topic!r} is not a topic filter (a non-empty "
                          "string)")
    levels = topic.split("/")
    for i, level in enumerate(levels):
        if ("+" in level or "#" in level) and level not in ("+", "#") or \
                level == "#" and i != len(levels) - 1:
            raise ConfigError(f"source.topics: {topic!r}: + and # must be a whole level, "
                              "and # the last one")


def _mqtt(src: _Section, source: SourceConfig, path_of, client_id: str) -> None:
    """The ``[source]`` keys of ``source.kind = "mqtt"``, refused for another kind."""
    if source.kind != "mqtt":
        extra = next((k for k in MQTT_KEYS if k in src.doc), None)
        if extra is not None:
            raise ConfigError(f"source.{extra}: only for source.kind = \"mqtt\"")
        return
    source.host = src.get("host", str, required=True)
    if not source.host.strip():
        raise ConfigError("source.host: empty")
    source.tls = src.get("tls", bool, False)
    source.port = src.get("port", int, 8883 if source.tls else 1883)
    if not 0 < source.port < 65536:
        raise ConfigError(f"source.port: must be in 1..65535, not {source.port}")
    topics = src.get("topics", (list, str), required=True)
    source.topics = tuple([topics] if isinstance(topics, str) else topics)
    if not source.topics:
        raise ConfigError("source.topics: empty (give at least one topic filter)")
    for topic in source.topics:
        _check_topic(topic)
    source.qos = src.get("qos", int, 1)
    if source.qos not in (0, 1, 2):
        raise ConfigError(f"source.qos: must be 0, 1 or 2, not {source.qos}")
    source.client_id = src.get("client_id", str, client_id)
    if not source.client_id:
        raise ConfigError("source.client_id: empty (a persistent session needs a stable id)")
    source.keepalive = src.get("keepalive", int, 60)
    if not 5 <= source.keepalive <= 65535:
        raise ConfigError(f"source.keepalive: must be in 5..65535 seconds, not "
                          f"{source.keepalive}")
    source.topic_field = src.get("topic_field", str)
    source.inflight = src.get("inflight", int, 20)
    if not 1 <= source.inflight <= 65535:
        raise ConfigError(f"source.inflight: must be in 1..65535 messages (the broker's "
                          f"max_inflight_messages), not {source.inflight}")
    _mqtt_login(src, source, path_of)
    _mqtt_tls(src, source, path_of)


def _mqtt_login(src: _Section, source: SourceConfig, path_of) -> None:
    source.username = src.get("username", str)
    if "password" in src.doc:
        raise ConfigError("source.password: not in agent.toml; put it in a file named by "
                          "source.password_file")
    source.password_file = path_of(src.get("password_file", str))
    if source.password_file is None:
        return
    if source.username is None:
        raise ConfigError("source.password_file: needs source.username (MQTT 3.1.1 sends "
                          "no password without a user name)")
    try:
        source.password = read_key_file(source.password_file, "source.password_file",
                                        "password").decode()
    except KeyFileError as e:
        raise ConfigError(str(e)) from None
    except UnicodeDecodeError:
        raise ConfigError(f"source.password_file: {source.password_file}: not UTF-8 "
                          "text") from None


def _mqtt_tls(src: _Section, source: SourceConfig, path_of) -> None:
    for key in ("ca_file", "cert_file", "key_file"):
        path = path_of(src.get(key, str))
        if path is None:
            continue
        if not source.tls:
            raise ConfigError(f"source.{key}: needs source.tls = true")
        if not os.path.isfile(path) or not os.access(path, os.R_OK):
            raise ConfigError(f"source.{key}: {path}: not a readable file")
        setattr(source, key, path)
    if (source.cert_file is None) != (source.key_file is None):
        raise ConfigError("source.key_file: give source.cert_file and source.key_file "
                          "together (a client certificate and its key)")
    if not source.tls:
        return
    try:
        context = ssl.create_default_context(cafile=source.ca_file)
    except (OSError, ssl.SSLError) as e:
        raise ConfigError(f"source.ca_file: {source.ca_file} is not a readable PEM "
                          f"certificate file ({e})") from None
    if source.cert_file is not None:
        try:
            context.load_cert_chain(source.cert_file, source.key_file)
        except (OSError, ssl.SSLError) as e:
            raise ConfigError(f"source.cert_file: {source.cert_file} with source.key_file "
                              f"{source.key_file} is not a PEM certificate and its key "
                              f"({e})") from None


def load_config(path: str | os.PathLike) -> AgentConfig:
    """Read and check ``agent.toml``.

    ``examples/agent.toml`` lists every key. Relative paths are taken from the file's
    directory.

    Parameters
    ----------
    path : str or os.PathLike
        The config file.

    Returns
    -------
    AgentConfig
        The checked config, for :class:`edge.Agent`.

    Raises
    ------
    ConfigError
        One line naming the file and the key, such as ``agent.toml: pattern.text: ...``.

    Examples
    --------
    >>> import os, tempfile
    >>> work = tempfile.mkdtemp()
    >>> toml = ['[device]', 'id = "pi-01"', '[pattern]', 'id = "abc"', 'text = "a b c"',
    ...         'window = 5.0', 'k = 1', '[source]', 'kind = "iterator"', '[outbox]',
    ...         'path = "outbox.db"']
    >>> with open(os.path.join(work, "agent.toml"), "w") as f:
    ...     for line in toml:
    ...         print(line, file=f)
    >>> from edge import load_config
    >>> config = load_config(os.path.join(work, "agent.toml"))
    >>> config.device_id, config.pattern.text, config.collector_url
    ('pi-01', 'a b c', None)
    """
    path = Path(path)
    try:
        with open(path, "rb") as fh:
            doc = tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such config file") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: not valid TOML: {e}") from None
    try:
        cfg = parse_config(doc, base_dir=str(path.parent.resolve()))
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None
    cfg.config_path = str(path.resolve())
    return cfg


class _Section:
    """Typed, named access to one table; unknown keys are errors (typos must not pass)."""

    def __init__(self, doc: dict, name: str, required: bool = False):
        value = doc.get(name)
        if value is None and required:
            raise ConfigError(f"[{name}]: missing section")
        if value is not None and not isinstance(value, dict):
            raise ConfigError(f"{name}: must be a table, not {type(value).__name__}")
        self.doc, self.name, self.used = value or {}, name, set()
        self.present = value is not None

    def get(self, key: str, kinds, default=None, required: bool = False):
        self.used.add(key)
        full = f"{self.name}.{key}"
        if key not in self.doc:
            if required:
                raise ConfigError(f"{full}: missing")
            return default
        value = self.doc[key]
        kinds = kinds if isinstance(kinds, tuple) else (kinds,)
        if float in kinds and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if isinstance(value, bool) and bool not in kinds or not isinstance(value, kinds):
            names = " or ".join(k.__name__ for k in kinds)
            raise ConfigError(f"{full}: must be {names}, not {value!r}")
        return value

    def positive(self, key: str, kinds, default=None, required: bool = False, zero=False):
        value = self.get(key, kinds, default, required)
        if value is not None and not (value >= 0 if zero else value > 0) \
                or value is not None and not math.isfinite(value):
            raise ConfigError(f"{self.name}.{key}: must be a finite number "
                              f"{'>= 0' if zero else '> 0'}, not {value!r}")
        return value

    def seconds(self, key: str, default: float, zero: bool = False) -> float:
        """A wait in seconds: :meth:`positive`, and at most :data:`MAX_SECONDS`."""
        value = self.positive(key, float, default, zero=zero)
        if value > MAX_SECONDS:
            raise ConfigError(f"{self.name}.{key}: {value:,.0f} seconds is more than a year "
                              f"({MAX_SECONDS:,.0f})")
        return value

    def choice(self, key: str, choices, default):
        value = self.get(key, str, default)
        if value not in choices:
            raise ConfigError(f"{self.name}.{key}: {value!r} is not one of {list(choices)}")
        return value

    def done(self) -> None:
        extra = sorted(set(self.doc) - self.used)
        if extra:
            raise ConfigError(f"{self.name}.{extra[0]}: unknown key")


def parse_config(doc: dict, base_dir: str = ".") -> AgentConfig:
    """Check a decoded config document (see :func:`load_config`)."""
    known = {"device", "collector", "pattern", "source", "budget", "sketch", "outbox",
             "condensed", "sample", "metrics"}
    for key in doc:
        if key not in known:
            raise ConfigError(f"{key}: unknown section (expected one of {sorted(known)})")

    def path_of(p):
        return None if p is None else str(Path(base_dir, os.path.expanduser(p)))

    dev = _Section(doc, "device", required=True)
    device_id = dev.get("id", str, required=True)
    if not valid_id(device_id):
        raise ConfigError(f"device.id: {device_id!r} must match {ID_RULE}")
    token = dev.get("token", str)
    token_file = path_of(dev.get("token_file", str))
    dev.done()
    if token is not None and token_file is not None:
        raise ConfigError("device.token_file: give device.token or device.token_file, not both")
    if token_file is not None:
        try:
            token = read_key_file(token_file, "device.token_file", "token").decode()
        except KeyFileError as e:
            raise ConfigError(str(e)) from None
        except UnicodeDecodeError:
            raise ConfigError(f"device.token_file: {token_file}: the token file is not "
                              "UTF-8 text") from None

    col = _Section(doc, "collector")
    url = col.get("url", str)
    if url is not None:
        _check_url(url)
    timeout = col.seconds("timeout", 10.0)
    answer_timeout = col.seconds("answer_timeout", ANSWER_TIMES * timeout)
    if answer_timeout < timeout:
        raise ConfigError(f"collector.answer_timeout: {answer_timeout:g} s is less than "
                          f"collector.timeout ({timeout:g} s), which one wait for the answer "
                          "may take; make it that or more")
    drain_timeout = col.seconds("drain_timeout", 30.0, zero=True)
    heartbeat = col.seconds("heartbeat", 300.0, zero=True)
    ca_file = path_of(col.get("ca_file", str))
    expect_continue = col.get("expect_continue", bool, True)
    compress = col.get("compress", bool, True)
    max_body = col.positive("max_body", int, 16 << 20)
    col.done()
    if url is not None and token is None:
        raise ConfigError("device.token: needed to upload to collector.url "
                          "(or give device.token_file)")
    if ca_file is not None:
        _check_ca_file(ca_file, url)

    pat = _Section(doc, "pattern", required=True)
    where = pat.get("where", (list, str), [])
    where = [where] if isinstance(where, str) else where
    if not all(isinstance(w, str) for w in where):
        raise ConfigError("pattern.where: must be a list of strings")
    k = pat.get("k", int, 0)
    if not 0 <= k <= 64:
        raise ConfigError(f"pattern.k: must be in 0..64, not {k}")
    pattern = PatternConfig(
        id=pat.get("id", str, "default"), text=pat.get("text", str, required=True),
        window=pat.positive("window", float, required=True, zero=True), k=k,
        where=tuple(where), partition=pat.get("partition", str))
    pat.done()
    if not valid_id(pattern.id):
        raise ConfigError(f"pattern.id: {pattern.id!r} must match {ID_RULE}")
    _check_pattern(pattern)

    src = _Section(doc, "source")
    source = SourceConfig(
        kind=src.choice("kind", SOURCES, "file"), path=path_of(src.get("path", str)),
        follow=src.get("follow", bool, True),
        batch_events=src.positive("batch_events", int, 1000),
        batch_seconds=src.seconds("batch_seconds", 1.0),
        poll_seconds=src.seconds("poll_seconds", 0.1))
    _mqtt(src, source, path_of, f"acep-{device_id}-{pattern.id}")
    src.done()
    if source.kind == "file" and source.path is None:
        raise ConfigError("source.path: missing (needed for source.kind = \"file\")")
    if source.kind == "file":
        _check_jsonl(source.path)

    bud = _Section(doc, "budget")
    budget = BudgetConfig(
        mode=bud.choice("mode", BUDGET_MODES, "none"),
        ops_per_event=bud.positive("ops_per_event", float, 0.0, zero=True),
        burst=bud.positive("burst", float, 64.0),
        target_utilization=bud.positive("target_utilization", float, 0.8),
        max_lag=bud.positive("max_lag", float, 2.0),
        catch_up=bud.positive("catch_up", float, 600.0),
        min_ops=bud.positive("min_ops", float, 0.5, zero=True),
        max_ops=bud.positive("max_ops", float, 1e6),
        policy=bud.choice("policy", ("oldest-first", "random", "history"), "oldest-first"))
    bud.done()
    if budget.mode == "fixed" and "ops_per_event" not in bud.doc:
        raise ConfigError("budget.ops_per_event: missing (needed for budget.mode = \"fixed\")")
    if budget.burst < 1:
        raise ConfigError(f"budget.burst: must be >= 1, not {budget.burst}")
    if budget.mode == "fixed" and budget.ops_per_event > 0:
        _check_bucket(budget)
    if budget.target_utilization > 1:
        raise ConfigError(f"budget.target_utilization: must be in (0, 1], "
                          f"not {budget.target_utilization}")
    if budget.min_ops > budget.max_ops:
        raise ConfigError("budget.min_ops: larger than budget.max_ops")

    sketch = None
    sk = _Section(doc, "sketch")
    if sk.present:
        sketch = SketchConfig(
            path=path_of(sk.get("path", str)), download=sk.get("download", bool, False),
            key_file=path_of(sk.get("key_file", str)),
            device_key_file=path_of(sk.get("device_key_file", str)),
            max_bytes=sk.positive("max_bytes", int, 1 << 20),
            learning_rate=sk.get("learning_rate", float, LEARNING_RATE),
            explore=sk.get("explore", float, EXPLORE), defer=sk.get("defer", int, DEFER),
            save_path=path_of(sk.get("save_path", str)),
            save_every=sk.positive("save_every", int, 100_000),
            check_interval=sk.seconds("check_interval", 3600.0, zero=True))
        for key in ("learning_rate", "explore"):
            if not 0.0 <= getattr(sketch, key) <= 1.0:
                raise ConfigError(f"sketch.{key}: must be in [0, 1], not "
                                  f"{getattr(sketch, key)}")
        if not 0 <= sketch.defer <= 1024:
            raise ConfigError(f"sketch.defer: must be in 0..1024, not {sketch.defer}")
        if sketch.path is None and not sketch.download:
            raise ConfigError("sketch.path: missing (or set sketch.download = true)")
        if sketch.download and url is None:
            raise ConfigError("sketch.download: needs collector.url")
        if sketch.key_file is None:
            raise ConfigError("sketch.key_file: missing (a sketch is only used once its "
                              "signature is verified)")
        sk.done()

    ob = _Section(doc, "outbox")
    outbox = OutboxConfig(
        path=path_of(ob.get("path", str, "agent-outbox.db")),
        max_rows=ob.positive("max_rows", int), max_bytes=ob.positive("max_bytes", int),
        policy=ob.choice("policy", CAP_POLICIES, "drop-oldest"),
        backoff_base=ob.seconds("backoff_base", 1.0),
        backoff_max=ob.seconds("backoff_max", 300.0),
        max_retained_events=ob.positive("max_retained_events", int, 200_000))
    ob.done()
    if outbox.backoff_max < outbox.backoff_base:
        raise ConfigError("outbox.backoff_max: smaller than outbox.backoff_base")

    con = _Section(doc, "condensed")
    condensed = CondensedConfig(enabled=con.get("enabled", bool, False),
                                slot=con.positive("slot", float, 60.0))
    con.done()
    sample = _sample(_Section(doc, "sample"), condensed)

    met = _Section(doc, "metrics")
    metrics = MetricsConfig(path=path_of(met.get("path", str)),
                            interval=met.seconds("interval", 10.0))
    met.done()
    if metrics.interval < MIN_METRICS_INTERVAL:
        raise ConfigError(f"metrics.interval: {metrics.interval:g} seconds is below the "
                          f"least of {MIN_METRICS_INTERVAL:g} (a metrics line of about "
                          "1 KiB is written each interval)")

    written = [("outbox.path", outbox.path), ("metrics.path", metrics.path)]
    if sketch is not None:
        written.append(("sketch.save_path", sketch.save_path))
    for key, path in written:
        folder = None if path is None else os.path.dirname(path)
        if folder and not os.path.isdir(folder):
            raise ConfigError(f"{key}: the directory {folder} does not exist (the agent writes "
                              f"{os.path.basename(path)} there)")
    return AgentConfig(device_id, token, url, pattern, source, budget, sketch, outbox,
                       condensed, metrics, timeout, base_dir, drain_timeout, heartbeat,
                       token_file=token_file, ca_file=ca_file,
                       expect_continue=expect_continue, compress=compress,
                       answer_timeout=answer_timeout, max_body=max_body, sample=sample)


def _sample(sam: _Section, condensed: CondensedConfig) -> SampleConfig:
    """``[sample]``: a share in [0, 1] and an integer seed; a sample needs batches of
    events, so not with ``[condensed]``."""
    sample = SampleConfig(share=sam.get("share", float, 0.0), seed=sam.get("seed", int, 0))
    sam.done()
    if not (math.isfinite(sample.share) and 0.0 <= sample.share <= 1.0):
        raise ConfigError(f"sample.share: must be in [0, 1], not {sample.share!r}")
    if sample.share > 0 and condensed.enabled:
        raise ConfigError("sample.share: a sample uploads events, and with condensed.enabled "
                          "= true the agent uploads summaries, which carry none; set "
                          "sample.share = 0 or condensed.enabled = false")
    return sample
