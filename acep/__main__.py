"""``python -m acep``: the ``acep`` command."""

import sys

from .cli import main

sys.exit(main())
