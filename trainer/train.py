"""The training loop and its losses.

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

Each term is then of order 1 at the start of training; docs/training.md has the argument.

``run_training`` is ``kgrpc-train run``: wait for ``min_new_rows`` new positions, load the
newest window (growing with the data: :func:`trainer.schedule.window_rows`), train
``steps_per_generation`` steps (or ``samples_per_row`` samples per new row:
:class:`trainer.schedule.SampleBudget`) at the scheduled learning rate, export ``NAME.onnx``
(from the averaged weights with ``ema_samples``: :mod:`trainer.averaging`), check ONNX Runtime
parity, publish (in the background, retried through coordinator outages:
:class:`trainer.publish.Publisher`), checkpoint, repeat (see docs/training.md).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from kgrpc.net import describe
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
from trainer.data import ShardIndex, Window, WindowLoader
from trainer.loader import BackgroundLoader
from trainer.model import SCORE_SCALE, KgrpcNet
from trainer.naming import format_name
from trainer.progress import CsvLog, Progress
from trainer.publish import Publisher, unpublished_candidate
from trainer.schedule import SampleBudget, config_lr, config_window_rows

log = logging.getLogger("kgrpc.train")
# How long the end of a run waits for its last candidate to be published.
PUBLISH_DRAIN_S = 3600.0
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
        # A net with the reply head always runs it (DDP wants every parameter used).
        outputs = self.net(batch.planes, batch.globals, aux=self.model.opponent_policy)
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
    if (model.blocks, model.channels) != (cfg.blocks, cfg.channels):
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


def export_generation(trainer: Trainer, window: Window, models_dir: Path) -> Path | None:
    """Export the release weights (:attr:`Trainer.export_model`: averaged with
    ``ema_samples``) as NAME.onnx (plus NAME.fp16.onnx / NAME.int8.onnx as ``--precisions``
    asks), each parity-checked against those weights on held-out window positions; the fp32
    path, or None (logged) when the fp32 export was refused. A refused fp16/int8 is only
    logged."""
    from trainer.export import export_precisions
    from trainer.parity import ParityBounds
    from trainer.positions import describe, draw_sets

    cfg, st, model = trainer.cfg, trainer.state, trainer.export_model
    name = format_name(cfg.series, model.blocks, model.channels, st.step, st.data_rows)
    sizes = [cfg.export_board_size] if cfg.export_board_size else sorted(window.by_size)
    path = models_dir / f"{name}.onnx"
    sets = draw_sets(sizes, cfg.parity_positions, window=window, seed=st.step)
    bounds = ParityBounds(
        cfg.parity_min_top1, cfg.parity_max_kl, cfg.parity_max_value_mae, cfg.parity_max_score_mae
    )
    outcome = export_precisions(
        model,
        path,
        cfg.export_precisions,
        name=name,
        board_sizes=sizes,
        training_steps=st.step,
        training_rows=st.data_rows,
        sets=sets,
        bounds=bounds,
        atol=cfg.parity_atol,
    )
    for e in outcome.written:
        log.info(
            "exported %s (parity max diff %.2g; %s)",
            e.path,
            e.report.max_abs_diff,
            e.report.summary(),
        )
    for precision, exc in outcome.refused.items():
        log.error("%s %s not written: %s (positions: %s)", name, precision, exc, describe(sets[1]))
    if outcome.get("fp32") is None:
        log.error("not publishing %s: the fp32 export was refused", name)
        return None
    st.last_model = name
    return path


def _wait_for_data(
    cfg: TrainConfig,
    ctx: ddp.DistContext,
    index: ShardIndex,
    state: TrainState,
    progress: Progress,
    publisher: Publisher | None = None,
    budget: SampleBudget | None = None,
) -> tuple[int, list] | None:
    """Block until ``min_new_rows`` new rows exist (and, under ``budget``, credit for at least
    one step); (total rows, shard list) from rank 0."""
    announced = False
    while True:
        if cfg.pull_shards and ctx.local_rank == 0:
            _pull(cfg, progress, publisher)
        ddp.barrier(ctx)
        decision = None
        if ctx.is_main:
            shards = index.refresh()
            total = index.total_rows
            new = total - state.last_export_rows
            steps = (
                budget.plan(state.credit, state.credited_rows, total)[0]
                if budget is not None and budget.enabled
                else 1
            )
            if total > 0 and new >= cfg.min_new_rows and steps > 0:
                decision = (total, shards)
            elif not announced:
                progress.message(
                    f"waiting for data: {total} rows, {new} new since the last "
                    f"export, {cfg.min_new_rows} needed"
                    + (
                        f", and rows for one step at {cfg.samples_per_row:g} samples per row"
                        if steps == 0 and new >= cfg.min_new_rows
                        else ""
                    )
                )
                announced = True
        decision = ddp.broadcast_object(decision, ctx)
        if decision is not None:
            return decision
        time.sleep(cfg.poll_interval_s)


def _pull(cfg: TrainConfig, progress: Progress, publisher: Publisher | None = None) -> None:
    from trainer.remote_shards import pull_shards, pull_shards_sync

    try:
        if publisher is not None:  # its thread owns this process's gRPC event loop
            res = publisher.call(
                pull_shards(
                    cfg.coordinator, cfg.resolved_token(), cfg.data_dir, tls_ca=cfg.tls_ca or None
                )
            )
        else:
            res = pull_shards_sync(
                cfg.coordinator, cfg.resolved_token(), cfg.data_dir, tls_ca=cfg.tls_ca or None
            )
        if res.downloaded:
            progress.message(f"pulled {len(res.downloaded)} shards ({res.bytes} bytes)")
    except Exception as exc:  # the coordinator may be restarting: train on what we have
        progress.message(f"pulling shards failed: {describe(exc)}")


def _start_publisher(cfg: TrainConfig, models_dir: Path, progress: Progress) -> Publisher:
    """The background publisher, handed the newest export a previous run left unpublished."""
    publisher = Publisher(
        cfg.coordinator, cfg.resolved_token(), tls_ca=cfg.tls_ca or None, report=progress.message
    )
    left = unpublished_candidate(models_dir)
    if left is not None:
        progress.message(f"{left.name} was exported but never published: publishing it")
        publisher.submit(left)
    return publisher


def _drain(publisher: Publisher, progress: Progress) -> None:
    """At the end of a run: the last candidate goes out unless the coordinator stays away
    for PUBLISH_DRAIN_S (then the next start publishes it)."""
    waiting = publisher.pending
    if waiting is None:
        return
    progress.message(f"waiting up to {PUBLISH_DRAIN_S:.0f} s to publish {waiting.name}")
    if not publisher.wait(PUBLISH_DRAIN_S):
        progress.message(
            f"{waiting.name} is still unpublished; the next `kgrpc-train run` "
            "with this work dir publishes it (or `kgrpc-train publish`)"
        )


def run_training(cfg: TrainConfig, ctx: ddp.DistContext | None = None) -> TrainState:
    """``kgrpc-train run``. Returns the final counters (for tests and the demo)."""
    ctx = ctx or ddp.setup(cfg.device)
    if not cfg.data_dir and not cfg.index:
        raise ValueError(
            "--data-dir is required (the shard directory, or the cache for --pull-shards), "
            "or --index (and --store) to read shards from the coordinator's store"
        )
    if (cfg.publish or cfg.pull_shards) and not cfg.coordinator:
        raise ValueError(
            "--coordinator is required to publish or pull shards (or pass --no-publish)"
        )
    if (cfg.publish or cfg.pull_shards) and not cfg.resolved_token():
        raise ValueError("a trainer token is required (--token or $KGRPC_TRAINER_TOKEN)")
    work = cfg.work_path
    ckpt_dir, models_dir = work / "checkpoints", work / "models"
    trainer = build_trainer(cfg, ctx, ckpt_dir)
    progress = (
        Progress(log_every_s=cfg.log_every_s)
        if ctx.is_main
        else Progress(log_every_s=1e9, tty=False)
    )
    csv = CsvLog(work / "train_log.csv") if ctx.is_main else None
    index = ShardIndex(cfg.data_dir, cfg.run_names)
    windows = WindowLoader(cfg.window_games, short_value_lambda=cfg.short_value_lambda)
    budget = SampleBudget.from_config(cfg, ctx.world_size)
    if cfg.index:  # store mode: the listing from the index, each shard from the store
        from trainer.store_shards import use_store

        index = use_store(cfg, ctx.rank, ctx.world_size, windows)  # type: ignore[assignment]
    done = 0
    publisher = _start_publisher(cfg, models_dir, progress) if cfg.publish and ctx.is_main else None
    try:
        while cfg.generations == 0 or done < cfg.generations:
            decision = _wait_for_data(cfg, ctx, index, trainer.state, progress, publisher, budget)
            assert decision is not None
            total, shards = decision
            if cfg.index:  # rank 0's listing names its own cache: this rank reads its own
                shards = index.localize(shards)  # type: ignore[union-attr]
            window_limit = config_window_rows(cfg, total)
            window = windows.load(shards, max_rows=window_limit)
            # Every shard in reach was unreadable (logged by the loader), on some rank: in store
            # mode ranks load different shards, and one rank alone must not wait while the
            # others train (they would wait for it in DDP's first all-reduce).
            if ddp.any_rank(window.rows == 0, ctx):
                if ctx.is_main:
                    progress.message("no readable rows in the window; waiting for new shards")
                time.sleep(cfg.poll_interval_s)
                continue
            trainer.state.data_rows = total
            steps, credit = budget.plan(trainer.state.credit, trainer.state.credited_rows, total)
            if ctx.is_main:
                progress.message(
                    f"generation {trainer.state.generation + 1}: {window.rows} rows from "
                    f"{window.games} games in {len(window.shards)} shards (sizes "
                    f"{sorted(window.by_size)}; window limit "
                    f"{'none' if window_limit is None else window_limit} of {total} rows), "
                    f"{steps} steps, lr {config_lr(cfg, trainer.state.samples):.3g}"
                )
            figures = trainer.train_steps(
                window,
                steps,
                progress=progress if ctx.is_main else None,
                csv=csv,
                checkpoint_dir=ckpt_dir,
                checkpoint_every=cfg.checkpoint_every,
            )
            trainer.state.generation += 1
            trainer.state.last_export_rows = total
            trainer.state.credit, trainer.state.credited_rows = credit, total
            if ctx.is_main:
                progress.message(
                    f"trained to step {trainer.state.step}: {figures['samples_per_s']:.0f} "
                    f"samples/s, data wait {100 * figures['data_wait_share']:.1f}%, "
                    f"loss {figures.get('loss', float('nan')):.4f}, "
                    f"{trainer.state.samples / max(total, 1):.2f} samples per data row"
                )
                path = export_generation(trainer, window, models_dir)
                if path is not None and publisher is not None:
                    publisher.submit(path)  # retried in the background until it is in
                trainer.save(ckpt_dir)
            ddp.barrier(ctx)
            done += 1
        if publisher is not None:
            _drain(publisher, progress)
    finally:
        if publisher is not None:
            publisher.close()
        if csv:
            csv.close()
    return trainer.state
