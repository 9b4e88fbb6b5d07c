"""The event spec: which column is the tag, how the type is derived (a column, or
:class:`TypeClasses` of a numeric column) and which columns are attributes; the presets.
"""

from __future__ import annotations

import json
import math
import numbers
import os
from collections.abc import Iterable
from dataclasses import dataclass

from .. import _checks as check
from .values import _float_or_nan


@dataclass(frozen=True)
class TypeClasses:
    """Derive the event type from a numeric column by classes: type = labels[j] where
    bins[j] <= value < bins[j+1]. e.g. delay classes of flights."""

    column: str
    bins: tuple[float, ...]
    labels: tuple[str, ...]

    def __post_init__(self):
        bins = tuple(float(b) for b in self.bins)
        labels = tuple(self.labels)
        object.__setattr__(self, "bins", bins)
        object.__setattr__(self, "labels", labels)
        if not labels or len(bins) != len(labels) + 1:
            raise ValueError(f"type classes of {self.column!r}: need len(labels) + 1 bins, "
                             f"got {len(bins)} bins for {len(labels)} labels")
        if any(not (a < b) for a, b in zip(bins, bins[1:])):
            raise ValueError(f"type classes of {self.column!r}: bins must increase: {bins}")
        if not all(isinstance(x, str) and x for x in labels):
            raise ValueError(f"type classes of {self.column!r}: labels must be non-empty "
                             f"strings: {labels}")



@dataclass(frozen=True)
class EventSpec:
    """Which column is the tag, how the type is derived, which columns are attributes.

    ``PRESETS["flights"]`` is the spec of the embedded flights; ``acep match --spec`` reads
    one from a JSON or TOML file with the same fields.

    Parameters
    ----------
    tag : str or None
        The column of the tags (timestamps or numbers); None numbers the events 0, 1, ...
        (count windows).
    type : str or TypeClasses
        The column of the event types, or classes of a numeric column.
    attributes : tuple of str, optional
        The columns kept as attributes (None: every other column).

    Examples
    --------
    >>> import json, os, tempfile
    >>> from acep import EventSpec, read_events
    >>> from acep.events import TypeClasses
    >>> path = os.path.join(tempfile.mkdtemp(), "trades.jsonl")
    >>> with open(path, "w") as f:
    ...     for row in [{"time": 1, "price": 10.5}, {"time": 2, "price": 12.0}]:
    ...         print(json.dumps(row), file=f)
    >>> cheap = TypeClasses("price", bins=(0, 11, 100), labels=("low", "high"))
    >>> batch = next(read_events(path, EventSpec(tag="time", type=cheap)))
    >>> [batch.type_names[c] for c in batch.type_codes], batch.tags.tolist()
    (['low', 'high'], [1.0, 2.0])
    """

    tag: str | None = "t"
    type: str | TypeClasses = "type"
    attributes: tuple[str, ...] | None = None

    def __post_init__(self):
        if self.attributes is not None:
            object.__setattr__(self, "attributes", check.texts(
                self.attributes, "event spec: attributes", "column names"))
        if not (self.tag is None or isinstance(self.tag, str)):
            raise ValueError(f"event spec: tag must be a column name or None, not {self.tag!r}")
        if not isinstance(self.type, (str, TypeClasses)):
            raise ValueError(f"event spec: type must be a column name or TypeClasses, "
                             f"not {self.type!r}")

    @classmethod
    def from_dict(cls, d: dict) -> EventSpec:
        """``{"tag": "date", "type": "kind" | {"column", "bins", "labels"}, "attributes"}``.

        Bins may be written ``"-inf"`` / ``"inf"``; ``"tag": null`` means count windows.
        """
        check.instance(d, "event spec", dict, 'a dict such as {"tag": "t", "type": "type"}')
        unknown = set(d) - {"tag", "type", "attributes"}
        if unknown:
            raise ValueError(f"event spec: unknown keys {sorted(unknown)}")
        kind = d.get("type", "type")
        if isinstance(kind, dict):
            if set(kind) != {"column", "bins", "labels"}:
                raise ValueError("event spec: type classes need exactly 'column', 'bins', "
                                 f"'labels', got {sorted(kind)}")
            kind = TypeClasses(kind["column"], tuple(_bin(b) for b in kind["bins"]),
                               tuple(kind["labels"]))
        attrs = d.get("attributes")
        if isinstance(attrs, str):  # one column, not its letters
            attrs = [attrs]
        elif attrs is not None and not isinstance(attrs, (list, tuple)):
            raise ValueError(f"event spec: attributes must be a list of column names, not "
                             f"{attrs!r}")
        return cls(d.get("tag", "t"), kind, None if attrs is None else tuple(attrs))

    @classmethod
    def load(cls, path_or_name: str) -> EventSpec:
        """A preset name (see ``PRESETS``) or a JSON (or TOML) file holding the dict form."""
        path_or_name = check.path(path_or_name, "event spec", " (a preset name or a file)")
        if path_or_name in PRESETS:
            return PRESETS[path_or_name]
        if not os.path.isfile(path_or_name):
            raise ValueError(f"event spec {path_or_name!r} is neither a file nor a preset "
                             f"({', '.join(PRESETS)})")
        try:
            with open(path_or_name, "rb") as f:
                d = _toml_load(f) if path_or_name.endswith(".toml") else json.load(f)
            return cls.from_dict(d)
        except (ValueError, TypeError, KeyError, AttributeError) as e:
            raise ValueError(f"event spec {path_or_name}: {e}") from None


