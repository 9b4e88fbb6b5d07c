"""The collector's ``GET /metrics`` for Prometheus (``docs/WIRE.md``, HTTP API).

The counters since the server started, as ``acep_collector_*_total``, and per device its
last request (``acep_device_last_seen_timestamp_seconds``, to alert on ``time() - x``) and
a few numbers of its last heartbeat (outbox backlog, dead letters, lag, a full disk, when
its agent started: a device restarting over and over still looks seen; which of its jobs
fail and since when; what it shed, skipped as bad input and lost). A heartbeat's status
comes from a device, so only finite numbers (and true/false as 1/0) are taken from it; its
texts (why a job fails) are never a label, whose values must be few: each is a 0/1 gauge.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder

from .throttle import MAX_ADDRESSES

__all__ = ["wants_prometheus", "render", "COUNTERS", "GAUGES", "DEVICE_GAUGES",
           "DEVICE_COUNTERS", "DEVICE_FAILING"]

COUNTERS = {
    "batches_stored": "batches stored",
    "batches_duplicate": "batches answered as duplicates (stored before)",
    "batches_conflict": "batches refused: their id is stored with another body (409)",
    "batches_decoded": "batches decoded (resent bodies are answered without decoding)",
    "matches_stored": "match rows stored",
    "summary_rows_stored": "condensed summary rows stored",
    "exact_rechecks": "uploaded matches re-checked by the exact engine",
    "exact_matches": "re-checked matches the exact engine confirmed",
    "rechecks_unsupported": "uploaded matches whose pattern the exact engine cannot check",
    "sketches_stored": "sketches published",
    "heartbeats": "device heartbeats received",
    "bytes_in": "request body bytes received (decompressed)",
    "bytes_in_wire": "request body bytes received as sent (compressed, when they were)",
    "refused_no_space": "uploads refused (507) for want of free space",
    "refused_unavailable": "uploads refused (503) while the archive or database directory "
                           "was missing",
    "refused_busy": "uploads refused (503) because they would wait longer than --max-wait",
    "refused_device_busy": "uploads refused (429): the device had --device-uploads uploads "
                           "being processed",
    "refused_unauthorized": "requests refused (401) for a wrong or missing token (a device's, "
                            "an admin's, or the --metrics-token-file's)",
    "refused_auth_throttled": "requests refused (429) without checking their token: their "
                              "address (IPv6: its /64) had --auth-failures refused within "
                              "--auth-window",
    "pruned_batches": "batches deleted by --retain-days",
    "pruned_matches": "match rows deleted by --retain-days",
    "pruned_summaries": "summary rows deleted by --retain-days",
    "pruned_archive_files": "archive files deleted by --retain-days",
    "pruned_finds": "rows of the devices' daily finds deleted by --retain-days",
    "compaction_merged": "small archive files merged by --compact",
    "compaction_written": "compacted archive files written by --compact",
    "compaction_leftovers": "files of an interrupted compaction deleted",
    "compaction_failed": "device folders a compaction pass could not compact (logged)",
    "mirror_files_copied": "archive files copied to the --mirror",
    "mirror_bytes_copied": "bytes of the archive files copied to the --mirror",
    "mirror_files_deleted": "files deleted from the --mirror (replaced by a compacted one)",
    "mirror_failures": "steps of the --mirror that failed and were tried again (logged)",
}
GAUGES = {
    "free_bytes": "free space of the fuller file system of the database and archive "
                  "(uploads are refused below --min-free; absent while one is missing)",
    "storage_ok": "1 while the archive and database directories are there; 0: one is "
                  "missing (moved, unmounted) or the database is damaged, uploads are "
                  "refused (503) and /health says why",
    "uploads_pending": "uploads whose bodies have arrived, not yet answered",
    "pending_bytes": "body bytes (decoded) of the uploads arrived and not yet answered",
    "uploads_arriving": "uploads admitted whose bodies are on their way (not in the wait)",
    "expected_wait_seconds": "how long an upload admitted now can expect to wait (pending "
                             "bytes / departure rate; refused above --max-wait)",
    "departure_rate_bytes": "upload bytes (decoded) re-checked and answered per second "
                            "while busy (moving average; "
                            "0 before the first measurement)",
    "min_free_bytes": "--min-free: below this much free space uploads are refused (507)",
    "max_wait_s": "--max-wait: uploads that would wait longer are refused (503)",
    "device_uploads": "--device-uploads: uploads taken at once from one device (more: 429)",
    "auth_failing_addresses": "client addresses (IPv6: /64 networks) with a token refused "
                              f"(401) within --auth-window (at most {MAX_ADDRESSES:,} are "
                              "kept)",
    "auth_throttled_addresses": "client addresses (IPv6: /64 networks) whose tokens are not "
                                "checked now (429): --auth-failures refused within "
                                "--auth-window",
    # with --mirror only
    "mirror_pending_files": "archive changes not yet made in the --mirror",
    "mirror_lag_seconds": "how long the oldest archive change not yet in the --mirror has "
                          "waited (0: up to date; counted from the start until the first "
                          "comparison of the two is done)",
}
DEVICE_GAUGES = {  # heartbeat key -> help (a metric acep_device_<key>, or as RENAMED)
    "outbox_pending": "batches waiting in the device's outbox, at its last heartbeat",
    "outbox_dead": "dead letters in the device's outbox, at its last heartbeat",
    "lag_s": "seconds the device's matching lagged behind its input, at its last heartbeat",
    "outbox_disk_full": "1 while the device's outbox waits for room on a full disk, at its "
                        "last heartbeat",
    "started_at": "when the device's agent started (Unix time; changes(...) counts restarts)",
}
DEVICE_COUNTERS = {  # heartbeat key -> help (acep_device_<key>_total); they start again at 0
    # when the agent restarts (batches_dropped: when its outbox file is new), as a counter may
    "events_in": "events the device's agent matched",
    "events_bad": "events the device's agent skipped as bad (no type or tag, a tag that goes "
                  "back, a missing attribute)",
    "bad_lines": "input lines the device's agent skipped: not a JSON object, or over a limit",
    "candidates": "match-node candidates of the device's matcher",
    "shed": "match-node candidates the device's matcher shed under its budget",
    "batches_refused": "batches the device's agent could not keep: its outbox was full "
                       "(outbox.policy = \"refuse\")",
    "batches_dropped": "batches the device's outbox dropped, unsent, to make room "
                       "(outbox.policy = \"drop-oldest\")",
    # outbox_*: since the device's outbox file was created, not since its agent started
    "outbox_damaged": "batches found damaged in the device's outbox (their body no longer "
                      "has the CRC-32 it was put with); never sent",
    "outbox_rebuilt": "damaged batches the device's agent rebuilt from its events file "
                      "and queued again under the same batch id (the rest are dead letters)",
}
DEVICE_FAILING = {  # job -> (heartbeat key telling it fails, help of acep_device_<job>_failing)
    # sketch_error and metrics_error say why, null when the job works (older agents too);
    # upload_error stays after a dead letter until a batch is acknowledged: not "failing now"
    "sketch": ("sketch_error", "1 while the device's sketch checks fail (a download, a sketch "
                               "published it refuses, its key file unreadable): its "
                               "sketch_error says why; at its last heartbeat"),
    "metrics": ("metrics_error", "1 while the device's agent cannot write its metrics lines "
                                 "(a full disk, a directory gone): its metrics_error says why; "
                                 "at its last heartbeat"),
    "upload": ("upload_failing_since", "1 while the device's uploads fail and its batches wait "
                                       "to be sent again (no answer, or 5xx, 408, 429): its "
                                       "upload_error says why; at its last heartbeat"),
}
FAILING_SINCE = "when the device's {job} began to fail (Unix time), from the agents that say it"
CLOCK_AHEAD = ("how far the device's clock was ahead of the collector's at its last heartbeat "
               "that said its time (negative: behind); batches created over --max-clock-ahead "
               "ahead are refused, and retention goes by the device's clock")
RENAMED = {"started_at": "started_timestamp_seconds"}  # Prometheus names a time's unit


def wants_prometheus(accept: str, query: Mapping[str, str]) -> bool:
    """Prometheus asks for text or OpenMetrics; a browser or ``curl`` gets the JSON."""
    if query.get("format") == "prometheus":
        return True
    return "text/plain" in accept or "application/openmetrics-text" in accept


def render(counters: Mapping[str, int], requests: Mapping[int, int], uptime: float,
           devices: list[dict], accept: str, gauges: Mapping[str, float]
           ) -> tuple[bytes, str]:
    """The exposition body and its Content-Type, in the format ``accept`` prefers;
    ``gauges`` has the values of :data:`GAUGES` (those of a feature not in use left out)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(counters, requests, uptime, devices, gauges))
    encoder, content_type = choose_encoder(accept)
    return encoder(registry), content_type


