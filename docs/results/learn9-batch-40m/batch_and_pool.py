"""The worker's net batch in each run (the "batch" figure of its last status line: the
engine's mean positions per net run since it started, so over the whole run) and the two
runs of one recipe, run-wb128 and run-plain, pooled (Wilson interval).

    python batch_and_pool.py   # from anywhere; reads run-*/worker-status.txt and
                               # run-{wb128,plain}/level10-m40-v1/ladder.csv
"""

import csv
import re
from pathlib import Path

from kgrpc.elo import wilson_interval

here = Path(__file__).parent
for run in sorted(here.glob("run-*")):
    last = (run / "worker-status.txt").read_text().splitlines()[-1]
    m = re.search(r"\| batch ([\d.]+) \|", last)
    assert m, last
    print(f"{run.name}: {m.group(1)} positions per net run on average over the run")
wins = games = 0
for arm in ("wb128", "plain"):
    (row,) = csv.DictReader((here / f"run-{arm}/level10-m40-v1/ladder.csv").open())
    wins, games = wins + int(row["wins"]), games + int(row["games"])
low, high = wilson_interval(wins / games, games)
print(
    f"run-wb128 and run-plain pooled: {wins}-{games - wins} of {games}, "
    f"{100 * wins / games:.1f}% [{100 * low:.1f}%, {100 * high:.1f}%]"
)
