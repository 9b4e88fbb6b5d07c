"""Decoding one JSON text, with orjson when it is installed (the ``fast`` extra).

The language accepted and the values read are those of the standard library's ``json``:
orjson decodes a text only when it is sure to agree, and ``json`` decides everything else.
orjson refuses ``NaN`` and ``Infinity``, numbers beyond a double, lone surrogates and a
byte order mark, all of which ``json`` reads; it would read an integer beyond 64 bits as a
float, so a text with a run of 19 digits (every integer beyond 64 bits has one) goes to
``json``, which keeps an id exact; a ``str`` text, not scanned, is read again by ``json``
when its value holds a float of magnitude 2**63 or more, where such an integer lands. A
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

_DIGITS = bytes(48 if 48 <= c <= 57 else 46 for c in range(256))  # digits to "0", else "."
_LONG_RUN = b"0" * 19  # 10**18 < 2**63: an integer of 18 digits or fewer fits 64 bits
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
        scanned = isinstance(text, (bytes, bytearray))
        if not scanned or text.translate(_DIGITS).find(_LONG_RUN) < 0:
            try:
                value = _orjson.loads(text)
            except _orjson.JSONDecodeError:
                pass  # NaN, a lone surrogate, or a bad text: json decides
            else:
                if scanned or not _has_huge_float(value):
                    return value
    return json.loads(text)


def _has_huge_float(value) -> bool:
    """Whether a decoded value holds a float of magnitude 2**63 or more (no recursion;
    a container of texts and integers only is passed over in one call)."""
    level = [value]
    while level:
        item = level.pop()
        kind = type(item)
        if kind is float:
            if not -_HUGE < item < _HUGE:
                return True
            continue
        if kind is not dict and kind is not list:
            continue
        children = item.values() if kind is dict else item
        if _FLOAT_OR_NESTED.intersection(map(type, children)):
            level.extend(children)
    return False
