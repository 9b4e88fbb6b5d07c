"""examples/systemd: the units' command lines are ones ``acep agent``, ``acep serve`` and
``acep train`` accept (parsed by their real argparse parsers, through ``acep.cli``; nothing
is run), their hardening keeps the files they write writable, and ``systemd-analyze
verify`` accepts them where it is installed."""

from __future__ import annotations

import argparse
import configparser
import datetime as dt
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from acep import cli

UNITS = Path(__file__).resolve().parents[1] / "examples" / "systemd"
PROGS = {"acep agent", "acep serve", "acep train"}


def service(name: str) -> configparser.SectionProxy:
    cp = configparser.ConfigParser(strict=False, interpolation=None)
    cp.optionxform = str
    cp.read_string((UNITS / name).read_text())
    return cp["Service"]


def command(line: str) -> list[str]:
    return shlex.split(line.lstrip("-@:+!"))  # systemd's prefixes: "-" ignores failure


class Parsed(Exception):
    def __init__(self, prog: str, args: argparse.Namespace):
        super().__init__(prog)
        self.prog, self.ns = prog, args


def parse(argv: list[str], monkeypatch) -> Parsed:
    """``argv`` through ``acep.cli.main`` up to the subcommand's own parser, stopped there."""
    original = argparse.ArgumentParser.parse_args

    def stop_after(self, args=None, namespace=None):
        ns = original(self, args, namespace)
        if self.prog in PROGS:
            raise Parsed(self.prog, ns)
        return ns

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", stop_after)
    with pytest.raises(Parsed) as got:
        cli.main(argv)
    return got.value


def test_the_agent_unit_runs_check_then_the_agent(monkeypatch):
    s = service("acep-agent.service")
    pre, start = command(s["ExecStartPre"]), command(s["ExecStart"])
    assert Path(pre[0]).name == Path(start[0]).name == "acep"
    check = parse(pre[1:], monkeypatch)
    assert check.prog == "acep agent" and check.ns.check
    run = parse(start[1:], monkeypatch)
    assert run.prog == "acep agent" and not run.ns.check and not run.ns.once
    assert check.ns.config == run.ns.config
    assert (s["Type"], s["Restart"], s["KillSignal"]) == ("simple", "on-failure", "SIGTERM")
    assert s["User"] and s["User"] != "root" and s["NoNewPrivileges"] == "yes"
    state = f"/var/lib/{s['StateDirectory']}"
    assert s["ProtectSystem"] == "strict" and state in s["ReadWritePaths"].split()
    assert s["MemoryMax"].endswith("M") and int(s["MemoryMax"][:-1]) <= 512


def test_the_collector_unit_serves_from_its_state_directory(monkeypatch):
    s = service("acep-collector.service")
    start = command(s["ExecStart"])
    assert Path(start[0]).name == "acep"
    run = parse(start[1:], monkeypatch)
    assert run.prog == "acep serve"
    assert not any((run.ns.add_device, run.ns.add_admin, run.ns.revoke_device,
                    run.ns.list_devices, run.ns.prune_before))
    state = f"/var/lib/{s['StateDirectory']}"
    assert run.ns.db.startswith(state + "/") and run.ns.archive.startswith(state + "/")
    assert s["ProtectSystem"] == "strict" and state in s["ReadWritePaths"].split()
    assert (s["Type"], s["Restart"], s["KillSignal"]) == ("simple", "on-failure", "SIGTERM")
    assert s["User"] and s["User"] != "root" and s["NoNewPrivileges"] == "yes"
    train = parse(command(service("acep-train.service")["ExecStart"])[1:], monkeypatch)
    assert run.ns.retain_days >= int(train.ns.since.removesuffix("d"))  # it keeps what
    # the retraining reads
    assert train.ns.when_finds_drop == run.ns.db  # the finds the collector records
    assert run.ns.compact


def test_the_trainer_unit_retrains_on_the_last_weeks_and_publishes(monkeypatch):
    from trainer.cli import _check
    from trainer.sources import archive_days

    s = service("acep-train.service")
    run = parse(command(s["ExecStart"])[1:], monkeypatch)
    assert run.prog == "acep train" and run.ns.archive and run.ns.pattern_id
    monkeypatch.undo()
    assert run.ns.ca_file.startswith("/etc/acep/")  # there on the host, not here:
    _check(argparse.Namespace(**{**vars(run.ns), "ca_file": None}))  # the job's other checks
    state = f"/var/lib/{s['StateDirectory']}"
    assert run.ns.archive.startswith(state + "/") and run.ns.sketch.startswith(state + "/")
    assert run.ns.publish.startswith("https://") and run.ns.ca_file.endswith(".pem")
    today = dt.date(2026, 11, 22)
    assert archive_days(run.ns.archive, run.ns.since, None, today) == ("2026-10-25", None)
    assert s["User"] == service("acep-collector.service")["User"]
    assert s["Type"] == "oneshot" and state in s["ReadWritePaths"].split()
    timer = configparser.ConfigParser(strict=False, interpolation=None)
    timer.read_string((UNITS / "acep-train.timer").read_text())
    assert timer["Timer"]["OnCalendar"] and timer["Timer"]["Persistent"] == "true"


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze")
def test_systemd_analyze_verify_accepts_the_units(tmp_path):
    """With /opt/acep/bin/acep standing for an executable that exists here (verify checks
    that ExecStart's program does)."""
    fake = tmp_path / "acep"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    names = ["acep-agent.service", "acep-collector.service", "acep-train.service"]
    for name in names:
        text = (UNITS / name).read_text()
        assert "/opt/acep/bin/acep " in text
        (tmp_path / name).write_text(text.replace("/opt/acep/bin/acep ", f"{fake} "))
    (tmp_path / "acep-train.timer").write_text((UNITS / "acep-train.timer").read_text())
    names.append("acep-train.timer")
    out = subprocess.run(["systemd-analyze", "verify", *names], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and not out.stderr.strip(), out.stdout + out.stderr
