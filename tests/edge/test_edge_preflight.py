"""``acep agent --config agent.toml --check`` (edge/agent/preflight.py) on real files and the real
collector (``python -m edge.collector``) on loopback: a good setup passes every check; a
missing source directory, a tampered sketch, a sketch for another pattern, a revoked or
wrong token and a collector that is down each fail by name; a config error exits 2; and the
checks write nothing (no outbox created, an existing one read without a -wal or -shm file
appearing, nothing else touched)."""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from support.cli import run_acep
from support.collector import DEVICE, ROOT, SKETCH_KEY, CollectorProcess, publish, serving
from support.e2e import bound_by_modes, sketch_bytes, write_config
from support.sketches import key_fingerprint

from edge.agent import main as agent_main
from edge.agent import preflight
from edge.agent.outbox import Outbox
from edge.agent.outbox_reader import read_summary


@pytest.fixture(scope="module")
def collector(tmp_path_factory):
    c = CollectorProcess(tmp_path_factory.mktemp("collector"))
    c.token = c.add(DEVICE)
    c.admin = c.add("ops", "--add-admin")
    c.revoked = c.add("pi-lost")
    c.add("pi-lost", "--revoke-device")
    c.start()
    yield c
    c.kill()


def snapshot(d: Path) -> dict:
    """Every file under ``d`` with its size, mode and modification time."""
    out = {}
    for root, dirs, files in os.walk(d):
        for name in dirs + files:
            st = os.stat(os.path.join(root, name))
            out[os.path.relpath(os.path.join(root, name), d)] = (st.st_size, st.st_mode,
                                                                st.st_mtime_ns)
    return out


def run_check(cfg: Path, capsys) -> tuple[int, list[str]]:
    code = agent_main(["--config", str(cfg), "--check"])
    return code, capsys.readouterr().out.splitlines()


def levels(lines: list[str]) -> dict[str, str]:
    """The first word of each line by the second (``ok  source /x`` -> source: ok)."""
    return {line.split()[1]: line.split()[0] for line in lines}


def test_a_good_setup_passes_every_check_and_nothing_is_written(tmp_path, collector, capsys):
    d = tmp_path / "dev"
    cfg = write_config(d, collector.url, collector.token)
    before = snapshot(tmp_path)
    code, lines = run_check(cfg, capsys)
    assert code == 0, lines
    assert lines and all(line.startswith("ok  ") for line in lines), lines
    assert [w for w in levels(lines)] == ["config", "pattern", "source", "outbox", "free",
                                          "metrics.path", "sketch.save_path",
                                          "device.token_file", "sketch.key_file",
                                          "collector", "clock", "device", "sketch"]
    text = "\n".join(lines)
    assert "outbox.db (not created yet" in text
    assert f"device token ({DEVICE}) (accepted as '{DEVICE}', role device (GET " \
           "/v1/sketches/abc: 404" in text
    assert f"abc.sketch (signature verified with key {key_fingerprint(SKETCH_KEY)} " \
           "(sketch.key_file), fits pattern abc" in text
    assert snapshot(tmp_path) == before  # no outbox, no metrics, no learned sketch

    assert any(line.startswith(f"ok  free space ({d}) (") and line.endswith(" MiB)")
               for line in lines)
    # an outbox with batches (the agent stopped: no -wal file) is read, not written
    with Outbox(d / "outbox.db") as box:
        box.put(b"x" * 10, "pi-e2e/1", state={"consumed": 42})
        box.put(b"y" * 5, "pi-e2e/2")
    assert not (d / "outbox.db-wal").exists()
    before = snapshot(tmp_path)
    code, lines = run_check(cfg, capsys)
    assert code == 0, lines
    assert f"ok  outbox {d / 'outbox.db'} (2 batches pending (15 bytes), 0 dead letters, " \
           "42 events consumed; checksums verified)" in lines
    assert snapshot(tmp_path) == before

    # the same through the acep command, as the service runs it
    out = run_acep("agent", "--config", cfg, "--check", cwd=ROOT)
    assert out.returncode == 0, out.stdout + out.stderr
    def steady(lines):  # the free space moves with whatever else the machine writes
        return [line for line in lines if " free space (" not in line]
    assert steady(out.stdout.splitlines()) == steady(lines)
    assert snapshot(tmp_path) == before


