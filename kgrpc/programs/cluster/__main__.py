import sys

from kgrpc.programs.cluster.main import main

sys.exit(main())
