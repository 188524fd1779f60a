"""A synthetic teacher: targets computed from a position's planes, fitted in a few hundred steps.

Parity figures of a *fresh* network say little: its policy is nearly flat (entropy close to
log(N*N+1)), so which move comes first is decided by noise far below any precision's error,
and its value and score barely move (standard deviation ~0.003). Benchmarks and tests of the
precision exports therefore fit the net briefly to targets it can learn, so that, like a
trained net, it has one clear best move and values and scores spread over their ranges:

- policy: one-hot on the empty point just above the last move (pass when there is none);
- score: the mover's stones minus the opponent's plus the mover's komi, in points;
- value: tanh(score / 10); ownership: +1 own stone, -1 opponent stone, 0 empty.

The real loss (:func:`trainer.losses.compute_losses`) and Adam are used, on positions from
:mod:`trainer.positions` (legal random games by default). Not a Go player: a stand-in for a
trained network's output statistics, nothing more.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from trainer.batches import Batch
from trainer.model import KgrpcNet
from trainer.positions import Positions, from_random_games


def teacher_targets(
    planes: np.ndarray, globals_: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(policy [B, N*N+1], value [B], score [B], ownership [B, N, N]) for planes
    [B, NUM_PLANES, N, N] and globals [B, NUM_GLOBALS] (float32)."""
    b, _, n, _ = planes.shape
    own, opp = planes[:, 1], planes[:, 2]
    empty = planes[:, 0] - own - opp
    above = np.zeros_like(planes[:, 10])
    above[:, :-1, :] = planes[:, 10, 1:, :]  # the point one row above the last move
    target = (above * empty).reshape(b, n * n)
    has = target.sum(axis=1) > 0
    policy = np.concatenate([target, (~has)[:, None].astype(np.float32)], axis=1)
    score = own.sum(axis=(1, 2)) - opp.sum(axis=(1, 2)) + globals_[:, 0] * 20.0
    value = np.tanh(score / 10.0)
    return (
        policy.astype(np.float32),
        value.astype(np.float32),
        score.astype(np.float32),
        (own - opp).astype(np.float32),
    )


def fit_teacher(
    model: KgrpcNet,
    steps: int,
    *,
    board_sizes: Sequence[int] = (9,),
    positions: Sequence[Positions] | None = None,
    batch: int = 32,
    lr: float = 3e-3,
    seed: int = 0,
) -> dict[str, float]:
    """Train ``model`` in place for ``steps`` Adam steps; returns the last losses.

    Positions: ``positions``, else 256 random-game positions per size in ``board_sizes``.
    The model is left in eval mode.
    """
    from trainer.losses import LossWeights, compute_losses

    sets = (
        list(positions)
        if positions is not None
        else [from_random_games(n, 256, seed=seed + n) for n in board_sizes]
    )
    rng = np.random.default_rng(seed)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    device = next(model.parameters()).device
    weights = LossWeights()
    losses: dict[str, torch.Tensor] = {}
    model.train()
    for step in range(steps):
        s = sets[step % len(sets)]
        idx = rng.choice(len(s), size=min(batch, len(s)), replace=False)
        planes, globals_ = s.planes[idx], s.globals[idx]
        policy, value, score, own = teacher_targets(planes, globals_)
        data = Batch(
            s.board_size,
            *(torch.from_numpy(a) for a in (planes, globals_, policy, value, score, own)),
        ).to(device)
        outputs = model(data.planes, data.globals)
        losses = compute_losses(outputs, data, weights)
        opt.zero_grad(set_to_none=True)
        losses["loss"].backward()
        opt.step()
    model.eval()
    return {k: float(v.detach()) for k, v in losses.items()}
