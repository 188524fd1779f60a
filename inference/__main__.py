"""``python -m inference`` = ``kgrpc-inference``."""

import sys

from inference.cli import main

sys.exit(main())
