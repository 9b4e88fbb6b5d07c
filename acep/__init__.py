"""acep: best-effort approximate complex-event matching for small devices.

The public API: :class:`Matcher` (streaming ACEP matcher over event batches),
:class:`Pattern`, :func:`match`, :func:`bundles`, the event readers in :mod:`acep.events`,
and :func:`backend` to tell whether the compiled kernel is running.
"""

from . import _backend
from .events import Event, EventBatch, EventError, EventSpec, read_events
from .matcher import (
    Bundle,
    Match,
    MatchBatch,
    Matcher,
    Pattern,
    best_per_point,
    bundles,
    bundles_table,
    match,
)
from .pattern import PatternError

__version__ = "0.1.0"

__all__ = [
    "backend", "Matcher", "Pattern", "Match", "MatchBatch", "Bundle", "bundles",
    "bundles_table", "best_per_point", "match", "Event", "EventBatch", "EventError", "EventSpec",
    "read_events", "PatternError",
]


def backend() -> str:
    """``"compiled"`` when the Cython kernel runs, ``"python"`` for the pure-Python fallback."""
    return "compiled" if _backend.is_compiled(_backend.kernel()) else "python"
