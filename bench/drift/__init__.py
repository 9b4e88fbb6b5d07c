"""The drift benchmark (``python -m bench.drift``): shedding policies on drifting streams."""
