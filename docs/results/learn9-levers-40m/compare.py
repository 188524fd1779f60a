"""Each arm's 100-game tally (Wilson interval) and, for every arm beside the profile as it is
(run-plain), the two-sided p of Fisher's exact test of the two tallies (kgrpc.fisher, the
test the coordinator's gating quorum uses).

    python compare.py   # from this folder; reads run-*/level10-m40-v1/ladder.csv
"""

import csv
from pathlib import Path

from kgrpc.elo import wilson_interval
from kgrpc.fisher import fisher_exact

here = Path(__file__).parent
tallies = {}
for path in sorted(here.glob("run-*/level10-m40-v1/ladder.csv")):
    (row,) = csv.DictReader(path.open())
    arm, wins, games = path.parts[-3], int(row["wins"]), int(row["games"])
    low, high = wilson_interval(wins / games, games)
    tallies[arm] = (wins, games)
    print(f"{arm}: {wins}-{row['losses']} of {games}, {wins / games:.1%} [{low:.1%}, {high:.1%}]")


base = tallies.pop("run-plain")
for arm, tally in tallies.items():
    p = fisher_exact(tally[0], tally[1] - tally[0], base[0], base[1] - base[0])
    print(f"{arm} against run-plain: Fisher's exact test, two-sided p {p:.2f}")
