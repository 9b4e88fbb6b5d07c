"""``python -m edge.agent``: run the device agent (as ``acep agent``)."""

import sys

from .cli import main

sys.exit(main())
