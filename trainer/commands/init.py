"""``kgrpc-train init``: write a randomly initialised model (ONNX, docs/formats.md section 5)."""

from __future__ import annotations

import argparse

HELP = "write a randomly initialised network as an ONNX model file"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--board-size",
        type=int,
        action="append",
        required=True,
        help="board size the model is meant for (repeat for several)",
    )
    parser.add_argument("--blocks", type=int, default=6, help="residual blocks (default 6)")
    parser.add_argument("--channels", type=int, default=96, help="channels (default 96)")
    parser.add_argument("--out", required=True, help="output .onnx file (written atomically)")
    parser.add_argument(
        "--name", default=None, help="model name (default kg-b{blocks}c{channels}-s0-d0)"
    )
    parser.add_argument("--seed", type=int, default=0, help="weight initialisation seed")


def run(args: argparse.Namespace) -> int:
    from trainer.export import init_model  # torch import deferred: --help stays fast

    name = init_model(
        args.board_size, args.blocks, args.channels, args.out, name=args.name, seed=args.seed
    )
    print(f"wrote {args.out}: model {name}")
    return 0
