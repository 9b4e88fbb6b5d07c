"""``python -m acep.cli``: the ``acep`` command."""

import sys

from . import main

sys.exit(main())
