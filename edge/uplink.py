"""The agent's side of the collector's HTTP API (``docs/WIRE.md``, last sections).

:class:`Uplink` posts one batch and classifies the answer; :class:`Uploader` is the thread
that drains the outbox: ``200`` ("stored" or "duplicate") acks, ``5xx``, ``408``, ``429``,
connection errors and timeouts are retried with the outbox's backoff, any other ``4xx`` is
permanent (the batch is rejected, counted, and never sent again). Only ``urllib.request``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass

from .outbox import Outbox

__all__ = ["Uplink", "Outcome", "Uploader", "download_sketch"]

log = logging.getLogger("edge.agent")
_RETRY_4XX = (408, 429)


@dataclass(frozen=True)
class Outcome:
    """What became of one delivery attempt: ``"ack"``, ``"retry"`` or ``"reject"``."""

    action: str
    status: int | None
    detail: str


class Uplink:
    """HTTP to the collector at ``url`` with a device's bearer token."""

    def __init__(self, url: str, token: str, timeout: float = 10.0):
        self.url, self.token, self.timeout = url.rstrip("/"), token, float(timeout)

    def _request(self, method: str, path: str, body: bytes | None = None,
                 headers: dict | None = None) -> urllib.request.Request:
        h = {"Authorization": f"Bearer {self.token}", **(headers or {})}
        return urllib.request.Request(self.url + path, data=body, method=method, headers=h)

    def post_batch(self, body: bytes) -> Outcome:
        """``POST /v1/batches``; never raises for network or HTTP problems."""
        req = self._request("POST", "/v1/batches", body,
                            {"Content-Type": "application/msgpack"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                status, text = resp.status, resp.read(1 << 16)
        except urllib.error.HTTPError as e:
            status, text = e.code, _read(e)
        except (urllib.error.URLError, OSError, TimeoutError) as e:
            return Outcome("retry", None, f"connection: {getattr(e, 'reason', e)}")
        detail = _error_text(text)
        if status == 200:
            try:
                answer = json.loads(text)
            except ValueError:
                return Outcome("retry", status, "200 with a body that is not JSON")
            if answer.get("status") in ("stored", "duplicate"):
                return Outcome("ack", status, answer["status"])
            return Outcome("retry", status, f"200 with status {answer.get('status')!r}")
        if status >= 500 or status in _RETRY_4XX:
            return Outcome("retry", status, detail)
        if 400 <= status < 500:
            return Outcome("reject", status, detail)
        return Outcome("retry", status, detail)

    def get_sketch(self, pattern_id: str, max_bytes: int) -> bytes:
        """``GET /v1/sketches/{pattern_id}``: the signed bytes (not verified here).
        Raises ``OSError`` naming the problem."""
        path = "/v1/sketches/" + urllib.parse.quote(pattern_id, safe="")
        try:
            with urllib.request.urlopen(self._request("GET", path), timeout=self.timeout) as r:
                data = r.read(max_bytes + 1)
        except urllib.error.HTTPError as e:
            raise OSError(f"GET {path}: HTTP {e.code} {_error_text(_read(e))}") from None
        except (urllib.error.URLError, TimeoutError) as e:
            raise OSError(f"GET {path}: {getattr(e, 'reason', e)}") from None
        if len(data) > max_bytes:
            raise OSError(f"GET {path}: more than sketch.max_bytes = {max_bytes} bytes")
        return data


def download_sketch(uplink: Uplink, pattern_id: str, max_bytes: int) -> bytes:
    """The sketch bytes for ``pattern_id`` (see :meth:`Uplink.get_sketch`)."""
    data = uplink.get_sketch(pattern_id, max_bytes)
    log.info("downloaded sketch %s: %d bytes, sha256 %s", pattern_id, len(data),
             hashlib.sha256(data).hexdigest()[:16])
    return data


def _read(e: urllib.error.HTTPError) -> bytes:
    try:
        return e.read(1 << 16)
    except OSError:
        return b""


def _error_text(text: bytes) -> str:
    try:
        doc = json.loads(text)
        if isinstance(doc, dict) and "error" in doc:
            return str(doc["error"])[:500]
    except ValueError:
        pass
    return text[:200].decode("utf-8", "replace")


class Uploader(threading.Thread):
    """Sends due batches until stopped. ``drain()`` waits until nothing is due."""

    def __init__(self, outbox: Outbox, uplink: Uplink, idle_seconds: float = 0.5):
        super().__init__(name="acep-uploader", daemon=True)
        self.outbox, self.uplink, self.idle = outbox, uplink, float(idle_seconds)
        self.stop_event = threading.Event()
        self.wake = threading.Event()
        self.counts = {"attempts": 0, "acked": 0, "retried": 0, "rejected": 0,
                       "bytes_sent": 0}
        self.last_error: str | None = None

    def run(self) -> None:
        while not self.stop_event.is_set():
            if not self.send_one():
                self.wake.wait(self._sleep_for())
                self.wake.clear()

    def _sleep_for(self) -> float:
        due = self.outbox.next_due_at()
        return self.idle if due is None else min(max(due - time.time(), 0.01), self.idle)

    def send_one(self) -> bool:
        """Send the oldest due batch; False when none was due."""
        due = self.outbox.next_due()
        if due is None:
            return False
        self.counts["attempts"] += 1
        out = self.uplink.post_batch(due.body)
        if out.action == "ack":
            self.outbox.ack(due.batch_id)
            self.counts["acked"] += 1
            self.counts["bytes_sent"] += len(due.body)
        elif out.action == "reject":
            self.outbox.reject(due.batch_id, f"HTTP {out.status}: {out.detail}")
            self.counts["rejected"] += 1
            log.error("collector refused batch %s for good (HTTP %s): %s", due.batch_id,
                      out.status, out.detail)
        else:
            when = self.outbox.fail(due.batch_id, f"HTTP {out.status}: {out.detail}")
            self.counts["retried"] += 1
            self.last_error = f"{out.status}: {out.detail}"
            log.warning("upload of %s failed (%s %s); retry in %.1fs", due.batch_id,
                        out.status, out.detail, (when or time.time()) - time.time())
        return True

    def stop(self, timeout: float | None = None) -> None:
        self.stop_event.set()
        self.wake.set()
        self.join(timeout)
