"""Postponing with early filters, for skip_till_any_match (``docs/EXACT.md`` sections 7-8,
[Z14] §5.1-5.2).

One main run per start event collects candidate lists; early filters (:mod:`.filters`)
drop roles or prove conjuncts true as events arrive, and a search over the lists
(:mod:`.search`) builds the matches at each end event. :func:`match_postponed`
(:mod:`.engine`) returns them in canonical order (``output="verbose"``) or as
:class:`CollapsedMatch` records (``"compact"``, :mod:`.compact`). The filters never change
the output: ``early_filters=False`` gives the same list.
"""

from .compact import CollapsedMatch
from .engine import PostponeStats, match_postponed
from .filters import BEGIN, CLOSE, TAKE, conjunct_classes
from .search import Candidate

__all__ = ["match_postponed", "CollapsedMatch", "Candidate", "PostponeStats",
           "conjunct_classes", "BEGIN", "TAKE", "CLOSE"]
