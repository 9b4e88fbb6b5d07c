"""Helpers that the project's packages share: input limits, checks, messages, HTTPS.

``edge``, ``history`` and ``trainer`` import these names from here, never from the private
modules of :mod:`acep` that hold them.
"""

from . import _bounds as bounds
from . import _checks as checks
from ._bounds import json_problem
from ._bundles import bundle_runs
from ._checks import ParameterError
from ._https import HTTPSWithin, HTTPSWithinHandler
from ._jsonread import loads as json_loads
from ._readable import live_descriptor, readable
from ._signals import Terminated, terminate_on_sigterm
from ._text import counted, one_line
from .events import lines as json_lines

__all__ = [
    "bounds", "bundle_runs", "checks", "json_problem", "ParameterError", "HTTPSWithin",
    "HTTPSWithinHandler", "json_loads", "live_descriptor", "readable", "Terminated",
    "terminate_on_sigterm", "one_line", "counted", "json_lines",
]
