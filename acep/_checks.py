"""Checks of the arguments of the public Python API, one helper per kind of check.

Each names the parameter, says what it expects and shows (shortened) what it got, and raises
:class:`ParameterError`, which is both a ``ValueError`` and a ``TypeError`` (as
scikit-learn's ``InvalidParameterError``): code that catches either keeps working whether
the value had the wrong type or the wrong value. They run once per call, never per event.
"""

from __future__ import annotations

import math
import numbers
import os
import reprlib
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

__all__ = ["ParameterError", "shown", "number", "whole", "flag", "choice", "instance",
           "name_or_none", "texts", "path"]

_REPR = reprlib.Repr()
_REPR.maxstring, _REPR.maxother, _REPR.maxlong, _REPR.maxlist = 40, 40, 24, 6


class ParameterError(ValueError, TypeError):
    """An argument of the Python API has the wrong type or value (the message names it)."""


def shown(value: object) -> str:
    """``repr(value)``, shortened (a huge number or a long list), for messages."""
    if isinstance(value, type):
        return f"the class {value.__name__}"
    return _REPR.repr(value)


def _scalar(value: object) -> object:
    """A 0-d numpy array as its Python value (``np.array(10.0)`` is taken as 10.0)."""
    if isinstance(value, np.ndarray) and value.ndim == 0:
        return value.item()
    return value


def _real(value: object) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))


def number(value: object, name: str, low: float | None = None, high: float | None = None,
           *, open_low: bool = False, open_high: bool = False, what: str = "") -> float:
    """``value`` as a finite float in the range (ints and numpy scalars taken; not bool)."""
    value = _scalar(value)
    inside = _real(value)
    if inside:
        try:
            x = float(value)
        except OverflowError:  # an int beyond float
            x = math.inf
        inside = math.isfinite(x) and not (
            low is not None and (x <= low if open_low else x < low)) and not (
            high is not None and (x >= high if open_high else x > high))
    if not inside:
        raise ParameterError(f"{name} must be {_number_range(low, high, open_low, open_high)}"
                             f"{what}, got {shown(value)}")
    return x


def _number_range(low, high, open_low, open_high) -> str:
    if low is not None and high is not None:
        return (f"a number in {'(' if open_low else '['}{low:g}, {high:g}"
                f"{')' if open_high else ']'}")
    if low is not None:
        return f"a finite number {'>' if open_low else '>='} {low:g}"
    if high is not None:
        return f"a finite number {'<' if open_high else '<='} {high:g}"
    return "a finite number"


def whole(value: object, name: str, low: int | None = None, high: int | None = None,
          *, what: str = "") -> int:
    """``value`` as an int in ``low..high`` (numpy ints and integral floats such as ``2.0``
    taken; not bool, text or 2.5)."""
    if type(value) is int and (low is None or value >= low) and (high is None or value <= high):
        return value  # the common case, first: a batch's position is checked per batch
    value = _scalar(value)
    inside = _real(value) and (isinstance(value, numbers.Integral) or (
        math.isfinite(float(value)) and float(value).is_integer()))
    if inside:
        n = int(value)
        inside = (low is None or n >= low) and (high is None or n <= high)
    if not inside:
        if low is not None and high is not None:
            span = f" in {low:,}..{high:,}"
        elif low is not None:
            span = f" >= {low:,}"
        else:
            span = ""
        raise ParameterError(f"{name} must be a whole number{span}{what}, got {shown(value)}")
    return n


def flag(value: object, name: str) -> bool:
    """``value`` as a bool: True or False (numpy's too), not a truthy text such as "no"."""
    if not isinstance(value, (bool, np.bool_)):
        raise ParameterError(f"{name} must be True or False, got {shown(value)}")
    return bool(value)


def choice(value: object, name: str, options: Sequence[object]) -> object:
    """``value``, one of ``options``."""
    if not isinstance(value, (str, type(None))) or value not in options:
        listed = " or ".join(repr(o) for o in options)
        raise ParameterError(f"{name} must be {listed}, got {shown(value)}")
    return value


def instance(value: object, name: str, kinds: type | tuple[type, ...], expected: str,
             hint: str = "") -> object:
    """``value``, an instance of ``kinds`` (``expected`` says which in the message)."""
    if not isinstance(value, kinds):
        raise ParameterError(f"{name} must be {expected}, got {_kind(value)}{hint}")
    return value


def _kind(value: object) -> str:
    if value is None or isinstance(value, (str, bytes, numbers.Number)):
        return shown(value)
    if isinstance(value, type):
        return shown(value)
    kind = type(value).__name__
    return f"{'an' if kind[0].lower() in 'aeiou' else 'a'} {kind}"


def name_or_none(value: object, name: str, what: str) -> str | None:
    """None, or a non-empty text (a column or attribute name)."""
    if value is not None and not (isinstance(value, str) and value):
        raise ParameterError(f"{name} must be {what} (a non-empty string) or None, "
                             f"got {shown(value)}")
    return value


def texts(value: object, name: str, what: str) -> tuple[str, ...]:
    """A text, or a list (any iterable but a mapping or bytes) of texts, as a tuple."""
    if isinstance(value, str):
        return (value,)
    items = None
    if isinstance(value, Iterable) and not isinstance(value, (bytes, Mapping)):
        items = tuple(value)
    if items is None or not all(isinstance(v, str) for v in items):
        raise ParameterError(f"{name} must be {what} (a string or a list of strings), "
                             f"got {shown(value)}")
    return items


def path(value: object, name: str, hint: str = "") -> str:
    """A file path: ``str`` or ``os.PathLike`` of text (not bytes), as ``str``."""
    if isinstance(value, (str, os.PathLike)):
        text = os.fspath(value)
        if isinstance(text, str):
            return text
    raise ParameterError(f"{name} must be a path (str or pathlib.Path), got {_kind(value)}"
                         f"{hint}")
