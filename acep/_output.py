"""JSON Lines output of matches and bundles, assembled in bulk.

Each distinct tag and partition key is formatted once (timestamps by the vectorised
:func:`acep.events.iso_texts`). The compiled ``acep._lines`` then writes the match lines
into one buffer; without it, the fragments of every line are laid into one object array
and joined once. The bytes are those of ``json.dumps`` of each match's dict.
"""

from __future__ import annotations

import json

import numpy as np

from .events import iso_texts

try:
    from . import _lines
except ImportError:  # built without a compiler: the numpy assembly below
    _lines = None

__all__ = ["tag_value", "tag_texts", "match_lines", "match_bytes", "bundle_lines"]


def tag_value(t: float, is_time: bool) -> str | int | float:
    """A tag as JSON output shows it: ISO text for timestamps, else the number."""
    if is_time:
        return iso_texts(np.array([t], dtype=np.float64))[0]
    return int(t) if float(t).is_integer() else t


def tag_texts(tags: np.ndarray, is_time: bool) -> np.ndarray:
    """JSON texts of tags, as an object array: quoted ISO text for timestamps, else the number.

    Parameters
    ----------
    tags : numpy.ndarray
        Tags (seconds since the epoch when ``is_time``).
    is_time : bool
        Whether the tags are timestamps.

    Returns
    -------
    numpy.ndarray
        One ``str`` per tag (dtype object).
    """
    tags = np.asarray(tags, dtype=np.float64)
    if not len(tags):
        return np.empty(0, dtype=object)
    distinct, inverse = _distinct_tags(tags)
    return np.array(_texts(distinct, is_time), dtype=object)[inverse]


def _texts(distinct: np.ndarray, is_time: bool) -> list[str]:
    if is_time:
        return ['"' + x + '"' for x in iso_texts(distinct)]
    return [json.dumps(int(t) if t.is_integer() else t) for t in distinct.tolist()]


