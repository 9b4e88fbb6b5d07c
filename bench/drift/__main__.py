"""``python -m bench.drift``: run the drift benchmark (see :mod:`bench.drift.run`)."""

from .run import main

raise SystemExit(main())
