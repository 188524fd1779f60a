"""The optimiser side of training: :class:`Trainer` and :func:`build_trainer`.

:class:`Trainer` holds the model (wrapped for DistributedDataParallel), Adam, the counters
(:class:`trainer.checkpoint.TrainState`) and, on the main process with ``ema_samples``, the
averaged weights releases are made of (:mod:`trainer.averaging`). ``step`` is one optimiser
step at the scheduled learning rate (:func:`trainer.schedule.config_lr`) on the loss of
:mod:`trainer.losses`; ``train_steps`` runs a generation's steps on a window, batches from
:class:`trainer.loader.BackgroundLoader`, reporting to :mod:`trainer.progress` and writing
checkpoints every ``checkpoint_every`` steps; ``save`` writes one (:mod:`trainer.checkpoint`).
:func:`build_trainer` resumes from the newest checkpoint, else starts a fresh net.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import torch

from kgrpc.precision import cpu_bf16_fast
from trainer import ddp
from trainer.averaging import WeightAverage
from trainer.batches import Batch
from trainer.checkpoint import (
    TrainState,
    latest_checkpoint,
    load_checkpoint,
    model_from_checkpoint,
    save_checkpoint,
    state_from_checkpoint,
)
from trainer.config import TrainConfig
from trainer.data import Window
from trainer.loader import BackgroundLoader
from trainer.losses import LOSS_NAMES, LossWeights, compute_losses
from trainer.model import KgrpcNet
from trainer.progress import CsvLog, Progress
from trainer.schedule import config_lr

log = logging.getLogger("kgrpc.train")


def autocast_bf16(setting: str, device: torch.device, cpuinfo: str | None = None) -> bool:
    """Does the ``autocast`` setting run the forward pass in bf16 on ``device``? auto: on a
    CUDA device that has bf16, on a CPU with AMX (:func:`kgrpc.precision.cpu_bf16_fast` of
    this host, or of the ``/proc/cpuinfo`` text ``cpuinfo``)."""
    if setting != "auto":
        return setting == "bf16"
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    return device.type == "cpu" and cpu_bf16_fast(cpuinfo)


class Trainer:
    """Model + Adam + counters (+ the averaged weights with ``ema_samples``, on the main
    process); ``step(batch)`` does one optimiser step at the scheduled learning rate."""

    def __init__(
        self,
        model: KgrpcNet,
        cfg: TrainConfig,
        ctx: ddp.DistContext | None = None,
        state: TrainState | None = None,
    ) -> None:
        self.ctx = ctx or ddp.DistContext()
        self.cfg = cfg
        self.model = model.to(self.ctx.device)
        # Before DDP wraps it: DDP's gradient buckets are laid out for the parameters it sees.
        self.memory_format = torch.channels_last if cfg.channels_last else torch.contiguous_format
        self.model = self.model.to(memory_format=self.memory_format)
        self.bf16 = autocast_bf16(cfg.autocast, self.ctx.device)
        if cfg.autocast == "auto" and self.ctx.is_main:
            log.info("autocast auto: %s on %s", "bf16" if self.bf16 else "off", self.ctx.device)
        self.net = ddp.wrap(self.model, self.ctx)
        self.optimizer = torch.optim.Adam(
            self.model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay
        )
        self.weights = LossWeights.from_config(cfg)
        self.state = state or TrainState()
        self.average = (
            WeightAverage(self.model, cfg.ema_samples)
            if cfg.ema_samples > 0 and self.ctx.is_main
            else None
        )

    @property
    def export_model(self) -> KgrpcNet:
        """The weights releases are made of: averaged with ``ema_samples``, else the raw ones."""
        return self.average.model if self.average is not None else self.model

    @property
    def lr(self) -> float:
        return float(self.optimizer.param_groups[0]["lr"])

    def step(self, batch: Batch) -> dict[str, float]:
        self.net.train()
        batch = batch.to(self.ctx.device)
        lr = config_lr(self.cfg, self.state.samples)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        planes = batch.planes.contiguous(memory_format=self.memory_format)
        # bf16 covers the net's convolutions and matrix products only: the losses (log-softmax
        # over 82 to 362 moves, MSEs of small differences) take fp32 outputs. On 9x9 and 13x13
        # the global pooling's board width (a sum of ones, exact in bf16 up to 256) is exact;
        # on 19x19 it reads 360 for 361, a 0.6% change of one pooled feature's scale.
        with torch.autocast(self.ctx.device.type, dtype=torch.bfloat16, enabled=self.bf16):
            # A net with the reply head always runs it (DDP wants every parameter used).
            outputs = self.net(planes, batch.globals, aux=self.model.opponent_policy)
        outputs = tuple(o.float() for o in outputs)
        losses = compute_losses(outputs, batch, self.weights)
        self.optimizer.zero_grad(set_to_none=True)
        losses["loss"].backward()
        self.optimizer.step()
        self.state.step += 1
        step_samples = len(batch) * self.ctx.world_size
        self.state.samples += step_samples
        if self.average is not None:
            self.average.update(self.model, step_samples)
        # One device->host copy for all five numbers.
        values = torch.stack([losses[k].detach() for k in LOSS_NAMES]).tolist()
        return dict(zip(LOSS_NAMES, values, strict=True))

    def train_steps(
        self,
        window: Window,
        steps: int,
        *,
        progress: Progress | None = None,
        csv: CsvLog | None = None,
        checkpoint_dir: Path | None = None,
        checkpoint_every: int = 0,
    ) -> dict[str, float]:
        """``steps`` steps on ``window``; returns throughput figures and the last losses."""
        cfg = self.cfg
        loader = BackgroundLoader(
            window,
            cfg.batch_size,
            seed=cfg.seed * 1_000_003 + self.state.step,
            # A window of this rank's own shards (store mode) is trained whole.
            rank=self.ctx.rank if window.part[1] == 1 else 0,
            world=self.ctx.world_size if window.part[1] == 1 else 1,
            symmetries=cfg.symmetries,
            prefetch=cfg.prefetch,
            threads=cfg.loader_threads,
            pin_memory=self.ctx.device.type == "cuda",
        )
        if progress:
            progress.reset()
        t0 = time.perf_counter()
        losses: dict[str, float] = {}
        samples = 0
        try:
            for _ in range(steps):
                batch = loader.get()
                losses = self.step(batch)
                samples += len(batch)
                if csv:
                    csv.write(
                        self.state.step,
                        self.state.samples,
                        losses,
                        self.lr,
                        batch.board_size,
                    )
                if progress:
                    progress.update(self.state.step, len(batch), losses, loader.wait_s)
                if (
                    checkpoint_dir
                    and checkpoint_every
                    and self.ctx.is_main
                    and self.state.step % checkpoint_every == 0
                ):
                    self.save(checkpoint_dir)
        finally:
            loader.close()
            if csv:
                csv.flush()
        elapsed = max(time.perf_counter() - t0, 1e-9)
        if progress:
            progress.done()
        return {
            "steps_per_s": steps / elapsed,
            "samples_per_s": samples / elapsed,
            "data_wait_share": loader.wait_s / elapsed,
            **losses,
        }

    def save(self, checkpoint_dir: Path) -> Path:
        return save_checkpoint(
            checkpoint_dir,
            self.model,
            self.optimizer,
            self.state,
            self.cfg.to_dict(),
            keep=self.cfg.keep_checkpoints,
            average=None if self.average is None else self.average.state_dict(),
        )


def grow_trainer(trainer: Trainer, blocks: int, channels: int) -> Trainer:
    """The run continued in a larger net (:func:`trainer.grow.grow_net`, function-preserving):
    the counters carry over, the averaged weights grow alike (the same new weights, so the
    average stays an average of one net), Adam starts afresh (its moments have the old
    shapes). The seed depends on the step only, so every DDP rank grows the same net."""
    from trainer.grow import grow_net

    seed = trainer.cfg.seed * 1_000_003 + trainer.state.step
    grown = Trainer(
        grow_net(trainer.model, blocks, channels, seed), trainer.cfg, trainer.ctx, trainer.state
    )
    if trainer.average is not None and grown.average is not None:
        average = grow_net(trainer.average.model, blocks, channels, seed)
        grown.average.load_state_dict(
            {"model": average.state_dict(), "samples": trainer.average.samples}
        )
    return grown


def build_trainer(cfg: TrainConfig, ctx: ddp.DistContext, checkpoint_dir: Path) -> Trainer:
    """Resume from the newest checkpoint in ``checkpoint_dir``, else a fresh net."""
    path = latest_checkpoint(checkpoint_dir)
    if path is None:
        torch.manual_seed(cfg.seed)
        opp = cfg.opponent_policy_weight > 0
        return Trainer(KgrpcNet(cfg.blocks, cfg.channels, opponent_policy=opp), cfg, ctx)
    payload = load_checkpoint(path)
    model = model_from_checkpoint(payload)
    if cfg.opponent_policy_weight > 0 and not model.opponent_policy:
        raise ValueError(
            f"opponent_policy_weight {cfg.opponent_policy_weight:g}: the checkpoint {path} has "
            "no opponent-reply head (its run trained without one); resume with "
            "opponent_policy_weight 0, or start a fresh run"
        )
    if (model.blocks, model.channels) != (cfg.blocks, cfg.channels) and not cfg.grow_schedule:
        log.warning(
            "checkpoint %s is b%dc%d; --blocks/--channels b%dc%d ignored",
            path,
            model.blocks,
            model.channels,
            cfg.blocks,
            cfg.channels,
        )
    trainer = Trainer(model, cfg, ctx, state_from_checkpoint(payload))
    trainer.optimizer.load_state_dict(payload["optimizer"])
    for group in trainer.optimizer.param_groups:  # a changed --lr applies on resume
        group["lr"] = config_lr(cfg, trainer.state.samples)
        group["weight_decay"] = cfg.weight_decay
    if trainer.average is not None and payload.get("average") is not None:
        trainer.average.load_state_dict(payload["average"])
    if ctx.is_main:
        log.info(
            "resumed from %s: step %d, %d samples, generation %d",
            path,
            trainer.state.step,
            trainer.state.samples,
            trainer.state.generation,
        )
    return trainer
