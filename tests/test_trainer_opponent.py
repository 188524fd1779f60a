"""The opponent-reply auxiliary policy (``opponent_policy_weight``): which rows have a reply,
the batch's reply targets under symmetries, the head and its loss, and the exported file,
which keeps the model-file contract's four outputs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kgrpc.schema import NUM_GLOBALS, NUM_PLANES, packed_row_bytes
from trainer.augment import symmetry_permutations
from trainer.batches import make_batch
from trainer.config import TrainConfig
from trainer.data import SizeArrays
from trainer.losses import LossWeights, compute_losses
from trainer.model import KgrpcNet
from trainer.steps import Trainer
from trainer.targets import reply_rows


def test_reply_rows() -> None:
    game = np.array([0, 0, 0, 1, 1, 2])
    move = np.array([4, 5, 9, 0, 1, 3])
    # 4 -> 5 is a reply, 5 -> 9 is not (moves between), 9 -> game 1 is another game.
    assert reply_rows(game, move).tolist() == [True, False, False, True, False, False]
    assert reply_rows(np.zeros(0, int), np.zeros(0, int)).tolist() == []


def _arrays(n: int = 3, rows: int = 6) -> SizeArrays:
    rng = np.random.default_rng(0)
    policy = rng.random((rows, n * n + 1)).astype(np.float32)
    policy /= policy.sum(axis=1, keepdims=True)
    return SizeArrays(
        n,
        np.zeros((rows, packed_row_bytes(n)), np.uint8),
        np.zeros((rows, NUM_GLOBALS), np.float32),
        policy,
        np.zeros(rows, np.float32),
        np.zeros(rows, np.float32),
        np.zeros((rows, n * n), np.int8),
        has_reply=np.array([True, False, True, True, False, False]),
    )


def test_batch_takes_the_next_rows_target_and_turns_it_with_the_position() -> None:
    arrs = _arrays()
    plain = make_batch(arrs, np.arange(6), None)
    assert plain.opp_mask.tolist() == arrs.has_reply.tolist()
    np.testing.assert_array_equal(plain.opp_policy[0].numpy(), arrs.policy[1])
    np.testing.assert_array_equal(plain.opp_policy[3].numpy(), arrs.policy[4])
    assert float(plain.opp_policy[1].abs().sum()) == 0.0  # no reply: zeros, masked out
    # Under a random symmetry the reply's board moves exactly as the position's policy does.
    turned = make_batch(arrs, np.arange(6), np.random.default_rng(5))
    perms = symmetry_permutations(3)
    for i in np.flatnonzero(arrs.has_reply):
        pol = turned.policy[i].numpy()
        sym = next(s for s in range(8) if np.allclose(arrs.policy[i][perms[s]], pol[:9]))
        np.testing.assert_allclose(turned.opp_policy[i, :9].numpy(), arrs.policy[i + 1][perms[sym]])


def test_head_loss_and_export_contract(tmp_path) -> None:
    torch.manual_seed(0)
    net = KgrpcNet(1, 8, opponent_policy=True)
    x, g = torch.zeros(6, NUM_PLANES, 3, 3), torch.zeros(6, NUM_GLOBALS)
    assert len(net(x, g)) == 4  # what export traces
    out = net(x, g, aux=True)
    assert len(out) == 5 and out[4].shape == (6, 10)
    batch = make_batch(_arrays(), np.arange(6), None)
    w = LossWeights(opponent_policy=0.15)
    losses = compute_losses(out, batch, w)
    ce = -(batch.opp_policy * torch.log_softmax(out[4], dim=1)).sum(dim=1)
    want = ce[batch.opp_mask].mean()
    assert losses["opponent"].item() == pytest.approx(want.item())
    plain = compute_losses(out[:4], batch, w)
    assert losses["loss"].item() == pytest.approx(plain["loss"].item() + 0.15 * want.item())
    # A net without the head ignores aux; the exported file has the contract's outputs only.
    assert len(KgrpcNet(1, 8)(x, g, aux=True)) == 4
    from trainer.export import export_onnx

    path = tmp_path / "kg-b1c8-s0-d0.onnx"
    export_onnx(net.eval(), path, name="kg-b1c8-s0-d0", board_sizes=[3])
    import onnx

    model = onnx.load(path)
    assert [o.name for o in model.graph.output] == ["policy", "value", "score", "ownership"]
    assert not any("opp" in i.name for i in model.graph.initializer)


@pytest.mark.slow
def test_trainer_steps_with_the_head_and_refuses_a_checkpoint_without(tmp_path) -> None:
    from trainer.checkpoint import model_from_checkpoint

    base = dict(data_dir="d", work_dir=str(tmp_path), publish=False, device="cpu")
    cfg = TrainConfig(**base, blocks=1, channels=8, opponent_policy_weight=0.15).validate()
    trainer = Trainer(KgrpcNet(1, 8, opponent_policy=True), cfg)
    before = trainer.model.opp_policy_out.weight.detach().clone()
    trainer.step(make_batch(_arrays(), np.arange(6), None))
    assert not torch.equal(before, trainer.model.opp_policy_out.weight)  # the head learns
    payload = {"blocks": 1, "channels": 8, "model": trainer.model.state_dict()}
    assert model_from_checkpoint(payload).opponent_policy
    plain = {"blocks": 1, "channels": 8, "model": KgrpcNet(1, 8).state_dict()}
    assert not model_from_checkpoint(plain).opponent_policy
    with pytest.raises(ValueError, match="opponent_policy_weight"):
        TrainConfig(**base, opponent_policy_weight=-1).validate()
