"""The uploader: the agent's thread that drains the outbox through an ``Uplink``.

Each due batch is posted; an ack deletes it, a retry schedules it with the outbox's
backoff (a ``Retry-After`` or a refused token holds every upload), a refusal for good
moves it to the dead letters, a batch too large is split. It also sends the heartbeats
the agent hands it (``docs/WIRE.md``, Agent, Uploads).
"""

from __future__ import annotations

import logging
import re
import threading
import time

from ..logs import Crashes
from ..wire import split_body
from .outbox import Outbox
from .outbox_reader import Due
from .uplink import Outcome, Uplink

__all__ = ["Uploader", "IDLE_SECONDS"]

log = logging.getLogger("edge.agent")
# seconds an uploader with nothing due sleeps before it looks at its outbox again: the agent
# wakes it at once for a batch or a heartbeat, so this only bounds how soon it sees what
# another process changed (acep outbox requeue). At 0.5 s, bench/herd's 1,600 idle
# uploaders took more CPU than the collector they waited for
IDLE_SECONDS = 5.0


class Uploader(threading.Thread):
    """Sends due batches until stopped.

    Between attempts it sleeps until the next batch is due (or the hold below ends), at
    most ``idle_seconds``; ``wake`` ends the sleep at once (the agent sets it when it puts a
    batch or a heartbeat, and to stop it).
    No batch (and no heartbeat) is sent before ``hold_until`` (``time.monotonic()``
    seconds: a clock set back must not stretch a hold by as much): set after a 401/403
    (``auth_streak`` counts them in a row), by an answer's ``Retry-After`` and after an
    unexpected error.
    ``last_error`` is the last failed attempt's error, None once a batch is acknowledged.
    ``failing_since`` is when the uploads began to fail (no answer, an answer to retry
    after, a refused token, an unexpected error), None once a batch is acknowledged or
    refused for good, or a heartbeat is taken while no batch waits (the metrics'
    ``upload_failing_since``)."""

    def __init__(self, outbox: Outbox, uplink: Uplink, idle_seconds: float = IDLE_SECONDS,
                 max_body: int = 16 << 20):
        super().__init__(name="acep-uploader", daemon=True)
        self.max_body = max_body  # the collector's body limit, unless its 413 says it
        self.outbox, self.uplink, self.idle = outbox, uplink, float(idle_seconds)
        self.stop_event = threading.Event()
        self.wake = threading.Event()
        self.counts = {"attempts": 0, "acked": 0, "retried": 0, "rejected": 0, "split": 0,
                       "unauthorized": 0, "bytes_sent": 0, "heartbeats": 0,
                       "heartbeats_failed": 0}
        self.last_error: str | None = None
        self.auth_streak = 0
        self.hold_until = 0.0
        self.fail_streak = 0  # attempts retried (5xx, 408, 429, no answer) since the last ack
        self.failing_since: float | None = None
        self.crashes = Crashes(log, "uploads", "batches are kept and uploads are retried with "
                               f"backoff (up to {outbox.backoff.max_delay:g}s apart)")
        self._beat: dict | None = None
        self._beat_streak = 0  # failed heartbeats in a row
        self.beats_off = False  # the collector has no heartbeat endpoint (an older one)

    def run(self) -> None:
        while not self.stop_event.is_set():
            try:
                self._round()
            except Exception as e:  # a bug must not end uploads: the batches stay, retried
                self._crashed(e)

    def _round(self) -> None:
        beat = self.send_beat()
        if not self.send_one() and not beat:
            self.wake.wait(self._sleep_for())
            self.wake.clear()

    def _crashed(self, e: Exception) -> None:
        """An unexpected error in an upload: hold every upload with the outbox's backoff
        (its batches are kept) and say it, with its traceback, once per streak."""
        wait = self.outbox.backoff.delay("crash", self.crashes.streak + 1)
        self.last_error = self.crashes.failed(e, wait)
        self._failing()
        self.hold_until = max(self.hold_until, time.monotonic() + wait)
        self.stop_event.wait(wait)

    def beat(self, status: dict) -> None:
        """Have the thread send a heartbeat with ``status`` (the agent's metrics) before its
        next batch; a newer status replaces one not sent yet."""
        if not self.beats_off:
            self._beat = status
            self.wake.set()

    def send_beat(self, timeout: float | None = None) -> bool:
        """Send the heartbeat waiting, if any; False when none was sent. While uploads are
        on hold (a refused token, an answer's ``Retry-After``) it waits for the hold's end,
        unless a newer one replaces it: dropped, a collector that answers every batch with
        ``503`` and ``Retry-After`` (its disk missing) heard from no device meanwhile."""
        status, self._beat = self._beat, None
        if status is None:
            return False
        if time.monotonic() < self.hold_until:
            if self._beat is None:  # not replaced by a newer one meanwhile
                self._beat = status
            return False
        out = self.uplink.post_heartbeat(status, timeout)
        self.crashes.ended()  # an answer came: no bug on the way
        if out.action == "ack":
            if self._beat_streak:
                log.info("heartbeats go through again")
            self.counts["heartbeats"] += 1
            self._beat_streak = 0
            self._authorized()
            if self.outbox.next_due_at() is None:  # no batch waits: nothing fails now
                self.failing_since = None
        elif out.action == "auth":  # the first request of a run: a wrong token shows at once
            self._unauthorized(out)
        elif out.status == 404:
            self.beats_off = True
            log.info("the collector has no heartbeat endpoint (HTTP 404: an older version); "
                     "heartbeats are off until the agent restarts")
        else:
            self.counts["heartbeats_failed"] += 1
            self._beat_streak += 1
            self._failing()
            say = log.warning if self._beat_streak == 1 else log.debug
            say("heartbeat failed (%s); the next one goes at the next interval", out.why)
        return True

    def next_attempt_at(self) -> float | None:
        """When the next batch may be sent (Unix seconds); None when nothing is pending."""
        due = self.outbox.next_due_at()
        held = self.hold_until - time.monotonic()
        return due if due is None or held <= 0 else max(due, time.time() + held)

    def _sleep_for(self) -> float:
        at = self.next_attempt_at()
        if self._beat is not None:  # a heartbeat held back goes when the hold ends
            hold_ends = time.time() + max(self.hold_until - time.monotonic(), 0.0)
            at = hold_ends if at is None else min(at, hold_ends)
        return self.idle if at is None else min(max(at - time.time(), 0.01), self.idle)

    def send_one(self) -> bool:
        """Send the oldest due batch; False when none was due (or uploads are on hold)."""
        if time.monotonic() < self.hold_until:
            return False
        due = self.outbox.next_due()
        if due is None:
            return False
        self.counts["attempts"] += 1
        out = self.uplink.post_batch(due.body)
        self.crashes.ended()  # an answer came: no bug on the way
        if out.action == "ack":
            self._acked(due)
        elif out.action == "auth":
            self._unauthorized(out)
        elif out.status == 413 and out.action == "reject":
            self._too_large(due, out)
        elif out.action == "reject":
            self._rejected(due, out)
        else:
            self._retried(due, out)
        return True

    def _too_large(self, due: Due, out: Outcome) -> None:
        """A batch over the collector's body limit (413) replaced by its two halves, due at
        once (their ids derived from its own: :func:`edge.wire.split_body`). One that holds
        one match (or a summary) is refused for good, its reason saying its size and the
        limit."""
        parts = split_body(due.body)
        if parts is None:
            limit = self._limit(out.detail)
            self._rejected(due, Outcome(
                out.action, out.status, f"{out.detail}; its body of {len(due.body)} bytes "
                f"holds one match (or a summary) and is over the collector's limit of "
                f"{limit} bytes: it cannot be sent"))
            return
        self._authorized()
        self.outbox.split(due.batch_id, [(bid, body, f"{n} matches of batch {due.batch_id}, "
                                          "split: over the collector's body limit")
                                         for bid, body, n in parts])
        self.counts["split"] += 1
        self.last_error = out.why
        log.warning("collector refused batch %s of %d bytes as too large (HTTP 413: %s); "
                    "split in two: %s", due.batch_id, len(due.body), out.detail,
                    ", ".join(f"{bid} ({n} matches, {len(body)} bytes)"
                              for bid, body, n in parts))

    def _limit(self, detail: str) -> int:
        """The body limit a 413's detail names, else ``max_body``."""
        found = re.search(r"(?:limit of|more than) (\d+) bytes", detail)
        return int(found.group(1)) if found else self.max_body

    def _acked(self, due: Due) -> None:
        if self.fail_streak:
            log.info("uploads go through again (after %d failed attempts)", self.fail_streak)
            self.fail_streak = 0
        self.outbox.ack(due.batch_id)
        self.counts["acked"] += 1
        self.counts["bytes_sent"] += len(due.body)
        self.last_error = self.failing_since = None
        self._authorized()

    def _rejected(self, due: Due, out: Outcome) -> None:
        """Refused for good: a dead letter, said once as an error."""
        self._authorized()  # the collector checks the token before anything else
        self.outbox.reject(due.batch_id, out.why)
        self.counts["rejected"] += 1
        self.last_error, self.failing_since = out.why, None
        log.error("collector refused batch %s (HTTP %s): %s; kept as a dead letter in %s "
                  "(acep outbox %s list)", due.batch_id, out.status, out.detail,
                  self.outbox.path, self.outbox.path)

    def _retried(self, due: Due, out: Outcome) -> None:
        """Failed, to be retried: after the backoff's delay or the collector's
        ``Retry-After`` (which also holds every upload), said once per streak."""
        when = self.outbox.fail(due.batch_id, out.why, delay=out.retry_after)
        self.counts["retried"] += 1
        self.last_error = out.why
        self.fail_streak += 1
        self._failing()
        wait = 0.0 if when is None else when - time.time()
        if out.retry_after is not None:
            wait = max(wait, self._hold(out))
        # a collector that is down fails every pending batch: say so once, not per batch
        say = log.warning if self.fail_streak == 1 else log.debug
        say("upload of %s failed (%s); retry in %.1fs (batches are kept and retried "
            "with backoff; further failures are logged at debug level until one is sent)",
            due.batch_id, out.why, wait)

    def _hold(self, out: Outcome) -> float:
        """Hold every upload for the answer's ``Retry-After`` (a collector with a full disk
        would refuse each batch in turn), at most the backoff's maximum; seconds held."""
        wait = min(out.retry_after, self.outbox.backoff.max_delay)
        self.hold_until = max(self.hold_until, time.monotonic() + wait)
        return self.hold_until - time.monotonic()

    def _unauthorized(self, out: Outcome) -> None:
        """A refused token (401/403) fails every request alike: hold them all (batches are
        kept), back off, and say it once."""
        self.auth_streak += 1
        self.counts["unauthorized"] += 1
        self.last_error = out.why
        self._failing()
        wait = self.outbox.backoff.delay("auth", self.auth_streak)
        self.hold_until = time.monotonic() + wait
        if self.auth_streak == 1:
            log.error("collector refused this device's credentials (HTTP %s: %s): check "
                      "device.token and device.id; %d batches are kept and uploads are "
                      "retried with backoff (up to %.0fs apart)", out.status, out.detail,
                      self.outbox.metrics()["pending"], self.outbox.backoff.max_delay)
        else:
            log.debug("still refused (HTTP %s), attempt %d; next in %.1fs", out.status,
                      self.auth_streak, wait)

    def _failing(self) -> None:
        if self.failing_since is None:
            self.failing_since = time.time()

    def _authorized(self) -> None:
        if self.auth_streak:
            log.info("the collector accepts this device's token again (after %d refused "
                     "attempts); uploading", self.auth_streak)
            self.auth_streak, self.hold_until = 0, 0.0

    def stop(self, timeout: float | None = None) -> None:
        self.stop_event.set()
        self.wake.set()
        self.join(timeout)
