"""``python -m bench.exact``: run the exact-engine benchmark (see :mod:`bench.exact.run`)."""

from .run import main

raise SystemExit(main())
