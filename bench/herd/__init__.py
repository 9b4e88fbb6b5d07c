"""A fleet reconnecting at once: the collector's overload limits (see :mod:`bench.herd.run`)."""
