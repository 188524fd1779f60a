"""The training run: ``kgrpc-train run``, one generation after another.

``run_training`` is ``kgrpc-train run``: wait for ``min_new_rows`` new positions, load the
newest window (growing with the data: :func:`trainer.schedule.window_rows`), train
``steps_per_generation`` steps (or ``samples_per_row`` samples per new row:
:class:`trainer.schedule.SampleBudget`) at the scheduled learning rate, export ``NAME.onnx``
(from the averaged weights with ``ema_samples``: :mod:`trainer.averaging`), check ONNX Runtime
parity, publish (in the background, retried through coordinator outages:
:class:`trainer.publish.Publisher`), checkpoint, repeat (see docs/training.md).

The steps themselves are :class:`trainer.steps.Trainer`'s, on the loss of
:mod:`trainer.losses`; the window is :mod:`trainer.data`'s.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from kgrpc.net import describe
from trainer import ddp
from trainer.checkpoint import TrainState
from trainer.config import TrainConfig
from trainer.data import ShardIndex, Window, WindowLoader
from trainer.naming import format_name
from trainer.progress import CsvLog, Progress
from trainer.publish import Publisher, unpublished_candidate
from trainer.schedule import SampleBudget, config_lr, config_window_rows
from trainer.steps import Trainer, build_trainer, grow_trainer

log = logging.getLogger("kgrpc.train")
# How long the end of a run waits for its last candidate to be published.
PUBLISH_DRAIN_S = 3600.0


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


def _grown(trainer: Trainer, rows: int, progress: Progress | None) -> Trainer:
    """The trainer in the net ``grow_schedule`` asks for at ``rows`` data rows (itself when
    the net already is that one)."""
    if not trainer.cfg.grow_schedule:
        return trainer
    from trainer.grow import parse_schedule, target_arch

    model = trainer.model
    target = target_arch(
        parse_schedule(trainer.cfg.grow_schedule), rows, (model.blocks, model.channels)
    )
    if target is None:
        return trainer
    grown = grow_trainer(trainer, *target)
    if progress is not None:
        progress.message(
            f"grew the net from {model.arch_name} to {grown.model.arch_name} at {rows} data "
            f"rows (step {trainer.state.step}; grow_schedule {trainer.cfg.grow_schedule})"
        )
    return grown


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
            trainer = _grown(trainer, total, progress if ctx.is_main else None)
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
