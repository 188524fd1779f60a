"""Each arm's 100-game tally in a results folder (Wilson interval) and, for every arm beside
the profile as it is (``run-plain``), the two-sided p of Fisher's exact test of the two
tallies (kgrpc.fisher, the test the coordinator's gating quorum uses).

    python compare_arms.py FOLDER   # reads FOLDER/run-*/level10-m40-v1/ladder.csv
"""

import csv
import sys
from pathlib import Path

from kgrpc.elo import wilson_interval
from kgrpc.fisher import fisher_exact


def main(folder: Path, base_arm: str = "run-plain") -> None:
    tallies = {}
    for path in sorted(folder.glob("run-*/level10-m40-v1/ladder.csv")):
        (row,) = csv.DictReader(path.open())
        arm, wins, games = path.parts[-3], int(row["wins"]), int(row["games"])
        rate = wins / games
        low, high = wilson_interval(rate, games)
        tallies[arm] = (wins, games)
        print(f"{arm}: {wins}-{row['losses']} of {games}, {rate:.1%} [{low:.1%}, {high:.1%}]")
    if base_arm not in tallies:
        sys.exit(f"{folder}: no {base_arm}/level10-m40-v1/ladder.csv to compare the arms with")
    base = tallies.pop(base_arm)
    for arm, tally in tallies.items():
        p = fisher_exact(tally[0], tally[1] - tally[0], base[0], base[1] - base[0])
        print(f"{arm} against {base_arm}: Fisher's exact test, two-sided p {p:.2f}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(Path(sys.argv[1]))
