"""``python -m tests.simulator``: see :mod:`.sim`."""

import sys

from .sim import main

sys.exit(main())
