"""The SASE+ query language of the exact engine (``docs/EXACT.md``, section 2).

:func:`parse_query` reads a query into :class:`acep.nfab.ast.Query`, :func:`load_query` a
query file; every syntax error and broken static rule is a :class:`QueryError` naming the
clause and the position. :func:`format_expr` and :func:`format_query` print the AST back.
The tokens are in :mod:`.lexer`, the expression grammar in :mod:`.expressions`, the clauses
in :mod:`.parser`, the static rules in :mod:`.rules` and the printing in :mod:`.printing`.
"""

from .lexer import QueryError
from .lexer import _tokenize as _tokenize  # the tests read the tokens
from .parser import load_query, parse_query
from .printing import format_expr, format_query

__all__ = ["QueryError", "parse_query", "load_query", "format_expr", "format_query"]
