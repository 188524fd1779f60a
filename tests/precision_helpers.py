"""Shared by the precision tests (tests/test_precision*.py): a tiny net, its release in every
precision (exported once per test module) and the parity bounds they are held to.

A tiny random net quantises coarsely (8 channels average little rounding noise away) and its
nearly flat policy makes top-1 a coin toss between near-ties, so the exports here use the
looser bounds ``LOOSE``; the default bounds are exercised by the refusal tests and, on a
b6c96 net, by ``kgrpc-bench inference --precision``.
"""

from __future__ import annotations

from pathlib import Path

import torch

from kgrpc.precision import PRECISIONS
from trainer.export import ExportOutcome, export_precisions
from trainer.model import KgrpcNet
from trainer.parity import ParityBounds
from trainer.positions import Positions, draw_sets

NAME = "kg-b1c8-s0-d0"
Release = tuple[KgrpcNet, Path, ExportOutcome, tuple[list[Positions], list[Positions]]]
LOOSE = ParityBounds(min_top1=0.5, max_kl=0.05, max_value_mae=0.05, max_score_mae=2.0)
ALL = PRECISIONS  # fp32, fp16, int8


def tiny_net(seed: int = 3) -> KgrpcNet:
    """A b1c8 net with random weights (``seed``), in eval mode."""
    torch.manual_seed(seed)
    return KgrpcNet(1, 8).eval()


def export_release(directory: Path) -> Release:
    """:func:`tiny_net` exported in every precision at 5x5 and 9x9 into ``directory``, within
    ``LOOSE``: the net, the fp32 file, the outcome, and the (calibration, held-out) sets."""
    model = tiny_net()
    path = directory / f"{NAME}.onnx"
    sets = draw_sets([5, 9], 64, seed=1)
    # int8 first: converting must leave the fp32 graph intact for the next precisions.
    outcome = export_precisions(
        model,
        path,
        ["int8", "fp32", "fp16"],
        name=NAME,
        board_sizes=[5, 9],
        sets=sets,
        bounds=LOOSE,
    )
    assert outcome.ok, outcome.refused
    return model, path, outcome, sets
