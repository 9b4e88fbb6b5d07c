"""Local files written whole or not at all (``acep.storage.durably``): the archive's batch
and compacted files, the mirror's local copies, history and sketch files, the agent's
learned sketch. A reader, or the next start after a kill, finds the old file or the new one,
never a part of either."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from acep import storage


def _hidden(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def test_a_file_is_replaced_whole_and_a_failed_write_leaves_the_old_one(tmp_path):
    path = tmp_path / "h.history"
    assert storage.write_durably(path, b"old" * 1000) == 3000
    with pytest.raises(RuntimeError, match="disk gone"):
        with storage.durably(path) as tmp, open(tmp, "wb") as f:
            f.write(b"new, half")
            raise RuntimeError("disk gone")
    assert path.read_bytes() == b"old" * 1000 and _hidden(tmp_path) == []
    assert storage.write_durably(str(path), b"new") == 3
    assert path.read_bytes() == b"new" and _hidden(tmp_path) == []


def test_a_writer_killed_midway_leaves_the_old_file_and_a_hidden_temporary(tmp_path):
    path = tmp_path / "fleet.sketch"
    path.write_bytes(b"the old sketch")
    code = ("import sys, time\nfrom acep import storage\n"
            "with storage.durably(sys.argv[1]) as tmp, open(tmp, 'wb') as f:\n"
            "    f.write(b'x' * 65536); f.flush(); print('writing', flush=True); time.sleep(60)\n")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}
    proc = subprocess.Popen([sys.executable, "-c", code, str(path)], stdout=subprocess.PIPE,
                            env=env)
    try:
        assert proc.stdout.readline() == b"writing\n"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert path.read_bytes() == b"the old sketch"
    left = _hidden(tmp_path)
    assert len(left) == 1 and left[0].startswith(".fleet.sketch.") and left[0].endswith(".tmp")


def test_threads_writing_one_file_leave_one_whole_version(tmp_path):
    path = tmp_path / "learned.sketch"
    versions = [bytes([65 + i]) * (1 << 18) for i in range(4)]
    errors = []

    def write(data: bytes) -> None:
        try:
            for _ in range(20):
                storage.write_durably(path, data)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(v,)) for v in versions]
    for t in threads:
        t.start()
    seen = set()
    while any(t.is_alive() for t in threads):
        if path.exists():
            seen.add(path.read_bytes())
        time.sleep(0.001)
    assert errors == []
    assert path.read_bytes() in versions and seen <= set(versions) and seen
    assert _hidden(tmp_path) == []


def test_history_and_sketch_files_are_saved_through_it(tmp_path, monkeypatch):
    from acep.events import read_all
    from history.build import build_history
    from history.sketch import Sketch

    rows = [{"type": "ab"[i % 2], "t": float(i)} for i in range(40)]
    (tmp_path / "e.jsonl").write_text("\n".join(map(json.dumps, rows)) + "\n")
    graph = build_history("a b", read_all(tmp_path / "e.jsonl"), 4.0, 0)
    written, real = [], storage.durably
    monkeypatch.setattr(storage, "durably",
                        lambda path: (written.append(Path(path).name), real(path))[1])
    assert graph.save(tmp_path / "h.history") == (tmp_path / "h.history").stat().st_size
    assert Sketch.from_graph(graph).save(tmp_path / "s.sketch", b"k" * 32) == \
        (tmp_path / "s.sketch").stat().st_size
    assert written == ["h.history", "s.sketch"] and _hidden(tmp_path) == []
