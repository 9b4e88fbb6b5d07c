"""The agent's stdin source on the compiled JSON Lines reader, on its Python path, and as
it decoded before (line by line), fed through a real pipe in random pieces.

The three must give the same chunks, events, batches, bad-line counts, line numbers and
log lines, for random good, bad, blank, long and non-ASCII lines, with or without a
newline at the end, whatever the pieces the bytes arrive in and the size of a read."""

from __future__ import annotations

import io
import os
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.jsonl_lines import Recorder, event_line, file_of, line, shown

from acep.events import EventBatch, EventError, rows
from acep.utils import bounds
from edge.agent.lines import parse_line, read_line, stream_lines, why_bad
from edge.agent.sources import StdinSource, chunk_batch, chunk_events

SETTINGS = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
LONG = b'{"type": "a", "t": 1, "x": "' + "é".encode() * 40 + b'"}'
LINES = st.lists(event_line() | event_line() | line() | st.just(LONG), max_size=14)
PATHS = [True, False] if rows._compiled is not None else [False]


class Limit:
    """:data:`bounds.MAX_LINE_BYTES` set for the time of a ``with``."""

    def __init__(self, limit: int):
        self.limit = limit

    def __enter__(self):
        self.saved, bounds.MAX_LINE_BYTES = bounds.MAX_LINE_BYTES, self.limit

    def __exit__(self, *exc):
        bounds.MAX_LINE_BYTES = self.saved


def batch_of(events_or_chunk, position: int) -> object:
    try:
        if isinstance(events_or_chunk, list) and all(isinstance(e, dict)
                                                      for e in events_or_chunk):
            return shown(EventBatch.from_events(events_or_chunk, position, "<stdin>"))
        return shown(chunk_batch(events_or_chunk, position, "<stdin>"))
    except EventError as e:
        return str(e)


def decoded_before(data: bytes, batch_events: int) -> tuple:
    """What the stdin source gave before it read whole reads: one line at a time."""
    stream, events, log, number, bad = io.BytesIO(data), [], Recorder(), 0, 0
    for text in iter(lambda: read_line(stream), b""):
        number += 1
        if text.strip():
            doc = parse_line(text)
            if doc is None:
                bad += 1
                log.warning("<stdin>, line %d of this run: %s, skipped: %.60r", number,
                            why_bad(text), text)
            else:
                events.append(doc)
    chunks = [events[i:i + batch_events] for i in range(0, len(events), batch_events)]
    out = [(repr(c), batch_of(c, i * batch_events)) for i, c in enumerate(chunks)]
    return out, bad, number, log.messages


def piped(pieces: list[bytes]) -> io.BufferedReader:
    """The read end of a pipe a thread writes ``pieces`` into, one write each, then closes."""
    r, w = os.pipe()

    def write():
        with open(w, "wb", buffering=0) as fh:
            for piece in pieces:
                fh.write(piece)

    threading.Thread(target=write, daemon=True).start()
    return open(r, "rb")


def read_stdin(pieces: list[bytes], compiled: bool, batch_events: int, read_bytes: int):
    """Every chunk the source makes of the pieces, sent through a pipe."""
    saved = rows._compiled
    if not compiled:
        rows._compiled = None
    try:
        with piped(pieces) as stream:
            src = StdinSource(stream, read_bytes=read_bytes, batch_events=batch_events,
                              batch_seconds=1e9)
            src.bad_log = Recorder()
            out, position = [], 0
            for chunk in src.chunks(threading.Event()):
                assert 0 < len(chunk) <= batch_events
                assert all(offset is None for _, offset in chunk)
                if compiled:
                    assert chunk.parts, "the compiled reader's columns are used"
                out.append((repr(chunk_events(chunk)), batch_of(chunk, position)))
                position += len(chunk)
            assert src.eof
            return out, src.bad_lines, src.lines, src.bad_log.messages
    finally:
        rows._compiled = saved


@SETTINGS
@given(LINES, st.booleans(), st.sampled_from([1, 2, 3, 1000]),
       st.sampled_from([1, 5, 64, 1 << 16]), st.sampled_from([64, 100, 16 << 20]), st.data())
def test_stdin_gives_what_line_by_line_decoding_gave(lines, newline_at_end, batch_events,
                                                      read_bytes, limit, data):
    text = file_of(lines, newline_at_end)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(text)), max_size=8), label="cuts"))
    pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)])]
    with Limit(limit):
        before = decoded_before(text, batch_events)
        for compiled in PATHS:
            assert read_stdin(pieces, compiled, batch_events, read_bytes) == before


