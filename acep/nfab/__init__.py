"""The exact SASE+ engine (NFA^b) of the server: query language and, to come, the engine.

The contract is ``docs/EXACT.md``. Built so far: the parsed form (:mod:`acep.nfab.ast`)
and the query parser (:mod:`acep.nfab.query`).
"""
