"""``python -m bench.herd``: run the herd benchmark (see :mod:`bench.herd.run`)."""

from .run import main

raise SystemExit(main())
