"""The agent's file source on the compiled JSON Lines reader against its Python path.

Each test reads the same file twice, once with the compiled reader and once with
``rows._compiled`` set to None (how a device without the compiled module reads), and
asserts the same chunks, offsets, events, batches, bad lines and log lines, for random good
and bad lines, read whole or as they arrive in random pieces, from the start or resumed."""

from __future__ import annotations

import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.jsonl_lines import Recorder, event_line, file_of, line, shown

from acep.events import EventError, rows
from edge.agent import sources
from edge.agent.sources import _CUT, FileSource, chunk_batch, chunk_events

needs_compiled = pytest.mark.skipif(rows._compiled is None, reason="the reader is not built")
SETTINGS = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


LINES = st.lists(event_line() | event_line() | event_line() | line(), max_size=14)


def described(chunk, position: int) -> tuple:
    """A chunk's offsets, its events as dicts (repr: NaN equals NaN) and its batch."""
    try:
        batch = shown(chunk_batch(chunk, position, "f.jsonl"))
    except EventError as e:
        batch = str(e)
    return [end for _, end in chunk], repr(chunk_events(chunk)), batch


class Mode:
    """The compiled reader (or not) and a read size, for the time of a ``with``."""

    def __init__(self, compiled: bool, read_bytes: int):
        self.compiled, self.read_bytes = compiled, read_bytes

    def __enter__(self):
        self.saved = rows._compiled, sources._READ_BYTES
        if not self.compiled:
            rows._compiled = None
        sources._READ_BYTES = self.read_bytes

    def __exit__(self, *exc):
        rows._compiled, sources._READ_BYTES = self.saved


def read_whole(path, compiled: bool, batch_events: int, read_bytes: int, start: int = 0):
    """Every chunk of a file read to its end (resumed at ``start``), as the agent takes it."""
    with Mode(compiled, read_bytes):
        src = FileSource(path, follow=False, start=start, counted=start,
                         batch_events=batch_events, batch_seconds=1e9)
        src.bad_log = Recorder()
        out, position = [], 0
        for chunk in src.chunks(threading.Event()):
            assert 0 < len(chunk) <= batch_events
            if compiled and rows._compiled is not None:
                assert chunk.parts, "the compiled reader's columns are used"
            out.append((described(chunk, position), src.bad_lines))
            position += len(chunk)
        return out, src.bad_lines, src.offset, src.bad_log.messages


def read_growing(path, pieces, compiled: bool, batch_events: int, read_bytes: int):
    """The blocks of a followed file that grows by ``pieces``, each written when the source
    has read everything before it (a half line waits for its newline)."""
    path.write_bytes(b"")
    with Mode(compiled, read_bytes):
        src = FileSource(path, follow=True, poll_seconds=0, batch_events=batch_events)
        src.bad_log = Recorder()
        blocks = src._blocks(threading.Event())
        out, position, pending = [], 0, list(pieces)
        for block in blocks:
            if block is None:
                if not pending:
                    break
                with open(path, "ab") as fh:
                    fh.write(pending.pop(0))
            elif block is _CUT:
                out.append("cut")
            else:
                out.append((described(block, position), src.bad_lines))
                position += len(block)
        blocks.close()
        return out, src.bad_lines, src.offset, src.bad_log.messages


@needs_compiled
@SETTINGS
@given(LINES, st.booleans(), st.sampled_from([1, 2, 3, 5, 1000]),
       st.sampled_from([1, 7, 64, 1 << 16]), st.data())
def test_a_file_read_whole_gives_the_same_chunks(tmp_path_factory, lines, newline_at_end,
                                                batch_events, read_bytes, data):
    path = tmp_path_factory.mktemp("agent") / "f.jsonl"
    path.write_bytes(file_of(lines, newline_at_end))
    python = read_whole(path, False, batch_events, read_bytes)
    assert read_whole(path, True, batch_events, read_bytes) == python
    ends = [0] + [end for (offsets, _, _), _ in python[0] for end in offsets]
    start = data.draw(st.sampled_from(ends), label="resumed at")
    assert read_whole(path, True, batch_events, read_bytes, start) == \
        read_whole(path, False, batch_events, read_bytes, start)


@needs_compiled
@SETTINGS
@given(LINES, st.sampled_from([1, 2, 5, 1000]),
       st.sampled_from([1, 7, 64, 1 << 16]), st.data())
def test_a_growing_file_gives_the_same_blocks(tmp_path_factory, lines, batch_events,
                                              read_bytes, data):
    """Tailing: the lines arrive in random pieces, cut anywhere (half lines included)."""
    text = file_of(lines, True)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(text)), max_size=6), label="cuts"))
    pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)])]
    path = tmp_path_factory.mktemp("agent") / "f.jsonl"
    python = read_growing(path, pieces, False, batch_events, read_bytes)
    assert read_growing(path, pieces, True, batch_events, read_bytes) == python
    assert python[2] == len(text)  # every whole line read, nothing lost


@needs_compiled
def test_the_compiled_chunk_holds_lines_and_their_columns(tmp_path):
    path = tmp_path / "f.jsonl"
    path.write_bytes(b'{"type": "a", "t": 1, "x": 2}\nnot json\n\n{"type": "b", "t": 2}\n'
                     b'{"type": "c", "t": 3, "y": "z"}')
    src = FileSource(path, follow=False, batch_events=2)
    src.bad_log = Recorder()
    chunks = list(src.chunks())
    assert [[end for _, end in c] for c in chunks] == [[30, 62], [93]]
    assert chunks[0][0][0] == b'{"type": "a", "t": 1, "x": 2}\n'
    assert chunk_events(chunks[1]) == [{"type": "c", "t": 3, "y": "z"}]
    batch = chunk_batch(chunks[0], 0, "f")
    assert batch.types().tolist() == ["a", "b"] and list(batch.columns) == ["x"]
    assert src.bad_lines == 1
    assert src.bad_log.messages == [f"{path}, line 2: not a JSON object, skipped: b'not json\\n'"]


def test_a_line_over_the_limit_is_a_bad_line_on_both_paths(tmp_path, monkeypatch):
    from acep.utils import bounds

    monkeypatch.setattr(bounds, "MAX_LINE_BYTES", 64)
    path = tmp_path / "f.jsonl"
    long = b'{"type": "a", "t": 1}' + b" " * 100
    path.write_bytes(b'{"type": "a", "t": 0}\n' + long + b'\n{"type": "b", "t": 2}\n')
    results = [read_whole(path, compiled, 1000, 1 << 16)
               for compiled in ([True, False] if rows._compiled is not None else [False])]
    assert all(r == results[-1] for r in results)
    chunks, bad, offset, messages = results[-1]
    assert bad == 1 and offset == len(path.read_bytes())
    assert "line 2: line over 64 bytes" in messages[0] or "line 2" in messages[0]
