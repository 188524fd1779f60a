"""The model file contract (docs/formats.md section 5): names, shapes and metadata keys.

Pure constants and parsing, no ONNX import: the trainer's exporter writes files by these
rules, the coordinator's publish check (``kgrpc.coordinator.model_check``) holds every
published file to them, the inference engine reads them.
"""

from __future__ import annotations

from kgrpc.go.features import FEATURE_VERSION, NUM_GLOBALS, NUM_PLANES

INPUT_NAMES = ("bin_input", "global_input")
OUTPUT_NAMES = ("policy", "value", "score", "ownership")
# Rank of each input and output; a fixed axis length where the contract has one (else None:
# batch, board and moves axes are dynamic).
INPUT_SHAPES: dict[str, tuple[int | None, ...]] = {
    "bin_input": (None, NUM_PLANES, None, None),
    "global_input": (None, NUM_GLOBALS),
}
OUTPUT_RANKS = {"policy": 2, "value": 1, "score": 1, "ownership": 3}
META_PREFIX = "kgrpc."
# Metadata props every published model carries (keys without the prefix).
META_KEYS = ("name", "blocks", "channels", "board_sizes", "feature_version",
             "training_steps", "training_rows")
MIN_BOARD_SIZE = 2
MAX_BOARD_SIZE = 19

__all__ = [
    "FEATURE_VERSION",
    "INPUT_NAMES",
    "INPUT_SHAPES",
    "MAX_BOARD_SIZE",
    "META_KEYS",
    "META_PREFIX",
    "MIN_BOARD_SIZE",
    "NUM_GLOBALS",
    "NUM_PLANES",
    "OUTPUT_NAMES",
    "OUTPUT_RANKS",
    "parse_board_sizes",
]


def parse_board_sizes(text: str) -> tuple[int, ...]:
    """``"5,9"`` -> ``(5, 9)``; ValueError unless a non-empty list of sizes in 2..19."""
    try:
        sizes = tuple(sorted({int(part) for part in text.split(",")}))
    except ValueError:
        raise ValueError(f"board_sizes {text!r} is not a comma-separated list of sizes") from None
    if not sizes or not all(MIN_BOARD_SIZE <= s <= MAX_BOARD_SIZE for s in sizes):
        raise ValueError(f"board_sizes {text!r}: sizes must be in "
                         f"{MIN_BOARD_SIZE}..{MAX_BOARD_SIZE}")
    return sizes
