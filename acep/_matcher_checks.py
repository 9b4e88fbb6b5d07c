"""Checks of what a Matcher is given: its parameters, and each batch and load array."""

from __future__ import annotations

import numpy as np

from . import _checks as check
from .events import EventBatch


def check_parameters(window, k, on_bad_event):
    check_window(window)
    check.whole(k, "k (error bound)", 0, 64)
    check.choice(on_bad_event, "on_bad_event", ("error", "skip"))


def check_window(window, name: str = "window") -> float:
    """The window ``w`` as a float: a finite number >= 0, in tag units."""
    return check.number(window, name, 0.0, what=" in tag units (seconds for timestamps: "
                        "7200 for 2h)" if isinstance(window, str) else "")


def check_batch(batch: EventBatch, position: int) -> None:
    """A batch the kernel can read: one entry per event in every array, type codes that
    index ``type_names``, finite tags, and positions that do not go back (O(1) checks but
    a min/max of the codes and tags: once per batch)."""
    check.instance(batch, "batch", EventBatch, "an acep.EventBatch",
                   " (EventBatch.from_events(rows) or read_events(path); Matcher.match "
                   "takes a list of events)")
    codes, tags, names = batch.type_codes, batch.tags, batch.type_names
    _check_array(codes, "batch.type_codes", "iu", "integers", None)
    n = len(codes)
    _check_array(tags, "batch.tags", "iuf", "numbers (seconds for timestamps)", n)
    if not isinstance(names, (list, tuple)) or not all(isinstance(t, str) for t in names):
        raise check.ParameterError(f"batch.type_names must be a list of strings, got "
                                   f"{check.shown(names)}")
    check.instance(batch.columns, "batch.columns", dict, "a dict of attribute columns")
    for name, column in batch.columns.items():
        _check_array(column, f"batch.columns[{name!r}]", None, "values", n)
    unsigned = codes.view(_UNSIGNED[codes.itemsize]) if codes.dtype.kind == "i" else codes
    if n and np.maximum.reduce(unsigned) >= len(names):  # a negative code is a huge one
        bad = int(np.flatnonzero((codes < 0) | (codes >= len(names)))[0])
        raise check.ParameterError(f"batch.type_codes must index batch.type_names (0.."
                                   f"{len(names) - 1}): event {bad} has {codes[bad]}")
    if n and tags.dtype.kind == "f" and not np.logical_and.reduce(np.isfinite(tags)):
        bad = int(np.flatnonzero(~np.isfinite(tags))[0])
        raise check.ParameterError(f"batch.tags must be finite: event {bad} has {tags[bad]}")
    if type(batch.position) is not int or batch.position < position:  # else: fine, at once
        check.whole(batch.position, "batch.position", position, what=(
            f" (positions go on across batches: this matcher has taken the events before "
            f"{position:,}; e.g. EventBatch.from_events(rows, position={position}))"
            if position else ""))


_UNSIGNED = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def _check_array(values, name: str, kinds: str | None, what: str, n: int | None) -> None:
    """A 1-d numpy array (of dtype kinds ``kinds``) with ``n`` entries."""
    if not isinstance(values, np.ndarray) or values.ndim != 1 or (
            kinds is not None and values.dtype.kind not in kinds):
        got = (f"an array of {values.dtype} and shape {values.shape}"
               if isinstance(values, np.ndarray) else f"a {type(values).__name__}")
        raise check.ParameterError(f"{name} must be a 1-d numpy array of {what}, got {got}")
    if n is not None and len(values) != n:
        raise check.ParameterError(f"{name} has {len(values)} entries for {n} events "
                                   "(batch.type_codes)")


def check_load(load, n: int) -> None:
    """``load``: the kernel writes in place, so it must be a writeable C-ordered int64 array."""
    if not (isinstance(load, np.ndarray) and load.dtype == np.int64 and load.shape == (n, 4)
            and load.flags.c_contiguous and load.flags.writeable):
        got = (f"{load.dtype} of shape {load.shape}"
               f"{'' if load.flags.c_contiguous else ', not C-contiguous'}"
               f"{'' if load.flags.writeable else ', read-only'}"
               if isinstance(load, np.ndarray) else f"a {type(load).__name__}")
        raise check.ParameterError(f"load must be a writeable, C-contiguous int64 array of "
                                   f"shape ({n}, 4) (np.zeros(({n}, 4), np.int64)), got {got}")
