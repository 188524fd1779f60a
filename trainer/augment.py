"""Symmetry augmentation of training batches: one of the 8 symmetries per sample.

A symmetry of an N x N board is a permutation of its N*N points (docs/formats.md section 3),
precomputed for all 8 and cached per board size, so a batch's planes, the board part of its
policy target and its ownership target each turn with one ``torch.gather``.
"""

from __future__ import annotations

import numpy as np
import torch

NUM_SYMMETRIES = 8


def symmetry_permutations(size: int) -> np.ndarray:
    """int64 [8, N*N]: ``out.flat[i] = in.flat[perm[sym, i]]`` for symmetry ``sym``.

    sym = 4*flip + rot: ``np.rot90`` by ``rot`` on the last two axes, then a transpose when
    ``flip`` (docs/formats.md section 3). Applying a symmetry to the point ids themselves
    yields, at each output point, the id of the input point that lands there.
    """
    ids = np.arange(size * size).reshape(size, size)
    perms = []
    for sym in range(NUM_SYMMETRIES):
        t = np.rot90(ids, sym % 4, axes=(0, 1))
        if sym >= 4:
            t = t.T
        perms.append(t.reshape(-1))
    return np.stack(perms).astype(np.int64)


_PERM_CACHE: dict[int, torch.Tensor] = {}


def cached_permutations(size: int) -> torch.Tensor:
    """:func:`symmetry_permutations` of ``size`` as a tensor, built once per board size."""
    p = _PERM_CACHE.get(size)
    if p is None:
        p = _PERM_CACHE[size] = torch.from_numpy(symmetry_permutations(size))
    return p


def apply_symmetries(
    planes: torch.Tensor, policy: torch.Tensor, ownership: torch.Tensor, syms: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-sample symmetries: planes [B, C, N*N], policy [B, N*N+1], ownership [B, N*N]."""
    b, c, nn = planes.shape
    size = int(round(nn**0.5))
    perm = cached_permutations(size)[syms.long()]  # [B, N*N]
    planes = torch.gather(planes, 2, perm[:, None, :].expand(b, c, nn))
    board = torch.gather(policy[:, :nn], 1, perm)
    policy = torch.cat([board, policy[:, nn:]], dim=1)
    ownership = torch.gather(ownership, 1, perm)
    return planes, policy, ownership
