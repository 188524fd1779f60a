"""``kgrpc-bench train``: trainer throughput (samples/s) and the share of time waiting for data.

Writes synthetic shards of the documented format (docs/formats.md section 4, written by
``kgrpc.shards``) to a temp directory, loads them as the trainer does, and runs the real
training step with the background loader for ``--steps`` steps after ``--warmup`` steps.
Target: the trainer waits for data under 5% of the time. JSON keys: ``samples_per_s``,
``data_wait_share`` (plus context).

:func:`write_synthetic_shard` is also the tests' fixture: its targets are learnable functions
of the planes (policy on own stones, ownership = own - opponent stones, value = who has more
stones) that commute with the board symmetries, so augmentation mistakes show up.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from kgrpc.cli_help import env_flag
from kgrpc.schema import NUM_PLANES
from kgrpc.shards import write_shard

HELP = "trainer samples/s and data-wait share on synthetic shards"
TARGET_WAIT_SHARE = 0.05


def synthetic_rows(rows: int, board_size: int, rng: np.random.Generator) -> dict[str, Any]:
    n = board_size
    nn = n * n
    planes = np.zeros((rows, NUM_PLANES, n, n), dtype=bool)
    planes[:, 0] = True
    stones = rng.choice(np.array([0, 1, -1], dtype=np.int8), size=(rows, n, n), p=[0.5, 0.25, 0.25])
    planes[:, 1] = stones == 1
    planes[:, 2] = stones == -1
    planes[:, 5] = planes[:, 1]
    planes[:, 8] = planes[:, 2]
    last = rng.integers(0, nn, rows)
    planes[np.arange(rows), 10, last // n, last % n] = True
    own = planes[:, 1].reshape(rows, nn).astype(np.float32)
    policy = np.zeros((rows, nn + 1), dtype=np.float32)
    policy[:, :nn] = own
    policy[own.sum(1) == 0, nn] = 1.0  # no own stones: "pass"
    policy /= policy.sum(1, keepdims=True)
    diff = (stones == 1).sum((1, 2)) - (stones == -1).sum((1, 2))
    return {
        "states": np.packbits(planes.reshape(rows, -1), axis=1),
        "globals": np.tile(np.array([0.375, 0, 0, 0, 0, 0, 0, n / 19], np.float32), (rows, 1)),
        "policy": policy,
        "value": np.sign(diff).astype(np.float32),
        "score": diff.astype(np.float32),
        "ownership": stones.reshape(rows, nn).astype(np.int8),
        "move_number": rng.integers(0, 200, rows).astype(np.int32),
        "root_value": rng.uniform(-1, 1, rows).astype(np.float32),
    }


def write_synthetic_shard(
    path: str | os.PathLike[str], rows: int, games: int, board_size: int, seed: int = 0
) -> Path:
    """One shard with ``rows`` positions spread evenly over ``games`` games (atomic write)."""
    if rows < games or games < 1:
        raise ValueError(f"need rows >= games >= 1, got rows={rows} games={games}")
    rng = np.random.default_rng(seed)
    arrays = synthetic_rows(rows, board_size, rng)
    arrays["game_index"] = (np.arange(rows) * games // rows).astype(np.int32)
    game_ids = [f"{seed:08x}-0000-4000-8000-{g:012x}" for g in range(games)]
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    write_shard(p, arrays, board_size=board_size, komi=7.5, rules="chinese", game_ids=game_ids)
    return p


def write_synthetic_run(
    data_dir: str | os.PathLike[str],
    shards: int,
    rows_per_shard: int,
    games_per_shard: int,
    board_size: int,
    run: str = "run_001",
    first_index: int = 1,
    seed: int = 0,
) -> list[Path]:
    out = []
    for i in range(first_index, first_index + shards):
        p = Path(data_dir) / "training_data" / run / f"games_{i:05d}.npz"
        out.append(
            write_synthetic_shard(
                p, rows_per_shard, games_per_shard, board_size, seed=seed * 100_000 + i
            )
        )
    return out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    env_flag(parser, "--blocks", type=int, default=6, help="residual blocks")
    env_flag(parser, "--channels", type=int, default=96, help="channels")
    env_flag(parser, "--board-size", type=int, default=19, help="board size")
    env_flag(parser, "--batch-size", type=int, default=256, help="samples per step")
    env_flag(parser, "--steps", type=int, default=20, help="measured steps")
    env_flag(parser, "--warmup", type=int, default=3, help="unmeasured steps first")
    env_flag(parser, "--rows", type=int, default=8192, help="synthetic positions")
    env_flag(parser, "--loader-threads", type=int, default=1, help="background loader threads")
    env_flag(parser, "--device", default="auto", help="auto, cpu or cuda")
    env_flag(
        parser,
        "--autocast",
        default="off",
        choices=("off", "bf16", "auto"),
        help="the trainer's autocast setting (bf16: the forward pass in bfloat16; auto: bf16 "
        "on a CPU with AMX or a bf16 GPU)",
    )
    env_flag(
        parser,
        "--channels-last",
        action="store_true",
        help="the trainer's channels_last setting (net and batches channels-last)",
    )
    env_flag(parser, "--json", metavar="FILE", help="also write the figures as JSON")


def _other_cpu_share(seconds: float) -> float | None:
    try:
        import psutil
    except ImportError:
        return None
    me = psutil.Process()
    total0, mine0 = psutil.cpu_times(), me.cpu_times()
    time.sleep(seconds)
    total1, mine1 = psutil.cpu_times(), me.cpu_times()
    busy = (total1.user + total1.system) - (total0.user + total0.system)
    mine = (mine1.user + mine1.system) - (mine0.user + mine0.system)
    return max(0.0, busy - mine) / (seconds * (psutil.cpu_count() or 1))


def run(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from trainer import ddp
    from trainer.config import TrainConfig
    from trainer.data import ShardIndex, WindowLoader
    from trainer.model import KgrpcNet
    from trainer.steps import Trainer

    busy = _other_cpu_share(0.5)
    with tempfile.TemporaryDirectory(prefix="kgrpc-bench-train-") as tmp:
        per_shard = max(args.batch_size, 1024)
        shards = max(1, args.rows // per_shard)
        write_synthetic_run(tmp, shards, per_shard, max(1, per_shard // 100), args.board_size)
        index = ShardIndex(tmp)
        window = WindowLoader(10**9).load(index.refresh())
        cfg = TrainConfig(
            data_dir=tmp,
            blocks=args.blocks,
            channels=args.channels,
            batch_size=args.batch_size,
            loader_threads=args.loader_threads,
            device=args.device,
            autocast=args.autocast,
            channels_last=args.channels_last,
        ).validate()
        ctx = ddp.DistContext(device=ddp.pick_device(args.device))
        torch.manual_seed(0)
        trainer = Trainer(KgrpcNet(args.blocks, args.channels), cfg, ctx)
        trainer.train_steps(window, args.warmup)
        fig = trainer.train_steps(window, args.steps)
    result = {
        "samples_per_s": fig["samples_per_s"],
        "steps_per_s": fig["steps_per_s"],
        "data_wait_share": fig["data_wait_share"],
        "target_data_wait_share": TARGET_WAIT_SHARE,
        "wait_ratio_to_target": fig["data_wait_share"] / TARGET_WAIT_SHARE,
        "blocks": args.blocks,
        "channels": args.channels,
        "board_size": args.board_size,
        "batch_size": args.batch_size,
        "steps": args.steps,
        "device": str(ctx.device),
        "autocast": args.autocast,
        "bf16": trainer.bf16,
        "channels_last": args.channels_last,
        "torch_threads": torch.get_num_threads(),
        "other_cpu_share_before": busy,
    }
    print(
        f"kgrpc-bench train: b{args.blocks}c{args.channels} {args.board_size}x"
        f"{args.board_size}, batch {args.batch_size}, {args.steps} steps on {ctx.device}, "
        f"autocast {args.autocast} ({'bf16' if trainer.bf16 else 'fp32'}), "
        f"{'channels-last' if args.channels_last else 'contiguous'}"
    )
    print(f"  {'samples/s':<22}{result['samples_per_s']:>12.1f}")
    print(f"  {'steps/s':<22}{result['steps_per_s']:>12.3f}")
    print(
        f"  {'data wait share':<22}{100 * result['data_wait_share']:>11.2f}%  "
        f"(target < {100 * TARGET_WAIT_SHARE:.0f}%: ratio {result['wait_ratio_to_target']:.2f}"
        f" {'OK' if result['wait_ratio_to_target'] < 1 else 'MISSED'})"
    )
    if busy is not None:
        print(f"  {'other CPU load before':<22}{100 * busy:>11.1f}%")
    return result
