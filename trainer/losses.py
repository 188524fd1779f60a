"""The loss terms of a training step and their weights.

Loss (weights configurable; defaults are the source design's 1.0 / 1.0 / 0.5 / 0.5):

- policy: cross-entropy of the net's logits against the search's visit distribution,
  ``-sum(target * log_softmax(logits))``, mean over the batch;
- value: MSE of the tanh value against the game result (+1/-1/0, mover's view);
- score: in units of ``SCORE_SCALE`` (20) points, Huber with delta ``score_huber_delta``
  (quadratic within 20 points, linear beyond, so a 100-point blow-out does not swamp the
  other heads; delta 0 gives the plain MSE);
- ownership: MSE of the tanh ownership against +1/-1/0, mean over points.

With ``policy_surprise_weight`` s > 0 (KataGo's policy-surprise weighting) every term is a
weighted mean over the batch instead: row i weighs (1 - s) + s * KL_i / mean(KL), KL_i the
divergence of its search target from the net's own policy (no gradient through the weights),
so the weights average 1 and rows where the search taught the net most count most.

With ``short_value_weight`` a > 0 the value term's target is ``(1 - a) * result + a *
short-term value`` (:func:`trainer.targets.short_value_returns`: a TD(lambda) return over the
root values of the game's later searched positions, ending with the result), a target with
less of the game's later luck in it.

With ``opponent_policy_weight`` and a net with the reply head, the cross-entropy of that head
against the opponent's reply (:func:`trainer.targets.reply_rows`) is added with that weight.

Each term is then of order 1 at the start of training; docs/training.md has the argument.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from trainer.batches import Batch
from trainer.config import TrainConfig
from trainer.model import SCORE_SCALE

LOSS_NAMES = ("loss", "policy", "value", "score", "ownership")


@dataclass(frozen=True)
class LossWeights:
    policy: float = 1.0
    value: float = 1.0
    score: float = 0.5
    ownership: float = 0.5
    score_huber_delta: float = 1.0
    policy_surprise: float = 0.0  # share of each row's weight spread by policy surprise
    short_value: float = 0.0  # share of the value target taken from the short-term value
    opponent_policy: float = 0.0  # weight of the opponent-reply policy loss

    @classmethod
    def from_config(cls, cfg: TrainConfig) -> LossWeights:
        return cls(
            cfg.policy_weight,
            cfg.value_weight,
            cfg.score_weight,
            cfg.ownership_weight,
            cfg.score_huber_delta,
            cfg.policy_surprise_weight,
            cfg.short_value_weight,
            cfg.opponent_policy_weight,
        )


def surprise_weights(target: torch.Tensor, logits: torch.Tensor, share: float) -> torch.Tensor:
    """Each row's weight [B] (mean 1): (1 - share) + share * KL_i / mean(KL), KL_i =
    KL(target_i || softmax(logits_i)) without gradient. A batch whose KL is about 0 everywhere
    (the net already predicts every target) weighs uniformly."""
    with torch.no_grad():
        log_p = F.log_softmax(logits.float(), dim=1)
        t = target.float()
        kl = (t * (torch.log(t.clamp_min(1e-12)) - log_p)).sum(dim=1).clamp_min(0.0)
        mean = kl.mean()
        if not mean > 1e-6:  # float noise of targets the net already predicts
            return torch.ones_like(kl)
        return (1.0 - share) + share * kl / mean


def compute_losses(
    outputs: tuple[torch.Tensor, ...], batch: Batch, w: LossWeights
) -> dict[str, torch.Tensor]:
    policy_logits, value, score, ownership = outputs[:4]
    pred_s, target_s = score / SCORE_SCALE, batch.score / SCORE_SCALE
    target_v = batch.value
    short = getattr(batch, "short_value", None)
    if w.short_value > 0 and short is not None:
        target_v = (1.0 - w.short_value) * batch.value + w.short_value * short
    if w.policy_surprise > 0:
        rw = surprise_weights(batch.policy, policy_logits, w.policy_surprise)
        policy = (-(batch.policy * F.log_softmax(policy_logits, dim=1)).sum(dim=1) * rw).mean()
        value_l = (F.mse_loss(value, target_v, reduction="none") * rw).mean()
        if w.score_huber_delta > 0:
            per = F.huber_loss(pred_s, target_s, delta=w.score_huber_delta, reduction="none")
        else:
            per = F.mse_loss(pred_s, target_s, reduction="none")
        score_l = (per * rw).mean()
        own = F.mse_loss(ownership, batch.ownership, reduction="none")
        own_l = (own.reshape(own.shape[0], -1).mean(dim=1) * rw).mean()
    else:
        policy = -(batch.policy * F.log_softmax(policy_logits, dim=1)).sum(dim=1).mean()
        value_l = F.mse_loss(value, target_v)
        if w.score_huber_delta > 0:
            score_l = F.huber_loss(pred_s, target_s, delta=w.score_huber_delta)
        else:
            score_l = F.mse_loss(pred_s, target_s)
        own_l = F.mse_loss(ownership, batch.ownership)
    total = w.policy * policy + w.value * value_l + w.score * score_l + w.ownership * own_l
    out = {"loss": total, "policy": policy, "value": value_l, "score": score_l, "ownership": own_l}
    opp_mask = getattr(batch, "opp_mask", None)
    if len(outputs) > 4 and opp_mask is not None:
        # Cross-entropy of the reply head on the rows that have a reply, mean over those.
        ce = -(batch.opp_policy * F.log_softmax(outputs[4], dim=1)).sum(dim=1)
        mask = opp_mask.to(ce.dtype)
        opp = (ce * mask).sum() / mask.sum().clamp_min(1.0)
        out["opponent"] = opp
        out["loss"] = total + w.opponent_policy * opp
    return out
