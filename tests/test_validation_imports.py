"""The replay pool's processes import only what a replay needs.

Each pool process imports :mod:`kgrpc.coordinator.validate`; grpc (and with it the store,
the workers table and the network helpers) cost each process about 14 MB and a replay never
uses them. Checked in a fresh interpreter, as a spawned pool process starts.
"""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import sys
from kgrpc.coordinator import validate
from kgrpc.randgame import make_random_game

validate.warm_up()
rec = make_random_game(9, "chinese", seed=4)
s = validate.ValidationSettings(require_task=False, sgf_share=1.0)
[out] = validate.validate_many([(rec.SerializeToString(), "w-probe")], s)
assert out.ok and out.positions > 0 and out.kept is not None, out
heavy = sorted(m for m in ("grpc", "kgrpc.coordinator.store", "kgrpc.net") if m in sys.modules)
print("loaded:", ",".join(heavy) or "none")
"""


def test_a_pool_process_validates_without_grpc() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "loaded: none", proc.stdout
