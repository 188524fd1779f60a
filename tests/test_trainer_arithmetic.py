"""The trainer's arithmetic settings: bf16 autocast of the forward pass and channels-last
memory order (trainer/config.py ``autocast``, ``channels_last``; trainer/steps.py)."""

from __future__ import annotations

import argparse

import numpy as np
import pytest
import torch

from kgrpc.programs.bench.train import write_synthetic_run
from tests.test_trainer_recipe import _cfg, _onnx_outputs, _torch_outputs
from trainer import config as train_config
from trainer.batches import Batch
from trainer.checkpoint import exported_model_from_checkpoint, latest_checkpoint, load_checkpoint
from trainer.config import TrainConfig
from trainer.data import ShardIndex, Window, WindowLoader
from trainer.export import random_inputs
from trainer.loader import BackgroundLoader
from trainer.model import KgrpcNet
from trainer.steps import Trainer, autocast_bf16
from trainer.train import run_training


def _window(tmp_path) -> Window:
    data = tmp_path / "data"
    if not data.exists():
        write_synthetic_run(data, 1, 64, 8, 5)
    return WindowLoader(10**9).load(ShardIndex(data).refresh())


def _trainer(tmp_path, **kw) -> Trainer:
    """A fresh net, the same initial weights every call."""
    cfg = _cfg(tmp_path, **kw)
    torch.manual_seed(0)
    return Trainer(KgrpcNet(cfg.blocks, cfg.channels), cfg)


def _batches(tmp_path, n: int) -> list[Batch]:
    loader = BackgroundLoader(_window(tmp_path), 16, seed=5, prefetch=2)
    try:
        return [loader.get() for _ in range(n)]
    finally:
        loader.close()


def test_channels_last_changes_the_layout_not_the_numbers(tmp_path) -> None:
    plain = _trainer(tmp_path)
    packed = _trainer(tmp_path, channels_last=True)
    conv = packed.model.stem.weight
    assert conv.is_contiguous(memory_format=torch.channels_last)
    assert not conv.is_contiguous()  # 8 x C x 3 x 3: the two orders differ
    assert plain.model.stem.weight.is_contiguous()
    # Step by step on the same batches the two nets compute the same losses. (Weights are not
    # compared: directions the batch norms cancel, such as a channel's constant shift, get
    # gradients of rounding noise, which Adam scales up to whole steps in either net.)
    for batch in _batches(tmp_path, 6):
        want, got = plain.step(batch), packed.step(batch)
        for name, value in want.items():
            assert got[name] == pytest.approx(value, rel=1e-4, abs=1e-6), name


def test_bf16_autocast_rounds_the_forward_and_keeps_fp32_weights(tmp_path) -> None:
    (batch,) = _batches(tmp_path, 1)
    fp32, bf16 = _trainer(tmp_path), _trainer(tmp_path, autocast="bf16")
    want, got = fp32.step(batch), bf16.step(batch)
    # The same batch and weights: bf16's 8-bit mantissa moves the loss a little, not a lot.
    assert got["loss"] != want["loss"]
    assert got["loss"] == pytest.approx(want["loss"], rel=2e-2)
    assert all(p.dtype == torch.float32 for p in bf16.model.parameters())
    moments = [s["exp_avg"] for s in bf16.optimizer.state.values()]
    assert moments and all(m.dtype == torch.float32 for m in moments)
    # Outside the training step the net is the fp32 net it always was.
    planes, globals_ = random_inputs(4, 5, seed=1)
    out = bf16.model.eval()(torch.from_numpy(planes), torch.from_numpy(globals_))
    assert all(t.dtype == torch.float32 for t in out)


@pytest.mark.slow
def test_a_bf16_channels_last_run_exports_a_model_that_passes_parity(tmp_path) -> None:
    write_synthetic_run(tmp_path / "data", 1, 64, 8, 5)
    cfg = _cfg(tmp_path, autocast="bf16", channels_last=True, steps_per_generation=6)
    state = run_training(cfg)  # the export's parity check refuses a model that fails it
    assert state.step == 6
    path = tmp_path / "work" / "models" / f"{state.last_model}.onnx"
    # The checkpoint loads into an ordinary (contiguous, fp32) net that the file matches.
    model = exported_model_from_checkpoint(
        load_checkpoint(latest_checkpoint(tmp_path / "work" / "checkpoints"))
    )
    assert model.stem.weight.is_contiguous()
    planes, globals_ = random_inputs(8, 5, seed=3)
    for got, want in zip(
        _onnx_outputs(path, planes, globals_), _torch_outputs(model, planes, globals_), strict=True
    ):
        np.testing.assert_allclose(got, want, atol=2e-3, rtol=0)


def test_autocast_setting_names_its_choices() -> None:
    with pytest.raises(ValueError, match="autocast must be one of off, bf16, auto, got 'fp16'"):
        TrainConfig(autocast="fp16").validate()
    parser = argparse.ArgumentParser()
    train_config.add_arguments(parser)
    args = parser.parse_args(["--autocast", "bf16", "--channels-last"])
    assert (args.autocast, args.channels_last) == ("bf16", True)
    with pytest.raises(SystemExit):
        parser.parse_args(["--autocast", "fp16"])


# /proc/cpuinfo flags lines (trimmed): a Xeon with AMX, and an AMD Zen 4 with AVX-512 BF16.
AMX_FLAGS = "flags\t\t: fpu sse2 avx2 avx512f avx512_vnni avx512_bf16 amx_bf16 amx_tile amx_int8\n"
ZEN4_FLAGS = "flags\t\t: fpu sse2 avx2 avx512f avx512_vnni avx512_bf16\n"


def test_autocast_auto_is_bf16_only_on_a_cpu_with_amx() -> None:
    cpu = torch.device("cpu")
    assert autocast_bf16("auto", cpu, AMX_FLAGS)
    assert not autocast_bf16("auto", cpu, ZEN4_FLAGS)  # not measured there: fp32
    assert not autocast_bf16("auto", cpu, "")  # flags unknown: fp32
    assert autocast_bf16("bf16", cpu, "") and not autocast_bf16("off", cpu, AMX_FLAGS)
