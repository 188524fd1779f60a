"""The three runs' 100-game tallies pooled (Wilson interval) and a chi-square test of them
against one common win rate (kgrpc.elo.same_rate_test).

    python pool.py   # from this folder; reads run-*/level10-m40-v1/ladder.csv
"""

import csv
from pathlib import Path

from kgrpc.elo import same_rate_test, wilson_interval

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
chi2, dof, p = same_rate_test([(w, n) for _, w, n in tallies])
print(f"chi-square {chi2:.2f}, {dof} degrees of freedom, p {p:.2f}")
