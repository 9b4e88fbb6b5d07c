"""Build the compiled matcher kernel; fall back to pure Python where it cannot be built.

`acep/_kernel.py` is written in Cython's pure-Python mode: the same file is the
compiled engine (when Cython and a C compiler are available) and the pure-Python
fallback (otherwise). `acep.backend()` reports which one is running.
"""

import os
import sys

from setuptools import setup
from setuptools.command.build_ext import build_ext


class OptionalBuildExt(build_ext):
    """Build extensions, but never fail the install: the pure-Python kernel remains."""

    def run(self):
        try:
            super().run()
        except Exception as exc:  # noqa: BLE001 - any build failure means "use fallback"
            self._warn(exc)

    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except Exception as exc:  # noqa: BLE001
            self._warn(exc)

    @staticmethod
    def _warn(exc):
        print(f"WARNING: compiled kernel not built ({exc}); using the pure-Python one",
              file=sys.stderr)


def extensions():
    if os.environ.get("ACEP_PURE_PYTHON"):
        return []
    try:
        from Cython.Build import cythonize
    except ImportError:
        print("WARNING: Cython not available; using the pure-Python kernel", file=sys.stderr)
        return []
    return cythonize(
        ["acep/_kernel.py", "acep/_lines.pyx", "acep/nfab/_core.py", "acep/nfab/_postpone.py",
         "acep/events/_jsonl.pyx", "edge/collector/_listing.pyx"],
        compiler_directives={"language_level": 3, "boundscheck": False,
                             "wraparound": False, "cdivision": True,
                             "initializedcheck": False},
        quiet=True,
    )


setup(ext_modules=extensions(), cmdclass={"build_ext": OptionalBuildExt})
