"""A run's trainer loss per generation near steps 20,000 and 40,000 and at its end, from the
"trained to step" lines of its trainer-steps.txt (copied by collect_runs.sh). Run from the
repository root:

    python docs/results/trainer_loss.py docs/results/learn9-amx-2h/run-profile2h
"""

import re
import sys
from pathlib import Path

if len(sys.argv) != 2:
    sys.exit(__doc__)
steps_text = (Path(sys.argv[1]) / "trainer-steps.txt").read_text()
losses = [
    (int(m[1]), float(m[2]))
    for m in re.finditer(r"trained to step (\d+):.*loss ([\d.]+),", steps_text)
]
for target in (20_000, 40_000, losses[-1][0]):
    step, loss = min(losses, key=lambda s: abs(s[0] - target))
    print(f"trainer loss at step {step:,}: {loss:.3f}")
