"""``kgrpc-train export --checkpoint C --out FILE.onnx``: a checkpoint as an ONNX model.

The model is named from the checkpoint's counters (``{series}-b{B}c{C}-s{steps}-d{rows}``)
unless ``--name`` is given, and checked for torch vs ONNX Runtime parity before the command
reports success (the file is removed on a mismatch).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HELP = "export a training checkpoint as an ONNX model file (with a parity check)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--checkpoint", required=True,
                        help="checkpoint file, or a checkpoints directory (newest is used)")
    parser.add_argument("--out", required=True,
                        help="output .onnx file, or a directory to write NAME.onnx into")
    parser.add_argument("--board-size", type=int, action="append",
                        help="board size recorded in the metadata (repeatable; default 19)")
    parser.add_argument("--series", default="kg", help="name series (default kg)")
    parser.add_argument("--name", default=None, help="model name (default from the counters)")
    parser.add_argument("--atol", type=float, default=2e-3, help="parity tolerance")


def run(args: argparse.Namespace) -> int:
    from trainer.checkpoint import (
        latest_checkpoint,
        load_checkpoint,
        model_from_checkpoint,
        state_from_checkpoint,
    )
    from trainer.export import ParityError, check_parity, export_onnx
    from trainer.naming import format_name

    ckpt = Path(args.checkpoint)
    if ckpt.is_dir():
        found = latest_checkpoint(ckpt)
        if found is None:
            print(f"kgrpc-train export: no checkpoint in {ckpt}", file=sys.stderr)
            return 2
        ckpt = found
    try:
        payload = load_checkpoint(ckpt)
        model = model_from_checkpoint(payload)
        state = state_from_checkpoint(payload)
        name = args.name or format_name(args.series, model.blocks, model.channels, state.step,
                                        state.data_rows)
    except (ValueError, FileNotFoundError) as exc:
        print(f"kgrpc-train export: {exc}", file=sys.stderr)
        return 2
    out = Path(args.out)
    if out.is_dir() or not out.suffix:
        out = out / f"{name}.onnx"
    sizes = args.board_size or [19]
    export_onnx(model, out, name=name, board_sizes=sizes, training_steps=state.step,
                training_rows=state.data_rows)
    try:
        diff = check_parity(model, out, max(sizes), atol=args.atol)
    except ParityError as exc:
        out.unlink(missing_ok=True)
        print(f"kgrpc-train export: parity check failed, nothing written: {exc}",
              file=sys.stderr)
        return 1
    print(f"wrote {out}: model {name} (parity max diff {diff:.2g})")
    return 0
