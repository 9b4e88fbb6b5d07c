"""``python -m edge.collector``: the collector service, as ``acep serve``."""

import sys

from .cli import main

sys.exit(main())