@SETTINGS
@given(LINES, st.booleans(), st.sampled_from([1, 3, 64, 1 << 16]),
       st.sampled_from([64, 100, 16 << 20]), st.data())
def test_stream_lines_are_the_lines_read_one_by_one(lines, newline_at_end, read_bytes,
                                                   limit, data):
    """Each read's lines, joined, are what ``read_line`` reads; a long line comes alone."""
    text = file_of(lines, newline_at_end)
    sizes = iter(data.draw(st.lists(st.integers(1, 80), max_size=30), label="read sizes"))
    stream = io.BytesIO(text)
    with Limit(limit):
        reference, ref = [], io.BytesIO(text)
        while piece := read_line(ref):
            reference.append((bytes(piece), len(piece)))
        got = list(stream_lines(lambda n: stream.read(min(n, next(sizes, read_bytes))),
                                read_bytes))
        assert [(bytes(x), len(x)) for group in got for x in group] == reference
        for group in got:
            assert len(group) == 1 or all(len(x) <= limit for x in group)


def test_lines_there_are_handed_over_without_waiting_for_more():
    """A live pipe: the events written are read at once (a half line waits for the rest),
    while the writer keeps the pipe open."""
    r, w = os.pipe()
    for compiled in PATHS:
        saved = rows._compiled
        if not compiled:
            rows._compiled = None
        try:
            stream = open(r, "rb", closefd=False)
            src = StdinSource(stream, batch_events=1000)
            blocks = src._blocks(threading.Event())
            os.write(w, b'{"type": "a", "t": 1}\n\n{"type": "b", "t": 2}\n{"type": "c"')
            got = next_within(blocks, 5)
            assert chunk_events(got) == [{"type": "a", "t": 1}, {"type": "b", "t": 2}]
            os.write(w, b', "t": 3}\nnot json\n')
            assert chunk_events(next_within(blocks, 5)) == [{"type": "c", "t": 3}]
            assert src.bad_lines == 1, "the bad line came with it, in the same read"
            assert src.lines == 5 and src.bad_lines == 1 and not src.eof
        finally:
            rows._compiled = saved
    os.close(w)
    os.close(r)


def next_within(blocks, seconds: float, **default):
    """The next block (``default`` at the end, if given), or a failure when it does not
    come within ``seconds``."""
    out = []
    thread = threading.Thread(target=lambda: out.append(next(blocks, *default.values())),
                              daemon=True)
    thread.start()
    thread.join(seconds)
    if not out:
        pytest.fail("the source waits for more input although whole lines are there")
    return out[0]


def test_a_bad_line_is_named_by_its_number_in_the_stream():
    text = b'{"type": "a", "t": 1}\n\nnot json\n{"type": "b", "t": 2}\n[1]'
    for compiled in PATHS:
        saved = rows._compiled
        if not compiled:
            rows._compiled = None
        try:
            src = StdinSource(io.BytesIO(text), read_bytes=7)
            src.bad_log = Recorder()
            events = [e for c in src.chunks() for e in chunk_events(c)]
        finally:
            rows._compiled = saved
        assert events == [{"type": "a", "t": 1}, {"type": "b", "t": 2}]
        assert src.bad_log.messages == [
            "<stdin>, line 3 of this run: not a JSON object, skipped: b'not json\\n'",
            "<stdin>, line 5 of this run: not a JSON object, skipped: b'[1]'"]


def test_a_quiet_pipe_hands_on_the_chunk_begun_after_batch_seconds():
    """Events that came before the pipe went quiet are not held until more come: the chunk
    goes on ``batch_seconds`` after its first event, and ``stop`` ends a quiet source."""
    for compiled in PATHS:
        saved = rows._compiled
        if not compiled:
            rows._compiled = None
        r, w = os.pipe()
        stream = open(r, "rb")
        try:
            src = StdinSource(stream, batch_events=1000, batch_seconds=0.2)
            stop = threading.Event()
            chunks = src.chunks(stop)
            os.write(w, b'{"type": "a", "t": 1}\n{"type": "b", "t": 2}\n')
            got = next_within(chunks, 5)
            assert chunk_events(got) == [{"type": "a", "t": 1}, {"type": "b", "t": 2}]
            stop.set()
            assert next_within(chunks, 5, default=None) is None and not src.eof
        finally:
            rows._compiled = saved
            os.close(w)  # first: a read still waiting ends, then the stream can close
            stream.close()
