"""Parity of the int8 quantisation of trainer/export.py (trunk only, 8-bit weights, calibrated
on real positions plus a quarter as many of random games) on every STEP-th fp32 model of a
finished run, against the model's fp32 file: on 256 held-out positions of the run's newest
shards (the trainer's check) and on the coordinator's 128 random-game positions.

    python check.py RUN STEP
"""

import sys
from pathlib import Path

import onnx

from kgrpc.randgame import random_positions
from trainer import parity
from trainer.parity import ParityBounds
from trainer.positions import Positions, describe, draw_sets, with_random_games
from trainer.quantize import RANDOM_CALIBRATION_SHARE, to_int8

run, step = Path(sys.argv[1]), int(sys.argv[2])


def steps(p: Path) -> int:
    return int(p.name.split("-s")[1].split("-")[0])


models = sorted((p for p in (run / "models").glob("kg-*.onnx") if p.name.count(".") == 1), key=steps)
calib, held = draw_sets([9], 256, data_dir=run)
assert all(p.source == "shards" for p in calib), describe(calib)
calib = with_random_games(calib, RANDOM_CALIBRATION_SHARE)
x, g = random_positions(9, 128, seed=9)  # as kgrpc/coordinator/model_check.py draws them
coordinator = [Positions(9, x, g, "random games")]
print(f"calibration: {describe(calib)}; held out: {describe(held)}")
passed = 0
picked = models[::step] + ([models[-1]] if (len(models) - 1) % step else [])
for m in picked:
    q = to_int8(onnx.load(str(m)), calib).SerializeToString()
    line, ok = [], True
    for label, sets in (("held-out", held), ("coordinator", coordinator)):
        rep = parity.compare("int8", parity.onnx_outputs(str(m), sets), parity.onnx_outputs(q, sets))
        bad = rep.violations(ParityBounds())
        ok = ok and not bad
        line.append(
            f"{label} top-1 {rep.top1:.3f} KL {rep.kl:.4f} value {rep.value_mae:.4f} "
            f"score {rep.score_mae:.3f}{' REFUSED: ' + '; '.join(bad) if bad else ''}"
        )
    passed += ok
    print(f"{m.stem:26s} " + " | ".join(line), flush=True)
print(f"{passed} of {len(picked)} pass both")
