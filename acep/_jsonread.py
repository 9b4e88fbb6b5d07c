"""Decoding one JSON text, with orjson when it is installed (the ``fast`` extra).

The language accepted and the values read are those of the standard library's ``json``:
orjson decodes a text only when it is sure to agree, and ``json`` decides everything else.
orjson refuses ``NaN`` and ``Infinity``, numbers beyond a double, lone surrogates and a
byte order mark, all of which ``json`` reads; it would read an integer beyond 64 bits as a
float, so a value read with a float of magnitude 2**63 or more (where such an integer
lands) is read again by ``json`` (an id stays exact). A
text that neither reads fails with ``json``'s message. The limits of :mod:`acep._bounds`
(line length, depth 64) are checked by the callers first; orjson's own depth limit is 254.
"""

from __future__ import annotations

import json

try:
    import orjson as _orjson
except ImportError:  # a device with only numpy and msgpack
    _orjson = None

__all__ = ["loads", "fast"]

_FLOAT_OR_NESTED = frozenset((float, dict, list))
_HUGE = 2.0**63  # orjson reads an integer literal beyond 64 bits as a float this large


def fast() -> bool:
    """Whether texts are decoded by orjson (else by the standard library alone)."""
    return _orjson is not None


def loads(text: bytes | str):
    """The value of one JSON text, as ``json.loads`` reads it.

    Parameters
    ----------
    text : bytes or str
        The JSON text (bytes: UTF-8, or any encoding ``json.loads`` detects).

    Returns
    -------
    object
        The decoded value.

    Raises
    ------
    ValueError
        ``json``'s own error (``json.JSONDecodeError``, ``UnicodeDecodeError``).
    """
    if _orjson is not None:
        try:
            value = _orjson.loads(text)
        except _orjson.JSONDecodeError:
            pass  # NaN, a lone surrogate, or a bad text: json decides
        else:
            if not _has_huge_float(value):
                return value
    return json.loads(text)


def _has_huge_float(value) -> bool:
    """Whether a decoded value holds a float of magnitude 2**63 or more (no recursion)."""
    if type(value) is float:
        return not -_HUGE < value < _HUGE
    if type(value) is dict and not _FLOAT_OR_NESTED.intersection(map(type, value.values())):
        return False  # the common event: a flat object of texts and integers
    level = [value] if type(value) in (dict, list) else []
    while level:
        item = level.pop()
        for v in item.values() if type(item) is dict else item:
            kind = type(v)
            if kind is float:
                if not -_HUGE < v < _HUGE:
                    return True
            elif kind is dict or kind is list:
                level.append(v)
    return False
