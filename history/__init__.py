"""History graph, sketch and shedding policies (docs/SHEDDING.md section 6; [L16] 3.2).

- :class:`HistoryGraph` (:mod:`history.graph`): [L16] Definition 4 over discretised match
  vectors, built from a traced unconstrained run (:func:`build_history`), merged, saved.
- :class:`Sketch` (:mod:`history.sketch`): the fixed-size, signed form a device reads.
- :mod:`history.policies`: :class:`HistoryPolicy` and the baselines, the field's shedders
  pSPICE and hSPICE among them (:mod:`history.spice`).
- :func:`fit_budgets` (:mod:`history.fit`): the sketch's reserves fitted to budgets by
  replaying the training stream (a trainer's job).

``history.sketch`` and ``history.policies`` need only numpy, msgpack and ``acep``.
"""

from .build import build_history
from .fit import fit_budgets
from .graph import HistoryFormatError, HistoryGraph
from .policies import (
    CompletionPolicy,
    EventSampler,
    HindsightPolicy,
    HistoryPolicy,
    HSpicePolicy,
    HybridPolicy,
    PSpicePolicy,
    sample_events,
)
from .sketch import Sketch, SketchError

__all__ = ["HistoryGraph", "HistoryFormatError", "Sketch", "SketchError", "build_history",
           "HistoryPolicy", "CompletionPolicy", "PSpicePolicy", "HSpicePolicy",
           "HybridPolicy", "HindsightPolicy", "EventSampler", "sample_events", "fit_budgets"]
