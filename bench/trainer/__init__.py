"""Trainer benchmark: wall time of the Spark trainer against the single process: ``python -m
bench.trainer``."""
