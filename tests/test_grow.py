"""The growing net (trainer/grow.py): a grown net computes what the small one did, its new
parts learn from the first step, and a run continues in it (grow_schedule)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from kgrpc.programs.bench.train import write_synthetic_run
from tests.test_trainer_train import _cfg as train_cfg
from trainer.checkpoint import latest_checkpoint, load_checkpoint, model_from_checkpoint
from trainer.config import TrainConfig
from trainer.export import read_metadata
from trainer.grow import grow_net, parse_schedule, target_arch
from trainer.model import NUM_GLOBALS, NUM_PLANES, KgrpcNet
from trainer.train import run_training


def _trained_looking(net: KgrpcNet) -> KgrpcNet:
    """Random BatchNorm statistics and affine terms, so the check is not on default values."""
    gen = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for m in net.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.weight.uniform_(0.5, 1.5, generator=gen)
                m.bias.uniform_(-0.3, 0.3, generator=gen)
                m.running_mean.uniform_(-0.5, 0.5, generator=gen)
                m.running_var.uniform_(0.5, 2.0, generator=gen)
    return net


def _inputs(batch: int = 6, size: int = 7) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(3)
    planes = (torch.rand(batch, NUM_PLANES, size, size, generator=gen) < 0.3).float()
    return planes, torch.rand(batch, NUM_GLOBALS, generator=gen)


@pytest.mark.parametrize("train_mode", [False, True])
def test_grown_net_computes_what_the_small_one_did(train_mode: bool) -> None:
    torch.manual_seed(0)
    small = _trained_looking(KgrpcNet(2, 32, opponent_policy=True))
    # b2c32 -> b5c48: new blocks (one with global pooling), new trunk channels and new head
    # channels (8 -> 12), so every rule of the module doc is exercised.
    big = grow_net(small, 5, 48, seed=1)
    assert big.arch_name == "b5c48" and big.opponent_policy
    small.train(train_mode)
    big.train(train_mode)
    planes, globs = _inputs()
    with torch.no_grad():
        want = small(planes, globs, aux=True)
        got = big(planes, globs, aux=True)
    for w, g in zip(want, got, strict=True):
        torch.testing.assert_close(g, w, atol=1e-5, rtol=1e-5)


def test_grown_parts_learn_from_the_first_step() -> None:
    torch.manual_seed(0)
    big = grow_net(_trained_looking(KgrpcNet(1, 32)), 2, 48, seed=1)
    big.train()
    planes, globs = _inputs()
    policy, value, score, ownership = big(planes, globs)
    loss = policy.logsumexp(1).mean() + value.pow(2).mean() + score.pow(2).mean() * 0.01
    loss = loss + ownership.pow(2).mean()
    loss.backward()
    # Each zeroed reader has a gradient, so none stays zero (dead).
    assert big.tower[0].conv1.weight.grad[:32, 32:].abs().sum() > 0
    assert big.tower[1].bn2.weight.grad.abs().sum() > 0  # the new block's closing BN
    assert big.value_out.weight.grad[:, 16:].abs().sum() > 0  # new value units (2 x 8 old)
    assert big.policy_out.weight.grad[:, 8:].abs().sum() > 0
    assert big.policy_conv.weight.grad[:8, 32:].abs().sum() > 0


def test_grow_refuses_to_shrink() -> None:
    with pytest.raises(ValueError, match="only grows"):
        grow_net(KgrpcNet(2, 32), 1, 48)


def test_schedule_parsing_and_targets() -> None:
    schedule = parse_schedule("b6c48@100000, b8c64@400000")
    assert schedule == [(100000, 6, 48), (400000, 8, 64)]
    assert target_arch(schedule, 99_999, (4, 32)) is None
    assert target_arch(schedule, 100_000, (4, 32)) == (6, 48)
    assert target_arch(schedule, 100_000, (6, 48)) is None  # already grown (a resumed run)
    assert target_arch(schedule, 500_000, (4, 32)) == (8, 64)  # both due: the last one
    for bad, why in [
        ("b6c48", "ARCH@ROWS"),
        ("b6c48@x", "ARCH@ROWS"),
        ("b6@100", "bad architecture"),
        ("b6c48@200,b8c64@100", "does not follow"),
        ("b6c48@100,b6c32@200", "does not follow"),
    ]:
        with pytest.raises(ValueError, match=why):
            parse_schedule(bad)
    with pytest.raises(ValueError, match="smaller than the fresh net"):
        TrainConfig(blocks=6, channels=96, grow_schedule="b4c32@10").validate()


def test_run_continues_in_the_grown_net(tmp_path) -> None:
    """Generation 1 trains b1c16 on 128 rows; 64 more rows pass the schedule's 150, so
    generation 2 grows to b2c24 first: its release has the new name and the checkpoint the
    grown net, and the steps, samples and averaged weights carry on."""
    write_synthetic_run(tmp_path / "data", 2, 64, 8, 5)
    cfg = train_cfg(tmp_path, lr=1e-3, ema_samples=64, grow_schedule="b2c24@150")
    first = run_training(cfg)
    assert first.last_model == "kg-b1c16-s4-d128"
    write_synthetic_run(tmp_path / "data", 1, 64, 8, 5, first_index=3)
    second = run_training(dataclasses.replace(cfg, min_new_rows=64))
    assert (second.step, second.samples) == (8, 8 * 32)
    assert second.last_model == "kg-b2c24-s8-d192"
    meta = read_metadata(tmp_path / "work" / "models" / "kg-b2c24-s8-d192.onnx")
    assert meta["training_steps"] == "8"
    payload = load_checkpoint(latest_checkpoint(tmp_path / "work" / "checkpoints"))
    assert (payload["blocks"], payload["channels"]) == (2, 24)
    assert payload["average"]["model"]["stem.weight"].shape[0] == 24
    net = model_from_checkpoint(payload)
    # Trained after growing: the old channels' readers of the new ones moved off zero.
    assert net.tower[0].conv1.weight[:16, 16:].abs().sum() > 0
