"""``python -m kgrpc.programs.gtp``: the same as ``kgrpc-gtp`` (match tools spawn it so)."""

import sys

from kgrpc.programs.gtp.cli import main

sys.exit(main())
