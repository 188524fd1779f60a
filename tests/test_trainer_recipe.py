"""The trainer recipe: growing window, learning-rate schedule, samples per new row, averaged
weights for exports (trainer/schedule.py, trainer/averaging.py; docs/training.md)."""

from __future__ import annotations

import csv
import math

import numpy as np
import onnxruntime as ort
import pytest
import torch

from kgrpc.programs.bench.train import write_synthetic_run
from tests.test_trainer_train import _cfg as train_cfg
from trainer.averaging import WeightAverage
from trainer.checkpoint import (
    exported_model_from_checkpoint,
    latest_checkpoint,
    load_checkpoint,
    model_from_checkpoint,
)
from trainer.config import TrainConfig
from trainer.data import ShardIndex, WindowLoader, first_game_for_rows
from trainer.export import random_inputs
from trainer.model import KgrpcNet
from trainer.schedule import SampleBudget, lr_factor, window_rows
from trainer.steps import Trainer
from trainer.train import run_training


def _cfg(tmp_path, **kw) -> TrainConfig:
    """tests/test_trainer_train.py's tiny run, narrower (8 channels, batch 16)."""
    return train_cfg(tmp_path, **{"channels": 8, "batch_size": 16, "parity_positions": 16, **kw})


# ------------------------------------------------------------------ growing window


def test_window_rows_formula() -> None:
    c, a, b = 1000, 0.75, 0.4
    assert window_rows(0, c, a, b) == 0
    assert window_rows(600, c, a, b) == 600  # every row while there are at most c
    assert window_rows(1000, c, a, b) == 1000
    # c * (1 + b * ((N/c)^a - 1) / a) beyond c: N = 16c -> 1000 * (1 + 0.4 * 7 / 0.75)
    assert window_rows(16_000, c, a, b) == int(1000 * (1 + 0.4 * 7 / 0.75))
    # Slope b just past c, falling as N^(a-1) further on.
    assert window_rows(1100, c, a, b) - 1000 == pytest.approx(0.4 * 100, abs=2)
    far = window_rows(101_000, c, a, b) - window_rows(100_000, c, a, b)
    assert far == pytest.approx(1000 * 0.4 * 100 ** (a - 1), abs=2)
    # Exponent 1, growth 1: the window is all the data; growth 0: it stays at c.
    assert window_rows(50_000, c, 1.0, 1.0) == 50_000
    assert window_rows(50_000, c, 0.5, 0.0) == c
    assert window_rows(50_000, 0, a, b) is None  # no growth rule


def test_window_loader_cuts_rows_at_a_game_boundary(tmp_path) -> None:
    write_synthetic_run(tmp_path, 3, 40, 4, 5)  # 10 rows per game
    shards = ShardIndex(tmp_path).refresh()
    # 55 rows wanted: the newest shard (40) and the 2 newest games of the middle one (20).
    window = WindowLoader(window_games=100).load(shards, max_rows=55)
    assert (window.rows, window.games) == (60, 6)
    assert [s.index for s in window.shards] == [2, 3]
    middle = np.load(tmp_path / "training_data/run_001/games_00002.npz")
    np.testing.assert_array_equal(window.by_size[5].states[:20], middle["states"][20:])
    # The game cap still applies when it is the tighter one.
    assert WindowLoader(window_games=3).load(shards, max_rows=100).rows == 30
    assert WindowLoader(window_games=100).load(shards, max_rows=None).rows == 120
    assert WindowLoader(window_games=100).load(shards, max_rows=40).rows == 40


def test_first_game_for_rows_with_uneven_games() -> None:
    game_index = np.array([0, 0, 0, 1, 2, 2, 2, 2], dtype=np.int32)  # 3, 1, 4 rows
    assert first_game_for_rows(game_index, 3, 4) == 2
    assert first_game_for_rows(game_index, 3, 5) == 1
    assert first_game_for_rows(game_index, 3, 6) == 0
    assert first_game_for_rows(game_index, 3, 100) == 0


