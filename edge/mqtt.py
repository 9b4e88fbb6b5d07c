"""An MQTT source for the agent: each message on the subscribed topics is one JSON event.

The session is persistent (MQTT 3.1.1 ``clean_session=False``, a stable client id) and the
subscriptions QoS 1 by default, so the broker keeps the messages published while the agent
is down and sends them when it is back. paho-mqtt acknowledges a message when the callback
returns; the callback waits until the agent's chunk has taken the event first. Delivery is
at least once: a message taken but not acknowledged (the agent killed between the two)
comes again after a restart, and a message acknowledged but whose chunk was not committed
yet (a power cut right then) is lost. paho-mqtt is an optional extra, imported here only.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Iterator

from .sources import Item, Source, parse_line, why_bad

__all__ = ["MqttSource", "import_paho", "probe", "MISSING"]

log = logging.getLogger("edge.agent")
MISSING = ("source.kind = \"mqtt\" needs paho-mqtt, which is not installed: "
           "pip install 'acep[mqtt]'")
WAIT = 0.05  # seconds between two looks at the stop flag while waiting
ONCE_IDLE = 1.0  # --once: the source ends after this long subscribed with no message
ONCE_CONNECT = 30.0  # --once: seconds to connect and subscribe before giving up


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


class MqttSource(Source):
    """Events from MQTT messages (see the module). ``s`` is the ``[source]`` config; the
    resume offset is None (the broker, not the agent, keeps what is not read yet)."""

    def __init__(self, s, **kw):
        super().__init__(**kw)
        self.s = s
        self.name = f"mqtt://{s.host}:{s.port}"
        self.offset = None
        self.subscribed = threading.Event()  # the broker has granted the subscriptions
        self._queue: queue.Queue = queue.Queue()
        self._closing = threading.Event()  # a waiting message is let go unacknowledged
        self._stopping = False
        self._subscribed_at = 0.0
        self.once = False  # end once no message came for ONCE_IDLE (acep agent --once)
        self.client = make_client(s, s.client_id, clean=False)
        self.client.on_connect = self._on_connect
        self.client.on_subscribe = self._on_subscribe
        self.client.on_message = self._on_message
        self.client.on_disconnect = self._on_disconnect
        self.client.on_connect_fail = self._on_connect_fail

    def _on_connect(self, client, _userdata, _flags, reason, _props) -> None:
        if reason.is_failure:
            self.bad_log.warning("%s refused the connection: %s", self.name, reason)
            return
        log.info("connected to %s as %s", self.name, self.s.client_id)
        client.subscribe([(topic, self.s.qos) for topic in self.s.topics])

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

    def _on_message(self, _client, _userdata, msg) -> None:
        doc = parse_line(msg.payload)
        if doc is None:
            self.bad_lines += 1
            self.bad_log.warning("%s, topic %s: %s, skipped: %.60r", self.name, msg.topic,
                                 why_bad(msg.payload), msg.payload)
            return
        if self.s.topic_field is not None:
            doc[self.s.topic_field] = msg.topic
        taken = threading.Event()
        self._queue.put((doc, taken))
        # paho acknowledges the message when this returns: not before the chunk has it
        while not taken.wait(WAIT):
            if self._closing.is_set():
                return

    def _items(self, stop: threading.Event) -> Iterator[Item | None]:
        self.client.reconnect_delay_set(1, 30)
        self.client.connect_async(self.s.host, self.s.port, self.s.keepalive)
        self.client.loop_start()
        started = last = time.monotonic()
        try:
            while not stop.is_set():
                try:
                    doc, taken = self._queue.get(timeout=WAIT)
                except queue.Empty:
                    if self.once and self._idle(started, last):
                        self.eof = True
                        return
                    yield None
                    continue
                last = time.monotonic()
                yield doc, None
                taken.set()
        finally:
            self.close()

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
        """Disconnect first: a message whose event was not taken is then never
        acknowledged, and the broker sends it again next time."""
        self._stopping = True
        self.client.disconnect()  # queued before the acknowledgement of a waiting message
        self._closing.set()
        self.client.loop_stop()

    def where(self, start: int | None, end: int | None, position: int) -> str:
        return f"{self.name}, event {position}"
