"""``python -m bench.shedding``: run the shedding benchmark (see :mod:`bench.shedding.run`)."""

from .run import main

raise SystemExit(main())
