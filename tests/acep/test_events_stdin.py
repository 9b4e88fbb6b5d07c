"""JSON Lines on stdin (``read_events("-")``) through the compiled reader and the Python one.

Random lines are written into a real pipe in random pieces (with pauses, so that what has
come is sometimes handed on as a batch once stdin goes quiet), or stdin is a regular file;
both readers must give the same events, bad events and errors. With no pause the batches
are cut only by their size, and must be equal bit for bit.
"""

from __future__ import annotations

import contextlib
import gc
import gzip
import json
import math
import os
import subprocess
import sys
import threading
import time
from importlib.resources import files
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.cli import ROOT
from support.jsonl_lines import SPECS, file_of, line, shown

from acep.events import EventError, read_events, rows
from acep.utils import bounds

needs_compiled = pytest.mark.skipif(rows._compiled is None, reason="the reader is not built")
PIECES = st.lists(st.tuples(st.integers(1, 200), st.booleans()), max_size=8)


def written(data: bytes, pieces: list[tuple[int, bool]], pause: float) -> tuple[int, object]:
    """The read end of a pipe a thread writes ``data`` into: a piece of each drawn size,
    after a pause where drawn, the rest at once, then the end."""
    r, w = os.pipe()

    def write():
        with open(w, "wb", buffering=0) as fh:
            at = 0
            for size, wait in pieces:
                if wait:
                    time.sleep(pause)
                fh.write(data[at : at + size])
                at += size
            fh.write(data[at:])

    def write_all():
        with contextlib.suppress(BrokenPipeError):  # the reader stopped at an error
            write()

    writer = threading.Thread(target=write_all, daemon=True)
    writer.start()
    return r, writer


def read_stdin(fd: int, spec, compiled: bool, idle: float, **kw) -> tuple:
    """What read_events("-") gives with ``fd`` as stdin: the batches, bad events, error."""
    saved = rows._compiled, rows.STDIN_IDLE_SECONDS, sys.stdin
    if not compiled:
        rows._compiled = None
    rows.STDIN_IDLE_SECONDS = idle
    batches, bad, error = [], [], None
    try:
        with open(fd, "rb") as f:
            sys.stdin = SimpleNamespace(buffer=f)
            for batch in read_events("-", spec, bad_events=bad, **kw):
                batches.append(batch)
    except EventError as e:
        error = str(e)
    finally:
        rows._compiled, rows.STDIN_IDLE_SECONDS, sys.stdin = saved
    return batches, bad, error


def by_event(batches) -> list:
    """Each event apart from the batch it came in (the pauses cut batches as they fall):
    position, line, type, tag and its attributes that hold a value."""
    out = []
    for b in batches:
        names = b.types().tolist()
        for i in range(len(b)):
            attrs = {k: c[i] for k, c in b.columns.items()}
            attrs = {k: v for k, v in attrs.items() if v is not None and v == v}
            tag = float(b.tags[i])
            out.append(
                (
                    b.position + i,
                    int(b.lines[i]),
                    names[i],
                    "nan" if math.isnan(tag) else tag,
                    attrs,
                )
            )
    return out


