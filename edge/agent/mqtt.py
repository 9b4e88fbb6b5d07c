"""An MQTT source for the agent: each message on the subscribed topics is one JSON event.

The session is persistent and the subscriptions QoS 1 by default, so the broker keeps the
messages published while the agent is down. A message is acknowledged only once its
chunk's matches and the progress after it are committed; a redelivered message that was
committed already is acknowledged and skipped. The delivery rules are in docs/WIRE.md,
"Agent", Loop (the MQTT source). paho-mqtt is an optional extra, imported here only.
"""

from __future__ import annotations

import collections
import hashlib
import logging
import queue
import threading
import time
from collections.abc import Iterator

from .sources import _CUT, Item, Source, parse_line, why_bad

__all__ = ["MqttSource", "import_paho", "probe", "identity", "MISSING", "STATE_KEY"]

log = logging.getLogger("edge.agent")
MISSING = ("source.kind = \"mqtt\" needs paho-mqtt, which is not installed: "
           "pip install 'acep[mqtt]'")
WAIT = 0.05  # seconds between two looks at the stop flag while waiting
ONCE_IDLE = 1.0  # --once: the source ends after this long subscribed with no message
ONCE_CONNECT = 30.0  # --once: seconds to connect and subscribe before giving up
STATE_KEY = "mqtt_committed"  # the progress's identities of the last messages committed
# identities kept per message the broker may hold unacknowledged: acknowledgements lost
# with a dropped connection are only sent again when the broker redelivers, after up to
# a few inflight windows of newer messages
KEEP_PER_INFLIGHT = 10


def identity(mid: int, topic: bytes | str, payload: bytes) -> str:
    """A message's identity across a redelivery: its packet id (kept by the broker for an
    unacknowledged message) and a digest of its topic and payload (a packet id is reused
    once acknowledged)."""
    topic_bytes = topic.encode() if isinstance(topic, str) else topic
    digest = hashlib.blake2b(topic_bytes + b"\0" + payload, digest_size=6).hexdigest()
    return f"{mid}:{digest}"


def import_paho():
    """``paho.mqtt.client``, or ImportError with :data:`MISSING` (one line)."""
    try:
        import paho.mqtt.client as mqtt
    except ImportError:
        raise ImportError(MISSING) from None
    return mqtt


def make_client(s, client_id: str, clean: bool):
    """A paho client for the ``[source]`` config ``s`` (TLS and credentials set)."""
    mqtt = import_paho()
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id,
                         clean_session=clean, protocol=mqtt.MQTTv311)
    if s.username is not None:
        client.username_pw_set(s.username, s.password)
    if s.tls:
        client.tls_set(ca_certs=s.ca_file, certfile=s.cert_file, keyfile=s.key_file)
    return client


def probe(s, timeout: float) -> str | None:
    """Connect to the broker of ``s`` and wait for its answer: None when it accepts, else
    why not. Under another client id, with a clean session: the agent's own session (and a
    running agent holding it) are left alone."""
    client = make_client(s, f"{s.client_id}-check", clean=True)
    answered = threading.Event()
    refused: list[str] = []

    def on_connect(_client, _userdata, _flags, reason, _props):
        if reason.is_failure:
            refused.append(f"refused: {reason}")
        answered.set()

    client.on_connect = on_connect
    client.connect_timeout = timeout
    try:
        client.connect(s.host, s.port, s.keepalive)
    except (OSError, ValueError) as e:  # ssl.SSLError is an OSError
        return f"cannot connect: {e}"
    client.loop_start()
    try:
        if not answered.wait(timeout):
            return f"no answer within {timeout:g} s"
    finally:
        client.disconnect()
        client.loop_stop()
    return refused[0] if refused else None


class _Held:
    """A message received and not yet acknowledged; ``event`` is False for one that is
    not an event (a bad payload), acknowledged with the events around it."""

    __slots__ = ("ident", "mid", "qos", "event")

    def __init__(self, ident: str, mid: int, qos: int, event: bool):
        self.ident, self.mid, self.qos, self.event = ident, mid, qos, event


