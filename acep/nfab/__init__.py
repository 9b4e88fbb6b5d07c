"""The exact SASE+ engine (NFA^b) of the server: query language and engine.

The contract is ``docs/EXACT.md``. Built so far: the parsed form (:mod:`acep.nfab.ast`), the
query parser (:mod:`acep.nfab.query`), the basic run algorithm (:mod:`acep.nfab.runs`) and
the public API over it (:mod:`acep.nfab.engine`)::

    from acep.nfab import Engine, match
    match(query_text, events)                    # list[ExactMatch], canonical order
    Engine(query, output="compact").run(events)  # list[MatchGroup]
"""

from .ast import Query
from .engine import ENGINES, OUTPUTS, Engine, MatchGroup, group_by_end, match
from .query import QueryError, load_query, parse_query
from .runs import ExactMatch

__all__ = ["Engine", "MatchGroup", "ExactMatch", "match", "group_by_end", "ENGINES", "OUTPUTS",
           "Query", "QueryError", "parse_query", "load_query"]
