"""`torchrun --nproc-per-node 2 -m trainer run`: DistributedDataParallel with gloo on CPU."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kgrpc.programs.bench.train import write_synthetic_run
from trainer.checkpoint import latest_checkpoint, load_checkpoint, state_from_checkpoint
from trainer.export import read_metadata

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_two_process_gloo_run(tmp_path) -> None:
    data, work = tmp_path / "data", tmp_path / "work"
    write_synthetic_run(data, 2, 64, 8, 5)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
        "-m",
        "trainer",
        "run",
        "--data-dir",
        str(data),
        "--work-dir",
        str(work),
        "--no-publish",
        "--blocks",
        "1",
        "--channels",
        "8",
        "--batch-size",
        "16",
        "--steps-per-generation",
        "3",
        "--min-new-rows",
        "0",
        "--once",
        "--device",
        "cpu",
        "--checkpoint-every",
        "0",
    ]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    # Rank 0 alone printed the summary and wrote the files.
    assert proc.stdout.count("done: step 3, 1 generations") == 1, proc.stdout
    state = state_from_checkpoint(load_checkpoint(latest_checkpoint(work / "checkpoints")))
    # Samples count both processes' batches: DDP's effective batch is 2 x 16.
    assert (state.step, state.samples, state.generation) == (3, 3 * 2 * 16, 1)
    models = list((work / "models").glob("*.onnx"))
    assert [m.name for m in models] == ["kg-b1c8-s3-d128.onnx"]
    assert read_metadata(models[0])["training_steps"] == "3"
    with open(work / "train_log.csv") as f:
        assert len(f.read().splitlines()) == 1 + 3  # header + one line per step, rank 0 only
