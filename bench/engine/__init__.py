"""Engine throughput benchmark: ``python -m bench.engine``."""
