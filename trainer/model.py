"""The kgrpc network: a KataGo-style residual tower ``b{blocks}c{channels}``.

Fully convolutional, so one set of weights evaluates any board size (up to 19x19 in
practice; nothing in the graph depends on N). Inputs and outputs follow docs/formats.md
section 5 (counts from kgrpc/schema.py):

- ``bin_input``   float32 [B, NUM_PLANES, N, N] (the bool feature planes as 0/1)
- ``global_input`` float32 [B, NUM_GLOBALS]
- returns ``(policy_logits [B, N*N+1], value [B], score [B], ownership [B, N, N])``.
  ``value`` and ``ownership`` are tanh-squashed (mover's view); ``score`` is in points
  (mover's view): the head's raw output times ``SCORE_SCALE`` so the trainer can divide a
  points target by ``SCORE_SCALE`` and regress a number of order 1.

Global pooling (mean and max over the board, plus a board-size term as in KataGo) feeds
channel biases in every ``global_every``-th block and the pass logit, value, and score heads,
which is how a convolutional net sees whole-board facts (komi, who is ahead, board size).
"""

from __future__ import annotations

import re

import torch
from torch import nn

from kgrpc.schema import NUM_GLOBALS, NUM_PLANES

__all__ = [
    "NUM_GLOBALS",
    "NUM_PLANES",
    "SCORE_SCALE",
    "KgrpcNet",
    "head_channels",
    "num_parameters",
    "parse_arch",
]

SCORE_SCALE = 20.0

_ARCH_RE = re.compile(r"^b(\d+)c(\d+)$")


