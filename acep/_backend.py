"""Choose the matcher kernel: the compiled one when built, else the pure-Python one.

Both come from the one source file ``_kernel.py`` (Cython pure-Python mode). The pure
one can be forced with ``ACEP_KERNEL=python`` or ``Matcher(..., backend="python")``.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

_PURE_NAME = "acep._kernel_pure"


class KernelUnavailable(RuntimeError):
    """The compiled kernel was asked for (``backend="compiled"``, ``ACEP_KERNEL=compiled``)
    where it is not built."""


class UnknownKernel(ValueError):
    """``ACEP_KERNEL`` or ``backend`` names no kernel."""


def source_module(path: Path, name: str) -> ModuleType:
    """The Cython pure-Python mode module at ``path`` run as plain Python, as ``name``."""
    module = sys.modules.get(name)
    if module is None:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return module


def pure_kernel() -> ModuleType:
    """The kernel module run as plain Python from its source file."""
    return source_module(Path(__file__).with_name("_kernel.py"), _PURE_NAME)


def kernel(name: str | None = None) -> ModuleType:
    """The kernel module for ``name`` ("compiled", "python", or None for the default)."""
    by_env = not name and bool(os.environ.get("ACEP_KERNEL"))
    name = name or os.environ.get("ACEP_KERNEL") or "auto"
    if name == "python":
        return pure_kernel()
    if name not in ("auto", "compiled"):
        if by_env:
            raise UnknownKernel(f"ACEP_KERNEL={name!r} is not a kernel: set it to compiled or "
                             "python, or unset it")
        raise UnknownKernel(f"unknown backend {name!r}: use 'compiled' or 'python'")
    from . import _kernel

    if name == "compiled" and not is_compiled(_kernel):
        fallback = "ACEP_KERNEL=python" if by_env else "backend='python'"
        raise KernelUnavailable(
            f"{'ACEP_KERNEL=compiled, but ' if by_env else ''}the compiled kernel is not "
            f"built; reinstall with a C compiler and Cython (pip install .), or use {fallback}")
    return _kernel


def is_compiled(module: ModuleType) -> bool:
    return str(getattr(module, "__file__", "")).endswith((".so", ".pyd"))


# Every compiled module setup.py builds: (what it is, its module); each has a fallback.
MODULES = [("kernel", "acep._kernel"), ("exact core", "acep.nfab._core"),
           ("postponing core", "acep.nfab._postpone"),
           ("jsonl reader", "acep.events._jsonl"), ("lines writer", "acep._lines"),
           ("collector listing", "edge.collector._listing")]


def modules() -> list[tuple[str, str, bool]]:
    """Each compiled module setup.py builds: (what it is, its name, whether it is compiled
    here); a module that does not import (built without a compiler) is not."""
    out = []
    for what, name in MODULES:
        try:
            compiled = is_compiled(importlib.import_module(name))
        except ImportError:
            compiled = False
        out.append((what, name, compiled))
    return out
