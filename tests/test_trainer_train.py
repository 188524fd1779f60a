"""Losses, the training step, checkpoints and resume, the run loop, and `kgrpc-train export`."""

from __future__ import annotations

import csv

import numpy as np
import onnx
import pytest
import torch

from kgrpc.programs.bench.train import write_synthetic_run
from trainer.batches import make_batch
from trainer.checkpoint import latest_checkpoint, list_checkpoints, load_checkpoint
from trainer.cli import main as train_main
from trainer.config import TrainConfig
from trainer.data import ShardIndex, WindowLoader
from trainer.export import read_metadata
from trainer.losses import LossWeights, compute_losses
from trainer.model import KgrpcNet
from trainer.steps import Trainer
from trainer.train import run_training


def _cfg(tmp_path, **kw) -> TrainConfig:
    base = dict(
        data_dir=str(tmp_path / "data"),
        work_dir=str(tmp_path / "work"),
        blocks=1,
        channels=16,
        batch_size=32,
        lr=3e-3,
        steps_per_generation=4,
        min_new_rows=0,
        generations=1,
        publish=False,
        poll_interval_s=0.05,
        prefetch=2,
        device="cpu",
        log_every_s=1e9,
    )
    base.update(kw)
    return TrainConfig(**base).validate()


def test_loss_terms_by_hand() -> None:
    n = 3
    logits = torch.zeros(2, n * n + 1)
    batch_policy = torch.full((2, n * n + 1), 1.0 / (n * n + 1))

    class B:
        policy = batch_policy
        value = torch.tensor([1.0, -1.0])
        score = torch.tensor([20.0, 100.0])
        ownership = torch.ones(2, n, n)

    out = (logits, torch.zeros(2), torch.zeros(2), torch.zeros(2, n, n))
    losses = compute_losses(out, B, LossWeights())
    assert losses["policy"].item() == pytest.approx(np.log(n * n + 1))  # uniform vs uniform
    assert losses["value"].item() == pytest.approx(1.0)
    # Score in units of 20 points, Huber delta 1: errors 1 -> 0.5, 5 -> 4.5; mean 2.5.
    assert losses["score"].item() == pytest.approx(2.5)
    assert losses["ownership"].item() == pytest.approx(1.0)
    assert losses["loss"].item() == pytest.approx(np.log(10) + 1 + 0.5 * 2.5 + 0.5)
    mse = compute_losses(out, B, LossWeights(score_huber_delta=0))
    assert mse["score"].item() == pytest.approx((1 + 25) / 2)


@pytest.mark.slow
def test_loss_goes_down_on_a_fixed_dataset(tmp_path) -> None:
    write_synthetic_run(tmp_path / "data", 1, 256, 16, 5)
    window = WindowLoader(100).load(ShardIndex(tmp_path / "data").refresh())
    cfg = _cfg(tmp_path)
    torch.manual_seed(0)
    trainer = Trainer(KgrpcNet(1, 16), cfg)
    fixed = make_batch(window.by_size[5], np.arange(256), None)

    def eval_loss() -> float:
        trainer.model.eval()
        with torch.no_grad():
            return compute_losses(
                trainer.model(fixed.planes, fixed.globals), fixed, trainer.weights
            )["loss"].item()

    before = eval_loss()
    figures = trainer.train_steps(window, 60)
    after = eval_loss()
    assert trainer.state.step == 60 and trainer.state.samples == 60 * 32
    assert after < 0.7 * before, (before, after)
    assert 0.0 <= figures["data_wait_share"] <= 1.0


@pytest.mark.slow
def test_run_exports_checkpoints_and_resumes(tmp_path, capsys) -> None:
    write_synthetic_run(tmp_path / "data", 2, 64, 8, 5)
    cfg = _cfg(tmp_path, checkpoint_every=3, keep_checkpoints=2)
    state = run_training(cfg)
    assert (state.step, state.generation, state.data_rows) == (4, 1, 128)
    work = tmp_path / "work"
    assert state.last_model == "kg-b1c16-s4-d128"
    model_path = work / "models" / "kg-b1c16-s4-d128.onnx"
    meta = read_metadata(model_path)
    assert (meta["training_steps"], meta["training_rows"], meta["board_sizes"]) == ("4", "128", "5")
    onnx.checker.check_model(onnx.load(str(model_path)))
    assert [s for s, _ in list_checkpoints(work / "checkpoints")] == [3, 4]
    first = load_checkpoint(latest_checkpoint(work / "checkpoints"))

    # A restart continues the counters and the optimiser; new data arrives meanwhile.
    write_synthetic_run(tmp_path / "data", 1, 64, 8, 5, first_index=3)
    state2 = run_training(_cfg(tmp_path, min_new_rows=64, checkpoint_every=0))
    assert (state2.step, state2.generation, state2.samples) == (8, 2, 8 * 32)
    assert state2.last_model == "kg-b1c16-s8-d192"
    assert (work / "models" / "kg-b1c16-s8-d192.onnx").exists()
    second = load_checkpoint(latest_checkpoint(work / "checkpoints"))
    adam_steps = [s["step"] for s in second["optimizer"]["state"].values()]
    assert all(int(s) == 8 for s in adam_steps)  # Adam's own counters carried over
    assert not torch.equal(first["model"]["stem.weight"], second["model"]["stem.weight"])
    with open(work / "train_log.csv") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["step"]) for r in rows] == list(range(1, 9))
    assert all(float(r["loss"]) > 0 and r["board_size"] == "5" for r in rows)


@pytest.mark.slow
def test_export_command_from_checkpoint(tmp_path, capsys) -> None:
    write_synthetic_run(tmp_path / "data", 1, 64, 8, 5)
    run_training(_cfg(tmp_path, steps_per_generation=2))
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    rc = train_main(
        [
            "export",
            "--checkpoint",
            str(tmp_path / "work" / "checkpoints"),
            "--out",
            str(out_dir),
            "--board-size",
            "5",
            "--board-size",
            "9",
            "--series",
            "demo",
        ]
    )
    assert rc == 0
    assert "parity max diff" in capsys.readouterr().out
    path = out_dir / "demo-b1c16-s2-d64.onnx"
    meta = read_metadata(path)
    assert meta["name"] == "demo-b1c16-s2-d64" and meta["board_sizes"] == "5,9"
    assert (
        train_main(
            [
                "export",
                "--checkpoint",
                str(tmp_path / "nothing.pt"),
                "--out",
                str(out_dir / "x.onnx"),
            ]
        )
        == 2
    )
    assert "not a readable checkpoint" in capsys.readouterr().err


def test_run_refuses_missing_coordinator(tmp_path) -> None:
    with pytest.raises(ValueError, match="--coordinator is required"):
        run_training(_cfg(tmp_path, publish=True))