def head_channels(channels: int) -> int:
    """Channels of the policy and value heads of a net ``channels`` wide: a quarter, at least 8
    (the heads hold few of the multiply-adds; 8 keeps a b4c16 net's heads useful)."""
    return max(8, channels // 4)


def parse_arch(arch: str) -> tuple[int, int]:
    """``"b6c96"`` -> ``(6, 96)``; ValueError on anything else."""
    m = _ARCH_RE.match(arch)
    if not m:
        raise ValueError(f"bad architecture {arch!r}: expected b<blocks>c<channels>, e.g. b6c96")
    return int(m.group(1)), int(m.group(2))


class GlobalPool(nn.Module):
    """[B, C, N, N] -> [B, 3C]: mean, mean scaled by board width, max.

    The width term ((N - 14) / 10, KataGo's choice) lets the net tell board sizes apart
    without a per-size input; the max lets it notice a single urgent point.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = x.mean(dim=(2, 3))
        # Counted with tensor ops rather than x.shape so no Python int gets baked into the
        # exported graph: the board axis stays dynamic under any exporter.
        width = torch.sqrt(torch.ones_like(x[:, :1]).sum(dim=(2, 3)))
        scaled = mean * (width - 14.0) / 10.0
        mx = x.amax(dim=(2, 3))
        return torch.cat([mean, scaled, mx], dim=1)


class ResBlock(nn.Module):
    """conv-BN-ReLU-conv-BN + skip, ReLU; optionally a global-pooled channel bias after the
    first convolution (KataGo's global pooling block, simplified)."""

    def __init__(self, channels: int, global_pool: bool) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        self.pool = GlobalPool() if global_pool else None
        self.gbias = nn.Linear(3 * channels, channels) if global_pool else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn1(self.conv1(x)))
        if self.pool is not None and self.gbias is not None:
            y = y + self.gbias(self.pool(y))[:, :, None, None]
        y = self.bn2(self.conv2(y))
        return torch.relu(x + y)


class KgrpcNet(nn.Module):
    """Residual tower with policy (board + pass), value, score and ownership heads."""

    def __init__(
        self,
        blocks: int,
        channels: int,
        num_planes: int = NUM_PLANES,
        num_globals: int = NUM_GLOBALS,
        global_every: int = 3,
        opponent_policy: bool = False,
    ) -> None:
        super().__init__()
        if blocks < 1 or channels < 1:
            raise ValueError(f"blocks and channels must be >= 1, got b{blocks}c{channels}")
        self.blocks = blocks
        self.channels = channels
        self.num_planes = num_planes
        self.num_globals = num_globals
        c = channels
        self.stem = nn.Conv2d(num_planes, c, 3, padding=1, bias=False)
        self.stem_global = nn.Linear(num_globals, c)
        self.stem_bn = nn.BatchNorm2d(c)
        # Global pooling in every third block, counting from the second, so even b2 has one.
        self.tower = nn.ModuleList(
            ResBlock(c, global_pool=(i % global_every == 1)) for i in range(blocks)
        )
        head_c = head_channels(c)
        self.pool = GlobalPool()
        # Policy: per-point logits from a 1x1 conv; pass from the pooled policy features.
        self.policy_conv = nn.Conv2d(c, head_c, 1, bias=False)
        self.policy_bn = nn.BatchNorm2d(head_c)
        self.policy_out = nn.Conv2d(head_c, 1, 1)
        self.pass_fc = nn.Linear(3 * head_c, 1)
        # Value/score: pooled features -> MLP; ownership: per-point 1x1 conv.
        self.value_conv = nn.Conv2d(c, head_c, 1, bias=False)
        self.value_bn = nn.BatchNorm2d(head_c)
        self.value_fc = nn.Linear(3 * head_c, 2 * head_c)
        self.value_out = nn.Linear(2 * head_c, 2)  # [value, score / SCORE_SCALE]
        self.ownership_out = nn.Conv2d(head_c, 1, 1)
        # Training only (trainer.losses, opponent_policy_weight): the opponent's reply, from the
        # policy head's features (KataGo's auxiliary target). forward() leaves it out unless
        # asked, so exported files keep the four outputs of the model-file contract.
        self.opponent_policy = opponent_policy
        if opponent_policy:
            self.opp_policy_out = nn.Conv2d(head_c, 1, 1)
            self.opp_pass_fc = nn.Linear(3 * head_c, 1)

    @property
    def arch_name(self) -> str:
        return f"b{self.blocks}c{self.channels}"

    @classmethod
    def from_arch(
        cls, arch: str | None = None, *, blocks: int | None = None, channels: int | None = None
    ) -> KgrpcNet:
        """``KgrpcNet.from_arch("b6c96")`` or ``KgrpcNet.from_arch(blocks=6, channels=96)``."""
        if arch is not None:
            blocks, channels = parse_arch(arch)
        if blocks is None or channels is None:
            raise ValueError("from_arch needs an arch string or both blocks and channels")
        return cls(blocks, channels)

    def forward(
        self, bin_input: torch.Tensor, global_input: torch.Tensor, aux: bool = False
    ) -> tuple[torch.Tensor, ...]:
        """The four outputs; with ``aux`` (a net built with ``opponent_policy``) a fifth, the
        opponent-reply policy logits [B, N*N+1]."""
        x = self.stem(bin_input) + self.stem_global(global_input)[:, :, None, None]
        x = torch.relu(self.stem_bn(x))
        for block in self.tower:
            x = block(x)
        b = x.shape[0]

        p = torch.relu(self.policy_bn(self.policy_conv(x)))
        board_logits = self.policy_out(p).reshape(b, -1)
        pass_logit = self.pass_fc(self.pool(p))
        policy = torch.cat([board_logits, pass_logit], dim=1)

        v = torch.relu(self.value_bn(self.value_conv(x)))
        hidden = torch.relu(self.value_fc(self.pool(v)))
        vs = self.value_out(hidden)
        value = torch.tanh(vs[:, 0])
        score = vs[:, 1] * SCORE_SCALE
        ownership = torch.tanh(self.ownership_out(v)[:, 0])
        if aux and self.opponent_policy:
            pooled = self.pool(p)
            opp = torch.cat([self.opp_policy_out(p).reshape(b, -1), self.opp_pass_fc(pooled)], 1)
            return policy, value, score, ownership, opp
        return policy, value, score, ownership


def num_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
