"""A model's policy on held-out GNU Go positions: top-1 agreement with GNU Go's move, mean
policy entropy (nats), value sign agreement with the game's outcome."""

from __future__ import annotations

import sys

import numpy as np

from inference.engine import Engine
from kgrpc import shards

model, shard = sys.argv[1], sys.argv[2]
d = shards.load_shard(shard)
eng = Engine(model, device="cpu")
top1 = ent = vsign = 0.0
rows = len(d["value"])
for i in range(0, rows, 64):
    p, v, _s, _o = eng.run(19, d["states"][i : i + 64], d["globals"][i : i + 64])
    top1 += float((p.argmax(1) == d["policy"][i : i + 64].argmax(1)).sum())
    ent += float(-(p * np.log(np.maximum(p, 1e-12))).sum(1).sum())
    vsign += float((np.sign(v.reshape(-1)) == np.sign(d["value"][i : i + 64])).sum())
print(f"{rows} positions: top-1 {top1 / rows:.3f}, entropy {ent / rows:.2f} nats, "
      f"value sign {vsign / rows:.3f}")