class MqttSource(Source):
    """Events from MQTT messages (see the module). ``s`` is the ``[source]`` config;
    ``committed`` the identities of the last messages committed (the saved progress's
    :data:`STATE_KEY`). The resume offset is None (the broker, not the agent, keeps what
    is not read yet)."""

    def __init__(self, s, committed: list[str] | None = None, **kw):
        super().__init__(**kw)
        self.s = s
        self.name = f"mqtt://{s.host}:{s.port}"
        self.offset = None
        self.subscribed = threading.Event()  # the broker has granted the subscriptions
        self.redelivered = 0  # messages sent again by the broker and skipped
        self._queue: queue.Queue = queue.Queue()
        self._lock = threading.Lock()  # _held, _recent, _taken: three threads use them
        self._held: collections.deque[_Held] = collections.deque()  # in arrival order
        self._holding: set[str] = set()  # the identities in _held
        self._recent = collections.deque(committed or (),
                                         maxlen=KEEP_PER_INFLIGHT * s.inflight)
        self._taken = 0  # events of _held in chunks handed to a commit, not durable yet
        self._stopping = False
        self._subscribed_at = 0.0
        self.once = False  # end once no message came for ONCE_IDLE (acep agent --once)
        self.client = make_client(s, s.client_id, clean=False)
        # QoS 2 cannot wait: after a restart the broker sends only the PUBREL of a message
        # handed over before, which paho answers only when it acknowledges by itself
        self.client.manual_ack_set(s.qos < 2)
        self.client.on_connect = self._on_connect
        self.client.on_subscribe = self._on_subscribe
        self.client.on_message = self._on_message
        self.client.on_disconnect = self._on_disconnect
        self.client.on_connect_fail = self._on_connect_fail

    @property
    def unacked(self) -> int:
        """Messages received and not acknowledged yet (their chunk not committed)."""
        with self._lock:
            return len(self._held)

    def _on_connect(self, client, _userdata, flags, reason, _props) -> None:
        if reason.is_failure:
            self.bad_log.warning("%s refused the connection: %s", self.name, reason)
            return
        log.info("connected to %s as %s", self.name, self.s.client_id)
        if not flags.session_present:
            self._forget_session()
        client.subscribe([(topic, self.s.qos) for topic in self.s.topics])

    def _forget_session(self) -> None:
        """A broker without our session (restarted without persistence) reuses the packet
        ids of the messages held: they are not acknowledged, lest another be."""
        with self._lock:
            for held in self._held:
                held.qos = 0

    def _on_subscribe(self, _client, _userdata, _mid, reasons, _props) -> None:
        bad = [str(r) for r in reasons if r.is_failure]
        if bad:
            log.error("%s refused a subscription of %s: %s", self.name, self.s.topics, bad)
        self._subscribed_at = time.monotonic()
        self.subscribed.set()

    def _on_disconnect(self, _client, _userdata, _flags, reason, _props) -> None:
        if not self._stopping:
            self.bad_log.warning("%s disconnected (%s); reconnecting", self.name, reason)

    def _on_connect_fail(self, _client, _userdata) -> None:
        self.bad_log.warning("cannot connect to %s; trying again", self.name)

    def _on_message(self, client, _userdata, msg) -> None:
        ident = identity(msg.mid, msg.topic, msg.payload)
        with self._lock:
            if msg.dup and ident in self._holding:
                self.redelivered += 1  # acknowledged with the first delivery, once durable
                return
            if msg.dup and ident in self._recent:
                self.redelivered += 1  # committed before a kill or a dropped connection
                client.ack(msg.mid, msg.qos)
                return
            doc = parse_line(msg.payload)
            if doc is None:
                self._bad(msg)
            elif self.s.topic_field is not None:
                doc[self.s.topic_field] = msg.topic
            if msg.qos == 0 and doc is None:
                return
            self._held.append(_Held(ident, msg.mid, msg.qos, doc is not None))
            self._holding.add(ident)
            if doc is not None:
                self._queue.put(doc)
            self._ack_head(client)

    def _bad(self, msg) -> None:
        self.bad_lines += 1
        self.bad_log.warning("%s, topic %s: %s, skipped: %.60r", self.name, msg.topic,
                             why_bad(msg.payload), msg.payload)

    def _ack_head(self, client) -> None:
        """Acknowledge the messages at the head of the arrival order that wait for nothing
        (bad payloads): acknowledgements go in the order the messages came (MQTT 4.6)."""
        while self._held and not self._held[0].event:
            self._release(client, self._held.popleft())

    def _release(self, client, held: _Held) -> None:
        self._holding.discard(held.ident)
        if held.qos:
            client.ack(held.mid, held.qos)

    def taken(self, n: int) -> dict:
        """The next ``n`` events handed out are in a chunk about to be committed: the
        progress to commit with it (the identities of the last messages committed)."""
        with self._lock:
            idents = [h.ident for h in self._held if h.event][self._taken:self._taken + n]
            self._taken += len(idents)
            self._recent.extend(idents)
            return {STATE_KEY: list(self._recent)}

    def durable(self, n: int) -> None:
        """The chunk of the next ``n`` events taken is committed: acknowledge them."""
        with self._lock:
            while n > 0 and self._held:
                held = self._held.popleft()
                n -= held.event
                self._taken -= held.event
                self._release(self.client, held)
            self._ack_head(self.client)

    def _blocks(self, stop: threading.Event):
        """One event a block, and a cut (the chunk closes) once ``source.inflight``
        messages wait for their acknowledgement and no other is there: the broker sends
        no more until the chunk is committed."""
        for item in self._items(stop):
            if item is None:
                yield None
                continue
            yield [item]
            if self._queue.empty() and self.unacked >= self.s.inflight:
                yield _CUT

    def _items(self, stop: threading.Event) -> Iterator[Item | None]:
        self.client.reconnect_delay_set(1, 30)
        self.client.connect_async(self.s.host, self.s.port, self.s.keepalive)
        self.client.loop_start()
        started = last = time.monotonic()
        while not stop.is_set():
            try:
                doc = self._queue.get(timeout=WAIT)
            except queue.Empty:
                if self.once and self._idle(started, last):
                    self.eof = True
                    return
                yield None
                continue
            last = time.monotonic()
            yield doc, None

    def _idle(self, started: float, last: float) -> bool:
        """--once: the broker has sent what it held (nothing for a while once subscribed),
        or it cannot be reached."""
        now = time.monotonic()
        if not self.subscribed.is_set():
            if now - started < ONCE_CONNECT:
                return False
            log.error("%s: not subscribed after %g s; nothing read", self.name, ONCE_CONNECT)
            return True
        return now - max(last, self._subscribed_at) >= ONCE_IDLE

    def close(self) -> None:
        """Disconnect (after the last commit, whose acknowledgements go first): a message
        whose chunk was not committed is never acknowledged, and the broker sends it
        again next time."""
        if self._stopping:
            return
        self._stopping = True
        self.client.disconnect()
        self.client.loop_stop()

    def where(self, start: int | None, end: int | None, position: int) -> str:
        return f"{self.name}, event {position}"
