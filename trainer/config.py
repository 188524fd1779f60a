"""The trainer's settings: one dataclass, loaded by kgrpc.settings.

Precedence: built-in default < ``--config train.toml`` < environment variable
``KGRPC_TRAINER_<FIELD>`` < command-line flag (docs/operations.md, "Settings"). The TOML file
is flat (``key = value``) or holds the same keys under a ``[train]`` table; keys are the field
names below (``batch_size``, ``lr`` ...). Every field is also a flag: ``batch_size`` ->
``--batch-size``; booleans get ``--flag`` / ``--no-flag``. Unknown keys are errors, so a typo in
a config file is caught instead of silently ignored.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kgrpc.blobstore.settings import STORE_SECRETS, StoreSettings
from kgrpc.net.channel import load_ca
from kgrpc.settings import Settings, setting
from trainer.naming import check_series


def _f(default: Any, help: str, **kw: Any) -> Any:
    return setting(default, help, **kw)


LR_SCHEDULES = ("constant", "step", "cosine")
AUTOCAST = ("off", "bf16", "auto")


def _precision_list(value: Any) -> str:
    """``"fp32,int8"`` (or a TOML list) checked and normalised (kgrpc/precision.py names)."""
    from kgrpc.precision import parse_precisions

    text = ",".join(value) if isinstance(value, list | tuple) else str(value)
    return ",".join(parse_precisions(text))


@dataclass
class TrainConfig(StoreSettings):
    # Where things are.
    coordinator: str = _f(
        "",
        "coordinator address host:port, or a comma-separated list of replicas (needed to "
        "publish or pull shards)",
        group="data and coordinator",
    )
    token: str = _f("", "trainer token (keep it out of `ps`: use the environment)")
    data_dir: str = _f("", "directory holding training_data/<run>/games_*.npz")
    work_dir: str = _f("", "checkpoints, models and logs (default DATA_DIR/trainer)")
    pull_shards: bool = _f(False, "download shards from the coordinator into DATA_DIR first")
    runs: str = _f("", "comma-separated run names to train on (default: every run)")
    tls_ca: str = _f("", "CA certificate (PEM) for a TLS coordinator; plaintext if empty")
    # Store mode (trainer.store_shards): the window from the index, shards from the store.
    index: str = _f(
        "",
        "read the shard listing from the coordinator's index: its postgresql:// URL, or its "
        "coordinator.sqlite3 (or data directory), read-only; empty = files under DATA_DIR",
        group="store mode",
    )
    store: str = _f(
        "",
        "the coordinator's blob store to fetch shards from (a directory or s3://BUCKET/PREFIX); "
        "empty with a SQLite index = that index's directory",
    )
    store_cache_mb: float = _f(
        10240.0,
        "store mode: MiB of shard files each process keeps in WORK/shard_cache (least "
        "recently used evicted first)",
    )
    # Network.
    blocks: int = _f(6, "residual blocks of a fresh network", group="network")
    channels: int = _f(96, "channels of a fresh network")
    grow_schedule: str = _f(
        "",
        "grow the net as the data grows: ARCH@ROWS,... (e.g. b6c48@100000,b8c64@400000): "
        "once the data has ROWS rows, continue in that larger net, computing what the smaller "
        "one did (trainer/grow.py); empty = keep the net",
    )
    series: str = _f("kg", "model name series: {series}-b{B}c{C}-s{steps}-d{rows}")
    # Optimiser and loss (the source design's defaults).
    batch_size: int = _f(
        256, "samples per step (per process under torchrun)", group="optimiser and loss"
    )
    lr: float = _f(1e-4, "Adam learning rate (the peak of the schedule)")
    lr_schedule: str = setting(
        "constant",
        "learning-rate schedule after the warm-up, by samples trained: constant, step (times "
        "lr_decay_factor every lr_decay_samples) or cosine (down to lr x lr_decay_factor over "
        "lr_decay_samples, then flat)",
        choices=LR_SCHEDULES,
    )
    lr_warmup_samples: int = _f(
        0, "linear learning-rate warm-up from lr/10 to lr over this many samples (0 = none)"
    )
    lr_decay_samples: int = _f(
        0, "step: samples between decays; cosine: samples the decay takes (after the warm-up)"
    )
    lr_decay_factor: float = _f(0.1, "step: factor per decay; cosine: final lr as a share of lr")
    ema_samples: int = _f(
        0,
        "export an exponential moving average of the weights over about this many samples "
        "(a plain average until that many; 0 = export the raw weights)",
    )
    weight_decay: float = _f(0.0, "Adam weight decay (L2)")
    policy_weight: float = _f(1.0, "weight of the policy cross-entropy")
    value_weight: float = _f(1.0, "weight of the value MSE")
    score_weight: float = _f(0.5, "weight of the score loss")
    ownership_weight: float = _f(0.5, "weight of the ownership MSE")
    score_huber_delta: float = _f(
        1.0, "score loss: Huber delta in units of SCORE_SCALE points (0 = plain MSE)"
    )
    policy_surprise_weight: float = _f(
        0.0,
        "policy-surprise weighting (KataGo): this share of each row's weight is spread by "
        "KL(search target || the net's policy), the rest uniform; 0 = off, at most 1",
    )
    short_value_weight: float = _f(
        0.0,
        "share of the value target taken from the short-term value (a TD(lambda) return over "
        "the root values of the game's later searched positions, ending with the result); "
        "0 = the result only, at most 1",
    )
    opponent_policy_weight: float = _f(
        0.0,
        "weight of the opponent-reply policy loss (KataGo: 0.15), an auxiliary head trained on "
        "the next move's search target where the shard has it; 0 = off (no head). A run "
        "resumed with it on needs a checkpoint that has the head",
    )
    short_value_lambda: float = _f(
        0.75,
        "lambda of that return, per searched row (0: the row's own search value; towards 1: "
        "the result)",
    )
    # Arithmetic of the training steps (the export is fp32 either way).
    autocast: str = setting(
        "off",
        "mixed precision of the training forward pass: off (fp32), bf16 (torch.autocast: "
        "convolutions in bfloat16, weights, Adam and the losses in fp32; meant for CPUs with "
        "AMX, where it is measured, and GPUs with bf16) or auto (bf16 where the device is one "
        "of those, else off)",
        choices=AUTOCAST,
        group="arithmetic",
    )
    channels_last: bool = _f(
        False,
        "keep the trained net and its batches in channels-last memory order, a layout "
        "oneDNN's CPU convolutions favour (the numbers are the same)",
    )
    # Data.
    window_games: int = _f(
        100_000,
        "train on at most the newest this many games' positions (the window's cap)",
        group="data window",
    )
    window_min_rows: int = _f(
        250_000,
        "growing window: every row while there are at most this many, then the window grows "
        "as the total rows to the power window_exponent (0 = no growth rule: window_games only)",
    )
    window_exponent: float = _f(0.75, "growing window: power of the total rows it grows as")
    window_growth: float = _f(
        0.4, "growing window: rows it gains per new row just past window_min_rows"
    )
    symmetries: bool = _f(True, "apply one of the 8 board symmetries at random to each sample")
    prefetch: int = _f(8, "ready batches the background loader keeps queued")
    loader_threads: int = _f(1, "background loader threads")
    # Loop.
    min_new_rows: int = _f(
        25_000, "new positions needed since the last export to train again", group="loop and export"
    )
    steps_per_generation: int = _f(
        1_000, "optimiser steps between exports (with samples_per_row: the most per generation)"
    )
    samples_per_row: float = _f(
        0.0,
        "train this many samples per new data row: a generation trains samples_per_row x the "
        "rows new since the last one, in whole steps, at most steps_per_generation (the rest "
        "carries over, up to one generation's worth); 0 = steps_per_generation every generation",
    )
    generations: int = _f(0, "stop after this many exports (0 = forever)")
    poll_interval_s: float = _f(30.0, "seconds between looks for new data")
    checkpoint_every: int = _f(500, "also checkpoint every this many steps (0 = per export only)")
    keep_checkpoints: int = _f(3, "checkpoints kept on disk")
    publish: bool = _f(True, "publish exported models to the coordinator")
    parity_atol: float = _f(2e-3, "max torch vs ONNX Runtime difference before refusing a model")
    precisions: str = setting(
        "fp32",
        "precisions exported each generation, comma-separated: fp32 (always), fp16 "
        "(for CUDA), int8 (for CPUs)",
        parse=_precision_list,
        metavar="LIST",
    )
    parity_positions: int = setting(
        256, "held-out positions an export is checked on (as many more calibrate int8)"
    )
    parity_min_top1: float = setting(0.95, "least policy top-1 agreement of an export with torch")
    parity_max_kl: float = setting(0.02, "largest mean policy KL (nats) of an export vs torch")
    parity_max_value_mae: float = setting(0.03, "largest value MAE of an export vs torch")
    parity_max_score_mae: float = setting(0.6, "largest score MAE (points) of an export vs torch")
    export_board_size: int = _f(0, "board size recorded in exports (0 = from the data)")
    # Misc.
    device: str = _f("auto", "torch device: auto, cpu, cuda, cuda:1 ...", group="other")
    seed: int = _f(0, "random seed (data order, symmetries, initial weights)")
    log_every_s: float = _f(
        10.0, "seconds between progress log lines when stderr is no tty", group="logging"
    )

    def validate(self) -> TrainConfig:
        check_series(self.series)
        if self.tls_ca:  # a wrong file fails here, not as failed publishes
            load_ca(self.tls_ca)
        positive = (
            "blocks",
            "channels",
            "batch_size",
            "window_games",
            "steps_per_generation",
            "prefetch",
            "loader_threads",
            "keep_checkpoints",
            "parity_positions",
        )
        for name in positive:
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("lr", "poll_interval_s", "parity_atol", "window_exponent"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        nonneg = (
            "weight_decay",
            "policy_weight",
            "value_weight",
            "score_weight",
            "ownership_weight",
            "score_huber_delta",
            "min_new_rows",
            "window_min_rows",
            "window_growth",
            "lr_warmup_samples",
            "lr_decay_samples",
            "ema_samples",
            "samples_per_row",
            "generations",
            "checkpoint_every",
            "export_board_size",
            "parity_max_kl",
            "parity_max_value_mae",
            "parity_max_score_mae",
            "parity_min_top1",
        )
        for name in nonneg:
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.window_exponent > 1:
            raise ValueError(f"window_exponent must be <= 1, got {self.window_exponent}")
        if self.lr_schedule not in LR_SCHEDULES:
            raise ValueError(
                f"lr_schedule must be one of {', '.join(LR_SCHEDULES)}, got {self.lr_schedule!r}"
            )
        if self.autocast not in AUTOCAST:
            raise ValueError(
                f"autocast must be one of {', '.join(AUTOCAST)}, got {self.autocast!r}"
            )
        if self.lr_schedule != "constant" and self.lr_decay_samples < 1:
            raise ValueError(f"lr_schedule {self.lr_schedule} needs lr_decay_samples >= 1")
        if not 0 < self.lr_decay_factor <= 1:
            raise ValueError(f"lr_decay_factor must be within (0, 1], got {self.lr_decay_factor}")
        if self.parity_min_top1 > 1:
            raise ValueError(f"parity_min_top1 must be <= 1, got {self.parity_min_top1}")
        if not 0 <= self.policy_surprise_weight <= 1:
            raise ValueError(
                f"policy_surprise_weight must be within [0, 1], got {self.policy_surprise_weight}"
            )
        if not 0 <= self.opponent_policy_weight <= 10:
            raise ValueError(
                f"opponent_policy_weight must be within [0, 10], got {self.opponent_policy_weight}"
            )
        if self.grow_schedule:
            from trainer.grow import parse_schedule

            first = parse_schedule(self.grow_schedule)[0]
            if first[1] < self.blocks or first[2] < self.channels:
                raise ValueError(
                    f"grow_schedule: b{first[1]}c{first[2]} is smaller than the fresh net "
                    f"b{self.blocks}c{self.channels}"
                )
        if not 0 <= self.short_value_weight <= 1:
            raise ValueError(
                f"short_value_weight must be within [0, 1], got {self.short_value_weight}"
            )
        if not 0 <= self.short_value_lambda <= 1:
            raise ValueError(
                f"short_value_lambda must be within [0, 1], got {self.short_value_lambda}"
            )
        self.export_precisions  # noqa: B018 - raises ValueError on a bad list
        if self.index and self.pull_shards:
            raise ValueError("index (store mode) and pull_shards exclude each other: pick one")
        if self.store and not self.index:
            raise ValueError("store needs index too (the listing of the shards in the store)")
        if not self.store_cache_mb > 0:  # NaN too
            raise ValueError(f"store_cache_mb must be > 0, got {self.store_cache_mb}")
        return self

    @property
    def export_precisions(self) -> list[str]:
        """``precisions`` as a list, fp32 first (always exported: the coordinator needs it)."""
        from kgrpc.precision import FP32, parse_precisions

        return [FP32, *(p for p in parse_precisions(self.precisions) if p != FP32)]

    @property
    def run_names(self) -> list[str]:
        return [r.strip() for r in self.runs.split(",") if r.strip()]

    @property
    def work_path(self) -> Path:
        if self.work_dir:
            return Path(self.work_dir)
        if not self.data_dir:
            raise ValueError("set --work-dir or --data-dir")
        return Path(self.data_dir) / "trainer"

    def resolved_token(self) -> str:
        return self.token or os.environ.get(TOKEN_ENV, "")

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        for secret in ("token", *STORE_SECRETS):
            d.pop(secret)  # never persisted into checkpoints or logs
        return d


SETTINGS: Settings[TrainConfig] = Settings(TrainConfig, "trainer", table="train")
TOKEN_ENV = SETTINGS.env_var("token")  # KGRPC_TRAINER_TOKEN
FIELDS = {f.name: f for f in dataclasses.fields(TrainConfig)}


def load_toml(path: str | os.PathLike[str]) -> dict[str, Any]:
    return SETTINGS.read_toml(path)


def add_arguments(parser: argparse.ArgumentParser, skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """``--config`` and one flag per field; flags not given override nothing. The --help
    groups by name (:meth:`kgrpc.settings.Settings.add_arguments`)."""
    return SETTINGS.add_arguments(parser, skip=skip)


def from_args(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> TrainConfig:
    """``--config`` file, then ``KGRPC_TRAINER_*`` variables (``os.environ`` unless ``env``),
    then the flags in ``args``; validated."""
    return SETTINGS.from_args(args, env).validate()
