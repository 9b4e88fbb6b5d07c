"""The exact SASE+ engine (NFA^b) of the server: query language and engine.

The contract is ``docs/EXACT.md``. Built: the parsed form (:mod:`acep.nfab.ast`), the query
parser (:mod:`acep.nfab.query`), NFA^b compilation (:mod:`acep.nfab.compile`), the basic run
algorithm (:mod:`acep.nfab.runs`, the naive baseline), the shared-buffer runtime
(:mod:`acep.nfab.shared`, with generated edge formulas from :mod:`acep.nfab.codegen`), the
postponing engine (:mod:`acep.nfab.postpone`) and the public API over them
(:mod:`acep.nfab.engine`)::

    from acep.nfab import Engine, match
    match(query_text, events)                    # list[ExactMatch], canonical order
    Engine(query, output="compact").run(events)  # list of compact records
    eng = Engine(query); eng.push(part1); eng.push(part2); eng.flush()   # streaming
"""

from .ast import Query
from .engine import ENGINES, OUTPUTS, BufferGroup, Engine, MatchGroup, group_by_end, match
from .query import QueryError, load_query, parse_query
from .runs import ExactLimitError, ExactMatch

__all__ = ["Engine", "MatchGroup", "BufferGroup", "ExactMatch", "ExactLimitError", "match",
           "group_by_end", "ENGINES", "OUTPUTS", "Query", "QueryError", "parse_query",
           "load_query"]