def test_the_check_examples_readme_shows_is_the_one_such_a_setup_prints(tmp_path, collector,
                                                                       capsys):
    """examples/README.md ("Run as a service") shows --check on a device: a token file, the
    metrics beside the outbox, no [sketch]. Its lines, check by check and in order, are
    those of such a setup against a real collector."""
    text = (ROOT / "examples" / "README.md").read_text()
    block = re.search(r"```console\n\$ sudo -u acep \S+ agent --config \S+ --check\n"
                      r"(.*?)```", text, re.S).group(1)
    shown = [tuple(line.split()[:2]) for line in block.splitlines()]
    cfg = write_config(tmp_path / "dev", collector.url, collector.token, sketch=None)
    code, lines = run_check(cfg, capsys)
    assert code == 0, lines
    assert [tuple(line.split()[:2]) for line in lines] == shown, lines


def test_an_outbox_open_in_a_running_agent_is_read_beside_it(tmp_path):
    with Outbox(tmp_path / "outbox.db") as box:
        box.put(b"abc", "d/1", state={"consumed": 7})
        assert (tmp_path / "outbox.db-wal").exists()
        before = sorted(os.listdir(tmp_path))
        s = read_summary(tmp_path / "outbox.db")
        assert (s["pending"], s["pending_bytes"], s["dead"], s["state"]["consumed"]) == \
            (1, 3, 0, 7)
        assert sorted(os.listdir(tmp_path)) == before
        box.put(b"de", "d/2")  # the reader held nothing
    (tmp_path / "other.db").write_bytes(b"SQLite format 3\0" + bytes(100))
    with pytest.raises(sqlite3.DatabaseError):
        read_summary(tmp_path / "other.db")
    sqlite3.connect(tmp_path / "plain.db").execute("CREATE TABLE t (x)").connection.close()
    with pytest.raises(ValueError, match="not an outbox"):
        read_summary(tmp_path / "plain.db")


def test_a_missing_source_directory_fails(tmp_path, collector, capsys):
    cfg = write_config(tmp_path, collector.url, collector.token,
                       source="not-mounted/events.jsonl")
    code, lines = run_check(cfg, capsys)
    assert code == 1
    assert f"FAIL source {tmp_path / 'not-mounted/events.jsonl'}: the directory " \
           f"{tmp_path / 'not-mounted'} does not exist" in lines
    assert levels(lines)["sketch"] == "ok"  # the other checks still run


def test_a_source_file_not_created_yet_is_a_warning(tmp_path, collector, capsys):
    cfg = write_config(tmp_path, collector.url, collector.token, source="later.jsonl")
    code, lines = run_check(cfg, capsys)
    assert code == 0, lines
    assert levels(lines)["source"] == "WARN"
    assert "does not exist yet; the agent waits for it" in "\n".join(lines)


