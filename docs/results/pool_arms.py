"""Runs of one recipe pooled: the 100-game tallies of some arms of a results folder (their
40-minute models alone, level10-m40-v1), pooled with a Wilson interval, and a chi-square test
of the tallies against one common win rate (kgrpc.elo.same_rate_test).

    python pool_arms.py FOLDER [ARM...]   # reads FOLDER/ARM/level10-m40-v1/ladder.csv;
                                          # without ARMs, every run-* in FOLDER

Pool only runs of one recipe from one session (the runs of different sessions differ more
than samples of one rate would: docs/training.md).
"""

import csv
import sys
from pathlib import Path

from kgrpc.elo import same_rate_test, wilson_interval


def main(folder: Path, arms: list[str]) -> None:
    paths = [folder / arm / "level10-m40-v1/ladder.csv" for arm in arms] or sorted(
        folder.glob("run-*/level10-m40-v1/ladder.csv")
    )
    tallies = []
    for path in paths:
        if not path.exists():
            sys.exit(f"{path}: no such rating (the arm's 40-minute model alone)")
        (row,) = csv.DictReader(path.open())
        wins, games = int(row["wins"]), int(row["games"])
        tallies.append((wins, games))
        print(f"{path.parts[-3]}: {wins}-{games - wins} of {games}")
    if len(tallies) < 2:
        sys.exit("pooling needs at least two arms")
    wins, games = sum(w for w, _ in tallies), sum(n for _, n in tallies)
    low, high = wilson_interval(wins / games, games)
    print(f"pooled: {wins}-{games - wins} of {games}, {wins / games:.1%} [{low:.1%}, {high:.1%}]")
    chi2, dof, p = same_rate_test(tallies)
    print(f"chi-square {chi2:.2f}, {dof} degrees of freedom, p {p:.2f}")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(Path(sys.argv[1]), sys.argv[2:])
