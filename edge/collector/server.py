"""The collector's aiohttp application and server: routes, JSON errors, request counts,
connection logging with tokens redacted, TLS, and serving until a signal.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import signal
import ssl
import sys
from typing import TYPE_CHECKING

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from ..codings import ACCEPT_ENCODING
from .access import DEVICE
from .bodies import defer_continue
from .guards import RETRY_AFTER, json_error

if TYPE_CHECKING:
    from .service import Collector

DEFAULT_PORT = 8750
# a connection is closed when no whole request head came this long after it opened or after
# its last answer (aiohttp's keep-alive timer, 3630 s by default: a connection that sent
# nothing, or half a head, held a file descriptor an hour). nginx's keepalive_timeout: above
# the 60 s of the usual proxies in front, which close their idle connections first
DEFAULT_IDLE_TIMEOUT = 75.0

log = logging.getLogger("acep.collector")


def _message(response: web.Response) -> str:
    """The ``error`` of a JSON error answer (for the log)."""
    try:
        return str(json.loads(response.body)["error"])
    except (TypeError, ValueError, KeyError):
        return ""


def make_app(collector: Collector) -> web.Application:
    """The aiohttp application of ``collector``: routes, JSON errors, request counting."""

    @web.middleware
    async def errors(request: web.Request, handler):
        try:
            expect = request.get("expect", "100-continue")
            response = await handler(request) if expect == "100-continue" else \
                json_error(417, f"Expect: {expect!r}: only 100-continue is supported")
        except web.HTTPException as exc:  # routing: 404, 405, and aiohttp's own 413
            response = json_error(exc.status, exc.reason or "error")
        except Exception as exc:  # a bug must answer 500, not drop the connection
            status, doc = collector.failed(exc, request.get(DEVICE, request.remote),
                                           f"{request.method} {request.path}")
            response = web.json_response(doc, status=status)
        response.headers["Accept-Encoding"] = ACCEPT_ENCODING
        if response.status in (503, 507):
            response.headers.setdefault("Retry-After", str(RETRY_AFTER))
        elif 400 <= response.status < 500 and response.status != 404:
            collector.refusals.warning("%s %s from %s: %d %s", request.method, request.path,
                                       request.get(DEVICE, request.remote), response.status,
                                       _message(response))
        collector.status_counts[response.status] += 1
        return response

    # client_max_size: aiohttp's own cap on request.read(); the handlers stream instead
    app = web.Application(middlewares=[errors], client_max_size=collector.max_body)
    # every route's Expect goes through defer_continue: aiohttp's own handler answers an
    # unknown expectation with a text it cannot encode when the header is not UTF-8 (a 500)
    expecting = {"expect_handler": defer_continue}
    app.add_routes([
        web.post("/v1/batches", collector.post_batch, **expecting),
        web.get("/v1/sketches/{pattern_id}", collector.get_sketch, **expecting),
        web.put("/v1/sketches/{pattern_id}", collector.put_sketch, **expecting),
        web.post("/v1/heartbeat", collector.post_heartbeat, **expecting),
        web.get("/v1/devices", collector.get_devices, **expecting),
        web.get("/v1/whoami", collector.whoami, **expecting),
        web.get("/health", collector.health, **expecting),
        web.get("/metrics", collector.metrics_view, **expecting),
    ])
    return app


def _one_line(text: str, limit: int = 200) -> str:
    """aiohttp's parser message on one line, without its caret line, and without the
    token of an Authorization header it quotes (:func:`_redacted`)."""
    parts = [p.strip() for p in text.splitlines() if p.strip().strip("^")]
    return _redacted(" ".join(parts))[:limit]


# aiohttp's parser quotes the line it refused: an Authorization header with a stray byte,
# one too long, one with a space before its colon, shows the token it carries
_AUTHORIZATION = re.compile(r"(?i)(authorization|bearer).*")


def _redacted(text: str) -> str:
    """``text`` cut after the first 'Authorization' or 'Bearer' it holds; a line too long
    without what it quotes (a header's value alone: which header, it does not say)."""
    if text.startswith("Got more than"):
        return text.split(":", 1)[0] + ": ... (not logged: it may hold a token)"
    return _AUTHORIZATION.sub(r"\1 ... (not logged: it may hold a token)", text, count=1)


class ServerLog:
    """aiohttp's ``logger`` for the collector's connections. A request aiohttp cannot parse
    (a bad Content-Length or chunk size, a header line too long) is a client's error: one
    warning line through the collector's rate limit for refusals, no traceback; anything
    else is logged as a failure, with its traceback, through that rate limit."""

    def __init__(self, collector: Collector):
        self.collector = collector

    def debug(self, msg: str, *args, exc_info=None, **_) -> None:
        log.debug(msg + (f": {_redacted(repr(exc_info))}"
                         if isinstance(exc_info, BaseException) else ""), *args)

    def exception(self, msg: str, *args, exc_info=True, **_) -> None:
        exc = exc_info if isinstance(exc_info, BaseException) else sys.exc_info()[1]
        if isinstance(exc, HttpProcessingError):
            self.collector.status_counts[exc.code] += 1
            self.collector.refusals.warning("malformed request from %s: %d %s",
                                            args[0] if args else "?", exc.code,
                                            _one_line(exc.message or type(exc).__name__))
        else:
            self.collector.errors.error(msg, *args, exc_info=exc_info)


class ListenError(OSError):
    """The collector cannot listen on ``--host``/``--port``: one line, exit 2."""


async def serve(collector: Collector, host: str, port: int, ready=print,
                tls: ssl.SSLContext | None = None, access_log: bool = False,
                idle_timeout: float = DEFAULT_IDLE_TIMEOUT) -> None:
    """Serve until SIGTERM or SIGINT, then finish the requests in flight and return;
    HTTPS with ``tls`` (:func:`server_tls`); one log line per request with ``access_log``
    (logger ``aiohttp.access``, level INFO). A connection without a whole request head
    ``idle_timeout`` seconds after it opened or after its last answer is closed (a body
    has its own limits: :meth:`Collector.read_body`)."""
    # bodies are decoded by edge.codings, bounded; aiohttp's decoding is not used
    runner = web.AppRunner(make_app(collector), handle_signals=False, auto_decompress=False,
                           access_log=logging.getLogger("aiohttp.access") if access_log else None,
                           logger=ServerLog(collector), keepalive_timeout=idle_timeout)
    await runner.setup()
    site = web.TCPSite(runner, host, port, ssl_context=tls)
    try:
        await site.start()
    except OSError as exc:  # a port in use or not this process's to take, an unknown host
        await runner.cleanup()
        raise ListenError(f"--host {host} --port {port}: cannot listen there "
                          f"({exc.strerror or exc})") from None
    bound = runner.addresses[0]
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):  # before "listening": a client may stop it
        loop.add_signal_handler(sig, stop.set)
    scheme = "http" if tls is None else "https"
    ready(f"acep collector listening on {scheme}://{bound[0]}:{bound[1]}")
    if collector.mirror is not None:
        collector.mirror.start()
    upkeep = asyncio.create_task(collector.maintain())
    try:
        await stop.wait()
    finally:
        upkeep.cancel()
        await runner.cleanup()


def server_tls(cert: str | None, key: str | None) -> ssl.SSLContext | None:
    """The TLS context of ``--tls-cert``/``--tls-key`` (PEM; TLS 1.2 or later), None for
    plain HTTP. Raises ``ValueError`` naming the file and the problem."""
    if cert is None and key is None:
        return None
    if cert is None or key is None:
        raise ValueError("--tls-cert and --tls-key go together (the certificate chain and "
                         "its private key, PEM)")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise ValueError(f"--tls-cert {cert} / --tls-key {key}: cannot load them as a PEM "
                         f"certificate chain and its key ({exc})") from None
    return context
