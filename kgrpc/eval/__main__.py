import sys

from kgrpc.eval.cli import main

sys.exit(main())
