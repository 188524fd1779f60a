"""What a game may be: its move cap, a task's terms and komi grid, and the check that a record
is a game the task it names asked for (:func:`check_task`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from kgrpc.go.rules import Rules
from kgrpc.records.errors import ReplayError
from kgrpc.v1 import records_pb2

# The coordinator's defaults for the move cap (kgrpc.coordinator.config uses the same values).
DEFAULT_MAX_MOVES = 499
DEFAULT_MAX_MOVES_PER_POINT = 2.0


def move_cap(
    board_size: int,
    max_moves: int = DEFAULT_MAX_MOVES,
    max_moves_per_point: float = DEFAULT_MAX_MOVES_PER_POINT,
) -> int:
    """The move cap of a game on a ``board_size`` board: the worker stops and scores the game
    after this many moves. ``max_moves`` is the coordinator's limit (Task.max_moves; 0 = none),
    ``max_moves_per_point`` SelfPlaySettings' (a float32 on the wire, so it is rounded to
    float32 here too: worker and coordinator compute the same number)."""
    per_point = float(np.float32(max_moves_per_point))
    cap = max(1, int(per_point * board_size * board_size))
    return min(cap, max_moves) if max_moves > 0 else cap


@dataclass(frozen=True)
class TaskTerms:
    """What a task handed out allowed (the coordinator's stored copy of a ``Task``), for
    :func:`check_task`. ``komi_step`` 0: exactly ``komi_low``; otherwise any of ``komi_low``,
    ``komi_low + komi_step``, ... up to ``komi_high``. ``models``: the one model of a self-play
    task, or (candidate, reference) of a match task. ``worker_id`` "": any worker."""

    task_id: str
    board_size: int
    rules: str
    komi_low: float
    komi_high: float
    komi_step: float
    max_moves: int
    models: tuple[str, ...]
    worker_id: str = ""


_KOMI_GRID_TOLERANCE = 1e-3


def komi_in_range(komi: float, low: float, high: float, step: float) -> bool:
    """Whether ``komi`` is one of the values a task's komi range allows (float32 rounding
    tolerated)."""
    if not math.isfinite(komi):
        return False
    if step <= 0:
        return abs(komi - low) <= _KOMI_GRID_TOLERANCE
    if not low - _KOMI_GRID_TOLERANCE <= komi <= high + _KOMI_GRID_TOLERANCE:
        return False
    k = (komi - low) / step
    return abs(k - round(k)) * step <= _KOMI_GRID_TOLERANCE


def komi_values(low: float, high: float, step: float) -> list[float]:
    """The komi values a range allows (the grid :func:`komi_in_range` accepts): ``low``,
    ``low + step``, ... up to ``high``; ``[low]`` when ``step`` is 0. Workers draw each
    game's komi from these."""
    if step <= 0:
        return [low]
    count = int(math.floor((high - low) / step + _KOMI_GRID_TOLERANCE)) + 1
    return [low + i * step for i in range(max(1, count))]


def check_task(record: records_pb2.GameRecord, task: TaskTerms, worker_id: str = "") -> None:
    """Raise ReplayError("task_mismatch") unless ``record`` is a game its task asked for:
    same task id, board size and rules, komi within the task's range, the task's model(s)
    (self-play: both sides the task's model; match: candidate against reference), played by
    the worker the task was issued to (``worker_id``: the id the upload is counted under)."""

    def bad(detail: str) -> ReplayError:
        return ReplayError("task_mismatch", f"task {task.task_id!r}: {detail}")

    if record.task_id != task.task_id:
        raise bad(f"the record names task {record.task_id!r}")
    if task.worker_id and worker_id != task.worker_id:
        raise bad(f"issued to worker {task.worker_id!r}, not {worker_id!r}")
    if record.board_size != task.board_size:
        raise bad(
            f"board size {record.board_size}, the task is {task.board_size}x{task.board_size}"
        )
    try:
        rules = Rules.from_proto(record.rules).name
    except ValueError as exc:
        raise ReplayError("unsupported_rules", str(exc)) from None
    if rules != task.rules:
        raise bad(f"rules {rules!r}, the task's are {task.rules!r}")
    if not komi_in_range(record.komi, task.komi_low, task.komi_high, task.komi_step):
        allowed = (
            f"{task.komi_low:g}"
            if task.komi_step <= 0
            else f"{task.komi_low:g}..{task.komi_high:g} in steps of {task.komi_step:g}"
        )
        raise bad(f"komi {record.komi:g} outside the task's {allowed}")
    sides = (record.black_model, record.white_model)
    if len(task.models) == 1:
        ok = sides == (task.models[0], task.models[0])
    else:
        ok = sorted(sides) == sorted(task.models[:2]) and sides[0] != sides[1]
    if not ok:
        raise bad(
            f"models {sides[0]!r} vs {sides[1]!r}, the task's are "
            f"{' vs '.join(repr(m) for m in task.models)}"
        )