# ------------------------------------------------------------------ learning rate


def test_lr_schedule_values() -> None:
    assert lr_factor(0) == 1.0 and lr_factor(10**9) == 1.0
    # Warm-up: linear from 0.1 to 1 over 1000 samples, then the schedule.
    assert lr_factor(0, warmup_samples=1000) == pytest.approx(0.1)
    assert lr_factor(500, warmup_samples=1000) == pytest.approx(0.55)
    assert lr_factor(1000, warmup_samples=1000) == 1.0
    step = dict(schedule="step", warmup_samples=1000, decay_samples=2000, decay_factor=0.3)
    assert lr_factor(2999, **step) == 1.0
    assert lr_factor(3000, **step) == pytest.approx(0.3)
    assert lr_factor(6999, **step) == pytest.approx(0.09)
    assert lr_factor(7000, **step) == pytest.approx(0.027)
    cos = dict(schedule="cosine", decay_samples=1000, decay_factor=0.1)
    assert lr_factor(0, **cos) == pytest.approx(1.0)
    assert lr_factor(500, **cos) == pytest.approx(0.55)
    assert lr_factor(1000, **cos) == pytest.approx(0.1)
    assert lr_factor(5000, **cos) == pytest.approx(0.1)
    with pytest.raises(ValueError, match="decay_samples"):
        lr_factor(10, schedule="cosine")


def test_lr_settings_are_checked(tmp_path) -> None:
    with pytest.raises(ValueError, match="needs lr_decay_samples"):
        _cfg(tmp_path, lr_schedule="step")
    with pytest.raises(ValueError, match="lr_schedule must be one of"):
        _cfg(tmp_path, lr_schedule="linear")
    with pytest.raises(ValueError, match="lr_decay_factor"):
        _cfg(tmp_path, lr_schedule="cosine", lr_decay_samples=10, lr_decay_factor=0)
    with pytest.raises(ValueError, match="window_exponent"):
        _cfg(tmp_path, window_exponent=1.5)


@pytest.mark.slow
def test_steps_use_the_scheduled_lr(tmp_path) -> None:
    write_synthetic_run(tmp_path / "data", 1, 64, 8, 5)
    cfg = _cfg(
        tmp_path,
        steps_per_generation=6,
        lr_warmup_samples=32,
        lr_schedule="step",
        lr_decay_samples=32,
        lr_decay_factor=0.5,
    )
    run_training(cfg)
    with open(tmp_path / "work" / "train_log.csv") as f:
        lrs = [float(r["lr"]) for r in csv.DictReader(f)]
    # Samples before each step: 0, 16 (warm-up), 32, 48 (full), 64, 80 (one decay).
    expected = [3e-4, 3e-3 * 0.55, 3e-3, 3e-3, 1.5e-3, 1.5e-3]
    assert lrs == pytest.approx(expected)


# ------------------------------------------------------------------ samples per new row


def test_sample_budget_plan() -> None:
    budget = SampleBudget(samples_per_row=4.0, max_steps=10, samples_per_step=32)
    assert budget.plan(0.0, 0, 100) == (10, 80.0)  # 400 owed, 320 trained, 80 left
    assert budget.plan(80.0, 100, 100) == (2, 16.0)
    assert budget.plan(0.0, 100, 105) == (0, 20.0)  # less than one step: wait
    # What cannot be trained now carries over, at most one generation's worth.
    assert budget.plan(0.0, 0, 10_000) == (10, 320.0)
    off = SampleBudget(samples_per_row=0.0, max_steps=7, samples_per_step=32)
    assert off.plan(0.0, 0, 10_000) == (7, 0.0)


