"""``python -m bench.archive``: run the archive benchmark (see :mod:`bench.archive.run`)."""

from .run import main

raise SystemExit(main())
