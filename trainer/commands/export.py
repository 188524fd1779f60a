"""``kgrpc-train export --checkpoint C --out FILE.onnx [--precision fp32,int8]``.

The model is named from the checkpoint's counters (``{series}-b{B}c{C}-s{steps}-d{rows}``)
unless ``--name`` is given. A checkpoint of a run with ``ema_samples`` exports its averaged
weights, as the run's own exports do (``--raw-weights``: the trained ones instead). Each
precision is written beside ``--out`` (``NAME.onnx``, ``NAME.fp16.onnx``, ``NAME.int8.onnx``)
only after its parity against the torch model on held-out positions is within the bounds
(trainer/parity.py); a refused precision writes nothing and makes the command exit 1.
Positions (int8 calibration and parity, disjoint) come from the newest shards under
``--data-dir``, else from legal random games.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kgrpc.cli_help import env_flag

HELP = "export a training checkpoint as ONNX model files (fp32, fp16, int8; parity-checked)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from trainer.parity import ParityBounds

    b = ParityBounds()
    env_flag(
        parser,
        "--checkpoint",
        required=True,
        help="checkpoint file, or a checkpoints directory (newest is used)",
    )
    env_flag(
        parser,
        "--out",
        required=True,
        help="output .onnx file (the fp32 file; other precisions go beside "
        "it), or a directory to write NAME.onnx into",
    )
    env_flag(
        parser,
        "--board-size",
        type=int,
        action="append",
        show="19",
        help="board size recorded in the metadata (repeatable; the variable: comma-separated)",
    )
    env_flag(parser, "--series", default="kg", help="name series")
    env_flag(parser, "--name", default=None, show="from the counters", help="model name")
    env_flag(
        parser,
        "--precision",
        default="fp32",
        help="fp32, fp16, int8 or a comma-separated list",
    )
    env_flag(
        parser,
        "--raw-weights",
        action="store_true",
        help="export the trained weights even when the checkpoint holds averaged ones",
    )
    env_flag(
        parser,
        "--data-dir",
        default="",
        show="random games",
        help="shards to draw calibration and parity positions from (DATA_DIR/training_data)",
    )
    env_flag(
        parser,
        "--parity-positions",
        type=int,
        default=256,
        help="held-out positions for parity (as many for calibration)",
    )
    env_flag(
        parser,
        "--atol",
        type=float,
        default=2e-3,
        help="fp32: largest torch vs ONNX Runtime output difference",
    )
    env_flag(
        parser,
        "--min-top1",
        type=float,
        default=b.min_top1,
        help="least policy top-1 agreement",
    )
    env_flag(
        parser,
        "--max-kl",
        type=float,
        default=b.max_kl,
        help="largest mean policy KL in nats",
    )
    env_flag(
        parser,
        "--max-value-mae",
        type=float,
        default=b.max_value_mae,
        help="largest value MAE",
    )
    env_flag(
        parser,
        "--max-score-mae",
        type=float,
        default=b.max_score_mae,
        help="largest score MAE in points",
    )


def run(args: argparse.Namespace) -> int:
    from kgrpc.precision import parse_precisions
    from trainer.checkpoint import (
        exported_model_from_checkpoint,
        latest_checkpoint,
        load_checkpoint,
        model_from_checkpoint,
        state_from_checkpoint,
    )
    from trainer.export import export_precisions
    from trainer.naming import format_name
    from trainer.parity import ParityBounds
    from trainer.positions import describe, draw_sets

    ckpt = Path(args.checkpoint)
    if ckpt.is_dir():
        found = latest_checkpoint(ckpt)
        if found is None:
            print(f"kgrpc-train export: no checkpoint in {ckpt}", file=sys.stderr)
            return 2
        ckpt = found
    try:
        precisions = parse_precisions(args.precision)
        bounds = ParityBounds(args.min_top1, args.max_kl, args.max_value_mae, args.max_score_mae)
        if args.parity_positions < 2:
            raise ValueError(f"--parity-positions must be >= 2, got {args.parity_positions}")
        payload = load_checkpoint(ckpt)
        model = (
            model_from_checkpoint(payload)
            if args.raw_weights
            else exported_model_from_checkpoint(payload)
        )
        state = state_from_checkpoint(payload)
        name = args.name or format_name(
            args.series, model.blocks, model.channels, state.step, state.data_rows
        )
    except (ValueError, FileNotFoundError) as exc:
        print(f"kgrpc-train export: {exc}", file=sys.stderr)
        return 2
    out = Path(args.out)
    if out.is_dir() or not out.suffix:
        out = out / f"{name}.onnx"
    sizes = args.board_size or [19]
    sets = draw_sets(sizes, args.parity_positions, data_dir=args.data_dir or None)
    print(f"positions: calibration {describe(sets[0])}; held out {describe(sets[1])}")
    outcome = export_precisions(
        model,
        out,
        precisions,
        name=name,
        board_sizes=sizes,
        training_steps=state.step,
        training_rows=state.data_rows,
        sets=sets,
        bounds=bounds,
        atol=args.atol,
    )
    for e in outcome.written:
        print(
            f"wrote {e.path}: model {name} (parity max diff {e.report.max_abs_diff:.2g}; "
            f"{e.report.summary()})"
        )
    for exc in outcome.refused.values():
        print(f"kgrpc-train export: nothing written: {exc}", file=sys.stderr)
    return 0 if outcome.ok else 1
