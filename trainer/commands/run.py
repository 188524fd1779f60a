"""``kgrpc-train run``: train on the coordinator's shards, export, publish, repeat.

Works alone or under ``torchrun --nproc-per-node K -m trainer run ...`` (DDP; rank 0 alone
exports, publishes and checkpoints). Resumes from the newest checkpoint in
``WORK_DIR/checkpoints``. Settings: trainer/config.py (flags, or ``--config train.toml``).
"""

from __future__ import annotations

import argparse
import logging
import sys

from kgrpc.blobstore.settings import STORE_SECRETS
from kgrpc.cli_help import env_flag
from trainer import config as config_mod

HELP = "train on the newest shards, export, check parity and publish, repeatedly"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    groups = config_mod.add_arguments(parser)
    env_flag(
        parser,
        "--once",
        action="store_true",
        help="same as --generations 1",
        group=groups["loop and export"],
    )


def run(args: argparse.Namespace) -> int:
    try:
        cfg = config_mod.from_args(args)
    except ValueError as exc:
        print(f"kgrpc-train run: {exc}", file=sys.stderr)
        return 2
    if args.once:
        cfg.generations = 1
    secrets = ("token", *STORE_SECRETS)
    for warning in config_mod.SETTINGS.secrets_given_as_flags(args, secrets):
        print(f"kgrpc-train run: {warning}", file=sys.stderr)
    from trainer import ddp
    from trainer.train import run_training

    ctx = ddp.setup(cfg.device)
    logging.basicConfig(
        level=logging.INFO if ctx.is_main else logging.WARNING,
        format=f"%(asctime)s [rank {ctx.rank}] %(name)s: %(message)s"
        if ctx.enabled
        else "%(asctime)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        state = run_training(cfg, ctx)
    except ValueError as exc:
        print(f"kgrpc-train run: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\nkgrpc-train run: interrupted (newest checkpoint kept)", file=sys.stderr)
        return 130
    finally:
        ddp.cleanup(ctx)
    if ctx.is_main:
        print(
            f"done: step {state.step}, {state.generation} generations, "
            f"last model {state.last_model or '-'}"
        )
    return 0
