"""The wall-clock budget: operations per event from the measured cost and the arrival rate.

The cost model ``seconds = a*n + c*ops`` is fitted per batch by least squares with
exponential forgetting, and the budget is ``(u / (rate + backlog / catch_up) - a) / c``,
clamped and scaled down when the lag exceeds ``max_lag``. The rule is in docs/WIRE.md,
"Agent", Budget.
"""

from __future__ import annotations

import math

__all__ = ["WallClockBudget"]


class WallClockBudget:
    """Adapts ``ops_per_event`` once per batch (see the module docstring)."""

    def __init__(self, initial: float, utilization: float = 0.8, max_lag: float = 2.0,
                 min_ops: float = 0.5, max_ops: float = 1e6, decay: float = 0.9,
                 catch_up: float = 600.0):
        self.ops = float(min(max(initial, min_ops), max_ops))
        self.u, self.max_lag = float(utilization), float(max_lag)
        self.catch_up = float(catch_up)
        self.min_ops, self.max_ops, self.decay = float(min_ops), float(max_ops), float(decay)
        self._s = [0.0] * 5  # sums of n*n, n*o, o*o, n*t, o*t (forgetting)
        self.base_cost = 0.0  # seconds per event
        self.op_cost = 0.0    # seconds per operation
        self.rate = 0.0       # events per second
        self.measured = False  # a rate has been seen

    def update(self, n: int, ops: int, seconds: float, rate: float | None, lag: float,
               backlog: float = 0.0) -> float:
        """Feed one batch; returns the new ``ops_per_event``. ``rate`` None: not measured
        (yet); the last rate, if any, and the backlog count, and with neither the budget
        stays."""
        if n <= 0:
            return self.ops
        d = self.decay
        nn, no, oo, nt, ot = (d * v for v in self._s)
        self._s = [nn + n * n, no + n * ops, oo + ops * ops, nt + n * seconds, ot + ops * seconds]
        nn, no, oo, nt, ot = self._s
        det = nn * oo - no * no
        if det > 1e-9 * max(nn * oo, 1e-300) and oo > 0:
            a, c = (oo * nt - no * ot) / det, (nn * ot - no * nt) / det
        else:  # too little spread in ops per event yet: charge everything to operations
            a, c = 0.0, seconds / max(ops, 1)
        if c <= 0:  # noise made the fit useless; fall back to the conservative ratio
            a, c = 0.0, seconds / max(ops, 1)
        self.base_cost, self.op_cost = max(a, 0.0), max(c, 1e-12)
        if rate is not None and math.isfinite(rate) and rate >= 0:
            self.rate = 0.7 * self.rate + 0.3 * rate if self.measured else rate
            self.measured = True
        elif not self.measured and backlog <= 0:
            return self.ops
        needed = self.rate + max(backlog, 0.0) / self.catch_up  # events per second
        target = (self.u / needed - self.base_cost) / self.op_cost if needed > 0 \
            else self.max_ops
        if lag > self.max_lag:
            target = min(target, self.ops) * self.max_lag / lag
        self.ops = float(min(max(target, self.min_ops), self.max_ops))
        return self.ops
