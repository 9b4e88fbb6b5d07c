"""tools/arm_check.py's verdict: a release is built from its wheels only when every output is
identical, so one differing byte, a pure-Python kernel or a wrong wheel tag must fail it, and
its roots must stay out of the repository. (The check itself runs under qemu for about 20
minutes, outside the suite: tools/README.md.)"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _tool():
    spec = importlib.util.spec_from_file_location("arm_check", ROOT / "tools" / "arm_check.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["arm_check"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


arm_check = _tool()


def _report(arch: str, digest: str = "ab" * 32, backend: str = "compiled",
            wheel: str = "-") -> arm_check.Report:
    r = arm_check.Report(arch, backend=backend, wheel=wheel)
    r.digests = {name: digest for name in arm_check.COMPARED}
    return r


def test_identical_outputs_pass_and_one_differing_run_fails_naming_it(capsys):
    x86 = _report("x86_64")
    wheel = "acep-0.1.0-cp311-cp311-linux_aarch64.whl"
    assert arm_check.summary(x86, [_report("arm64", wheel=wheel)])
    assert "all identical" in capsys.readouterr().out

    other = _report("armhf", wheel="acep-0.1.0-cp311-cp311-linux_armv7l.whl")
    other.digests["late-bundles"] = "cd" * 32
    assert not arm_check.summary(x86, [_report("arm64", wheel=wheel), other])
    out = capsys.readouterr().out
    assert out.count("DIFFERENT") == 1
    assert [line for line in out.splitlines() if "DIFFERENT" in line][0].split()[:2] == [
        "late-bundles", "armhf"]
    assert "arm-check: FAILED" in out


def test_a_run_missing_on_one_side_is_not_identical(capsys):
    arm = _report("arm64")
    arm.digests = {}
    assert not arm_check.summary(_report("x86_64"), [arm])


def test_a_failed_step_fails_the_check_even_with_identical_outputs(capsys):
    arm = _report("arm64")
    arm.step("acep runs", 0.0, "python", good=False)  # the kernel did not build
    assert not arm_check.summary(_report("x86_64"), [arm])
    assert "arm64: FAILED: acep runs: python" in capsys.readouterr().out


def test_the_roots_are_refused_inside_the_repository(capsys):
    with pytest.raises(SystemExit) as exit_:
        arm_check.parse_args(["--workdir", str(ROOT / "roots")])
    assert exit_.value.code == 2
    assert "inside the repository" in capsys.readouterr().err
    args = arm_check.parse_args(["--arch", "armhf", "--mirror", "http://example.org/debian"])
    assert args.arch == ["armhf"] and args.workdir == arm_check.WORKDIR


def test_each_architecture_gets_its_numpy_and_its_wheel_tag():
    arm64, armhf = arm_check.ARCHES["arm64"], arm_check.ARCHES["armhf"]
    assert "python3-numpy" not in arm64.packages and "python3-numpy" in armhf.packages
    assert (arm64.wheel_tag, armhf.wheel_tag) == ("linux_aarch64", "linux_armv7l")


def _mounted(path: Path) -> bool:
    return any(line.split()[1] == str(path) for line in open("/proc/mounts"))


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting needs root")
def test_removing_an_interrupted_root_unmounts_what_is_mounted_in_it_first(tmp_path):
    """debootstrap's second stage mounts proc in the root: deleting the root without
    unmounting it would walk into the mount."""
    root = tmp_path / "root"
    (root / "proc").mkdir(parents=True)
    (root / "etc").mkdir()
    (root / "etc" / "hostname").write_text("pi\n")
    if subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(root / "proc")]).returncode:
        pytest.skip("this container may not mount")
    (root / "proc" / "kept-by-the-mount").write_text("x")
    arm_check.remove_root(root)
    assert not _mounted(root / "proc") and not root.exists()
    arm_check.remove_root(root)  # a root that is not there: nothing to do


def test_a_module_left_pure_python_fails_the_backend_check():
    listing = ("kernel             compiled  acep._kernel\n"
               "jsonl reader       python    acep.events._jsonl\n"
               "lines writer       compiled  acep._lines\n")
    assert arm_check.backend_of(listing) == "python: acep.events._jsonl"
    assert arm_check.backend_of(listing.replace("python ", "compiled")) == "compiled"
    assert arm_check.backend_of("") != "compiled"
    assert arm_check.AGENT_RUN in arm_check.COMPARED
