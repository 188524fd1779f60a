"""Policy-surprise weighting (trainer.losses.surprise_weights, ``policy_surprise_weight``): rows
whose search target the net predicted worst weigh most, the weights average 1, and off (0)
is the plain mean of every loss term."""

from __future__ import annotations

import pytest
import torch

from trainer.config import TrainConfig
from trainer.losses import LossWeights, compute_losses, surprise_weights

N = 3
MOVES = N * N + 1


class Batch:
    def __init__(self, policy: torch.Tensor) -> None:
        b = policy.shape[0]
        self.policy = policy
        self.value = torch.linspace(-1, 1, b)
        self.score = torch.linspace(-30, 30, b)
        self.ownership = torch.ones(b, N, N)


def _batch() -> tuple[tuple[torch.Tensor, ...], Batch]:
    torch.manual_seed(0)
    logits = torch.randn(4, MOVES)
    target = torch.softmax(logits, dim=1).clone()
    target[2] = torch.zeros(MOVES)
    target[2, int(torch.argmin(logits[2]))] = 1.0  # the net's least likely move: surprising
    out = (logits, torch.zeros(4), torch.zeros(4), torch.zeros(4, N, N))
    return out, Batch(target)


def test_weights_follow_the_surprise_and_average_one() -> None:
    (logits, *_), batch = _batch()
    w = surprise_weights(batch.policy, logits, 1.0)
    assert w.shape == (4,) and w.mean().item() == pytest.approx(1.0)
    # Rows the net predicts exactly carry no surprise; the surprising row takes it all.
    assert int(torch.argmax(w)) == 2 and w[2].item() == pytest.approx(4.0, rel=1e-4)
    assert w[0].item() == pytest.approx(0.0, abs=1e-4)
    half = surprise_weights(batch.policy, logits, 0.5)
    torch.testing.assert_close(half, 0.5 + 0.5 * w)
    # Nothing to learn anywhere: uniform.
    same = torch.softmax(logits, dim=1)
    torch.testing.assert_close(
        surprise_weights(same, logits, 1.0), torch.ones(4), atol=1e-4, rtol=0
    )


def test_off_is_the_plain_loss_and_on_reweights_every_term() -> None:
    out, batch = _batch()
    plain = compute_losses(out, batch, LossWeights())
    off = compute_losses(out, batch, LossWeights(policy_surprise=0.0))
    assert {k: v.item() for k, v in plain.items()} == {k: v.item() for k, v in off.items()}
    on = compute_losses(out, batch, LossWeights(policy_surprise=1.0))
    w = surprise_weights(batch.policy, out[0], 1.0)
    ce = -(batch.policy * torch.log_softmax(out[0], dim=1)).sum(dim=1)
    assert on["policy"].item() == pytest.approx((ce * w).mean().item())
    value = (out[1] - batch.value) ** 2
    assert on["value"].item() == pytest.approx((value * w).mean().item())
    # The surprising row's (large) policy loss now counts 4 times: the mean goes up.
    assert on["policy"].item() > plain["policy"].item()
    # No gradient flows through the weights: d(loss)/d(logits) is the weighted plain one.
    logits = out[0].clone().requires_grad_(True)
    compute_losses((logits, *out[1:]), batch, LossWeights(policy_surprise=1.0))["policy"].backward()
    manual = logits.detach().clone().requires_grad_(True)
    ((-(batch.policy * torch.log_softmax(manual, dim=1)).sum(dim=1)) * w).mean().backward()
    torch.testing.assert_close(logits.grad, manual.grad)


def test_setting_is_checked() -> None:
    base = dict(data_dir="d", work_dir="w", publish=False, device="cpu")
    assert TrainConfig(**base, policy_surprise_weight=0.5).validate().policy_surprise_weight == 0.5
    for bad in (-0.1, 1.5):
        with pytest.raises(ValueError, match="policy_surprise_weight"):
            TrainConfig(**base, policy_surprise_weight=bad).validate()
    cfg = TrainConfig(**base, policy_surprise_weight=0.25).validate()
    assert LossWeights.from_config(cfg).policy_surprise == 0.25
