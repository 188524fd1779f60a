"""The coordinator's acceptance check of a game record (:func:`validate_record`): limits
first (cheap), then the task it names, the full replay, then how the game ended.

How a game may end (checked by :func:`validate_record`): by two consecutive passes, by the
resignation of the player to move after the last recorded move (so ``winner`` is the other
colour, and the game was neither over by passes nor at its cap), or by reaching exactly its
move cap (:func:`~kgrpc.records.terms.move_cap`: the cap of the task it was played for). What
the replay takes as the result of each is said in :mod:`kgrpc.records.replay`.
"""

from __future__ import annotations

from collections.abc import Iterable

from kgrpc.records.errors import ReplayError
from kgrpc.records.replay import ReplayResult, check_komi, proto_to_board_replay, size_and_rules
from kgrpc.records.terms import (
    DEFAULT_MAX_MOVES,
    DEFAULT_MAX_MOVES_PER_POINT,
    TaskTerms,
    check_task,
    move_cap,
)
from kgrpc.v1 import records_pb2


def validate_record(
    record: records_pb2.GameRecord,
    min_moves: int = 11,
    max_moves: int = DEFAULT_MAX_MOVES,
    allowed_rules: Iterable[str] = ("chinese",),
    allowed_sizes: Iterable[int] | None = None,
    collect_features: bool = True,
    *,
    max_moves_per_point: float = DEFAULT_MAX_MOVES_PER_POINT,
    task: TaskTerms | None = None,
    worker_id: str = "",
    wire: bytes | None = None,
) -> ReplayResult:
    """The coordinator's acceptance check: limits first (cheap), then the full replay, then
    how the game ended. The game's move cap is its task's (``task.max_moves``) when the task
    is known, else :func:`move_cap` of ``max_moves`` and ``max_moves_per_point``. With
    ``task`` the record must also be a game that task asked for (:func:`check_task`,
    ``worker_id`` being the worker the upload counts under). ``wire``: the bytes ``record`` was
    parsed from, when at hand (the native replay reads them instead of serializing again)."""
    n = record.board_size
    if allowed_sizes is not None and n not in set(allowed_sizes):
        raise ReplayError("bad_board_size", f"board_size {n} not accepted here")
    n, rules = size_and_rules(record)
    allowed = tuple(allowed_rules)
    if rules.name not in allowed:
        raise ReplayError(
            "unsupported_rules", f"rules {rules} not accepted (accepted: {', '.join(allowed)})"
        )
    if task is not None:
        check_komi(record.komi, n)  # an absurd komi is bad_komi, whatever the task allowed
        check_task(record, task, worker_id)
        # The task's own cap, as issued: a later change of the settings does not turn the
        # games spooled under it into rejects.
        cap = task.max_moves if task.max_moves > 0 else move_cap(n, max_moves, max_moves_per_point)
    else:
        cap = move_cap(n, max_moves, max_moves_per_point)
    played = len(record.moves)
    if played < min_moves:
        raise ReplayError("too_short", f"{played} moves, at least {min_moves} needed")
    if played > cap:
        raise ReplayError("too_long", f"{played} moves, at most {cap} allowed on {n}x{n}")
    replay = proto_to_board_replay(record, collect_features=collect_features, wire=wire)
    by_passes = replay.board.consecutive_passes >= 2
    if replay.resigned:
        if played >= cap:
            raise ReplayError(
                "resign_inconsistent",
                f"the game reached its move cap ({cap}) and was scored there: nobody resigned",
            )
    elif not by_passes and played != cap:
        raise ReplayError(
            "unfinished",
            f"{played} moves without two final passes or a resignation; a game stopped "
            f"before the end must stop at its move cap ({cap} moves on {n}x{n})",
        )
    return replay
