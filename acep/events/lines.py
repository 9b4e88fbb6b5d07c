"""Whole JSON Lines lines read into columns as :meth:`EventBatch.from_events` reads their
dicts: the device agent's reading of a file, on the compiled reader of ``read_events``.

:class:`LineBlocks` reads the lines of one read of a file a few at a time with
``_jsonl.Reader`` (the lines it cannot read in C are decoded by Python, as everywhere),
and :func:`columns_batch` makes one batch of several blocks' columns. Without the compiled
module :func:`compiled` is False and the agent decodes each line to a dict as before.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from .. import _bounds
from .._bounds import json_problem
from .._jsonread import loads
from . import rows
from .chunks import _accept, _Sink
from .model import EventBatch
from .rows import _chunk_of, _Undecodable
from .spec import _DEFAULT, _not_attributes, _type_column
from .values import _TagKind

__all__ = ["Columns", "LineBlocks", "columns_batch", "compiled"]

_BAD = _Undecodable("not a JSON object")


def compiled() -> bool:
    """Whether the compiled reader is there (``rows._compiled``, which tests set to None)."""
    return rows._compiled is not None


@dataclass
class Columns:
    """The values of ``n`` events read from lines: their types, tags and attributes (an
    attribute's values are None where an event lacks it), attributes in the order a dict
    of the events would first name them."""

    n: int
    types: list
    tags: list
    attrs: dict[str, list]


def _decode(line: bytes) -> object:
    """A line the reader leaves to Python, as the agent's ``parse_line`` decodes it."""
    if json_problem(line):
        return _BAD
    try:
        return loads(line)
    except (ValueError, RecursionError):
        return _BAD


class LineBlocks:
    """The whole lines of one read of a file (the last one may lack its newline), read
    by the compiled reader in blocks of at most a given number of non-blank lines."""

    def __init__(self, lines: list[bytes]):
        self.buf, self.pos = b"".join(lines), 0
        self.reader = rows._compiled.Reader(
            _type_column(_DEFAULT), _DEFAULT.tag, None, _not_attributes(_DEFAULT),
            len(lines) + 1, _decode, _Undecodable, _bounds.MAX_LINE_BYTES)

    @property
    def done(self) -> bool:
        """Every line is read."""
        return self.pos >= len(self.buf)

    def next(self, limit: int) -> tuple[Columns, list[int], list[int]]:
        """The next at most ``limit`` non-blank lines: the columns of the JSON objects among
        them, the index (in the lines given) of each of those, and of each other line."""
        reader = self.reader
        reader.size = max(int(limit), 1)
        self.pos = reader.feed(self.buf, self.pos, True)
        n, numbers, problems, types, tags, attrs = reader.take()
        index = (numbers - 1).tolist()
        if not problems:
            return Columns(n, types, tags, attrs), index, []
        keep = [i for i in range(n) if i not in problems]
        attrs = {k: [v[i] for i in keep] for k, v in attrs.items()}
        cols = Columns(len(keep), [types[i] for i in keep], [tags[i] for i in keep], attrs)
        return cols, [index[i] for i in keep], [index[i] for i in sorted(problems)]


def columns_batch(parts: list[Columns], position: int, source: str) -> EventBatch:
    """The batch :meth:`EventBatch.from_events` makes of the events of ``parts`` as dicts,
    with the same :class:`~acep.EventError` for the first bad one."""
    chain = itertools.chain.from_iterable
    keys = dict.fromkeys(k for p in parts for k in p.attrs)
    attrs = {k: list(chain(p.attrs.get(k) or [None] * p.n for p in parts)) for k in keys}
    n = sum(p.n for p in parts)
    chunk = _chunk_of(n, None, {}, list(chain(p.types for p in parts)),
                      list(chain(p.tags for p in parts)), attrs, _DEFAULT, _TagKind())
    batch, error = _accept(chunk, _Sink(source, "error", None), position)
    if error is not None:
        raise error
    return batch
