"""README.md's "Run a collector and an agent on one machine" runs as written: its bash block
(the fenced block after the ``<!-- walkthrough`` marker) is extracted and run in a temporary
directory with the installed ``acep`` command, the real collector and the real agent. The one
change is the port (8750 in the README), replaced by a free one so the test never collides
with a collector already running."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MARKER = "<!-- walkthrough"


def walkthrough() -> str:
    text = (ROOT / "README.md").read_text()
    assert MARKER in text, "README.md lost its walkthrough marker"
    after = text[text.index(MARKER):]
    m = re.search(r"```bash\n(.*?)\n```\n", after, re.S)
    assert m, "no ```bash block after the walkthrough marker"
    return m.group(1) + "\n"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_walkthrough_block_is_extracted():
    script = walkthrough()
    for needle in ("acep serve --db collector.db --add-device", "acep agent --config",
                   "8750", "kill $AGENT $COLLECTOR"):
        assert needle in script


def test_readme_walkthrough_runs_as_written(tmp_path):
    pytest.importorskip("aiohttp")
    bindir = Path(sys.executable).parent
    if not (bindir / "acep").exists() and shutil.which("acep") is None:
        pytest.skip("the acep command is not installed (pip install -e '.[test,server]')")
    script = walkthrough()
    port = free_port()
    (tmp_path / "walkthrough.sh").write_text(script.replace("8750", str(port)))
    env = {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}"}
    proc = subprocess.Popen(["bash", "-e", "walkthrough.sh"], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the script and the servers it started
        out, err = proc.communicate()
        pytest.fail(f"the walkthrough hung\n{out}\n{err}")
    demo = tmp_path / "demo"
    logs = "".join(f"\n--- {p.name}\n{p.read_text()}" for p in demo.glob("*.log"))
    assert proc.returncode == 0, f"{out}\n{err}{logs}"

    lines = out.splitlines()
    metrics = json.loads(lines[0])
    assert metrics["matches_stored"] == 5 and metrics["exact_matches"] == 1
    rows = [x for x in lines if x.startswith("('pi-01'")]
    assert len(rows) == 5, out
    # the example row the README quotes
    assert "('pi-01', '\"x\"', 3.0, 0, '[0,1,3]', 1)" in rows
    assert any(x.startswith("archive/date=") and x.endswith(".parquet") for x in lines)
    final = json.loads(lines[-1])  # the agent's last metrics line, written on SIGTERM
    assert final["events_in"] == 11 and final["outbox_pending"] == 0
    assert final["batches_sent"] == final["batches_put"] >= 1
    assert "stopped" in (demo / "collector.log").read_text()  # a clean SIGTERM exit