@pytest.mark.slow
def test_samples_per_row_controls_the_steps_trained(tmp_path) -> None:
    write_synthetic_run(tmp_path / "data", 2, 64, 8, 5)  # 128 rows
    cfg = _cfg(tmp_path, samples_per_row=2.0, steps_per_generation=100, checkpoint_every=0)
    state = run_training(cfg)
    assert (state.step, state.samples) == (16, 256)  # 2 x 128 rows in batches of 16
    assert (state.credit, state.credited_rows) == (0.0, 128)
    # 40 new rows: 80 samples owed, 5 steps; the capped generation carries the rest.
    write_synthetic_run(tmp_path / "data", 1, 40, 4, 5, first_index=3)
    state = run_training(_cfg(tmp_path, samples_per_row=2.0, steps_per_generation=3))
    assert (state.step, state.samples, state.credit) == (19, 304, 32.0)
    assert state.samples / state.data_rows == pytest.approx(304 / 168)


# ------------------------------------------------------------------ averaged weights


def test_weight_average_follows_recent_weights() -> None:
    torch.manual_seed(0)
    model = KgrpcNet(1, 8)
    avg = WeightAverage(model, horizon_samples=1000)
    expected = None
    for _ in range(4):
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p))
        raw = model.stem.weight.detach().clone()
        w = 1.0 if expected is None else max(10 / (10 + 0.1 * avg.samples), 1 - math.exp(-0.01))
        expected = raw if expected is None else expected + w * (raw - expected)
        avg.update(model, 10)
    torch.testing.assert_close(avg.model.stem.weight, expected)
    assert not torch.equal(avg.model.stem.weight, model.stem.weight)
    assert avg.weight(10) == pytest.approx(10 / 14)  # a tenth of 40 samples back
    # Late in a run the memory is the horizon: the newest weights' share is 1 - exp(-B/H).
    avg.samples = 100_000
    assert avg.weight(100) == pytest.approx(1 - math.exp(-0.1))
    # BatchNorm statistics are averaged with the weights; its step counter is copied.
    assert int(avg.model.stem_bn.num_batches_tracked) == int(model.stem_bn.num_batches_tracked)


def _onnx_outputs(path, planes, globals_) -> list[np.ndarray]:
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return sess.run(None, {"bin_input": planes, "global_input": globals_})


def _torch_outputs(model, planes, globals_) -> list[np.ndarray]:
    model.eval()
    with torch.no_grad():
        out = model(torch.from_numpy(planes), torch.from_numpy(globals_))
    return [t.numpy() for t in out]


@pytest.mark.slow
def test_exports_come_from_the_averaged_weights(tmp_path) -> None:
    write_synthetic_run(tmp_path / "data", 1, 64, 8, 5)
    cfg = _cfg(tmp_path, steps_per_generation=8, ema_samples=10_000)
    state = run_training(cfg)
    payload = load_checkpoint(latest_checkpoint(tmp_path / "work" / "checkpoints"))
    assert payload["average"]["samples"] == 8 * 16  # the checkpoint keeps both nets
    raw, averaged = model_from_checkpoint(payload), exported_model_from_checkpoint(payload)
    assert not torch.equal(raw.stem.weight, averaged.stem.weight)
    planes, globals_ = random_inputs(8, 5, seed=3)
    path = tmp_path / "work" / "models" / f"{state.last_model}.onnx"
    got = _onnx_outputs(path, planes, globals_)
    want = _torch_outputs(averaged, planes, globals_)
    other = _torch_outputs(raw, planes, globals_)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, atol=2e-3, rtol=0)
    # The raw weights give visibly different outputs: the check above could fail.
    assert max(float(np.max(np.abs(g - o))) for g, o in zip(got, other, strict=True)) > 1e-2

    # A resumed run continues the same average.
    trainer = Trainer(raw, cfg)
    trainer.average.load_state_dict(payload["average"])
    torch.testing.assert_close(trainer.export_model.stem.weight, averaged.stem.weight)
    write_synthetic_run(tmp_path / "data", 1, 64, 8, 5, first_index=2)
    run_training(_cfg(tmp_path, steps_per_generation=2, ema_samples=10_000, min_new_rows=64))
    resumed = load_checkpoint(latest_checkpoint(tmp_path / "work" / "checkpoints"))
    assert resumed["average"]["samples"] == 10 * 16