def test_a_tampered_sketch_fails_naming_the_reason(tmp_path, collector, capsys):
    cfg = write_config(tmp_path, collector.url, collector.token)
    data = bytearray((tmp_path / "abc.sketch").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (tmp_path / "abc.sketch").write_bytes(bytes(data))
    code, lines = run_check(cfg, capsys)
    assert code == 1
    fail = [line for line in lines if line.startswith("FAIL")]
    assert fail == [f"FAIL sketch {tmp_path / 'abc.sketch'}: refused: signature check failed: "
                    "the sketch is damaged or was changed after signing (it was signed with "
                    f"this key, {key_fingerprint(SKETCH_KEY)}) (the agent would run "
                    "oldest-first)"], lines


def test_a_sketch_signed_with_another_key_names_both_keys_in_check_and_log(tmp_path,
                                                                          collector):
    """The most common deployment mistake, the wrong key file: ``--check`` and the agent's
    log say the sketch was signed with another key, with both fingerprints, where a damaged
    sketch says damaged (the real commands, on a real sketch file)."""
    from history.sketch import Sketch

    cfg = write_config(tmp_path, collector.url, collector.token)
    trainer_key = b"the trainer's key"
    sketch = Sketch.from_bytes((tmp_path / "abc.sketch").read_bytes(), SKETCH_KEY)
    (tmp_path / "abc.sketch").write_bytes(sketch.to_bytes(trainer_key))
    why = (f"signature check failed: the sketch was signed with another key, "
           f"{key_fingerprint(trainer_key)}; this key is {key_fingerprint(SKETCH_KEY)} "
           "(sketch.key_file)")
    check = run_acep("agent", "--config", cfg, "--check", cwd=ROOT)
    assert check.returncode == 1, check.stdout + check.stderr
    assert [line for line in check.stdout.splitlines() if line.startswith("FAIL")] == [
        f"FAIL sketch {tmp_path / 'abc.sketch'}: refused: {why} (the agent would run "
        "oldest-first)"], check.stdout
    run = run_acep("agent", "--config", cfg, "--once", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert f"ERROR edge.agent: sketch refused: sketch.path {tmp_path / 'abc.sketch'}: " \
           f"{why}; using the fallback policy oldest-first" in run.stderr, run.stderr


def test_a_sketch_written_before_key_fingerprints_passes_saying_so(tmp_path, collector,
                                                                   capsys):
    from support.sketches import old_writer

    from history.sketch import Sketch

    cfg = write_config(tmp_path, collector.url, collector.token)
    path = tmp_path / "abc.sketch"
    path.write_bytes(old_writer(Sketch.from_bytes(path.read_bytes(), SKETCH_KEY), SKETCH_KEY))
    code, lines = run_check(cfg, capsys)
    assert code == 0, lines
    assert f"ok  sketch {path} (signature verified with key {key_fingerprint(SKETCH_KEY)} " \
           "(sketch.key_file; the sketch records no key fingerprint: written before acep " \
           "recorded them, re-sign it to record one), fits pattern abc, " in "\n".join(lines)


def test_a_sketch_for_another_pattern_and_a_missing_one_fail(tmp_path, collector, capsys):
    from history.sketch import Sketch

    cfg = write_config(tmp_path, collector.url, collector.token)
    good = Sketch.from_bytes((tmp_path / "abc.sketch").read_bytes(), SKETCH_KEY)
    other = Sketch(good.pattern, (), good.k, good.window, good.n_states, good.rem_edges,
                   good.gap_edges, good.score, good.minhash, partition_by="id")
    (tmp_path / "abc.sketch").write_bytes(other.to_bytes(SKETCH_KEY))
    code, lines = run_check(cfg, capsys)
    assert code == 1
    assert "refused: it is for pattern 'a b c' (k=1, window=5, where=[]), not 'a b c' (k=1, " \
           "window=5, where=['c.x >= a.x'])" in "\n".join(lines)
    (tmp_path / "abc.sketch").unlink()
    code, lines = run_check(cfg, capsys)
    assert code == 1
    assert f"FAIL sketch {tmp_path / 'abc.sketch'}: no such file" in "\n".join(lines)


def test_a_revoked_or_wrong_token_is_refused(tmp_path, collector, capsys):
    for name, token in (("revoked", collector.revoked), ("wrong", "not-a-token")):
        cfg = write_config(tmp_path / name, collector.url, token)
        code, lines = run_check(cfg, capsys)
        assert code == 1, name
        fail = [line for line in lines if line.startswith("FAIL")]
        assert len(fail) == 1 and fail[0].startswith(
            f"FAIL device token ({DEVICE}): token refused (GET /v1/sketches/abc: HTTP 401 "
            "unknown token)"), (name, lines)
        assert levels(lines)["collector"] == "ok"


def test_another_devices_token_is_accepted_by_the_collector_but_fails_the_check(
        tmp_path, collector, capsys):
    # a token file copied from another device: the collector takes it, then refuses
    # every batch this device uploads under its own id (403)
    other = collector.add("pi-other")
    cfg = write_config(tmp_path, collector.url, other)
    code, lines = run_check(cfg, capsys)
    assert code == 1
    fail = [line for line in lines if line.startswith("FAIL")]
    assert fail == [f"FAIL device token ({DEVICE}): the collector knows this token as "
                    f"'pi-other', not device.id '{DEVICE}': it would refuse every batch "
                    "(HTTP 403); use this device's own token"], lines


def test_a_collector_that_is_down_fails(tmp_path, capsys):
    from support.links import free_port

    url = f"http://127.0.0.1:{free_port()}"
    cfg = write_config(tmp_path, url, "some-token")
    code, lines = run_check(cfg, capsys)
    assert code == 1
    assert f"FAIL collector {url}: not reachable: [Errno 111] Connection refused" in lines
    assert levels(lines)["device"] == "FAIL"


def test_a_collector_that_trickles_its_answer_fails_within_the_check_s_time(tmp_path,
                                                                           capsys):
    """A collector (or what answers at its address) that sends its answer a byte at a
    time: each wait was bounded, not the answer, so ``--check`` (the service's
    ExecStartPre) waited for as long as the answer lasted. Now each answer must come
    whole within the check's timeout (collector.timeout, at most 5 s)."""
    from support.uplink import ANSWER, TRICKLED, trickling

    listener = trickling(ANSWER, TRICKLED["headers"], every=0.3)
    url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    cfg = write_config(tmp_path, url, "some-token")
    cfg.write_text(cfg.read_text().replace("timeout = 5.0", "timeout = 1.0"))
    try:
        start = time.monotonic()
        code, lines = run_check(cfg, capsys)
        took = time.monotonic() - start
    finally:
        listener.close()
    assert code == 1
    assert f"FAIL collector {url}: not reachable: no whole answer within 1 s" in lines, lines
    assert took < 4, took


def test_a_device_clock_the_collector_would_refuse_fails_and_one_off_warns(
        tmp_path, capsys, monkeypatch):
    """Batches are dated by the device's clock: one set too far ahead, or before the first
    day the collector's --retain-days keeps (a Raspberry Pi without a real-time clock says
    1970 until NTP sets it), has every batch refused; a few hours off is a warning."""
    with serving(tmp_path, "--retain-days", "30") as c:
        token = c.token
        cfg = write_config(tmp_path / "dev", c.url, token)
        real = time.time
        for offset, level, words in [
                (0.0, "ok", "within 60 s of the collector's"),
                (-real() + 5.0, "FAIL", "1970-01-01 00:00:0"),
                (-real() + 5.0, "FAIL", " years behind"),
                (-40 * 86400.0, "FAIL", "40.0 days behind the collector's: before "),
                (2 * 86400.0, "FAIL", "2.0 days ahead of the collector's (more than its "
                                      "--max-clock-ahead)"),
                (-3 * 3600.0, "WARN", "3.0 hours behind the collector's: batches are dated")]:
            shifted = SimpleNamespace(time=lambda o=offset: real() + o)  # this device's clock
            monkeypatch.setattr(preflight, "time", shifted)
            code, lines = run_check(cfg, capsys)
            clock = [line for line in lines if line.split()[1].rstrip(":") == "clock"]
            assert len(clock) == 1 and clock[0].startswith(level), "\n".join(lines)
            assert words in clock[0]
            assert code == (1 if level == "FAIL" else 0), lines


def test_a_health_answer_nested_too_deep_says_nothing_of_the_clock():
    """A RecursionError (a traceback from --check) before: it is no ValueError."""
    assert preflight._clock(b"[" * 30000 + b"]" * 30000, time.time()) is None


def test_a_published_sketch_is_downloaded_and_verified_not_kept(tmp_path, collector, capsys):
    publish(collector, collector.admin, sketch_bytes(0.5))
    cfg = write_config(tmp_path, collector.url, collector.token, sketch=None, download=True)
    before = snapshot(tmp_path)
    code, lines = run_check(cfg, capsys)
    assert code == 0, lines
    assert "ok  sketch abc published by the collector (signature verified with key " \
           f"{key_fingerprint(SKETCH_KEY)} (sketch.key_file), fits pattern abc" in "\n".join(lines)
    assert "role device (GET /v1/sketches/abc: 200)" in "\n".join(lines)
    assert snapshot(tmp_path) == before


def test_key_files_every_user_can_read_are_a_warning(tmp_path, capsys):
    cfg = write_config(tmp_path, None, "t")
    os.chmod(tmp_path / "sketch.key", 0o644)
    code, lines = run_check(cfg, capsys)
    assert code == 0, lines
    assert f"WARN sketch.key_file {tmp_path / 'sketch.key'}: every user can read it (mode " \
           f"0644); chmod o-r {tmp_path / 'sketch.key'}" in lines
    assert "collector" not in levels(lines)  # no collector.url: nothing to ask


def test_a_key_file_the_agent_cannot_read_fails_naming_it(tmp_path, collector):
    """A key file whose mode the agent's user does not pass (root, as CI, without its
    capability to read any file): the file and why, and what the agent does about it."""
    cfg = write_config(tmp_path, collector.url, collector.token, sketch=None, download=True)
    os.chmod(tmp_path / "sketch.key", 0o200)
    done = subprocess.run([sys.executable, "-m", "edge.agent", "--config", str(cfg), "--check"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, **bound_by_modes())
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert f"FAIL sketch.key_file {tmp_path / 'sketch.key'}: cannot read the key file " \
           "(Permission denied)" in lines, lines
    assert "FAIL sketch: cannot be verified: sketch.key_file cannot be read (the agent would " \
           "run oldest-first and try again at each sketch check, with backoff, until it can " \
           "be)" in lines, lines


@pytest.mark.parametrize("option", ["sketch.key_file", "sketch.device_key_file"])
def test_the_agent_and_its_check_word_a_bad_key_file_alike(tmp_path, option):
    """Before, ``--check`` said ``cannot read the key file`` and the running agent (its
    log, ``policy_error``, ``sketch_error``) ``cannot read the signing key file``, of one
    file: one function reads it for both now, so a person searching the log for what the
    check said finds it."""
    from edge.agent.config import load_config
    from edge.agent.preflight import checks
    from edge.agent.sketches import KeyFileError, Sketches

    cfg = write_config(tmp_path, None, "t")
    bad = tmp_path / "empty.key"
    bad.write_bytes(b" \n")
    os.chmod(bad, 0o600)
    line = {"sketch.key_file": 'key_file = "empty.key"',
            "sketch.device_key_file": 'key_file = "sketch.key"\ndevice_key_file = "empty.key"'}
    cfg.write_text(cfg.read_text().replace('key_file = "sketch.key"', line[option]))
    cfg = load_config(cfg)
    assert getattr(cfg.sketch, option.split(".")[1]) == str(bad)
    with pytest.raises(KeyFileError) as agent:
        Sketches(cfg, None).keys()
    (check,) = [c for c in checks(cfg) if c.what.startswith(option)]
    assert str(agent.value) == f"{option}: {bad}: the key file is empty"
    assert check.line() == f"FAIL {option} {bad}: the key file is empty"


@pytest.mark.parametrize("content, why", [(b"\n", "the token file is empty"),
                                          (b"\xff\xfe", "the token file is not UTF-8 text")])
def test_a_token_file_the_agent_cannot_use_is_a_config_error_in_those_words(
        tmp_path, capsys, content, why):
    """``device.token_file`` is read with the key files' function, in their words (it said
    ``cannot read PATH: [Errno 13] ...`` and ``PATH is empty``), and one that is not text is
    that line too, not a UnicodeDecodeError's traceback."""
    cfg = write_config(tmp_path, None, "t")
    (tmp_path / "token").write_bytes(content)
    assert agent_main(["--config", str(cfg), "--check"]) == 2
    assert capsys.readouterr().err == (f"acep agent: config error: {cfg}: device.token_file: "
                                       f"{tmp_path / 'token'}: {why}\n")


def test_a_config_error_exits_2_with_the_message(tmp_path, capsys):
    (tmp_path / "agent.toml").write_text('[device]\nid = "pi"\n[pattern]\ntext = "a b"\n')
    assert agent_main(["--config", str(tmp_path / "agent.toml"), "--check"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (f"acep agent: config error: {tmp_path / 'agent.toml'}: "
                            "pattern.window: missing\n")


def test_little_free_space_beside_the_outbox_is_a_warning(tmp_path, monkeypatch):
    import edge.agent.preflight
    from edge.agent.config import load_config
    from edge.agent.preflight import checks

    cfg = load_config(write_config(tmp_path / "dev", None, "t", sketch=None))
    monkeypatch.setattr(edge.agent.preflight, "MIN_FREE", 1 << 60)  # more than any disk here
    (room,) = [c for c in checks(cfg) if c.what.startswith("free space")]
    assert room.level == "WARN" and "the agent holds its input until there is room" in room.why
