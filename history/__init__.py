"""History graph, sketch and shedding policies (docs/SHEDDING.md section 6; [L16] 3.2).

- :class:`HistoryGraph` (:mod:`history.graph`): [L16] Definition 4 over discretised match
  vectors, built from a traced unconstrained run (:func:`build_history`), merged, saved.
- :class:`Sketch` (:mod:`history.sketch`): the fixed-size, signed form a device reads.
- :mod:`history.policies`: :class:`HistoryPolicy` and the baselines, the field's shedders
  pSPICE and hSPICE among them (:mod:`history.spice`).
- :func:`fit_budgets` (:mod:`history.fit`): the sketch's reserves fitted to budgets by
  replaying the training stream (a trainer's job).
- :class:`FindsDrop` (:mod:`history.drift`): when a device's falling finds call for a
  retrain.

``history.sketch`` and ``history.policies`` need only numpy, msgpack and ``acep``.
"""

from __future__ import annotations

import importlib

# imported on first use: ``acep match`` registers ``acep history`` (history.cli) without
# loading the policies and the fit (0.07 s of CPU at every start of the command line)
_HOME = {
    "build_history": "build", "fit_budgets": "fit", "FindsDrop": "drift",
    "HistoryFormatError": "graph",
    "HistoryGraph": "graph", "CompletionPolicy": "policies", "EventSampler": "policies",
    "HindsightPolicy": "policies", "HistoryPolicy": "policies", "HSpicePolicy": "policies",
    "HybridPolicy": "policies", "PSpicePolicy": "policies", "sample_events": "policies",
    "Sketch": "sketch", "SketchError": "sketch",
}

__all__ = ["HistoryGraph", "HistoryFormatError", "Sketch", "SketchError", "build_history",
           "HistoryPolicy", "CompletionPolicy", "PSpicePolicy", "HSpicePolicy",
           "HybridPolicy", "HindsightPolicy", "EventSampler", "sample_events", "fit_budgets",
           "FindsDrop"]


def __getattr__(name: str):
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'history' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{home}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
