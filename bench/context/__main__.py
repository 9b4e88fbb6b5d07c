"""``python -m bench.context``: run the context benchmark (see :mod:`bench.context.run`)."""

from .run import main

raise SystemExit(main())
