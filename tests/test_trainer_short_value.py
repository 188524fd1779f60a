"""The short-term value target (trainer.targets.short_value_returns, ``short_value_weight``): a
TD(lambda) return over a game's searched rows ending with its result, mover's view; through the
window and the batch into the value loss."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kgrpc.programs.bench.train import write_synthetic_run
from trainer.batches import make_batch
from trainer.config import TrainConfig
from trainer.data import ShardIndex, WindowLoader
from trainer.losses import LossWeights, compute_losses
from trainer.targets import short_value_returns


def _game() -> tuple[np.ndarray, ...]:
    # Two games, rows shuffled: game 0 searched at moves 0, 3, 8 (black wins: +1 for black's
    # moves 0 and 8, -1 for white's move 3); game 1 at moves 1, 2 (white to move at 1 wins).
    game = np.array([0, 1, 0, 0, 1])
    move = np.array([8, 2, 0, 3, 1])
    root = np.array([0.6, 0.2, 0.1, -0.3, 0.4], np.float32)
    value = np.array([1.0, -1.0, 1.0, -1.0, 1.0], np.float32)
    return game, move, root, value


def test_returns_by_hand() -> None:
    game, move, root, value = _game()
    got = short_value_returns(game, move, root, value, 0.5)
    # Game 0, from its last row back: G(8) = 0.5*0.6 + 0.5*1 = 0.8; G(3), mover white, 5 moves
    # on (odd: flipped) = 0.5*(-0.3) + 0.5*(-0.8) = -0.55; G(0), 3 moves on (odd) =
    # 0.5*0.1 + 0.5*0.55 = 0.325. Game 1: G(2) = 0.5*0.2 + 0.5*(-1) = -0.4; G(1), one on
    # (odd) = 0.5*0.4 + 0.5*0.4 = 0.4.
    np.testing.assert_allclose(got, [0.8, -0.4, 0.325, -0.55, 0.4], rtol=1e-6)
    # lambda 0: the row's own search value; lambda 1: the result, each from its mover's view.
    np.testing.assert_allclose(short_value_returns(game, move, root, value, 0.0), root)
    np.testing.assert_allclose(short_value_returns(game, move, root, value, 1.0), value)


def test_window_and_batch_carry_it_into_the_value_loss(tmp_path) -> None:
    write_synthetic_run(tmp_path, 2, 40, 4, 5)
    index = ShardIndex(tmp_path)
    window = WindowLoader(100, short_value_lambda=0.0).load(index.refresh())
    arrs = window.by_size[5]
    assert arrs.short_value is not None and arrs.short_value.shape == arrs.value.shape
    batch = make_batch(arrs, np.arange(16), np.random.default_rng(0))
    assert batch.short_value is not None and batch.short_value.shape == (16,)
    out = (
        torch.zeros(16, 26),
        torch.zeros(16),
        torch.zeros(16),
        torch.zeros(16, 5, 5),
    )
    plain = compute_losses(out, batch, LossWeights())["value"].item()
    assert plain == pytest.approx(float((batch.value**2).mean()))
    mixed = compute_losses(out, batch, LossWeights(short_value=0.5))["value"].item()
    want = 0.5 * batch.value + 0.5 * batch.short_value
    assert mixed == pytest.approx(float((want**2).mean()))
    assert mixed != pytest.approx(plain)


def test_settings_are_checked() -> None:
    base = dict(data_dir="d", work_dir="w", publish=False, device="cpu")
    cfg = TrainConfig(**base, short_value_weight=0.3, short_value_lambda=0.5).validate()
    assert LossWeights.from_config(cfg).short_value == 0.3
    for key, bad in (("short_value_weight", 1.5), ("short_value_lambda", -0.1)):
        with pytest.raises(ValueError, match=key):
            TrainConfig(**base, **{key: bad}).validate()
