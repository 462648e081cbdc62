"""``python -m nw.cli``."""

import sys

from nw.cli import main

sys.exit(main())
