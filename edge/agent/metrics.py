"""The agent's metrics: one JSON line every ``metrics.interval``, and the heartbeats.

:class:`Metrics` is the part of :class:`~edge.agent.loop.Agent` that gathers its counters
(matcher, outbox, uploads, sketch) into one object, writes it to ``metrics.path`` or
standard error from a thread of its own and hands it to the uploader as a heartbeat.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time

from .sources import FileSource, Source

__all__ = ["Metrics", "LAST_BEAT_TIMEOUT"]

log = logging.getLogger("edge.agent")
LAST_BEAT_TIMEOUT = 2.0  # seconds the final heartbeat may take at exit


class Metrics:
    """The agent's metrics and heartbeats (a part of :class:`~edge.agent.loop.Agent`)."""

    @property
    def metrics_error(self) -> str | None:
        """Why the last metrics line was not written (or the metrics not taken), or None."""
        return self._metrics_failing.why

    @metrics_error.setter
    def metrics_error(self, why: str | None) -> None:
        self._metrics_failing.set(why)

    def metrics(self, source: Source | None = None) -> dict:
        """The current metrics (one JSON object)."""
        s = {**self.matcher.stats}
        for name, carried in self._stats_carry.items():  # from matchers before a new sketch
            s[name] += carried
        ob = self.outbox.metrics()
        sk = self.sketches
        out = {"time": time.time(), "started_at": self.started_at,
               "device": self.cfg.device_id, **self.counts, **sk.counts,
               "consumed": self.consumed, "seq": self.seq, "candidates": s["candidates"],
               "shed": s["shed"], "decide_ns": s["decide_ns"], "lag_s": round(self.lag, 4),
               "ops_per_event": self._ops_now(), "policy": sk.policy_name,
               "policy_error": sk.policy_error, "outbox_pending": ob["pending"],
               "outbox_pending_bytes": ob["pending_bytes"], "batches_sent": ob["sent"],
               "bytes_sent": ob["sent_bytes"], "batches_rejected": ob["rejected"],
               "batches_dropped": ob["dropped"], "batches_damaged": ob["damaged"],
               "outbox_damaged": ob["damaged"], "outbox_rebuilt": ob["rebuilt"],
               "batches_split": ob["split"], "outbox_dead": ob["dead"],
               "outbox_dead_bytes": ob["dead_bytes"], "outbox_disk_full": self.commits.disk_full,
               "retained_events": len(self.kept),
               "uploads_unauthorized": 0, "upload_error": None, "upload_failing_since": None,
               "sketch_error": sk.error, "sketch_failing_since": sk.failing_since,
               "metrics_error": self.metrics_error,
               "metrics_failing_since": self._metrics_failing.since}
        if self.uplink is not None:
            out["clock_ahead_s"] = self.uplink.clock_ahead
        if self.uploader is not None:
            out["uploads_unauthorized"] = self.uploader.counts["unauthorized"]
            out["heartbeats"] = self.uploader.counts["heartbeats"]
            out["upload_error"] = self.uploader.last_error
            out["upload_failing_since"] = self.uploader.failing_since
            up = self.uploader.uplink
            out.update(upload_bytes_on_wire=up.bytes_on_wire,
                       upload_expect_continue=up.expect_continue,
                       upload_gzip=up.compress and up.gzip_taken)
        if source is not None:
            out["bad_lines"] = source.bad_lines
            if self.cfg.source.kind == "mqtt":  # messages not acknowledged yet, and skipped
                out.update(mqtt_unacked=source.unacked, mqtt_redelivered=source.redelivered)
            if isinstance(source, FileSource):
                out["backlog_bytes"] = source.backlog()
        if self.wallclock is not None:
            out.update(cost_per_op_ns=self.wallclock.op_cost * 1e9,
                       cost_per_event_ns=self.wallclock.base_cost * 1e9,
                       arrival_rate=self.wallclock.rate,
                       backlog_events=round(getattr(source, "backlog_events", 0.0)))
        return out

    def _metrics_loop(self, source: Source, done: threading.Event) -> None:
        """A metrics line every ``metrics.interval`` seconds, also while no event arrives.
        An unexpected error (a bug, a failing read of the outbox) does not end it: it is
        said once per streak (:class:`edge.logs.Crashes`) and tried at the next interval."""
        every = self.cfg.metrics.interval
        while not done.wait(every):
            try:
                written = self._metrics_once(source)
            except Exception as e:  # the agent must not go on for days without metrics
                self.metrics_error = self._metrics_crashes.failed(e, every)
            else:
                if written:
                    self._metrics_crashes.ended()

    def _metrics_once(self, source: Source) -> bool:
        """One metrics line and heartbeat; False when a chunk took the whole interval."""
        doc = self._metrics_now(source)
        if doc is None:
            return False
        try:
            self._emit_metrics(doc)
        finally:  # the collector hears from the device even when its line was not written
            self._heartbeat(doc)
        return True

    def _metrics_now(self, source: Source) -> dict | None:
        """The metrics between two chunks; while the loop waits for room on a full disk
        (it holds the lock but changes nothing), without the lock, so the metrics and the
        heartbeats say so. None when a chunk takes longer than the interval."""
        locked = self._loop_lock.acquire(timeout=self.cfg.metrics.interval)
        try:
            return self.metrics(source) if locked or self.commits.disk_full else None
        finally:
            if locked:
                self._loop_lock.release()

    def _heartbeat(self, doc: dict) -> None:
        """Hand the collector the metrics every ``collector.heartbeat`` seconds, so that
        ``acep serve --list-devices`` tells a device that is up with nothing to upload from
        one that is down."""
        every = self.cfg.heartbeat
        now = time.monotonic()
        if self.uploader is None or every <= 0 or \
                (self._beat_at is not None and now - self._beat_at < every):
            return
        self._beat_at = now
        self.uploader.beat(doc)

    def _last_heartbeat(self, final: dict) -> None:
        """The final metrics with ``"stopped": true``, so that the collector tells an agent
        that stopped from one that died or lost its link. A collector that does not answer
        within ``LAST_BEAT_TIMEOUT`` does not hold the exit up for long."""
        if self.uploader is not None and self.cfg.heartbeat > 0:
            self.uploader.beat({**final, "stopped": True})
            try:
                self.uploader.send_beat(LAST_BEAT_TIMEOUT)
            except Exception as e:  # the exit must go on (the uploader logged the like)
                log.warning("the last heartbeat failed: %s: %s", type(e).__name__, e)

    def _emit_metrics(self, doc: dict) -> None:
        line = json.dumps(doc, sort_keys=True)
        path = self.cfg.metrics.path
        try:
            if path is None:
                print(line, file=sys.stderr, flush=True)
            else:
                with open(path, "a") as fh:
                    fh.write(line + "\n")
        except OSError as exc:  # a full disk, a closed pipe must not stop the matching
            self._metrics_lost += 1
            where = "the metrics to stderr" if path is None else f"metrics.path {path}"
            self.metrics_error = f"cannot write {where}: {exc}"
            if self._metrics_lost == 1:
                log.error("cannot write %s (%s); metrics lines are dropped until it can",
                          where, exc)
            return
        if self._metrics_lost:
            log.info("metrics lines are written again (after %d dropped)", self._metrics_lost)
        self._metrics_lost, self.metrics_error = 0, None
