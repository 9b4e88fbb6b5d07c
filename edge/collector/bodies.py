"""How the collector reads a request body: bounded in size (also once decoded), in time
(idle and minimum rate), and after ``100 Continue`` only when the handler wants it.
:class:`Bodies` is a part of :class:`~edge.collector.service.Collector`.
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from ..codings import BodyDecoder, CodingError
from .guards import json_error

CLIENT_GONE = 499  # nginx's status for a request its client closed, counted and logged so
# a body is refused (408) when no byte of it arrives for DEFAULT_BODY_IDLE seconds
# (nginx's client_body_timeout: between two reads, not for the whole body), or when, after
# that long, it arrives at fewer than DEFAULT_BODY_MIN_RATE bytes/s (Apache's
# RequestReadTimeout MinRate): a device on a thin link (2G, cellular: 100 kbit/s is 12,500
# bytes/s) takes as long as its body needs, a client that trickles holds its upload's
# admission a grace period at most
DEFAULT_BODY_IDLE = 30.0
DEFAULT_BODY_MIN_RATE = 1024  # bytes/s (8 kbit/s)


class Bodies:
    """The collector's reading of request bodies."""

    async def read_body(self, request: web.Request, limit: int | None = None
                        ) -> bytes | web.Response:
        """The body, decoded (gzip, deflate: :mod:`edge.codings`; another coding is 415, one
        that does not decode 400), refused with 413 above ``limit`` (default ``max_body``)
        by Content-Length before reading, by the bytes actually received (chunked or lying
        clients) and by the bytes decoded (a zip bomb); 408 when too slow
        (:meth:`_read_deadline`)."""
        limit = self.max_body if limit is None else limit
        length = request.content_length
        if length is not None and length > limit:
            return json_error(413, f"body: Content-Length {length} is above the limit of "
                                   f"{limit} bytes")
        try:
            decoder = BodyDecoder(request.headers.get("Content-Encoding"), limit)
        except CodingError as e:
            return json_error(415, str(e))
        await send_continue(request)
        clock = asyncio.get_running_loop().time
        parts, wire = [], 0
        start = last = clock()
        try:
            while True:
                deadline, slow = self._read_deadline(start, last, wire)
                try:
                    async with asyncio.timeout_at(deadline):
                        chunk = await request.content.read(1 << 16)
                except TimeoutError:
                    return self._too_slow(slow, clock() - start, wire, length)
                if not chunk:
                    break
                last = clock()
                wire += len(chunk)
                if wire > limit:
                    return json_error(413, f"body: more than {limit} bytes")
                parts += decoder.feed(chunk)
            decoder.end()
        except CodingError as e:
            return json_error(413 if e.too_large else 400, f"body: {e}")
        except ConnectionResetError:  # a device that lost its link: nobody reads the answer
            return json_error(CLIENT_GONE, f"body: the client went away after {wire} of "
                                           f"{length if length is not None else '?'} bytes")
        self.metrics["bytes_in"] += decoder.decoded
        self.metrics["bytes_in_wire"] += wire
        return b"".join(parts)

    def _read_deadline(self, start: float, last: float, wire: int) -> tuple[float, bool]:
        """Until when (the event loop's clock) the next read of a body may wait, begun at
        ``start``, its last bytes read at ``last``, ``wire`` bytes so far; and whether the
        minimum rate (not the idle timeout) sets it. No byte for ``body_idle`` seconds is
        too slow; so is a body behind ``body_min_rate`` bytes/s after a grace of
        ``body_idle`` seconds: each byte buys ``1/body_min_rate`` seconds more (Apache's
        MinRate). So a body never takes longer than ``body_idle + bytes / body_min_rate``
        seconds, and a steady one above the rate takes as long as it needs."""
        idle_at = last + self.body_idle
        if not self.body_min_rate:
            return idle_at, False
        rate_at = start + self.body_idle + wire / self.body_min_rate
        return (rate_at, True) if rate_at < idle_at else (idle_at, False)

    def _too_slow(self, slow: bool, seconds: float, wire: int, length: int | None
                  ) -> web.Response:
        """The 408 of a body that stopped (``slow`` False) or came too slowly, after
        ``seconds`` with ``wire`` of ``length`` bytes."""
        got = f"{wire} of {length if length is not None else '?'} bytes"
        if slow:
            return json_error(408, f"body: {got} in {seconds:.0f} s, {wire / seconds:.0f} "
                                   f"bytes/s on average: below the collector's minimum of "
                                   f"{self.body_min_rate:g} bytes/s (--body-min-rate)")
        return json_error(408, f"body: no byte for {self.body_idle:g} s "
                               f"(--body-idle-timeout), after {got}")


async def defer_continue(request: web.Request) -> None:
    """The expect handler of the routes with a body: ``Expect: 100-continue`` is answered
    by :func:`send_continue` when the handler is about to read the body, not on arrival
    (aiohttp's default), so that a refusal (401, 413, 415, 429, 503, 507) comes before the
    client sends it (RFC 9110 10.1.1). Another expectation gets 417 (:func:`make_app`)."""
    if request.version >= (1, 1):  # an HTTP/1.0 client does not wait (RFC 9110 10.1.1)
        request["expect"] = request.headers.get("Expect", "").lower()


async def send_continue(request: web.Request) -> None:
    """``100 Continue``, once, to a client that waits for it (:func:`defer_continue`)."""
    if request.pop("expect", None) == "100-continue":
        await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        request.writer.output_size = 0  # the answer's size in the access log, as aiohttp's