class _Families:
    """A prometheus_client collector over numbers already counted."""

    def __init__(self, counters, requests, uptime, devices, gauges):
        self.counters, self.requests = counters, requests
        self.uptime, self.devices, self.gauges = uptime, devices, gauges

    def collect(self) -> Iterator[Metric]:
        for name, doc in COUNTERS.items():
            yield CounterMetricFamily(f"acep_collector_{name}", doc,
                                      value=self.counters.get(name, 0))
        by_status = CounterMetricFamily("acep_collector_requests", "HTTP requests answered",
                                        labels=["status"])
        for status, n in sorted(self.requests.items()):
            by_status.add_metric([str(status)], n)
        yield by_status
        yield GaugeMetricFamily("acep_collector_uptime_seconds", "seconds since the start",
                                value=self.uptime)
        for name, doc in GAUGES.items():
            if name in self.gauges:
                yield GaugeMetricFamily(f"acep_collector_{name}", doc, value=self.gauges[name])
        yield from self._devices()

    def _devices(self) -> Iterator[Metric]:
        seen = GaugeMetricFamily("acep_device_last_seen_timestamp_seconds",
                                 "when the device last made an authenticated request or "
                                 "heartbeat (Unix time)", labels=["device"])
        gauges = {k: GaugeMetricFamily(f"acep_device_{RENAMED.get(k, k)}", doc,
                                       labels=["device"]) for k, doc in DEVICE_GAUGES.items()}
        ahead = GaugeMetricFamily("acep_device_clock_ahead_seconds", CLOCK_AHEAD,
                                  labels=["device"])
        counters = {k: CounterMetricFamily(f"acep_device_{k}", doc, labels=["device"])
                    for k, doc in DEVICE_COUNTERS.items()}
        failing = {job: GaugeMetricFamily(f"acep_device_{job}_failing", doc, labels=["device"])
                   for job, (_, doc) in DEVICE_FAILING.items()}
        since = {job: GaugeMetricFamily(f"acep_device_{job}_failing_since_timestamp_seconds",
                                        FAILING_SINCE.format(job=f"{job} job"),
                                        labels=["device"]) for job in DEVICE_FAILING}
        for d in self.devices:
            name, status = [d["device"]], d["status"] or {}
            if d["last_seen"] is not None:
                seen.add_metric(name, d["last_seen"])
            if d.get("clock_ahead_s") is not None:
                ahead.add_metric(name, d["clock_ahead_s"])
            for key, family in gauges.items():
                value = status.get(key)
                value = float(value) if isinstance(value, bool) else value
                if _finite(value):
                    family.add_metric(name, float(value))
            for key, family in counters.items():
                if _finite(status.get(key)) and status[key] >= 0:
                    family.add_metric(name, float(status[key]))
            for job, (key, _) in DEVICE_FAILING.items():
                flag = _failing(status, key)
                if flag is not None:
                    failing[job].add_metric(name, flag)
                when = status.get(f"{job}_failing_since")
                if _finite(when):
                    since[job].add_metric(name, float(when))
        yield seen
        yield ahead
        yield from gauges.values()
        yield from failing.values()
        yield from since.values()
        yield from counters.values()


def _failing(status: Mapping, key: str) -> float | None:
    """1.0 when ``status[key]`` says a job fails (a reason, or since when: a time), 0.0
    when it is null; None when absent (an older agent) or of another type (a device's
    junk)."""
    if key not in status:
        return None
    value = status[key]
    if value is None:
        return 0.0
    fails = _finite(value) if key.endswith("_since") else isinstance(value, str)
    return 1.0 if fails else None


def _finite(value) -> bool:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an int beyond any float (a device's 10**400)
        return False
