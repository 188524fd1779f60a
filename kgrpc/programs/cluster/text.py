"""Text forms the live display and the final summary share."""

from __future__ import annotations

import math

from kgrpc.v1 import common_pb2


def model_status(status: int) -> str:
    """``MODEL_STATUS_RELEASED`` -> ``released``."""
    return common_pb2.ModelStatus.Name(status).removeprefix("MODEL_STATUS_").lower()


def elo_interval(elo: float, low: float, high: float) -> str:
    """``12 [-30, 55]``; infinite bounds (a match won or lost outright) as ``inf`` / ``-inf``."""

    def f(x: float) -> str:
        return "inf" if math.isinf(x) and x > 0 else "-inf" if math.isinf(x) else f"{x:.0f}"

    return f"{f(elo)} [{f(low)}, {f(high)}]"


def mm_ss(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    return f"{m:02d}:{s:02d}"
