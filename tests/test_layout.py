"""The codebase's layout rules (CONTRIBUTING.md): short modules, no private names across
packages, and no test file importing another."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("acep", "history", "edge", "trainer", "bench")
MAX_LINES = 800
# Cython's pure-Python mode keeps the matcher kernel in one file: it is compiled as one unit.
EXEMPT = {"acep/_kernel.py"}


def _modules():
    for top in PACKAGES:
        yield from sorted((ROOT / top).rglob("*.py"))
        yield from sorted((ROOT / top).rglob("*.pyx"))


def test_no_module_is_longer_than_800_lines():
    long = {str(p.relative_to(ROOT)): n for p in _modules()
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert {k: v for k, v in long.items() if k not in EXEMPT} == {}


def _private_imports(path: Path) -> list[str]:
    own = path.relative_to(ROOT).parts[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.ImportFrom) or node.level or not node.module:
            continue
        parts = node.module.split(".")
        if parts[0] == own or parts[0] not in PACKAGES:
            continue
        names = [a.name for a in node.names]
        if any(p.startswith("_") for p in parts) or any(
                n.startswith("_") and n != "__version__" for n in names):
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}: from {node.module} "
                         f"import {', '.join(names)}")
    return found


def test_no_private_name_is_imported_from_another_package():
    assert [line for path in _modules() if path.suffix == ".py"
            for line in _private_imports(path)] == []


def test_no_test_file_imports_another():
    imports = re.compile(r"^\s*(?:from|import) (test_\w+)", re.M)
    found = {p.name: imports.findall(p.read_text()) for p in (ROOT / "tests").rglob("*.py")}
    assert {k: v for k, v in found.items() if v} == {}
