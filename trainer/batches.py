"""Batches: the order rows are trained in, and the tensors of one batch.

Every batch holds one board size (the net is fully convolutional but a tensor needs one
shape). Each epoch shuffles the rows of each size, cuts them into batches, shuffles the batch
order, and under DistributedDataParallel rank r takes batches r, r+K, r+2K ... of that common
plan, so the K processes see disjoint data (:func:`batch_plan`). The stream is endless: a
generation trains a fixed number of steps, whatever the window size.

:func:`make_batch` gathers a batch's rows from the window (:class:`trainer.data.SizeArrays`),
unpacks the packed planes and applies a random symmetry per sample (:mod:`trainer.augment`);
:class:`trainer.loader.BackgroundLoader` runs it ahead of the training step.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch

from kgrpc.schema import NUM_PLANES, packed_row_bytes
from trainer.augment import NUM_SYMMETRIES, apply_symmetries, cached_permutations
from trainer.data import ShardError, SizeArrays, Window


@dataclass
class Batch:
    """Tensors ready for the net (CPU; pinned when the trainer runs on CUDA)."""

    board_size: int
    planes: torch.Tensor  # float32 [B, NUM_PLANES, N, N]
    globals: torch.Tensor  # float32 [B, NUM_GLOBALS]
    policy: torch.Tensor  # float32 [B, N*N+1]
    value: torch.Tensor  # float32 [B]
    score: torch.Tensor  # float32 [B]
    ownership: torch.Tensor  # float32 [B, N, N]
    short_value: torch.Tensor | None = None  # float32 [B] (SizeArrays.short_value)
    # The opponent's reply: its search target [B, N*N+1] (zeros where none) and which rows
    # have one [B] (SizeArrays.has_reply).
    opp_policy: torch.Tensor | None = None
    opp_mask: torch.Tensor | None = None

    def __len__(self) -> int:
        return int(self.value.shape[0])

    def to(self, device: torch.device) -> Batch:
        if device.type == "cpu":
            return self
        kw = {"device": device, "non_blocking": True}
        return Batch(
            self.board_size,
            self.planes.to(**kw),
            self.globals.to(**kw),
            self.policy.to(**kw),
            self.value.to(**kw),
            self.score.to(**kw),
            self.ownership.to(**kw),
            None if self.short_value is None else self.short_value.to(**kw),
            None if self.opp_policy is None else self.opp_policy.to(**kw),
            None if self.opp_mask is None else self.opp_mask.to(**kw),
        )


def make_batch(
    arrs: SizeArrays, idx: np.ndarray, rng: np.random.Generator | None, pin: bool = False
) -> Batch:
    """Gather rows ``idx``, unpack planes, apply a random symmetry per sample if ``rng``."""
    n = arrs.size
    nn = n * n
    idx = np.sort(idx)  # sequential memory access; order inside a batch does not matter
    b = len(idx)
    packed = arrs.states[idx]
    if packed.shape[1] != packed_row_bytes(n):
        # np.unpackbits would silently pad a short row with zeros.
        raise ShardError(
            f"states rows are {packed.shape[1]} bytes, expected "
            f"{packed_row_bytes(n)} for board size {n}"
        )
    planes = torch.from_numpy(
        np.unpackbits(packed, axis=1, count=NUM_PLANES * nn).reshape(b, NUM_PLANES, nn)
    )
    policy = torch.from_numpy(arrs.policy[idx])
    ownership = torch.from_numpy(arrs.ownership[idx])
    opp_policy = opp_mask = None
    if arrs.has_reply is not None:
        has = arrs.has_reply[idx]
        reply = np.zeros((b, policy.shape[1]), dtype=np.float32)
        reply[has] = arrs.policy[idx[has] + 1]
        opp_policy, opp_mask = torch.from_numpy(reply), torch.from_numpy(has)
    if rng is not None:
        syms = torch.from_numpy(rng.integers(0, NUM_SYMMETRIES, b))
        planes, policy, ownership = apply_symmetries(planes, policy, ownership, syms)
        if opp_policy is not None:  # the reply's board turns with the position's
            board = torch.gather(opp_policy[:, :nn], 1, cached_permutations(n)[syms.long()])
            opp_policy = torch.cat([board, opp_policy[:, nn:]], dim=1)
    batch = Batch(
        n,
        planes.reshape(b, NUM_PLANES, n, n).float(),
        torch.from_numpy(arrs.globals[idx]),
        policy.contiguous(),
        torch.from_numpy(arrs.value[idx]),
        torch.from_numpy(arrs.score[idx]),
        ownership.reshape(b, n, n).float(),
        None if arrs.short_value is None else torch.from_numpy(arrs.short_value[idx]),
        opp_policy,
        opp_mask,
    )
    if pin:
        batch = Batch(
            n,
            *(
                t.pin_memory()
                for t in (
                    batch.planes,
                    batch.globals,
                    batch.policy,
                    batch.value,
                    batch.score,
                    batch.ownership,
                )
            ),
            None if batch.short_value is None else batch.short_value.pin_memory(),
            None if batch.opp_policy is None else batch.opp_policy.pin_memory(),
            None if batch.opp_mask is None else batch.opp_mask.pin_memory(),
        )
    return batch


def batch_plan(
    window: Window, batch_size: int, seed: int, rank: int = 0, world: int = 1
) -> Iterator[tuple[int, np.ndarray]]:
    """Endless (board_size, row indices) stream; see the module docstring for the order."""
    if window.rows == 0:
        raise ValueError("the training window is empty")
    epoch = 0
    while True:
        rng = np.random.default_rng([seed, epoch])
        plan: list[tuple[int, np.ndarray]] = []
        for n in sorted(window.by_size):
            rows = window.by_size[n].rows
            perm = rng.permutation(rows)
            if rows < batch_size:
                plan.append((n, perm))
            else:
                plan.extend(
                    (n, perm[i : i + batch_size])
                    for i in range(0, rows - batch_size + 1, batch_size)
                )
        order = rng.permutation(len(plan))
        plan = [plan[i] for i in order]
        while len(plan) < world:  # tiny windows: every rank still gets a batch
            plan = plan + plan
        yield from plan[rank::world]
        epoch += 1
