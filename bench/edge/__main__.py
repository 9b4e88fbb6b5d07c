"""``python -m bench.edge``: run the edge benchmark (see :mod:`bench.edge.run`)."""

from .run import main

raise SystemExit(main())
