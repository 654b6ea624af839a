"""``python -m poolkit.cli``."""

import sys

from . import main

sys.exit(main())
