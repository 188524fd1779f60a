"""Each arm's 100-game tally (Wilson interval, kgrpc.elo) and, for every arm beside the
profile as it is (run-plain), a chi-square test of the two tallies against one common win
rate (1 degree of freedom: p = erfc(sqrt(chi2 / 2))).

    python compare.py   # from this folder; reads run-*/level10-m40-v1/ladder.csv
"""

import csv
import math
from pathlib import Path

from kgrpc.elo import wilson_interval

here = Path(__file__).parent
tallies = {}
for path in sorted(here.glob("run-*/level10-m40-v1/ladder.csv")):
    (row,) = csv.DictReader(path.open())
    arm, wins, games = path.parts[-3], int(row["wins"]), int(row["games"])
    low, high = wilson_interval(wins / games, games)
    tallies[arm] = (wins, games)
    print(f"{arm}: {wins}-{row['losses']} of {games}, {wins / games:.1%} [{low:.1%}, {high:.1%}]")


def chi_square(a: tuple[int, int], b: tuple[int, int]) -> float:
    """Pearson's chi-square of two win-loss tallies against their pooled win rate."""
    rate = (a[0] + b[0]) / (a[1] + b[1])
    return sum(
        (w - n * rate) ** 2 / (n * rate) + ((n - w) - n * (1 - rate)) ** 2 / (n * (1 - rate))
        for w, n in (a, b)
    )


base = tallies.pop("run-plain")
for arm, tally in tallies.items():
    chi2 = chi_square(tally, base)
    p = math.erfc(math.sqrt(chi2 / 2))
    print(f"{arm} against run-plain: chi-square {chi2:.2f}, 1 degree of freedom, p {p:.2f}")
