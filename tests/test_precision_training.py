"""Network precisions made by the trainer (issue 13): ``kgrpc-train export`` with
calibration from shards and a refusal, the training loop exporting the configured precisions,
the precision settings, and the synthetic teacher the benchmark fits a fresh net to.
Tiny nets (tests/precision_helpers.py), real files and ONNX Runtime."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch

from kgrpc.programs.bench.train import write_synthetic_run
from tests.precision_helpers import tiny_net
from trainer.checkpoint import TrainState, save_checkpoint
from trainer.cli import main as train_main
from trainer.config import TrainConfig
from trainer.export import fp32_proto, read_metadata
from trainer.parity import compare, torch_outputs
from trainer.positions import from_random_games
from trainer.quantize import to_fp16
from trainer.synthetic import fit_teacher, teacher_targets


@pytest.mark.slow
def test_export_command_precisions_from_shards(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_synthetic_run(tmp_path / "data", 1, 96, 6, 9)
    model = tiny_net()
    ckpt = save_checkpoint(
        tmp_path / "ckpt", model, torch.optim.Adam(model.parameters()), TrainState()
    )
    out = tmp_path / "out"
    out.mkdir()
    loose = [
        "--min-top1",
        "0.5",
        "--max-kl",
        "0.05",
        "--max-value-mae",
        "0.05",
        "--max-score-mae",
        "2",
    ]
    rc = train_main(
        [
            "export",
            "--checkpoint",
            str(ckpt),
            "--out",
            str(out),
            "--board-size",
            "9",
            "--precision",
            "fp32,int8",
            "--data-dir",
            str(tmp_path / "data"),
            "--parity-positions",
            "32",
            *loose,
        ]
    )
    text = capsys.readouterr()
    assert rc == 0, text.err
    assert "calibration 32 at 9x9 (shards)" in text.out and "parity max diff" in text.out
    assert (
        read_metadata(out / "kg-b1c8-s0-d0.int8.onnx")["calibration"]
        == "32 at 9x9 (shards), 8 at 9x9 (random games)"
    )
    assert not (out / "kg-b1c8-s0-d0.fp16.onnx").exists()
    # The same with a value bound no int8 file meets: exit 1, a clear message, no file.
    (out / "kg-b1c8-s0-d0.int8.onnx").unlink()
    rc = train_main(
        [
            "export",
            "--checkpoint",
            str(ckpt),
            "--out",
            str(out),
            "--board-size",
            "9",
            "--precision",
            "int8",
            "--parity-positions",
            "32",
            "--min-top1",
            "0.5",
            "--max-value-mae",
            "1e-6",
        ]
    )
    err = capsys.readouterr().err
    assert rc == 1 and "nothing written: int8 export refused: value MAE" in err, err
    assert not (out / "kg-b1c8-s0-d0.int8.onnx").exists()
    assert (
        train_main(["export", "--checkpoint", str(ckpt), "--out", str(out), "--precision", "fp8"])
        == 2
    )


@pytest.mark.slow
def test_trainer_loop_exports_the_configured_precisions(tmp_path: Path) -> None:
    from trainer.train import run_training

    write_synthetic_run(tmp_path / "data", 1, 64, 8, 5)
    cfg = TrainConfig(
        data_dir=str(tmp_path / "data"),
        work_dir=str(tmp_path / "work"),
        blocks=1,
        channels=8,
        batch_size=16,
        steps_per_generation=2,
        min_new_rows=0,
        generations=1,
        publish=False,
        device="cpu",
        log_every_s=1e9,
        precisions="int8",
        parity_positions=32,
        parity_min_top1=0.5,
        parity_max_kl=0.05,
        parity_max_value_mae=0.05,
        parity_max_score_mae=2.0,
    ).validate()
    assert cfg.export_precisions == ["fp32", "int8"]
    state = run_training(cfg)
    models = tmp_path / "work" / "models"
    assert sorted(p.name for p in models.iterdir()) == [
        f"{state.last_model}.int8.onnx",
        f"{state.last_model}.onnx",
    ]
    meta = read_metadata(models / f"{state.last_model}.int8.onnx")
    # The training window's positions, and a quarter as many of random games.
    assert re.fullmatch(
        r"\d+ at 5x5 \(window\), \d+ at 5x5 \(random games\)", meta["calibration"]
    ), meta["calibration"]
    assert meta["precision"] == "int8"
    with pytest.raises(ValueError, match="precision must be one of"):
        TrainConfig(precisions="fp32,bf16").validate()


def test_train_settings_precisions() -> None:
    from kgrpc.settings import SettingsError
    from trainer.config import SETTINGS

    cfg = SETTINGS.load(flags={"precisions": "int8, fp16,int8"}, env={})
    assert cfg.precisions == "int8,fp16"
    assert cfg.validate().export_precisions == ["fp32", "int8", "fp16"]
    with pytest.raises(SettingsError, match="KGRPC_TRAINER_PRECISIONS.*precision must be one of"):
        SETTINGS.load(env={"KGRPC_TRAINER_PRECISIONS": "bf16"})
    with pytest.raises(ValueError, match="parity_min_top1 must be <= 1"):
        TrainConfig(parity_min_top1=1.5).validate()


@pytest.mark.slow
def test_teacher_targets_and_fit() -> None:
    s = from_random_games(5, 64, seed=9)
    policy, value, score, own = teacher_targets(s.planes, s.globals)
    assert np.allclose(policy.sum(axis=1), 1.0) and set(np.unique(policy)) <= {0.0, 1.0}
    assert np.allclose(value, np.tanh(score / 10.0)) and own.shape == (64, 5, 5)
    model = tiny_net()
    before = compare("fp32", torch_outputs(model, [s]), torch_outputs(model, [s])).ref_entropy
    fit_teacher(model, 20, positions=[s], batch=32, lr=1e-2)
    after = compare("fp32", torch_outputs(model, [s]), torch_outputs(model, [s])).ref_entropy
    assert after < before - 0.5  # the policy sharpens towards the teacher's single move
    assert not model.training
    assert fp32_proto(model, [5]).graph.input[0].name == "bin_input"
    assert to_fp16(fp32_proto(model, [5])).graph.output[0].name == "policy"
