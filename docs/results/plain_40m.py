"""Every 40-minute run of the learn9 profile as it was until 2026-12-06 evening (the Gumbel
recipe, no lever added, the worker's engine on one ONNX Runtime thread per core) on the
2-core AMD EPYC VM with AVX-512 VNNI, its 40-minute model alone (one visit per move)
against GNU Go level 10 over 100 games: each run's tally and pace, the tallies pooled (Wilson
interval), a chi-square test of them against one common win rate (kgrpc.elo.same_rate_test)
and the correlation of win rate with the self-play games the run played before that model
and with that model's training steps.

The runs come from several sessions, so this describes how the recipe's runs spread on that
machine; it compares no lever (each lever is set against the plain run of its own session).

    python plain_40m.py   # from docs/results; reads each run's ladder.csv
"""

import csv
import math
from pathlib import Path

from kgrpc.elo import same_rate_test, wilson_interval

# (ladder folder, the session's date and the run's start, UTC)
RUNS = (
    ("learn9-puct-gumbel-40m/gumbel/level10/m40-v1", "2026-12-04 18:35"),
    ("learn9-every-move-40m/learn9/level10-m40-v1", "2026-12-06 05:53"),
    ("learn9-spread-40m/run-a/level10-m40-v1", "2026-12-06 10:36"),
    ("learn9-spread-40m/run-b/level10-m40-v1", "2026-12-06 11:16"),
    ("learn9-spread-40m/run-c/level10-m40-v1", "2026-12-06 11:56"),
    ("learn9-levers-40m/run-plain/level10-m40-v1", "2026-12-06 14:18"),
    ("learn9-rate-ratio-40m/run-plain/level10-m40-v1", "2026-12-06 17:20"),
    ("learn9-rate-threads-40m/run-plain/level10-m40-v1", "2026-12-06 20:15"),
)


def pearson(xs: list[float], ys: list[float]) -> float:
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    sxx = sum((x - mx) ** 2 for x in xs)
    syy = sum((y - my) ** 2 for y in ys)
    return sxy / math.sqrt(sxx * syy)


here = Path(__file__).parent
tallies, games_played, steps_trained, rates = [], [], [], []
print("run | started (UTC) | self-play games | steps | W-L | win rate [Wilson 95%]")
for folder, started in RUNS:
    (row,) = csv.DictReader((here / folder / "ladder.csv").open())
    wins, games = int(row["wins"]), int(row["games"])
    rate = wins / games
    low, high = wilson_interval(rate, games)
    print(
        f"{folder.split('/level10')[0]} | {started} | {row['selfplay_games']} | "
        f"{row['training_steps']} | {wins}-{row['losses']} | {rate:.1%} [{low:.1%}, {high:.1%}]"
    )
    tallies.append((wins, games))
    games_played.append(float(row["selfplay_games"]))
    steps_trained.append(float(row["training_steps"]))
    rates.append(rate)
wins, games = sum(w for w, _ in tallies), sum(n for _, n in tallies)
low, high = wilson_interval(wins / games, games)
print(f"pooled: {wins}/{games}, {wins / games:.1%} [{low:.1%}, {high:.1%}]")
chi2, dof, p = same_rate_test(tallies)
print(f"one common rate: chi-square {chi2:.2f}, {dof} degrees of freedom, p {p:.3f}")
# t statistic of a Pearson r with n - 2 degrees of freedom; its two-sided p is not printed
# (no t distribution here), the 5% point for 6 degrees of freedom is 2.447. Games and steps
# move together in these runs (one machine's pace sets both), so the two r are not two facts.
for what, xs in (("self-play games", games_played), ("training steps", steps_trained)):
    r = pearson(xs, rates)
    t = r * math.sqrt((len(rates) - 2) / (1 - r * r))
    print(f"win rate against {what}: Pearson r {r:.2f}, t {t:.2f} ({len(rates) - 2} dof)")
