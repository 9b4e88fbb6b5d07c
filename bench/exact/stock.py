"""The stock ticker of [A08] section 6 (``docs/EXACT.md`` 10.1), as :class:`acep.events.Event` rows.

One event type ``Stock`` with attributes ``symbol`` (uniform over 1..S), ``price`` (per
symbol, a walk of +1 with probability p, -1 and 0 with (1 - p) / 2 each, wrapping inside
[1, 1000], from a uniform start) and ``volume`` (uniform in [1, 1000]). The tag is the event
index (a count window). Every event applies its step to its symbol's price and carries the
new price. Seeded, so the same arguments give the same stream.
"""

from __future__ import annotations

import numpy as np

from acep.events import Event

PRICE_MAX = 1000
VOLUME_MAX = 1000


def stock_ticker(n: int, symbols: int = 2, p: float = 0.7, seed: int = 0) -> list[Event]:
    """``n`` Stock events over ``symbols`` symbols, price rising with probability ``p``."""
    if not 0 <= p <= 1:
        raise ValueError(f"p must be in [0, 1], not {p}")
    rng = np.random.default_rng(seed)
    start = rng.integers(1, PRICE_MAX + 1, symbols)
    symbol = rng.integers(0, symbols, n)
    volume = rng.integers(1, VOLUME_MAX + 1, n)
    u = rng.random(n)
    step = np.where(u < p, 1, np.where(u < p + (1 - p) / 2, -1, 0))
    price = np.empty(n, dtype=np.int64)
    for s in range(symbols):
        mine = symbol == s
        # a wrap-around walk: ((start - 1 + sum of steps) mod 1000) + 1
        price[mine] = (start[s] - 1 + np.cumsum(step[mine])) % PRICE_MAX + 1
    return [Event("Stock", float(i), {"symbol": s + 1, "price": pr, "volume": v})
            for i, (s, pr, v) in enumerate(zip(symbol.tolist(), price.tolist(),
                                               volume.tolist()))]