def _distinct_tags(tags: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(tags, return_inverse=True)``, about three times faster on 2M tags."""
    order = np.argsort(tags)
    ranked = tags[order]
    new = np.empty(len(ranked), dtype=bool)
    new[:1] = True
    np.not_equal(ranked[1:], ranked[:-1], out=new[1:])
    inverse = np.empty(len(ranked), dtype=np.int64)
    inverse[order] = np.cumsum(new) - 1
    return ranked[new], inverse


def json_default(value):
    """``json.dumps``'s ``default`` for partition keys: a numpy scalar as its Python value."""
    if isinstance(value, np.generic):
        return value.item()
    return str(value)


def _key_texts(keys) -> np.ndarray:
    """JSON texts of partition keys (each distinct key formatted once), as an object array."""
    texts, index = _distinct_keys(keys)
    return np.array(texts, dtype=object)[index]


def _distinct_keys(keys) -> tuple[list[str], np.ndarray]:
    """The JSON texts of the distinct partition keys, and each key's index into them."""
    order: dict = {}
    index = np.fromiter((order.setdefault(key, len(order)) for key in keys), dtype=np.int64)
    return [json.dumps(key, default=json_default) for key in order], index


def _int_texts(values: np.ndarray) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = list(map(str, np.asarray(values).tolist()))
    return out


def match_lines(found) -> str:
    """The JSON lines of matches, one per match, each ending in a newline.

    Parameters
    ----------
    found : acep.MatchBatch
        The matches.

    Returns
    -------
    str
        ``{"partition": .., "start": .., "point": .., "errors": .., "events": [..],
        "positions": [..]}`` per match.
    """
    if not len(found):
        return ""
    if _lines is None:  # built without a compiler
        return _assembled_match_lines(found)
    return _compiled_match_lines(found).decode("ascii")


def match_bytes(found) -> bytes:
    """:func:`match_lines` as ASCII bytes, for a binary stream (no text decoded and
    encoded again)."""
    if not len(found):
        return b""
    if _lines is None:
        return _assembled_match_lines(found).encode("ascii")
    return _compiled_match_lines(found)


def _compiled_match_lines(found) -> bytes:
    key_of = np.empty(len(found), dtype=np.int64)
    distinct = _lines.first_seen(np.asarray(found.partition, dtype=object).tolist(), key_of)
    keys = [json.dumps(key, default=json_default) for key in distinct]
    tags = np.concatenate([found.start, found.point, found.trajectory_tags]).astype(np.float64)
    seconds = np.empty(len(tags), dtype=np.int64)
    if found.tag_is_time and _lines.whole_seconds(tags, seconds):  # formatted in C
        texts, tag_of = [], seconds[:0]
    else:
        distinct, tag_of = _distinct_tags(tags)
        texts, seconds = [t.encode("ascii") for t in _texts(distinct, found.tag_is_time)], None
    return _lines.match_lines([k.encode("ascii") for k in keys], key_of, texts, tag_of,
                              np.asarray(found.errors, dtype=np.int64),
                              np.asarray(found.trajectory_ptr, dtype=np.int64),
                              np.asarray(found.trajectory, dtype=np.int64), seconds)


def _assembled_match_lines(found) -> str:
    n = len(found)
    ptr = np.asarray(found.trajectory_ptr, dtype=np.int64)
    sizes = np.diff(ptr)
    # a line: 9 fragments before its events, 2 per event (separator, tag), 1 between,
    # 2 per position, 1 at the end
    starts = np.arange(n, dtype=np.int64) * 11 + 4 * ptr[:-1]
    out = np.empty(11 * n + 4 * int(ptr[-1]), dtype=object)
    for offset, piece in ((0, '{"partition": '), (2, ', "start": '), (4, ', "point": '),
                          (6, ', "errors": '), (8, ', "events": [')):
        out[starts + offset] = piece
    out[starts + 1] = _key_texts(found.partition)
    tags = tag_texts(np.concatenate([found.start, found.point, found.trajectory_tags]),
                     found.tag_is_time)  # one call: starts and points are mostly event tags
    out[starts + 3] = tags[:n]
    out[starts + 5] = tags[n:2 * n]
    out[starts + 7] = _int_texts(found.errors)
    line = np.repeat(np.arange(n, dtype=np.int64), sizes)
    within = np.arange(int(ptr[-1]), dtype=np.int64) - ptr[:-1][line]
    events = starts[line] + 9 + 2 * within
    separators = np.where(within == 0, "", ", ").astype(object)
    out[events] = separators
    out[events + 1] = tags[2 * n:]
    middle = starts + 9 + 2 * sizes
    out[middle] = '], "positions": ['
    positions = middle[line] + 1 + 2 * within
    out[positions] = separators
    out[positions + 1] = _int_texts(found.trajectory)
    out[middle + 1 + 2 * sizes] = "]}\n"
    return "".join(out.tolist())


def bundle_lines(found: list, is_time: bool) -> str:
    """The JSON lines of bundles, one per bundle, each ending in a newline.

    Parameters
    ----------
    found : list of acep.matcher.Bundle
        The bundles, as :func:`acep.bundles` gives them.
    is_time : bool
        Whether the tags are timestamps.

    Returns
    -------
    str
        ``{"partition": .., "first": .., "last": .., "points": ..}`` per bundle.
    """
    n = len(found)
    if not n:
        return ""
    out = np.empty((n, 9), dtype=object)
    out[:, 0] = '{"partition": '
    out[:, 1] = _key_texts(b.partition for b in found)
    out[:, 2] = ', "first": '
    out[:, 3] = tag_texts(np.array([b.first for b in found], dtype=np.float64), is_time)
    out[:, 4] = ', "last": '
    out[:, 5] = tag_texts(np.array([b.last for b in found], dtype=np.float64), is_time)
    out[:, 6] = ', "points": '
    out[:, 7] = _int_texts(np.array([b.n_points for b in found], dtype=np.int64))
    out[:, 8] = "}\n"
    return "".join(out.ravel().tolist())
