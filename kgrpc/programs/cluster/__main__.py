import sys

from kgrpc.programs.cluster.run import main

sys.exit(main())
