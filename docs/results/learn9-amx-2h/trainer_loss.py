"""This run's trainer loss per generation near steps 20,000 and 40,000 and at its end, from
the "trained to step" lines of run-profile2h/trainer-steps.txt. Run from the repository root:

    python docs/results/learn9-amx-2h/trainer_loss.py
"""

import re
from pathlib import Path

steps_text = (Path(__file__).parent / "run-profile2h/trainer-steps.txt").read_text()
losses = [
    (int(m[1]), float(m[2]))
    for m in re.finditer(r"trained to step (\d+):.*loss ([\d.]+),", steps_text)
]
for target in (20_000, 40_000, losses[-1][0]):
    step, loss = min(losses, key=lambda s: abs(s[0] - target))
    print(f"trainer loss at step {step:,}: {loss:.3f}")
