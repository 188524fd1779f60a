"""int8 (trunk, 8-bit) of fp32 models of a run, calibrated three ways, measured against the
fp32 file on held-out real positions (the trainer's check) and on random-game positions (the
coordinator's: 32 at seed 9, and 512 more)."""
import sys
from pathlib import Path
import onnx
from trainer import parity, quantize
from trainer.parity import ParityBounds
from trainer.positions import draw_sets, describe, Positions, from_random_games
from kgrpc.randgame import random_positions
run = Path(sys.argv[1])
rx, rg = random_positions(9, 32, seed=9)
coord = [Positions(9, rx, rg, "random")]
bx, bg = random_positions(9, 512, seed=99)
big = [Positions(9, bx, bg, "random")]
calib, held = draw_sets([9], 256, data_dir=run, seed=1)
assert "shards" in describe(calib), describe(calib)
rand = [from_random_games(9, int(a), seed=7) for a in sys.argv[2].split(",")]
for name in sys.argv[3:]:
    m = run / "models" / f"{name}.onnx"
    variants = [("real256", calib)] + [(f"real256+rand{len(r)}", calib + [r]) for r in rand] + [("rand256", [from_random_games(9, 256, seed=3)])]
    for label, cal in variants:
        q = quantize.to_int8(onnx.load(str(m)), cal).SerializeToString()
        res = []
        for what, sets in (("real-held", held), ("coord32", coord), ("rand512", big)):
            rep = parity.compare("int8", parity.onnx_outputs(str(m), sets), parity.onnx_outputs(q, sets))
            ok = "ok" if not rep.violations(ParityBounds()) else "FAIL"
            res.append(f"{what} t{rep.top1:.3f} kl{rep.kl:.4f} v{rep.value_mae:.3f} s{rep.score_mae:.2f} {ok}")
        print(f"{name} {label:16s} " + " | ".join(res), flush=True)
