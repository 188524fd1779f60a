"""The coordinator's structured setting values: the curriculum's stages and the komi range.

Each has a type, a parser of what a TOML file, a flag or a variable gives, and a format as
the flag takes it (``--help`` shows the default so). The fields that hold them are in
:class:`kgrpc.coordinator.config.Config`; their checks against other settings in
:mod:`kgrpc.coordinator.config_checks`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class CurriculumStage:
    # Stage applies while the released model's training steps are below this (0 = forever).
    until_steps: int
    board_size: int
    visits: int


DEFAULT_CURRICULUM = (
    CurriculumStage(100_000, 9, 200),
    CurriculumStage(500_000, 13, 400),
    CurriculumStage(0, 19, 800),
)


def parse_curriculum(value: Any) -> tuple[CurriculumStage, ...]:
    """From a TOML list of tables, a ``steps:size:visits,...`` string, or stages."""
    stages: list[CurriculumStage] = []
    if isinstance(value, str):
        for part in value.split(","):
            try:
                until, size, visits = (int(x) for x in part.strip().split(":"))
            except ValueError as exc:
                raise ValueError(
                    f"curriculum entry {part!r}: expected until_steps:board_size:visits"
                ) from exc
            stages.append(CurriculumStage(until, size, visits))
    else:
        for entry in value:
            if isinstance(entry, CurriculumStage):
                stages.append(entry)
                continue
            try:
                stages.append(
                    CurriculumStage(
                        int(entry["until_steps"]), int(entry["board_size"]), int(entry["visits"])
                    )
                )
            except (KeyError, TypeError) as exc:
                raise ValueError(
                    f"curriculum entry {entry!r}: needs until_steps, board_size, visits"
                ) from exc
    for s in stages:
        if not 2 <= s.board_size <= 25 or s.visits < 1 or s.until_steps < 0:
            raise ValueError(f"bad curriculum stage {s}")
    return tuple(stages)


def format_curriculum(stages: tuple[CurriculumStage, ...]) -> str:
    """``until_steps:board_size:visits,...``, as the flag takes it."""
    return ",".join(f"{s.until_steps}:{s.board_size}:{s.visits}" for s in stages)


# Most komi values one komi range may hold (each may become a shard group of its own).
MAX_KOMI_VALUES = 64


def parse_komi_range(value: Any) -> tuple[float, ...]:
    """``()`` (off) from ``""``, ``"none"`` or an empty list; else ``(low, high, step)`` from
    ``"LOW:HIGH:STEP"`` or a TOML list ``[low, high, step]``."""
    if isinstance(value, str):
        text = value.strip()
        if text.lower() in ("", "none", "off"):
            return ()
        parts: list[Any] = text.split(":")
    else:
        parts = list(value)
        if not parts:
            return ()
    try:
        low, high, step = (float(p) for p in parts)
    except (TypeError, ValueError):
        raise ValueError(
            f"komi_range {value!r}: expected LOW:HIGH:STEP, e.g. 6.5:8.5:0.5"
        ) from None
    if not all(math.isfinite(x) for x in (low, high, step)) or step <= 0 or high < low:
        raise ValueError(f"komi_range {value!r}: need finite LOW <= HIGH and STEP > 0")
    return (low, high, step)


def format_komi_range(value: tuple[float, ...]) -> str:
    return ":".join(f"{x:g}" for x in value) if value else "none"
