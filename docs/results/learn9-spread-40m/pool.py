"""The three runs' 100-game tallies pooled (Wilson interval, kgrpc.elo) and a chi-square test
of them against one common win rate (2 degrees of freedom: p = exp(-chi2 / 2)).

    python pool.py   # from this folder; reads run-*/level10-m40-v1/ladder.csv
"""

import csv
import math
from pathlib import Path

from kgrpc.elo import wilson_interval

here = Path(__file__).parent
tallies = []
for path in sorted(here.glob("run-*/level10-m40-v1/ladder.csv")):
    (row,) = csv.DictReader(path.open())
    tallies.append((path.parts[-3], int(row["wins"]), int(row["games"])))
    print(f"{path.parts[-3]}: {row['wins']}-{row['losses']} of {row['games']}")
wins, games = sum(w for _, w, _ in tallies), sum(n for _, _, n in tallies)
rate = wins / games
low, high = wilson_interval(rate, games)
print(f"pooled: {wins}/{games}, {rate:.1%} [{low:.1%}, {high:.1%}]")
chi2 = sum(
    (w - n * rate) ** 2 / (n * rate) + ((n - w) - n * (1 - rate)) ** 2 / (n * (1 - rate))
    for _, w, n in tallies
)
dof = len(tallies) - 1
assert dof == 2, "p = exp(-chi2/2) holds for 2 degrees of freedom only"
print(f"chi-square {chi2:.2f}, {dof} degrees of freedom, p {math.exp(-chi2 / 2):.2f}")
