"""Each arm's 100-game tally in a results folder (Wilson interval) and its pace (the self-play
games and training steps before the rated model, from ladder.csv; the games of the whole run
and the worker's last reported search rates, from cluster-summary.json) and, for every arm
beside the profile as it is (``run-plain``, or the arm named second), the two-sided p of
Fisher's exact test of the two tallies (kgrpc.fisher, the test the coordinator's gating
quorum uses).

    python compare_arms.py FOLDER [BASE]   # reads FOLDER/run-*/level10-m*-v*/ladder.csv;
                                           # BASE: the arm to compare with (run-plain)

The arms are compared on their 40-minute models alone (level10-m40-v1); other ratings of a
run's models (level10-m120-v1: its 120-minute model) are listed with their pace. A folder of
one run compares nothing.
"""

import csv
import json
import re
import sys
from pathlib import Path

from kgrpc.elo import wilson_interval
from kgrpc.fisher import fisher_exact

TRAINED = re.compile(r"trained to step \d+: (\d+) samples/s.* ([\d.]+) samples per data row")


def trainer_pace(run: Path) -> str:
    """The trainer's samples/s (mean and range) and samples per data row (range) over the
    "trained to step" lines of run-*/trainer-steps.txt, one a generation, after the first
    three (the warm-up, where every trainer is at the cap)."""
    path = run / "trainer-steps.txt"  # pace() calls this only where it exists
    lines = [m.groups() for m in map(TRAINED.search, path.read_text().splitlines()) if m]
    if len(lines) < 4:
        return ""
    rates = [int(r) for r, _ in lines[3:]]
    ratios = [float(x) for _, x in lines[3:]]
    return (
        f"; the trainer {sum(rates) / len(rates):,.0f} samples/s on average "
        f"({min(rates):,}-{max(rates):,}), {min(ratios):.2f}-{max(ratios):.2f} samples per row "
        f"after its first three generations"
    )


def pace(run: Path, row: dict[str, str]) -> str:
    """The run's pace: games and steps before the rated model; the whole run's games per
    hour and each worker's rates in its last heartbeat (a recent window, not a run average),
    with its share of the games where the run had several."""
    games_before, steps = int(row["selfplay_games"]), int(row["training_steps"])
    text = f"{games_before:,} games and {steps:,} steps before it"
    if (run / "trainer-steps.txt").exists():
        text += trainer_pace(run)
    summary_path = run / "cluster-summary.json"
    if not summary_path.exists():
        return text
    stats = json.loads(summary_path.read_text())["stats"]
    games, hours = int(stats["games_received"]), int(stats["uptime_s"]) / 3600
    workers = sorted(stats["workers"], key=lambda w: w["display_name"])
    if len(workers) == 1:
        worker = workers[0]["stats"]
        return (
            f"{text}; the run {games:,} games, {games / hours:,.0f} an hour; at its end the "
            f"worker searched {worker['visits_per_s']:,.0f} visits/s, "
            f"{worker['moves_per_s']:,.0f} moves/s"
        )
    # Several workers (--spare-workers): each one's share of the games and its last rates.
    each = ", ".join(
        f"{w['display_name']} {int(w['games_accepted']):,} games, "
        f"{w['stats']['visits_per_s']:,.0f} visits/s"
        for w in workers
    )
    return f"{text}; the run {games:,} games, {games / hours:,.0f} an hour ({each} at its end)"


def main(folder: Path, base_arm: str = "run-plain") -> None:
    tallies, before = {}, {}
    for path in sorted(folder.glob("run-*/level10-m*-v*/ladder.csv")):
        (row,) = csv.DictReader(path.open())
        arm, rating = path.parts[-3], path.parts[-2].removeprefix("level10-")
        wins, games = int(row["wins"]), int(row["games"])
        rate = wins / games
        low, high = wilson_interval(rate, games)
        label = arm if rating == "m40-v1" else f"{arm} {rating}"
        print(f"{label}: {wins}-{row['losses']} of {games}, {rate:.1%} [{low:.1%}, {high:.1%}]")
        print(f"  {pace(path.parents[1], row)}")
        if rating == "m40-v1":
            tallies[arm] = (wins, games)
            before[arm] = (int(row["selfplay_games"]), int(row["training_steps"]))
    if len(tallies) < 2:
        return
    if base_arm not in tallies:
        sys.exit(f"{folder}: no {base_arm}/level10-m40-v1/ladder.csv to compare the arms with")
    base = tallies.pop(base_arm)
    for arm, tally in tallies.items():
        p = fisher_exact(tally[0], tally[1] - tally[0], base[0], base[1] - base[0])
        games, steps = (a / b for a, b in zip(before[arm], before[base_arm], strict=True))
        print(
            f"{arm} against {base_arm}: Fisher's exact test, two-sided p {p:.2f}; "
            f"games before the model x{games:.2f}, steps x{steps:.2f}"
        )


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    main(Path(sys.argv[1]), *sys.argv[2:])
