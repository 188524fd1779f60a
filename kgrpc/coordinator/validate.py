"""Per-game validation, run in the validation process pool (spawn start method).

:func:`validate_game` takes a serialized ``GameRecord`` and returns a
:class:`~kgrpc.coordinator.store.GameOutcome`: accepted with its training rows, or
rejected with a machine-readable reason. Cheap structural checks come first
here: ``undecodable``, ``bad_game_id``, ``unknown_task`` (only where the settings require
every game to name a task the coordinator issued, and none was found for it); then
``kgrpc.records.validate.validate_record`` (limits, the task's terms, the full replay through the
rules engine, how the game ended; its reason codes are ``kgrpc.records.errors.REASON_CODES``:
bad_board_size, unsupported_rules, bad_komi, too_short, too_long, targets_mismatch,
illegal_move, policy_invalid, value_invalid, played_move_unvisited, result_mismatch,
ownership_mismatch, resign_inconsistent, unfinished, task_mismatch), and the training rows
are built by ``kgrpc.records.rows.training_rows`` from the same replay. An accepted game the game
archive keeps (``sgf_share``) gets its index row and SGF here too (``GameOutcome.kept``), off
the coordinator's event loop.

The "positions" of a game are its training rows: moves with a full search.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from kgrpc.coordinator import journal, kept_games
from kgrpc.coordinator.outcome import GameOutcome
from kgrpc.go.board import BLACK, WHITE
from kgrpc.records.errors import ReplayError
from kgrpc.records.rows import training_rows
from kgrpc.records.terms import DEFAULT_MAX_MOVES, DEFAULT_MAX_MOVES_PER_POINT, TaskTerms
from kgrpc.records.validate import validate_record
from kgrpc.v1 import common_pb2, records_pb2

_WINNER_PROTO = {BLACK: common_pb2.COLOR_BLACK, WHITE: common_pb2.COLOR_WHITE}


@dataclass(frozen=True)
class ValidationSettings:
    min_moves: int = 11
    max_moves: int = DEFAULT_MAX_MOVES
    allowed_rules: tuple[str, ...] = ("chinese",)
    # With max_moves: the move cap of a game whose task is not known (kgrpc.records.terms.move_cap).
    max_moves_per_point: float = DEFAULT_MAX_MOVES_PER_POINT
    # Every game must come with the terms of the task it names (else: unknown_task).
    require_task: bool = True
    # Share of accepted self-play games whose SGF is rendered here, for the game archive
    # (kept_games.selected picks them by id; 0: none).
    sgf_share: float = 0.0

    @classmethod
    def from_config(cls, cfg: Any) -> ValidationSettings:
        """From the coordinator's Config (min_moves, max_moves, allowed_rules,
        max_moves_per_point, require_task, sgf_share)."""
        return cls(
            cfg.min_moves,
            cfg.max_moves,
            tuple(cfg.allowed_rules),
            float(cfg.max_moves_per_point),
            bool(cfg.require_task),
            float(cfg.sgf_share),
        )


# One item of work: (serialized record, worker id it counts under[, its task's terms]).
Item = tuple[bytes, str] | tuple[bytes, str, TaskTerms | None]


def validate_record_bytes(
    data: bytes, worker_id: str, s: ValidationSettings, task: TaskTerms | None = None
) -> GameOutcome:
    """Validate one serialized game; never raises for bad input. ``task``: the terms of the
    task the record names, as the coordinator issued it (None: not known)."""
    rec = records_pb2.GameRecord()
    try:
        rec.ParseFromString(data)
    except Exception as exc:  # noqa: BLE001 - protobuf raises DecodeError and friends
        return GameOutcome(
            "", worker_id, False, "undecodable", f"game record does not parse: {exc}"
        )
    base = dict(
        game_id=rec.game_id,
        worker_id=worker_id,
        board_size=rec.board_size,
        komi=rec.komi,
    )

    def reject(reason: str, detail: str) -> GameOutcome:
        # Counted only for rejections: an accepted game's positions are its rows, and walking
        # the targets in Python cost as much as the native replay itself.
        positions = sum(1 for t in rec.targets if t.full_search)
        return GameOutcome(ok=False, reason=reason, detail=detail, positions=positions, **base)  # type: ignore[arg-type]

    if not rec.game_id or len(rec.game_id) > 36:
        return reject("bad_game_id", f"game_id must be 1..36 characters, got {len(rec.game_id)}")
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in rec.game_id):
        # Shards store ids as numpy "<U36", which drops trailing NULs: the id read back from a
        # shard (crash recovery adopts shards by their ids) would not be the stored game's.
        return reject("bad_game_id", f"game_id {rec.game_id!r} has control characters")
    if task is None and s.require_task:
        detail = (
            f"task {rec.task_id!r} was not issued by this coordinator (or is past its retention)"
            if rec.task_id
            else "the game names no task (task_id is empty)"
        ) + ": ask GetTask for a task and name it in every game's task_id"
        return reject("unknown_task", detail)
    try:
        replay = validate_record(
            rec,
            min_moves=s.min_moves,
            max_moves=s.max_moves,
            allowed_rules=s.allowed_rules,
            max_moves_per_point=s.max_moves_per_point,
            task=task,
            worker_id=worker_id,
            wire=data,
        )
        rows = training_rows(rec, replay)
    except ReplayError as exc:
        return reject(exc.reason_code, exc.detail)
    rules_name = replay.rules.name or ""
    rows.pop("game_index", None)
    rows = {k: np.asarray(v) for k, v in rows.items()}
    kept = None
    if s.sgf_share > 0 and kept_games.selected(rec.game_id, s.sgf_share):
        kept = kept_games.prepare(rec, "selfplay", rec.black_model, worker_id, replay)
    # Encoded and compressed here, in the pool: the coordinator's storage thread only frames
    # and writes it.
    return GameOutcome(
        ok=True,
        rules=rules_name,
        payload=journal.compress_payload(journal.encode_payload(rows)),
        kept=kept,
        positions=len(rows["value"]),
        winner=_WINNER_PROTO.get(replay.winner, common_pb2.COLOR_UNSPECIFIED),
        score=float(replay.score),
        **base,
    )  # type: ignore[arg-type]


def validate_many(items: list[Item], s: ValidationSettings) -> list[GameOutcome]:
    """Validate several games in one pool task (fewer round trips for small games)."""
    return [
        validate_record_bytes(item[0], item[1], s, item[2] if len(item) > 2 else None)
        for item in items
    ]


def watch_parent(parent_pid: int, period_s: float = 1.0) -> None:
    """Pool initializer: end this process once the coordinator that started it is gone. A
    pool process waits on a queue whose write end it holds itself, so after a SIGKILL (the
    OOM killer, a test) nothing would ever wake it: it would wait, and hold its memory, for
    ever."""

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(period_s)
        os._exit(0)

    threading.Thread(target=watch, name="kgrpc-parent-watch", daemon=True).start()


def warm_up() -> int:
    """Import the heavy modules in a pool process before the first game arrives."""
    from kgrpc.go import board, features  # noqa: F401

    return os.getpid()
