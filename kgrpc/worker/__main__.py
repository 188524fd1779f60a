import sys

from kgrpc.worker.cli import main

sys.exit(main())
