"""Shared helpers for the inference tests: tiny real models and random positions."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from kgrpc.schema import NUM_PLANES
from trainer.export import export_onnx
from trainer.model import KgrpcNet
from trainer.naming import parse_name


def make_model(
    path: Path,
    name: str,
    blocks: int = 1,
    channels: int = 8,
    seed: int = 0,
    board_sizes: tuple[int, ...] = (5, 9),
) -> Path:
    torch.manual_seed(seed)
    model = KgrpcNet(blocks, channels).eval()
    try:  # the steps and rows of a model name go into the metadata, as the trainer writes them
        parsed = parse_name(name)
        steps, rows = parsed.steps, parsed.rows
    except ValueError:
        steps = rows = 0
    export_onnx(
        model, path, name=name, board_sizes=board_sizes, training_steps=steps, training_rows=rows
    )
    return path


def positions(count: int, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    planes = rng.random((count, NUM_PLANES, n, n)) < 0.3
    planes[:, 0] = True
    globals_ = rng.uniform(-1, 1, (count, 8)).astype(np.float32)
    return planes, globals_
