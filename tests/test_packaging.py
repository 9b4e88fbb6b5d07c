"""What ``pip install .`` installs: ``acep``, ``history``, ``edge`` and ``trainer`` with every
subpackage, not ``bench`` or ``tests`` (they run from a clone), and the extras what they run
needs."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
INSTALLED = ("acep", "history", "edge", "trainer")


def _packages(root: Path) -> set[str]:
    """Every folder of Python modules under ``root`` (a package), as a dotted name."""
    return {".".join(d.relative_to(ROOT).parts) for d in [root, *root.rglob("*")]
            if d.is_dir() and d.name != "__pycache__" and any(d.glob("*.py"))}


def _project() -> dict:
    tomllib = pytest.importorskip("tomllib")
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _wheel_packages() -> list[str]:
    """The packages a build of pyproject.toml puts in the wheel, found as setuptools finds them
    (``packages.find`` in pyproject.toml finds namespace packages too, such as ``acep.data``)."""
    setuptools = pytest.importorskip("setuptools")
    find = _project()["tool"]["setuptools"]["packages"]["find"]
    return setuptools.find_namespace_packages(str(ROOT), include=find["include"],
                                              exclude=find.get("exclude", ()))


def test_pip_install_installs_the_four_packages_and_no_bench_or_tests():
    wheel = _wheel_packages()
    for top in INSTALLED:
        assert _packages(ROOT / top) <= set(wheel), top
    assert "acep.data" in wheel  # no module: the embedded flights (package-data)
    assert not [p for p in wheel if p.split(".")[0] not in INSTALLED], wheel


def test_the_benchmarks_the_docs_name_run_from_a_clone():
    """``python -m bench.NAME`` in a README or CONTRIBUTING.md names a benchmark of the
    source tree, and one starts from the clone's root."""
    named = set()
    for doc in [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *ROOT.glob("bench/*/README.md")]:
        named |= set(re.findall(r"python -m bench\.(\w+)", doc.read_text()))
    assert len(named) >= 7
    for name in named:
        assert (ROOT / "bench" / name / "__main__.py").is_file(), name
    done = subprocess.run([sys.executable, "-m", "bench.engine", "--help"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "usage:" in done.stdout, done.stderr


# standard-library modules added after Python 3.9, by the version that added them: an
# install on an older Python gets the package and then an ImportError where it imports one
NEWER_STDLIB = {"tomllib": (3, 11), "zoneinfo": (3, 9), "graphlib": (3, 9)}


def _imported_modules() -> set[str]:
    """The top-level modules the installed packages import (absolute imports)."""
    names = set()
    for top in INSTALLED:
        for path in (ROOT / top).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    names |= {alias.name.split(".")[0] for alias in node.names}
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names.add(node.module.split(".")[0])
    return names


def test_requires_python_admits_no_python_that_lacks_a_module_the_package_imports():
    """The agent reads agent.toml, and every command a TOML spec, with tomllib: on a Python
    without it pip must refuse the install, not leave an agent that stops with a
    traceback at its start."""
    spec = _project()["project"]["requires-python"]
    floor = tuple(int(x) for x in re.fullmatch(r">=\s*(\d+)\.(\d+)", spec).groups())
    needed = {name: version for name, version in NEWER_STDLIB.items()
              if name in _imported_modules()}
    assert "tomllib" in needed
    assert all(floor >= version for version in needed.values()), (spec, needed)


def test_the_bench_extra_has_what_the_benchmarks_start():
    extras = _project()["project"]["optional-dependencies"]
    assert set(extras["server"]) <= set(extras["bench"])  # edge, herd, archive run a collector
    # bench.shedding solves the bucket's programme with scipy; so does its test
    assert any(d.startswith("scipy") for d in extras["bench"])
    assert any(d.startswith("scipy") for d in extras["test"])


def test_the_license_the_package_declares_ships_with_it():
    """Apache-2.0 asks that its text goes with every copy: the wheel's License-File."""
    project = _project()["project"]
    assert project["license"] == "Apache-2.0" and project["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License\n                           Version 2.0, January 2004" in text
    assert text.rstrip().endswith("limitations under the License.")
