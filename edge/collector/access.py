"""Who may send a request to the collector: bearer tokens checked, wrong ones throttled
per client address (:mod:`edge.collector.throttle`), uploads admitted or refused
when overloaded (:mod:`edge.collector.admission`). :class:`Access` is a part of
:class:`~edge.collector.service.Collector`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque

from aiohttp import web

from .admission import Refusal
from .guards import json_error
from .throttle import client_of

# who sent a request, once its token is known (for the log lines of its failures)
DEVICE = web.RequestKey("device", str)

log = logging.getLogger("acep.collector")


class Access:
    """The collector's token checks, their throttle, and the admission of uploads."""

    def refuse(self, refused: Refusal) -> web.Response:
        """The answer to an upload not admitted (:mod:`edge.collector.admission`), counted; a
        spell of 503s is logged when it starts and when uploads are admitted again."""
        if refused.status == 503:
            self.metrics["refused_busy"] += 1
            if self.busy is None:
                log.warning("%s (%d uploads, %.1f MiB admitted; answered at %.0f KiB/s)",
                            refused.reason, self.admission.pending,
                            self.admission.backlog / 2**20, (self.admission.rate or 0) / 1024)
            since, count = self.busy or (time.monotonic(), 0)
            self.busy = (since, count + 1)
        else:
            self.metrics["refused_device_busy"] += 1
        response = json_error(refused.status, refused.reason)
        response.headers["Retry-After"] = str(refused.retry_after)
        return response

    def admitted(self) -> None:
        if self.busy is not None:
            log.info("uploads are admitted again, after %d refused in %.0f s", self.busy[1],
                     time.monotonic() - self.busy[0])
            self.busy = None

    def throttled(self, client: str) -> web.Response | None:
        """The 429 (with ``Retry-After``) of a request whose client sent too many wrong or
        missing tokens of late (:mod:`edge.collector.throttle`): its token is not checked. None when
        it may be."""
        wait = self.throttle.retry_after(client)
        if wait is None:
            return None
        self.metrics["refused_auth_throttled"] += 1
        response = json_error(429, (
            f"too many requests with a wrong or missing token from {client} (at most "
            f"{self.throttle.failures} within {self.throttle.window:g} s: --auth-failures, "
            f"--auth-window): no token from it is checked for {wait} s; send it again "
            "after Retry-After"))
        response.headers["Retry-After"] = str(wait)
        return response

    async def admit(self, request: web.Request) -> web.Response | None:
        """Begin the check of ``request``'s token, reserved as a failure of its client
        until :meth:`checked` (:meth:`edge.collector.throttle.AuthThrottle.reserve`): None once
        begun, or the 429 of a throttled client (:meth:`throttled`). While the client's
        failures and checks under way are at ``--auth-failures``, wait for one to end: so
        no connection it holds open gets a guess beyond the limit."""
        client = client_of(request.remote)
        while (refused := self.throttled(client)) is None:
            if self.throttle.reserve(client):
                return None
            await self._turn(client)
        return refused

    async def _turn(self, client: str) -> None:
        """Wait until a check of ``client``'s under way ends (or its throttle begins). One
        waiter is woken per check that ends, not all: a herd of devices behind one
        address would otherwise be woken, each of them, at every check."""
        turn = asyncio.get_running_loop().create_future()
        self.check_turns.setdefault(client, deque()).append(turn)
        try:
            await turn
        except asyncio.CancelledError:  # its client went away: a turn it was given passes on
            if turn.done() and not turn.cancelled():
                self._pass_turn(client)
            raise

    def _pass_turn(self, client: str, every: bool = False) -> None:
        """Wake the first of ``client``'s requests waiting for a check to end (``every``:
        all of them)."""
        waiting = self.check_turns.get(client)
        while waiting:
            turn = waiting.popleft()
            if not turn.done():
                turn.set_result(None)
                if not every:
                    break
        if not waiting:
            self.check_turns.pop(client, None)

    def checked(self, request: web.Request) -> None:
        """End the check :meth:`admit` began (after :meth:`unauthorized`, if refused), and
        wake the next request of its client waiting for one to end."""
        client = client_of(request.remote)
        self.throttle.release(client)
        self._pass_turn(client)

    def unauthorized(self, request: web.Request, message: str) -> web.Response:
        """The 401 saying ``message``, counted against the request's client; the client
        that it throttles is logged (rate-limited)."""
        self.metrics["refused_unauthorized"] += 1
        client = client_of(request.remote)
        if self.throttle.failed(client):
            self._pass_turn(client, every=True)  # each is answered 429 now
            self.throttled_log.warning(
                "%s sent %d requests with a wrong or missing token within %g s: its "
                "requests with a token are answered 429, unchecked, for %g s", client,
                self.throttle.failures, self.throttle.window, self.throttle.window)
        return json_error(401, message)

    async def identify(self, request: web.Request, admin: str | None = None
                       ) -> tuple[str, str] | web.Response:
        """``(id, role)`` of the bearer token's holder, or the 401 to answer (429 from a
        throttled client, before the token is looked up: :meth:`admit`); with ``admin``
        (what the request does), a token that is not an admin's is 403."""
        refused = await self.admit(request)
        if refused is not None:
            return refused
        try:
            who = await self._holder(request)
        finally:
            self.checked(request)
        if isinstance(who, web.Response):
            return who
        request[DEVICE] = who[0]
        if admin is not None and who[1] != "admin":
            return json_error(403, f"{who[0]!r} may not {admin} (admin only)")
        return who

    async def _holder(self, request: web.Request) -> tuple[str, str] | web.Response:
        """``(id, role)`` of the bearer token's holder, or the 401 to answer."""
        auth = request.headers.get("Authorization", "")
        scheme, _, token = auth.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return self.unauthorized(request, "missing bearer token (header 'Authorization: "
                                              "Bearer <token>')")
        if not token.isascii():  # bytes beyond ASCII: no token (and no UTF-8 to hash)
            return self.unauthorized(request, "unknown token (not ASCII text: a token is 43 "
                                              "letters, digits, '-' and '_')")
        who = await self.run(self.store.identify, token.strip())
        if who is None:
            return self.unauthorized(request, "unknown token")
        return who
