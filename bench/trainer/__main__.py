"""``python -m bench.trainer``: run the trainer benchmark (see :mod:`bench.trainer.run`)."""

from .run import main

raise SystemExit(main())
