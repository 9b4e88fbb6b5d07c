"""Tests of edge.codings: request bodies in gzip and deflate decode to what was coded,
however the network cuts them, and never to more than the limit."""

from __future__ import annotations

import gzip
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edge.codings import BodyDecoder, CodingError

CODERS = {"identity": lambda b: b, "gzip": lambda b: gzip.compress(b, mtime=0),
          "deflate": zlib.compress}

bodies = st.one_of(st.binary(max_size=3000),  # hardly compressible
                   st.builds(lambda b, n: b * n, st.binary(min_size=1, max_size=8),
                             st.integers(1, 5000)))  # very compressible


def cut(data: bytes, points: list[int]) -> list[bytes]:
    bounds = [0, *sorted({p % (len(data) + 1) for p in points}), len(data)]
    return [data[a:b] for a, b in zip(bounds, bounds[1:])]


def decode(coding: str, chunks: list[bytes], limit: int) -> tuple[bytes, BodyDecoder]:
    decoder = BodyDecoder(coding, limit)
    out = b"".join(piece for chunk in chunks for piece in decoder.feed(chunk))
    decoder.end()
    return out, decoder


@settings(max_examples=300, deadline=None)
@given(body=bodies, coding=st.sampled_from(list(CODERS)), points=st.lists(st.integers(0)),
       slack=st.integers(0, 10))
def test_a_body_decodes_to_what_was_coded_however_it_is_cut(body, coding, points, slack):
    out, decoder = decode(coding, cut(CODERS[coding](body), points), len(body) + slack)
    assert out == body and decoder.decoded == len(body)


@settings(max_examples=300, deadline=None)
@given(body=bodies, coding=st.sampled_from(list(CODERS)), points=st.lists(st.integers(0)),
       short=st.integers(1, 100))
def test_more_than_the_limit_is_refused_before_more_is_decoded(body, coding, points, short):
    """A zip bomb: never more than one byte past the limit comes out of the decoder."""
    limit = max(len(body) - short, 0)
    if len(body) <= limit:
        return
    decoder, out = BodyDecoder(coding, limit), 0
    with pytest.raises(CodingError) as refused:
        for chunk in cut(CODERS[coding](body), points):
            out += sum(map(len, decoder.feed(chunk)))
            assert out <= limit
    assert refused.value.too_large and f"more than {limit} bytes" in str(refused.value)
    if coding != "identity":  # a plain chunk is counted whole (the collector caps chunks)
        assert decoder.decoded <= limit + 1


@settings(max_examples=200, deadline=None)
@given(body=bodies, coding=st.sampled_from(["gzip", "deflate"]), drop=st.integers(1, 30),
       points=st.lists(st.integers(0), max_size=3))
def test_a_truncated_body_is_refused_not_taken_short(body, coding, drop, points):
    coded = CODERS[coding](body)
    with pytest.raises(CodingError, match=f"not valid {coding}") as refused:
        decode(coding, cut(coded[:max(len(coded) - drop, 0)], points), len(body))
    assert not refused.value.too_large


@pytest.mark.parametrize("coding", ["gzip", "deflate"])
def test_bytes_after_the_coded_data_or_a_bad_checksum_are_refused(coding):
    coded = CODERS[coding](b"matches " * 100)
    with pytest.raises(CodingError, match=f"bytes after the end of the {coding} data"):
        decode(coding, [coded + b"more"], 10_000)
    with pytest.raises(CodingError, match=f"bytes after the end of the {coding} data"):
        decode(coding, [coded, b"more"], 10_000)
    broken = bytearray(coded)
    broken[-5] ^= 0xFF  # in the checksum (gzip: CRC-32 then length; zlib: Adler-32)
    with pytest.raises(CodingError, match=f"not valid {coding}"):
        decode(coding, [bytes(broken)], 10_000)


@pytest.mark.parametrize("header", ["br", "zstd", "gzip, identity", "compress"])
def test_a_coding_not_taken_is_named(header):
    with pytest.raises(CodingError, match="takes gzip, deflate") as refused:
        BodyDecoder(header, 100)
    assert refused.value.unsupported and repr(header) in str(refused.value)


def test_the_header_is_read_as_http_says():
    for header in (None, "identity", " GZIP ", "Deflate"):
        assert BodyDecoder(header, 10).coding in ("identity", "gzip", "deflate")