@needs_compiled
@settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    st.lists(line(), max_size=12),
    st.booleans(),
    st.sampled_from(SPECS),
    st.sampled_from([1, 2, 5, 1000]),
    PIECES,
    st.booleans(),
    st.sampled_from([None, 40]),
    st.sampled_from(["error", "skip"]),
)
def test_stdin_reads_as_the_python_reader(
    tmp_path_factory, lines, newline_at_end, spec, batch_size, pieces, pauses, limit, mode
):
    data = file_of(lines, newline_at_end)
    saved = bounds.MAX_LINE_BYTES
    bounds.MAX_LINE_BYTES = limit or saved  # 40: some lines are over the limit
    kw = {"batch_size": batch_size, "on_bad_event": mode}
    try:
        got = {}
        for compiled in (True, False):
            # idle 60 s: never quiet, so batches are cut by size alone
            idle, pause = (0.005, 0.02) if pauses else (60.0, 0.0)
            r, writer = written(data, pieces, pause)
            got[compiled] = read_stdin(r, spec, compiled, idle, **kw)
            writer.join()
            path = tmp_path_factory.mktemp("stdin") / "events.jsonl"
            path.write_bytes(data)
            f_batches, f_bad, f_error = read_stdin(
                os.open(path, os.O_RDONLY), spec, compiled, idle, **kw
            )
            got[compiled, "file"] = [shown(b) for b in f_batches], f_bad, f_error
        assert got[True, "file"] == got[False, "file"]
        (c_batches, c_bad, c_error), (p_batches, p_bad, p_error) = got[True], got[False]
        assert (c_bad, c_error) == (p_bad, p_error) == got[True, "file"][1:]
        if pauses:
            assert by_event(c_batches) == by_event(p_batches)
        else:
            assert [shown(b) for b in c_batches] == [shown(b) for b in p_batches]
            assert [shown(b) for b in c_batches] == got[True, "file"][0]
    finally:
        bounds.MAX_LINE_BYTES = saved


def reader_for(compiled: bool, monkeypatch) -> None:
    """The compiled reader, or the Python one (``rows._compiled`` None) for this test."""
    if compiled and rows._compiled is None:
        pytest.skip("the reader is not built")
    if not compiled:
        monkeypatch.setattr(rows, "_compiled", None)


@pytest.mark.parametrize("compiled", [True, False])
def test_a_live_pipe_hands_on_what_came_once_it_goes_quiet(compiled, monkeypatch):
    """``tail -f | acep match -``: the lines come as a batch with stdin still open, and the
    reader waits for more with the garbage collector on."""
    reader_for(compiled, monkeypatch)
    r, w = os.pipe()
    got = []
    try:
        with open(r, "rb") as f:
            monkeypatch.setattr(sys, "stdin", SimpleNamespace(buffer=f))
            batches = read_events("-")
            reader = threading.Thread(target=lambda: got.extend(batches), daemon=True)
            os.write(w, b'{"type": "a", "t": 1}\n\n{"type": "b", "t": 2}\n{"type": "c"')
            reader.start()
            deadline = time.monotonic() + 30
            while not got and time.monotonic() < deadline:
                time.sleep(0.05)
            assert got and got[0].types().tolist() == ["a", "b"], "nothing while stdin is open"
            time.sleep(rows.STDIN_IDLE_SECONDS * 2)  # waiting for the next bytes
            assert gc.isenabled() and len(got) == 1
            os.write(w, b', "t": 3}')
            os.close(w)
            w = None
            reader.join(30)
            assert not reader.is_alive()
            assert [b.types().tolist() for b in got] == [["a", "b"], ["c"]]
            assert got[1].lines.tolist() == [4] and got[1].position == 2
    finally:
        if w is not None:
            os.close(w)


@pytest.mark.parametrize("compiled", [True, False])
def test_a_terminal_ends_at_ctrl_d_after_its_lines(compiled, monkeypatch):
    """Lines typed (or pasted) and Ctrl-D at once: the end is read once, with the lines."""
    reader_for(compiled, monkeypatch)
    pty = pytest.importorskip("pty")
    main, terminal = pty.openpty()
    got = []
    try:
        with open(terminal, "rb") as f:
            monkeypatch.setattr(sys, "stdin", SimpleNamespace(buffer=f))
            os.write(main, b'{"type": "a", "t": 1}\n{"type": "b", "t": 2}\n\x04')
            time.sleep(0.1)  # all of it there before the first read
            reader = threading.Thread(target=lambda: got.extend(read_events("-")), daemon=True)
            reader.start()
            reader.join(30)
            assert not reader.is_alive(), "Ctrl-D did not end stdin"
            assert [b.types().tolist() for b in got] == [["a", "b"]]
    finally:
        os.close(main)


def scripted_read(monkeypatch, reads: list) -> None:
    """``rows._live_read`` gives ``reads`` one by one, and fails if asked past b""."""
    left = iter(reads)

    def live_read(fd):
        def read(n):
            got = next(left)
            assert got is not StopIteration, "read again after the end"
            return got

        return read

    reads.append(StopIteration)
    monkeypatch.setattr(rows, "_live_read", live_read)


