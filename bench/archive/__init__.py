"""``python -m bench.archive``: the collector's archive before and after ``--compact``."""
