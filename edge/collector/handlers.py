"""The collector's HTTP handlers: uploads, sketches, heartbeats, devices, health and
metrics (``docs/WIRE.md``, "The collector's HTTP API"). :class:`Handlers` is a part
of :class:`~edge.collector.service.Collector`.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import time

from aiohttp import web

from acep.utils import json_problem

from ..wire import ID_RULE, valid_id
from . import exposition
from .clock import utc_day
from .guards import json_error

MAX_STATUS = 16 << 10  # bytes of a heartbeat's status (an agent's metrics: about 1 KiB)
_MSGPACK_TYPES = ("application/msgpack", "application/x-msgpack", "application/vnd.msgpack")


def _status_doc(body: bytes) -> dict | web.Response:
    """A heartbeat's body as a JSON object, or the 400 naming what is wrong with it.
    ``NaN`` and ``Infinity`` (Python's ``json`` writes them), and numbers too large for a
    float (``1e400``), become null: what ``--list-devices`` prints stays JSON."""
    if problem := json_problem(body):
        return json_error(400, f"heartbeat: body is {problem}")
    try:
        doc = json.loads(body, parse_constant=lambda _: None, parse_float=_finite_or_none)
    except (ValueError, RecursionError) as exc:
        return json_error(400, f"heartbeat: body is not JSON ({exc})")
    if not isinstance(doc, dict):
        return json_error(400, f"heartbeat: body must be a JSON object (the agent's metrics), "
                               f"not {type(doc).__name__}")
    return doc


def _finite_or_none(text: str) -> float | None:
    value = float(text)
    return value if math.isfinite(value) else None


class Handlers:
    """The collector's routes (:func:`edge.collector.server.make_app`) and its gauges."""

    async def post_batch(self, request: web.Request) -> web.Response:
        who = await self.identify(request)
        if isinstance(who, web.Response):
            return who
        if request.content_type not in _MSGPACK_TYPES:
            return json_error(415, f"Content-Type {request.content_type!r}: an upload batch is "
                                   "'application/msgpack'")
        refusal = self.available()
        refusal = self.room_left() if refusal is None else refusal
        if refusal is not None:
            return refusal
        size = min(request.content_length or 0, self.max_body)  # more is refused: 413
        refused = self.admission.admit(who[0], size)
        if refused is not None:
            return self.refuse(refused)
        self.admitted()
        arrived = None  # the body's bytes once in, decoded: then it is in the backlog
        try:
            body = await self.read_body(request)
            if isinstance(body, web.Response):
                return body
            arrived = len(body)  # decoded: what the re-check works through, gzipped or not
            self.admission.arrived(arrived)
            return await self._upload(request, body, who[0])
        finally:
            self.admission.done(who[0], arrived, worked=request.get("decoded", False))

    async def _upload(self, request: web.Request, body: bytes, device: str) -> web.Response:
        resent = await self.run(self.resent, body, device)
        if resent is not None:
            return web.json_response(resent)
        request["decoded"] = True
        prepared = await self.prepare(body, device)
        self.metrics["batches_decoded"] += 1
        if prepared[0] == "error":
            return web.json_response(prepared[2], status=prepared[1])
        status, doc = await self.commit(body, device, prepared[1])
        return web.json_response(doc, status=status)

    async def get_sketch(self, request: web.Request) -> web.Response:
        who = await self.identify(request)
        if isinstance(who, web.Response):
            return who
        pattern_id = request.match_info["pattern_id"]
        found = await self.run(self.store.get_sketch, pattern_id)
        if found is None:
            return json_error(404, f"no sketch for pattern {pattern_id!r}")
        data, etag = found
        quoted = f'"{etag}"'
        if request.headers.get("If-None-Match", "").strip() in (quoted, etag):
            return web.Response(status=304, headers={"ETag": quoted})
        return web.Response(body=data, content_type="application/octet-stream",
                            headers={"ETag": quoted})

    async def put_sketch(self, request: web.Request) -> web.Response:
        who = await self.identify(request, admin="publish sketches")
        if isinstance(who, web.Response):
            return who
        if self.sketch_key is None:
            return json_error(403, "no sketch key is configured (--sketch-key-file), so no "
                                   "signature can be checked")
        body = await self.read_body(request)
        if isinstance(body, web.Response):
            return body
        pattern_id = request.match_info["pattern_id"]
        if not valid_id(pattern_id):
            return json_error(400, f"pattern id {pattern_id!r} does not match {ID_RULE} (the "
                                   "agents' pattern.id)")
        unchecked = request.query.get("unchecked", "") in ("1", "true")
        status, doc = await self.run(self._put_sketch, pattern_id, body, unchecked)
        return web.json_response(doc, status=status)

    def _put_sketch(self, pattern_id: str, data: bytes, unchecked: bool = False
                    ) -> tuple[int, dict]:
        """Verify, check against the pattern the devices run under ``pattern_id``, store."""
        from history.sketch import Sketch, SketchError

        try:
            sketch = Sketch.from_bytes(data, self.sketch_key, self.max_body,
                                       key_from="the collector's --sketch-key-file")
        except SketchError as exc:
            return 400, {"error": f"sketch: {exc}", "status": 400}
        definitions = [] if unchecked else self.store.pattern_definitions(pattern_id)
        problems = [sketch.mismatch(d["text"], d["k"], d["window"], d["where"],
                                    d["partition_by"]) for d in definitions]
        if definitions and None not in problems:
            return 409, {"status": 409, "error": (
                f"sketch: the devices upload pattern {pattern_id!r} as {definitions[0]['text']!r}"
                f" and would refuse this sketch: {problems[0]} ({len(definitions)} "
                "definition(s) checked; ?unchecked=1 publishes it anyway)")}
        etag = self.store.put_sketch(pattern_id, data)
        self.metrics["sketches_stored"] += 1
        return 200, {"pattern_id": pattern_id, "bytes": len(data), "etag": etag,
                     "checked": 0 if unchecked else len(definitions),
                     "key_id": sketch.signed_with, "key_recorded": sketch.key_recorded}

    async def post_heartbeat(self, request: web.Request) -> web.Response:
        """A device says it is alive, with its metrics as ``status`` (``--list-devices``)."""
        who = await self.identify(request)
        if isinstance(who, web.Response):
            return who
        if request.content_type != "application/json":
            return json_error(415, f"Content-Type {request.content_type!r}: a heartbeat is "
                                   "'application/json'")
        body = await self.read_body(request, MAX_STATUS)
        if isinstance(body, web.Response):
            return body
        status = _status_doc(body)
        if isinstance(status, web.Response):
            return status
        await self.run(self.store.heartbeat, who[0], status)
        self.metrics["heartbeats"] += 1
        return web.json_response({"device": who[0], "time": time.time()})

    async def get_devices(self, request: web.Request) -> web.Response:
        """What ``--list-devices`` prints, for an admin away from the collector's host."""
        who = await self.identify(request, admin="list the devices")
        if isinstance(who, web.Response):
            return who
        devices = await self.run(self.store.devices)
        return web.json_response({"time": time.time(), "devices": devices})

    async def whoami(self, request: web.Request) -> web.Response:
        """Whose token this is (``acep agent --check`` compares it with ``device.id``)."""
        who = await self.identify(request)
        if isinstance(who, web.Response):
            return who
        return web.json_response({"device": who[0], "role": who[1]})

    async def health(self, request: web.Request) -> web.Response:
        """``200 ok``, or ``503`` saying why nothing can be stored; with the collector's
        clock and the ``created_at`` it takes (``acep agent --check`` compares the device's
        clock with them)."""
        now = time.time()
        first = self.clock.first_day(utc_day(now))
        clock = {"time": now, "max_clock_ahead": self.clock.max_ahead,
                 "first_day_kept": None if first is None else first.isoformat()}
        why = self.unusable()
        if why is not None:
            return web.json_response({"status": "unavailable", "error": why, **clock},
                                     status=503)
        return web.json_response({"status": "ok", **clock})

    async def metrics_view(self, request: web.Request) -> web.Response:
        """The counters as JSON, or for Prometheus (``Accept: text/plain`` or OpenMetrics,
        or ``?format=prometheus``) with each device's last request and heartbeat; only to
        the bearer of the metrics token, when there is one (:meth:`unauthorized_scrape`)."""
        refused = await self.unauthorized_scrape(request)
        if refused is not None:
            return refused
        uptime = time.time() - self.started
        accept = request.headers.get("Accept", "")
        if exposition.wants_prometheus(accept, request.query):
            devices = await self.run(self.store.devices)
            body, content_type = exposition.render(self.metrics, self.status_counts, uptime,
                                                   devices, accept, self.gauges())
            return web.Response(body=body, headers={"Content-Type": content_type})
        doc = {name: self.metrics.get(name, 0) for name in exposition.COUNTERS}
        doc["requests"] = {str(k): v for k, v in sorted(self.status_counts.items())}
        doc["uptime_s"] = round(uptime, 3)
        doc.update(self.gauges())
        return web.json_response(doc)

    async def unauthorized_scrape(self, request: web.Request) -> web.Response | None:
        """None when ``request`` may read ``/metrics``: there is no metrics token, or it
        carries it (``Authorization: Bearer <token>``, compared in constant time); else
        the 401 to answer, or the 429 of a throttled client (:meth:`admit`)."""
        if self.metrics_digest is None:
            return None
        refused = await self.admit(request)
        if refused is not None:
            return refused
        try:
            return self._scrape_refused(request)
        finally:
            self.checked(request)

    def _scrape_refused(self, request: web.Request) -> web.Response | None:
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        token = token.strip()
        given = hashlib.sha256(token.encode() if token.isascii() else b"").digest()
        if hmac.compare_digest(given, self.metrics_digest) and scheme.lower() == "bearer" \
                and token:
            return None
        response = self.unauthorized(request, "GET /metrics needs the token of the "
                                              "collector's --metrics-token-file (header "
                                              "'Authorization: Bearer <token>')")
        response.headers["WWW-Authenticate"] = 'Bearer realm="acep metrics"'
        return response

    def gauges(self) -> dict[str, float]:
        """The values of :data:`edge.collector.exposition.GAUGES` (the limits too, for alerts)."""
        free = self.free_bytes()
        return {**({} if free is None else {"free_bytes": free}),
                "storage_ok": int(self.unusable() is None), "min_free_bytes": self.min_free,
                **self.admission.gauges(), "max_wait_s": self.admission.max_wait,
                "device_uploads": self.admission.per_device, **self.throttle.gauges(),
                **(self.mirror.gauges() if self.mirror is not None else {})}
