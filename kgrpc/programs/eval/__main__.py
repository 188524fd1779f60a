import sys

from kgrpc.programs.eval.cli import main

sys.exit(main())
