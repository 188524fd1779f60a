"""``python -m trainer`` (also the entry point for ``torchrun -m trainer``)."""

import sys

from trainer.cli import main

sys.exit(main())
