"""Content codings of request bodies (RFC 9110 8.4.1): ``gzip`` and ``deflate`` (the zlib
format) decoded as the chunks arrive, to at most a limit of bytes: a zip bomb stops at the
limit, having cost that much memory and no more. The collector decodes its bodies here
(aiohttp's own decoding is off) and says in every answer which codings it takes
(``Accept-Encoding``, RFC 7694 3); the agent's side is in ``edge.agent.uplink``.
"""

from __future__ import annotations

import zlib

__all__ = ["CODINGS", "ACCEPT_ENCODING", "CodingError", "BodyDecoder"]

CODINGS = ("identity", "gzip", "deflate")
ACCEPT_ENCODING = "gzip, deflate"
_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}


class CodingError(ValueError):
    """A coding not taken (``unsupported``), a body that does not decode, or one that
    decodes to more than the limit (``too_large``)."""

    def __init__(self, message: str, unsupported: bool = False, too_large: bool = False):
        super().__init__(message)
        self.unsupported, self.too_large = unsupported, too_large


class BodyDecoder:
    """Decodes one body sent with ``Content-Encoding: coding`` (None: none), chunk by
    chunk, to at most ``limit`` bytes; ``decoded`` counts the bytes out so far."""

    def __init__(self, coding: str | None, limit: int):
        coding = (coding or "identity").strip().lower()
        if coding not in CODINGS:
            raise CodingError(f"Content-Encoding {coding!r}: the collector takes "
                              f"{ACCEPT_ENCODING} (or none)", unsupported=True)
        self.coding, self.limit, self.decoded = coding, limit, 0
        self._zlib = None if coding == "identity" else zlib.decompressobj(_WBITS[coding])

    def feed(self, chunk: bytes) -> list[bytes]:
        """The decoded bytes of the next ``chunk`` of the body."""
        if self._zlib is None:
            return [self._count(chunk)]
        out = []
        while chunk:
            try:  # never more out than one byte over the limit, whatever the ratio
                piece = self._zlib.decompress(chunk, self.limit - self.decoded + 1)
            except zlib.error as e:
                raise CodingError(f"not valid {self.coding}: {e}") from None
            if self._zlib.unused_data:
                raise CodingError(f"bytes after the end of the {self.coding} data")
            out.append(self._count(piece))
            chunk = self._zlib.unconsumed_tail
        return out

    def end(self) -> None:
        """The body is over: it must not stop inside its coded data."""
        if self._zlib is not None and not self._zlib.eof:
            raise CodingError(f"not valid {self.coding}: it ends before its coded data does "
                              "(truncated)")

    def _count(self, piece: bytes) -> bytes:
        self.decoded += len(piece)
        if self.decoded > self.limit:
            raise CodingError(f"more than {self.limit} bytes"
                              + ("" if self._zlib is None else f" once decoded ({self.coding})"),
                              too_large=True)
        return piece
