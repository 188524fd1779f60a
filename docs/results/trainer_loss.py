"""A run's trainer loss per generation near steps 20,000 and 40,000 and at its end, from the
"trained to step" lines of its trainer-steps.txt (copied by collect_runs.sh); given STEP (a
schedule's change, e.g. a learning-rate drop), also the mean loss of the generations in the
SPAN steps before it and in the SPAN steps after it, with the standard deviation of those
generations' losses (a generation's loss scatters with the rows it draws, so single points
cannot show a change smaller than that). Run from the repository root:

    python docs/results/trainer_loss.py docs/results/learn9-amx-2h/run-profile2h
    python docs/results/trainer_loss.py docs/results/learn9-drop-2h/run-drop 78399
"""

import re
import statistics
import sys
from pathlib import Path

# Steps each side of STEP: about the steps learn9-drop-2h/'s 2-hour run had after its drop
# (7,595 to its 120-minute model).
SPAN = 7_000

if len(sys.argv) not in (2, 3):
    sys.exit(__doc__)
steps_text = (Path(sys.argv[1]) / "trainer-steps.txt").read_text()
losses = [
    (int(m[1]), float(m[2]))
    for m in re.finditer(r"trained to step (\d+):.*loss ([\d.]+),", steps_text)
]
for target in (20_000, 40_000, losses[-1][0]):
    step, loss = min(losses, key=lambda s: abs(s[0] - target))
    print(f"trainer loss at step {step:,}: {loss:.3f}")
if len(sys.argv) == 3:
    change = int(sys.argv[2])
    for label, lo, hi in (("before", change - SPAN, change), ("after", change, change + SPAN)):
        span = [loss for step, loss in losses if lo < step <= hi]
        print(
            f"mean loss of the {len(span)} generations {label} step {change:,} "
            f"(steps {max(lo, 0):,}-{hi:,}): {statistics.mean(span):.3f} "
            f"(standard deviation {statistics.stdev(span):.3f})"
        )
