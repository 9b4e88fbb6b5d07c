"""``python -m bench.engine``: run the engine benchmark (see :mod:`bench.engine.run`)."""

from .run import main

raise SystemExit(main())
