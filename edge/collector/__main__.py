"""``python -m edge.collector``: the collector service, as ``acep serve``."""

import sys

from .service import main

sys.exit(main())