def test_live_lines_join_the_pieces_of_a_line_across_reads_and_pauses(monkeypatch):
    scripted_read(monkeypatch, [b'{"a', None, b'": 1', b"}\n", b'{"b"', b": 2}\n{", None,
                                b'"c"', b""])
    with open(os.devnull, "rb") as f:
        got = list(rows._live_lines(f))
    assert got == [rows._PAUSE, b'{"a": 1}\n', b'{"b": 2}\n', rows._PAUSE, b'{"c"']


def test_a_long_line_in_many_reads_costs_no_more_than_its_length(monkeypatch):
    """10 MB in 10,000 reads: joined once at its end, not once per read (50 GB copied)."""
    pieces = 10_000
    scripted_read(monkeypatch, [b"x" * 1000] * pieces + [b"\n", b""])
    start = time.process_time()
    with open(os.devnull, "rb") as f:
        got = list(rows._live_lines(f))
    assert time.process_time() - start < 1.0
    assert len(got) == 1 and len(got[0]) == 1000 * pieces + 1


def test_live_lines_of_a_pipe_pause_once_while_it_is_quiet(monkeypatch):
    """Each quiet spell gives one ``_PAUSE``, not one per ``STDIN_IDLE_SECONDS``: after it
    the reader waits for the next bytes as long as they take."""
    monkeypatch.setattr(rows, "STDIN_IDLE_SECONDS", 0.02)
    data = b'{"type": "a"}\n' + b'{"type": "b", "x": "' + b"y" * 200_000 + b'"}\n{"type"'
    r, writer = written(data, [(7, True), (20, True), (70_000, False), (1, True)], 0.5)
    with open(r, "rb") as f:
        got = list(rows._live_lines(f))
    writer.join()
    lines = [raw for raw in got if raw is not rows._PAUSE]
    assert lines == [b'{"type": "a"}\n', data[14:-7], b'{"type"']
    # three spells of 0.5 s (a few more if the writer is held up): about 75 with a timeout
    assert 1 <= got.count(rows._PAUSE) <= 6


def test_live_lines_of_a_terminal_read_its_end_once():
    """Ctrl-D ends the lines; what is typed after it stays unread."""
    pty = pytest.importorskip("pty")
    main, terminal = pty.openpty()
    try:
        os.write(main, b"a\nb\n\x04c\n")
        time.sleep(0.1)  # all of it there before the first read
        with open(terminal, "rb") as f:
            assert list(rows._live_lines(f)) == [b"a\n", b"b\n"]
            assert os.read(terminal, 100) == b"c\n"
    finally:
        os.close(main)


def run_match(*args, stdin) -> subprocess.CompletedProcess:
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "acep.cli",
            "match",
            "-p",
            "late late",
            "-w",
            "2h",
            "-k",
            "1",
            "--partition",
            "origin",
            "--no-progress",
            *args,
        ],
        stdin=stdin,
        capture_output=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": path},
    )


def test_acep_match_on_stdin_prints_what_it_prints_for_the_file(tmp_path):
    sample = files("acep") / "data" / "flights-sample.jsonl.gz"
    path = tmp_path / "flights.jsonl"
    path.write_bytes(gzip.decompress(sample.read_bytes()))
    whole = run_match(str(path), stdin=subprocess.DEVNULL)
    assert whole.returncode == 0 and whole.stdout.count(b"\n") > 10, whole.stderr
    with open(path, "rb") as f:  # stdin a regular file
        assert run_match("-", stdin=f).stdout == whole.stdout
    cat = subprocess.Popen(["cat", str(path)], stdout=subprocess.PIPE)  # stdin a pipe
    try:
        piped = run_match("-", stdin=cat.stdout)
    finally:
        cat.stdout.close()
        cat.wait()
    assert piped.returncode == 0 and piped.stdout == whole.stdout
    assert json.loads(whole.stdout.splitlines()[0])["events"]
