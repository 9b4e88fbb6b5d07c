"""What ``pip install .`` installs: every package of the source tree (a benchmark the READMEs
name is importable from a wheel), and the extras what they run needs."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _packages(root: Path) -> set[str]:
    """Every folder of Python modules under ``root`` (a package), as a dotted name."""
    return {".".join(d.relative_to(ROOT).parts) for d in [root, *root.rglob("*")]
            if d.is_dir() and d.name != "__pycache__" and any(d.glob("*.py"))}


def _project() -> dict:
    tomllib = pytest.importorskip("tomllib")
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_pip_install_installs_every_package():
    listed = set(_project()["tool"]["setuptools"]["packages"])
    for top in ("acep", "history", "edge", "trainer", "bench"):
        assert _packages(ROOT / top) <= listed, top
    benches = {f"bench.{d.parent.name}" for d in (ROOT / "bench").glob("*/__main__.py")}
    assert len(benches) >= 7 and benches <= listed


def test_the_bench_extra_has_what_the_benchmarks_start():
    extras = _project()["project"]["optional-dependencies"]
    assert set(extras["server"]) <= set(extras["bench"])  # edge, herd, archive run a collector


def test_the_license_the_package_declares_ships_with_it():
    """Apache-2.0 asks that its text goes with every copy: the wheel's License-File."""
    project = _project()["project"]
    assert project["license"] == "Apache-2.0" and project["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License\n                           Version 2.0, January 2004" in text
    assert text.rstrip().endswith("limitations under the License.")
