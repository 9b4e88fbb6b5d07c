"""Match bundles of match points ([L16] Definition 3), as arrays."""

from __future__ import annotations

import numpy as np


def bundle_runs(part, points, window: float) -> tuple[np.ndarray, ...]:
    """Group match points into bundles: the points of a partition, each counted once, cut
    where the gap to the previous point exceeds ``window``.

    Parameters
    ----------
    part : array of int
        The partition code of each match point.
    points : array of float
        The match points.
    window : float
        The largest gap inside a bundle.

    Returns
    -------
    partition, first, last, n_points : arrays (int64, float64, float64, int64)
        One entry per bundle, sorted by partition code, then first point.

    Examples
    --------
    >>> part, first, last, n = bundle_runs([0, 0, 0, 1], [1.0, 3.0, 9.0, 3.0], 5)
    >>> first.tolist(), last.tolist(), n.tolist()
    ([1.0, 9.0, 3.0], [3.0, 9.0, 3.0], [2, 1, 1])
    """
    part = np.asarray(part, dtype=np.int64)
    points = np.asarray(points, dtype=np.float64)
    order = np.lexsort((points, part))
    part, points = part[order], points[order]
    distinct = np.ones(len(points), dtype=bool)
    distinct[1:] = (part[1:] != part[:-1]) | (points[1:] != points[:-1])
    part, points = part[distinct], points[distinct]
    if not len(points):
        return part, points, points, np.zeros(0, dtype=np.int64)
    starts = np.ones(len(points), dtype=bool)
    starts[1:] = (part[1:] != part[:-1]) | (np.diff(points) > window)
    first = np.flatnonzero(starts)
    last = np.append(first[1:], len(points)) - 1
    return part[first], points[first], points[last], last - first + 1
