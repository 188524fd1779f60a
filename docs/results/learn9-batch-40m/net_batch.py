"""The worker's net batch in each run (the "batch" figure of its last status line: the
engine's mean positions per net run since it started, so over the whole run).

    python net_batch.py   # from anywhere; reads run-*/worker-status.txt
"""

import re
from pathlib import Path

here = Path(__file__).parent
for run in sorted(here.glob("run-*")):
    last = (run / "worker-status.txt").read_text().splitlines()[-1]
    m = re.search(r"\| batch ([\d.]+) \|", last)
    assert m, last
    print(f"{run.name}: {m.group(1)} positions per net run on average over the run")
