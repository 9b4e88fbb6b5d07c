"""The ``acep`` command as a user runs it: ``python -m acep.cli`` in a process of its own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "data" / "flights-2000.parquet"


def run_acep(*args, stdin: str | None = None, env: dict | None = None, timeout: float = 120,
             **run) -> subprocess.CompletedProcess:
    """Run ``acep ARGS`` from this checkout and return its exit code and text output.

    ``stdin`` is written to its standard input; ``env`` adds variables to this process's
    environment (a value of None removes one); ``run`` are more arguments of
    :func:`subprocess.run` (``cwd``...). PYTHONPATH starts with the checkout, so the command
    runs this copy even where the installed package points at another one.
    """
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    merged = {**os.environ, "PYTHONPATH": path, **(env or {})}
    return subprocess.run([sys.executable, "-m", "acep.cli", *map(str, args)],
                          capture_output=True, text=True, input=stdin, timeout=timeout,
                          env={k: v for k, v in merged.items() if v is not None}, **run)


_NO_CYTHON = """\
import sys
class NoCython:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("cython", "Cython"):
            raise ImportError("no Cython on this device")
sys.meta_path.insert(0, NoCython())
"""


def run_without_cython(code: str, env: dict | None = None,
                       timeout: float = 120) -> subprocess.CompletedProcess:
    """Run Python ``code`` from this checkout as on a device where Cython cannot be imported."""
    merged = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run([sys.executable, "-c", _NO_CYTHON + code], capture_output=True,
                          text=True, env=merged, timeout=timeout)
