"""``python -m kgrpc.coordinator`` = ``kgrpc-coordinator``."""

import sys

from kgrpc.coordinator.cli import main

sys.exit(main())
