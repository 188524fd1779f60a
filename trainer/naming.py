"""Model names: ``{series}-b{blocks}c{channels}-s{steps}-d{rows}``.

The pattern of the source design (``kata1-b18c384nbt-s9996604416-d4316597426``), without the
block-kind suffix: ``series`` names the run (default ``kg``), ``b``/``c`` the architecture,
``s`` the optimiser steps the weights have taken and ``d`` the number of training-data rows
that existed when the model was exported. The model file is ``NAME.onnx``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

DEFAULT_SERIES = "kg"
# The series may contain letters, digits and underscores but no '-' (the field separator).
_SERIES_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
_NAME_RE = re.compile(r"^([A-Za-z][A-Za-z0-9_]*)-b(\d+)c(\d+)-s(\d+)-d(\d+)$")


@dataclass(frozen=True)
class ModelName:
    series: str
    blocks: int
    channels: int
    steps: int
    rows: int

    def __str__(self) -> str:
        return format_name(self.series, self.blocks, self.channels, self.steps, self.rows)

    @property
    def file_name(self) -> str:
        return f"{self}.onnx"


def check_series(series: str) -> str:
    if not _SERIES_RE.match(series):
        raise ValueError(
            f"bad model series {series!r}: use a letter then letters, digits or '_' (no '-')"
        )
    return series


def format_name(series: str, blocks: int, channels: int, steps: int, rows: int) -> str:
    check_series(series)
    for label, v in (("blocks", blocks), ("channels", channels)):
        if v < 1:
            raise ValueError(f"{label} must be >= 1, got {v}")
    for label, v in (("steps", steps), ("rows", rows)):
        if v < 0:
            raise ValueError(f"{label} must be >= 0, got {v}")
    return f"{series}-b{blocks}c{channels}-s{steps}-d{rows}"


def parse_name(name: str) -> ModelName:
    """Inverse of :func:`format_name`; ValueError naming the expected form otherwise."""
    m = _NAME_RE.match(name)
    if not m:
        raise ValueError(
            f"bad model name {name!r}: expected {{series}}-b{{blocks}}c{{channels}}-s{{steps}}"
            "-d{rows}, e.g. kg-b6c96-s1000-d250000"
        )
    series, b, c, s, d = m.groups()
    return ModelName(series, int(b), int(c), int(s), int(d))
