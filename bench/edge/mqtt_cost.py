"""Where the agent's MQTT source spends its CPU per message, and what joining payloads for
the compiled JSON Lines reader would save.

``python -m bench.edge.mqtt_cost FILE.jsonl [--messages N] [--inflight M]``: the first N
lines of FILE (one event each, as a device publishes them) are queued at a local
Mosquitto for the agent's session, then read by ``MqttSource`` with ``--once``, each chunk
made into a batch and acknowledged as the agent's loop does after its commit (no
matching, no outbox): CPU per message of the whole process (paho's thread included).
Then the same payloads alone: parsed one by one and batched (what the source does), and
joined in groups for the compiled reader (``LineBlocks`` and ``columns_batch``).
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from acep.events import EventBatch
from acep.utils import json_lines
from edge.agent import sources
from edge.agent.config import parse_config
from edge.agent.lines import parse_line
from edge.agent.mqtt import MqttSource, import_paho


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def broker(folder: Path, inflight: int):
    """A Mosquitto on loopback that queues without limit; its port."""
    exe = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
    port = free_port()
    conf = folder / "mosquitto.conf"
    conf.write_text(f"listener {port} 127.0.0.1\nallow_anonymous true\nuser root\n"
                    f"max_queued_messages 0\nmax_inflight_messages {inflight}\n")
    proc = subprocess.Popen([exe, "-c", str(conf)], stderr=subprocess.DEVNULL)
    try:
        for _ in range(200):
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port),
                                                                        0.2):
                break
            time.sleep(0.05)
        yield port
    finally:
        proc.terminate()
        proc.wait(10)


def read_all_messages(cfg) -> tuple[int, float]:
    """Messages read by the agent's source until the broker has no more; CPU seconds."""
    src = MqttSource(cfg, batch_events=1000, batch_seconds=1.0)
    src.once = True
    cpu, n = time.process_time(), 0
    for chunk in src.chunks(threading.Event()):
        sources.chunk_batch(chunk, n, "mqtt")
        n += len(chunk)
        src.taken(len(chunk))
        src.durable(len(chunk))
    cpu = time.process_time() - cpu
    src.close()
    return n, cpu


def publish(port: int, payloads: list[bytes]) -> None:
    mqtt = import_paho()
    pub = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="bench-publisher")
    pub.max_inflight_messages_set(1000)
    pub.connect("127.0.0.1", port)
    pub.loop_start()
    for info in [pub.publish("bench", p, qos=1) for p in payloads]:
        info.wait_for_publish(60)
    pub.disconnect()
    pub.loop_stop()


def source_cost(payloads: list[bytes], inflight: int) -> float:
    """CPU microseconds per message of the MQTT source, end to end."""
    with tempfile.TemporaryDirectory() as tmp, broker(Path(tmp), inflight) as port:
        cfg = parse_config({
            "device": {"id": "bench"}, "pattern": {"id": "p", "text": "a b", "window": 5.0},
            "source": {"kind": "mqtt", "host": "127.0.0.1", "port": port,
                       "topics": ["bench"], "inflight": inflight},
            "outbox": {"path": str(Path(tmp) / "outbox.db")}}).source
        read_all_messages(cfg)  # the session, subscribed: the broker keeps what comes
        publish(port, payloads)
        n, cpu = read_all_messages(cfg)
    return cpu / n * 1e6


def parse_cost(payloads: list[bytes], group: int) -> tuple[float, float]:
    """CPU microseconds per payload: one by one into dicts and a batch, and joined in
    groups of ``group`` lines for the compiled reader."""
    cpu = time.process_time()
    for i in range(0, len(payloads), group):
        EventBatch.from_events([parse_line(p) for p in payloads[i:i + group]], i, "mqtt")
    one = time.process_time() - cpu
    cpu = time.process_time()
    for i in range(0, len(payloads), group):
        blocks = json_lines.LineBlocks([p + b"\n" for p in payloads[i:i + group]])
        columns, _, _ = blocks.next(group)
        json_lines.columns_batch([columns], i, "mqtt")
    joined = time.process_time() - cpu
    return one / len(payloads) * 1e6, joined / len(payloads) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("file")
    ap.add_argument("--messages", type=int, default=20_000)
    ap.add_argument("--inflight", type=int, nargs="+", default=[20, 1000])
    args = ap.parse_args()
    with open(args.file, "rb") as fh:
        payloads = [fh.readline().rstrip(b"\n") for _ in range(args.messages)]
    for inflight in args.inflight:
        print(f"source, inflight {inflight}: {source_cost(payloads, inflight):.1f} us/message")
    if json_lines.compiled():
        for group in (20, 1000):
            one, joined = parse_cost(payloads, group)
            print(f"parse and batch, groups of {group}: one by one {one:.2f} us, "
                  f"joined for the compiled reader {joined:.2f} us")


if __name__ == "__main__":
    main()
