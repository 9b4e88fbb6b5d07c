"""The exact SASE+ engine (NFA^b) of the server: query language and engine.

The contract is docs/EXACT.md; its section 8 has the API (:class:`Engine`, :func:`match`).
The modules: the parsed form (:mod:`acep.nfab.ast`), the parser (:mod:`acep.nfab.query`),
compilation (:mod:`acep.nfab.compile`), the run algorithm (:mod:`acep.nfab.runs`), the
shared-buffer runtime (:mod:`acep.nfab.shared`, :mod:`acep.nfab.codegen`), postponing
(:mod:`acep.nfab.postpone`) and the API (:mod:`acep.nfab.engine`).
"""

from .ast import Query
from .engine import ENGINES, OUTPUTS, BufferGroup, Engine, MatchGroup, group_by_end, match
from .query import QueryError, load_query, parse_query
from .runs import ExactLimitError, ExactMatch

__all__ = ["Engine", "MatchGroup", "BufferGroup", "ExactMatch", "ExactLimitError", "match",
           "group_by_end", "ENGINES", "OUTPUTS", "Query", "QueryError", "parse_query",
           "load_query"]
