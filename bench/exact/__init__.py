"""Exact (SASE+) engine benchmark on the [A08] stock ticker: ``python -m bench.exact``."""
