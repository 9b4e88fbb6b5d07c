"""The query language's tokens (``docs/EXACT.md`` 2.3), its keywords and :class:`QueryError`.

The tokenizer is the query language's own: it adds ``~``, ``%``, ``..`` and ``/* */``
comments to :mod:`acep.pattern`'s, and does not read the dot of ``1..i-1`` as part of the
number.
"""

from __future__ import annotations

import re

from ...pattern import PatternError, Token
from ..ast import Strategy

STRATEGIES = {s.value: s for s in Strategy}
AGGREGATES = ("avg", "sum", "min", "max", "count")
CLAUSES = ("pattern", "where", "within", "return")
KEYWORDS = frozenset((*CLAUSES, "seq", "and", "or", "not", "as", "len", *STRATEGIES,
                      *AGGREGATES))


class QueryError(PatternError):
    """A syntax error or a broken static rule (EXACT.md 2.4) in a query.

    ``message`` starts with the clause (``"WHERE: ..."``), ``clause`` names it alone, ``pos``
    is the offset in the whole text, ``source`` the file name (or None). ``str()`` shows the
    line and column, the offending line and a caret under the position.
    """

    def __init__(self, message: str, text: str, pos: int, clause: str,
                 source: str | None = None):
        full = f"{clause}: {message}"
        super().__init__(full, text, pos, "query")
        self.clause, self.source = clause, source
        line_no, line, column = _locate(text, pos)
        caret = "".join(c if c == "\t" else " " for c in line[:column]) + "^"
        origin = f"{source}: " if source else ""
        ValueError.__init__(self, f"{origin}query error at line {line_no}, column {column + 1} "
                                  f"(position {pos}): {full}\n  {line}\n  {caret}")


def _locate(text: str, pos: int) -> tuple[int, str, int]:
    """1-based line number, the line's text and the 0-based column of ``pos``."""
    start = text.rfind("\n", 0, pos) + 1
    end = text.find("\n", pos)
    line = text[start:None if end < 0 else end].rstrip("\r")
    return text.count("\n", 0, pos) + 1, line, pos - start


_TOKEN = re.compile(
    r"""(?P<ws>\s+|/\*.*?\*/)
      | (?P<open_comment>/\*)
      | (?P<num>\d+\.(?!\.)\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|\d+(?:[eE][-+]?\d+)?)
      | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
      | (?P<str>'[^']*'|"[^"]*")
      | (?P<open_str>['"])
      | (?P<op><=|>=|==|!=|<>|\.\.|[-+*/%()<>{},.\[\]=!~])
    """,
    re.VERBOSE | re.DOTALL,
)

_BAD = {"open_comment": "unterminated comment: '/*' without '*/'",
        "open_str": "unterminated string"}


def _tokenize(text: str) -> list[Token]:
    """Tokens of a query; an unreadable spot becomes one ``bad`` token holding the message,
    raised (with the clause it sits in) when the parser reaches it."""
    tokens, pos = [], 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.lastgroup in _BAD:
            message = _BAD[m.lastgroup] if m else f"unexpected character {text[pos]!r}"
            tokens.append(Token("bad", message, pos))
            break
        if m.lastgroup != "ws":
            tokens.append(Token(m.lastgroup, m.group(), pos))
        pos = m.end()
    tokens.append(Token("end", "", len(text.rstrip())))  # a caret after the last word
    return tokens


def _is(tok: Token, *texts: str) -> bool:
    """``tok`` is one of ``texts`` (operators exactly, names in lower case)."""
    if tok.kind == "name":
        return tok.text.lower() in texts
    return tok.kind == "op" and tok.text in texts
