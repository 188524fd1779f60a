"""Single-process or torchrun / DistributedDataParallel training, one code path.

Under ``torchrun`` (the environment has ``WORLD_SIZE`` > 1) :func:`setup` joins the process
group: NCCL when the processes train on CUDA, gloo on CPU. Each process trains on its own
share of the batches (trainer.batches's batch plan) and DDP averages the gradients, so the
effective batch is ``batch_size x world_size``. Rank 0 alone waits for data, exports,
publishes and checkpoints; it tells the others what to do with :func:`broadcast_object`.
Without torchrun every helper here is a no-op around the plain model.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
import torch.distributed as dist
from torch import nn

T = TypeVar("T")


@dataclass(frozen=True)
class DistContext:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def pick_device(pref: str, local_rank: int = 0) -> torch.device:
    if pref == "auto":
        return (
            torch.device(f"cuda:{local_rank}") if torch.cuda.is_available() else torch.device("cpu")
        )
    dev = torch.device(pref)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {pref!r} asked for, but CUDA is not available")
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device(f"cuda:{local_rank}")
    return dev


def setup(device_pref: str = "auto") -> DistContext:
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = pick_device(device_pref, local_rank)
    if world > 1 and not dist.is_initialized():
        if device.type == "cuda":
            torch.cuda.set_device(device)
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    return DistContext(rank, world, local_rank, device)


def wrap(model: nn.Module, ctx: DistContext) -> nn.Module:
    """DDP around ``model`` (already on ``ctx.device``) when distributed, else ``model``.

    DDP broadcasts rank 0's parameters and buffers at construction, so all ranks start from
    the same weights even if only rank 0 could read the checkpoint.
    """
    if not ctx.enabled:
        return model
    ids = [ctx.device.index] if ctx.device.type == "cuda" else None
    return nn.parallel.DistributedDataParallel(model, device_ids=ids)


def unwrap(model: nn.Module) -> nn.Module:
    return model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model


def broadcast_object(obj: T, ctx: DistContext) -> T:
    """Rank 0's ``obj`` on every rank (picklable objects)."""
    if not ctx.enabled:
        return obj
    box: list[Any] = [obj if ctx.is_main else None]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def any_rank(flag: bool, ctx: DistContext) -> bool:
    """Whether ``flag`` is true on any rank (every rank gets the same answer): for decisions
    a rank cannot make alone, such as skipping a generation none may train alone."""
    if not ctx.enabled:
        return flag
    flags: list[Any] = [None] * ctx.world_size
    dist.all_gather_object(flags, flag)
    return any(flags)


def barrier(ctx: DistContext) -> None:
    if ctx.enabled:
        dist.barrier()


def cleanup(ctx: DistContext) -> None:
    if ctx.enabled and dist.is_initialized():
        dist.destroy_process_group()
