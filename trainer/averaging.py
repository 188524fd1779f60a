"""Averaged weights for exports: an exponential moving average of the trained weights.

KataGo exports an average of recent weights rather than the newest ones (stochastic weight
averaging): the average sits nearer the middle of the valley the optimiser bounces around in,
so a release plays more steadily than any single step's weights. :class:`WeightAverage` keeps a
second :class:`trainer.model.KgrpcNet` whose every floating-point tensor (parameters and
BatchNorm running statistics alike, so the averaged net's normalisation matches its averaged
weights) follows the trained one after each step::

    avg <- avg + w * (raw - avg),   w = max(B / (B + REACH * n), 1 - exp(-B / H))

with ``B`` the samples of the step, ``n`` the samples trained so far and ``H`` =
``ema_samples``: an exponential average whose memory is the shorter of ``H`` samples and
``REACH`` (a tenth) of the training so far. Early in a run the net changes fast and the
weights of a few hundred steps ago are much worse than today's: an average reaching back to
the random initial weights (a plain mean from the start, or an exponential one started at
them) released nets far behind the trained one (docs/training.md, "Experiments": held-out
loss 6.03 against 4.65 after 160 steps), while the average over the last tenth followed the
trained net early and beat it after a few hundred steps. Integer buffers (BatchNorm's batch
counters) are copied.

The checkpoint keeps both nets (:mod:`trainer.checkpoint`, key ``average``); the export and
its parity check use the averaged one.
"""

from __future__ import annotations

import copy
import math
from typing import Any

import torch

from trainer.model import KgrpcNet

REACH = 0.1  # the average reaches back at most this share of the training so far


class WeightAverage:
    def __init__(self, model: KgrpcNet, horizon_samples: int) -> None:
        if horizon_samples < 1:
            raise ValueError(f"horizon_samples must be >= 1, got {horizon_samples}")
        self.horizon = horizon_samples
        self.model = copy.deepcopy(model).eval()
        for p in self.model.parameters():
            p.requires_grad_(False)
        self.samples = 0  # samples averaged in so far (those trained while averaging)

    def weight(self, batch_samples: int) -> float:
        """Weight of the newest weights in the next update."""
        recent = batch_samples / (batch_samples + REACH * self.samples)
        return max(recent, 1.0 - math.exp(-batch_samples / self.horizon))

    @torch.no_grad()
    def update(self, model: KgrpcNet, batch_samples: int) -> None:
        w = self.weight(batch_samples)
        avg_float, raw_float = [], []
        for a, r in zip(self._tensors(self.model), self._tensors(model), strict=True):
            if a.is_floating_point():
                avg_float.append(a)
                raw_float.append(r.detach())
            else:
                a.copy_(r)
        torch._foreach_lerp_(avg_float, raw_float, w)
        self.samples += batch_samples

    @staticmethod
    def _tensors(model: KgrpcNet) -> list[torch.Tensor]:
        return [*model.parameters(), *model.buffers()]

    def state_dict(self) -> dict[str, Any]:
        return {"model": self.model.state_dict(), "samples": self.samples}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.samples = int(state["samples"])
