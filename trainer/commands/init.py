"""``kgrpc-train init``: write a randomly initialised model (ONNX, docs/formats.md section 5)."""

from __future__ import annotations

import argparse

from kgrpc.cli_help import env_flag

HELP = "write a randomly initialised network as an ONNX model file"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    env_flag(
        parser,
        "--board-size",
        type=int,
        action="append",
        required=True,
        help="board size the model is meant for (repeat for several; the variable: "
        "comma-separated)",
    )
    env_flag(parser, "--blocks", type=int, default=6, help="residual blocks")
    env_flag(parser, "--channels", type=int, default=96, help="channels")
    env_flag(parser, "--out", required=True, help="output .onnx file (written atomically)")
    env_flag(
        parser, "--name", default=None, show="kg-b{blocks}c{channels}-s0-d0", help="model name"
    )
    env_flag(parser, "--seed", type=int, default=0, help="weight initialisation seed")


def run(args: argparse.Namespace) -> int:
    from trainer.export import init_model  # torch import deferred: --help stays fast

    name = init_model(
        args.board_size, args.blocks, args.channels, args.out, name=args.name, seed=args.seed
    )
    print(f"wrote {args.out}: model {name}")
    return 0
