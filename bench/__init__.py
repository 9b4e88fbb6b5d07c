"""Benchmark drivers, dataset loaders and plots (one sub-package per benchmark)."""
