"""This run's 2-hour model against kg9 (the AMD run's, ../learn9-gumbel-2h/), both alone
against GNU Go level 10 over 100 games: the two tallies, Fisher's exact test, the games each
run played; and this run's trainer loss per generation near steps 20,000 and 40,000 and at
its end (run-profile2h/trainer-steps.txt). Run from the repository root:

    python docs/results/learn9-amx-2h/vs_kg9.py
"""

import csv
import json
import re
from pathlib import Path

from kgrpc.fisher import fisher_exact

here = Path(__file__).parent
ours, kg9 = here / "run-profile2h", here.parent / "learn9-gumbel-2h"


def tally(path: Path) -> tuple[int, int]:
    (row,) = csv.DictReader(path.open())
    return int(row["wins"]), int(row["losses"])


def games(summary: Path) -> int:
    return int(json.loads(summary.read_text())["stats"]["games_received"])


a, b = tally(ours / "level10-m120-v1/ladder.csv"), tally(kg9 / "level10/m120-v1/ladder.csv")
print(
    f"this run's 2-hour model {a[0]}-{a[1]}, kg9 {b[0]}-{b[1]}: "
    f"Fisher's exact test, two-sided p {fisher_exact(a[0], a[1], b[0], b[1]):.2f}"
)
ga, gb = games(ours / "cluster-summary.json"), games(kg9 / "cluster-summary.json")
print(f"games in 2 hours: {ga:,} against {gb:,}, x{ga / gb:.2f}")
steps_text = (ours / "trainer-steps.txt").read_text()
losses = [
    (int(m[1]), float(m[2]))
    for m in re.finditer(r"trained to step (\d+):.*loss ([\d.]+),", steps_text)
]
for target in (20_000, 40_000, losses[-1][0]):
    step, loss = min(losses, key=lambda s: abs(s[0] - target))
    print(f"trainer loss at step {step:,}: {loss:.3f}")