def not_an_attribute(spec: EventSpec, name: str) -> str | None:
    """Why ``name`` is never read as an attribute under ``spec`` (not in the spec's
    attributes; without them, the tag or the type column), or None."""
    if spec.attributes is not None:
        if name in spec.attributes:
            return None
        return (f"{name!r} is not among the event spec's 'attributes' "
                f"({', '.join(spec.attributes)})")
    if name == spec.tag:
        return f"{name!r} is the tag (the event spec's 'tag'), not an attribute"
    if name == spec.type:
        return (f"{name!r} is the column the event type is read from (the event spec's "
                "'type'), not an attribute; a spec with another type column reads it")
    return None


def _type_column(spec: EventSpec) -> str:
    """The column the type is read from (the classified column for TypeClasses)."""
    return spec.type if isinstance(spec.type, str) else spec.type.column


def _needed_columns(spec: EventSpec) -> list[str] | None:
    """The columns to read, or None for all of them."""
    if spec.attributes is None:
        return None
    tag = [] if spec.tag is None else [spec.tag]
    return list(dict.fromkeys([*tag, _type_column(spec), *spec.attributes]))


def _not_attributes(spec: EventSpec) -> set[str | None]:
    """Columns that are not attributes when the spec does not list them: tag and type."""
    return {spec.tag, spec.type if isinstance(spec.type, str) else None}


def _attribute_names(spec: EventSpec, columns: Iterable[str]) -> list[str]:
    """The attributes: the spec's list, or every column but the tag and the type column."""
    if spec.attributes is not None:
        return list(spec.attributes)
    drop = _not_attributes(spec)
    return [c for c in columns if c not in drop]


def _bin(b: object) -> float:
    if isinstance(b, str) and math.isinf(_float_or_nan(b)):
        return float(b)
    if isinstance(b, numbers.Real) and not isinstance(b, bool):
        return float(b)
    raise ValueError(f"event spec: bin {b!r} is not a number, '-inf' or 'inf'")


def _toml_load(f) -> dict:
    import tomllib  # Python 3.11+

    return tomllib.load(f)


_DEFAULT = EventSpec()
PRESETS: dict[str, EventSpec] = {
    "default": _DEFAULT,
    "flights": EventSpec(
        tag="date",
        type=TypeClasses("delay", (-math.inf, 0.0, 15.0, 60.0, math.inf),
                         ("early", "ontime", "late", "verylate")),
        attributes=("delay", "distance", "origin", "destination"),
    ),
}
