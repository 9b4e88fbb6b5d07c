"""``acep exact``'s verbose lines assembled in bulk from the matches' positions.

The bytes are those of ``json.dumps`` of :meth:`acep.cli.exact._ExactPrinter.match` per
match, without a dict per match: each event's tag is formatted once, each distinct
partition key once, and the fragments of a chunk of lines are laid into one object array
and joined once. The compiled core's :class:`~acep.nfab.core.CoreMatches` is read as its
arrays; a list of :class:`~acep.nfab.runs.ExactMatch` (the other engines) is flattened
into the same arrays in one pass.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from itertools import chain, count, repeat
from operator import attrgetter

import numpy as np

from .._output import tag_texts
from ..nfab.core import CoreMatches
from .exact import plain_key

CHUNK = 65536  # matches per write: memory stays bounded for millions of matches


def verbose_lines(
    found: Sequence, components: list[tuple[str, bool]], tags, is_time: bool, chunk: int = CHUNK
) -> Iterator[str] | None:
    """The verbose lines of ``found``, one text per chunk of matches (None: matches with
    RETURN values, which the per-match path prints). ``components``: (variable, is a
    singleton) per positive component; ``tags``: the tags of the events, by position."""
    if not len(found):
        return iter(())
    tags = np.asarray(tags, dtype=np.float64)
    table = _core_table(found) if isinstance(found, CoreMatches) else _list_table(found, tags)
    if table is None:
        return None
    return _chunks(*table, components, tag_texts(tags, is_time), chunk)


def _core_table(found: CoreMatches) -> tuple | None:
    ends, offsets, flat, order, partitions = found.arrays()
    if order is not None:
        offsets, ends = offsets[order], ends[order]
    if not (flat[offsets[:, -1] - 1] == ends).all():  # a match ends at its last event
        return None
    firsts = flat[offsets[:, 0]]
    if not partitions:
        return offsets, flat, None
    if all(isinstance(col, np.ndarray) and col.dtype == np.float64 for col in partitions):
        rows = np.column_stack([col[firsts] for col in partitions])
        distinct, inverse = np.unique(rows, axis=0, return_inverse=True)
        texts = [_key_text(tuple(row)) for row in distinct.tolist()]
        return offsets, flat, np.array(texts, dtype=object)[inverse.reshape(-1)]
    at = firsts.tolist()
    keys = zip(*[[col[i] for i in at] for col in partitions])
    return offsets, flat, _key_texts(keys)


def _list_table(found: Sequence, tags: np.ndarray) -> tuple | None:
    if list(map(attrgetter("values"), found)).count(None) != len(found):
        return None  # RETURN values
    k = len(found[0].positions)
    blocks = list(chain.from_iterable(map(attrgetter("positions"), found)))
    bounds = np.zeros(len(blocks) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, blocks), dtype=np.int64, count=len(blocks)), out=bounds[1:])
    flat = np.fromiter(chain.from_iterable(blocks), dtype=np.int64, count=int(bounds[-1]))
    offsets = bounds[np.arange(len(found))[:, None] * k + np.arange(k + 1)]
    starts = np.fromiter(map(attrgetter("start"), found), dtype=np.float64, count=len(found))
    ends = np.fromiter(map(attrgetter("end"), found), dtype=np.float64, count=len(found))
    if not (
        (tags[flat[offsets[:, 0]]] == starts).all()
        and (tags[flat[offsets[:, -1] - 1]] == ends).all()
    ):
        return None  # shown from the match's own start and end: the per-match path
    partitions = list(map(attrgetter("partition"), found))
    if all(p is None for p in partitions):
        return offsets, flat, None
    return offsets, flat, _key_texts(partitions)


def _key_texts(keys) -> np.ndarray:
    """JSON texts of partition keys, each distinct one formatted once. A dict tells True
    and 1 apart from neither 1 nor 1.0, whose texts are the same; with a bool among the
    values, keys are told apart by type too."""
    keys = list(keys)
    seen: dict = {}
    try:
        if any(map(isinstance, chain.from_iterable(filter(None, keys)), repeat(bool))):
            typed = [(key, *map(type, key or ())) for key in keys]
            firsts = list(map(seen.setdefault, typed, count()))
        else:
            firsts = list(map(seen.setdefault, keys, count()))
    except TypeError:  # an unhashable value: each key formatted on its own
        return _objects([_key_text(key) for key in keys])
    out = np.empty(len(keys), dtype=object)
    at = list(seen.values())
    out[at] = _objects([_key_text(keys[i]) for i in at])
    return out[np.array(firsts, dtype=np.intp)]


def _objects(items: list) -> np.ndarray:
    out = np.empty(len(items), dtype=object)
    out[:] = items
    return out


def _key_text(key) -> str:
    """A partition key as the per-match path shows it."""
    return json.dumps(plain_key(key))


def _chunks(
    offsets: np.ndarray,
    flat: np.ndarray,
    keys: np.ndarray | None,
    components: list[tuple[str, bool]],
    texts: np.ndarray,
    chunk: int,
) -> Iterator[str]:
    for lo in range(0, len(offsets), chunk):
        part = None if keys is None else keys[lo : lo + chunk]
        yield _lines(offsets[lo : lo + chunk], flat, part, components, texts)


def _labels(components: list[tuple[str, bool]]) -> tuple[list[str], list[str], str]:
    """The texts before each component's events and positions, and the line's end."""
    kleene = [not single for _, single in components]
    close = "]" if kleene[-1] else ""
    names = [
        json.dumps(var) + ": " + ("[" if many else "")
        for var, many in zip((v for v, _ in components), kleene)
    ]
    between = [("]" if kleene[c - 1] else "") + ", " + names[c] for c in range(1, len(names))]
    return (
        [', "events": {' + names[0], *between],
        [close + '}, "positions": {' + names[0], *between],
        close + '}, "values": null}\n',
    )


def _lines(
    offsets: np.ndarray,
    flat: np.ndarray,
    keys: np.ndarray | None,
    components: list[tuple[str, bool]],
    texts: np.ndarray,
) -> str:
    """The lines of one chunk: per line 6 fragments up to the partition, per section
    (events, positions) a label per component and a separator and a text per event, and
    the end."""
    m, k = len(offsets), len(components)
    sizes = np.diff(offsets, axis=1)
    per_match = offsets[:, -1] - offsets[:, 0]
    line = np.cumsum(7 + 2 * k + 4 * per_match) - (7 + 2 * k + 4 * per_match)
    out = np.empty(int(line[-1] + 7 + 2 * k + 4 * per_match[-1]), dtype=object)
    out[line] = '{"start": '
    out[line + 1] = texts[flat[offsets[:, 0]]]
    out[line + 2] = ', "end": '
    out[line + 3] = texts[flat[offsets[:, -1] - 1]]
    out[line + 4] = ', "partition": '
    out[line + 5] = "null" if keys is None else keys
    match_of = np.repeat(np.arange(m), per_match)
    within = np.arange(len(match_of)) - np.repeat(np.cumsum(per_match) - per_match, per_match)
    positions = flat[offsets[match_of, 0] + within]
    component = np.repeat(np.tile(np.arange(k), m), sizes.ravel())
    block = np.repeat(offsets[:, :-1].ravel() - np.repeat(offsets[:, 0], k), sizes.ravel())
    separators = np.where(within == block, "", ", ").astype(object)
    before = offsets[:, :-1] - offsets[:, :1]  # events of the match before each component
    event_labels, position_labels, end = _labels(components)
    numbers = _objects(list(map(str, positions.tolist())))
    for start, labels, values in (
        (line + 6, event_labels, texts[positions]),
        (line + 6 + k + 2 * per_match, position_labels, numbers),
    ):
        for c in range(k):
            out[start + c + 2 * before[:, c]] = labels[c]
        at = start[match_of] + component + 1 + 2 * within
        out[at] = separators
        out[at + 1] = values
    out[line + 6 + 2 * k + 4 * per_match] = end
    return "".join(out.tolist())
