"""Writing game records: search targets (:func:`make_target`), the record of a finished game
(:func:`game_to_proto`) and the record format version it is written in.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from kgrpc.go.board import BLACK, WHITE, Board
from kgrpc.v1 import common_pb2, records_pb2

# GameRecord.format_version this module writes: 2 = targets carry ``played_visits``. Records
# without the field (0) or with 1 come from older writers and are read as format 1.
RECORD_FORMAT_VERSION = 2


def _colour_to_proto(colour: int) -> int:
    if colour == BLACK:
        return common_pb2.COLOR_BLACK
    if colour == WHITE:
        return common_pb2.COLOR_WHITE
    return common_pb2.COLOR_UNSPECIFIED


def winner_of(score: float) -> int:
    return BLACK if score > 0 else WHITE if score < 0 else 0


def make_target(
    policy: Mapping[int, float] | np.ndarray,
    *,
    visits: int,
    root_value: float,
    root_score: float = 0.0,
    full_search: bool = True,
    played_visits: int = 0,
) -> records_pb2.SearchTarget:
    """A SearchTarget from a dense policy vector [N*N+1] or a {move: probability} mapping;
    ``played_visits``: the child visits of the move then played (see records.proto)."""
    if isinstance(policy, np.ndarray):
        nz = np.flatnonzero(policy)
        moves, probs = nz.tolist(), policy[nz].astype(np.float64).tolist()
    else:
        items = sorted((int(m), float(p)) for m, p in policy.items() if p > 0)
        moves, probs = [m for m, _ in items], [p for _, p in items]
    return records_pb2.SearchTarget(
        full_search=full_search,
        visits=int(visits),
        policy_moves=moves,
        policy_probs=probs,
        root_value=float(root_value),
        root_score=float(root_score),
        played_visits=int(played_visits),
    )


def game_to_proto(
    board: Board,
    targets: Sequence[records_pb2.SearchTarget],
    *,
    game_id: str,
    black_model: str = "",
    white_model: str = "",
    resigned_winner: int | None = None,
    resign_score: float | None = None,
    worker_id: str = "",
    task_id: str = "",
    finished_unix_ms: int = 0,
) -> records_pb2.GameRecord:
    """The record of the game played on ``board`` (its move history), one target per move.

    For a finished game (passes or move cap) the result is the board's score with every stone
    alive and its area ownership. For a resignation pass ``resigned_winner`` (BLACK/WHITE: the
    opponent of the player to move, who resigned) and optionally ``resign_score``, the score
    estimate (black's view) at resignation. The record is written as format 2
    (:data:`RECORD_FORMAT_VERSION`) when every full-search target carries ``played_visits``,
    else as format 1.
    """
    if len(targets) != len(board.moves):
        raise ValueError(f"{len(targets)} targets for {len(board.moves)} moves")
    ownership = board.area_ownership()
    if resigned_winner is None:
        score = board.score()
        result = records_pb2.GameResult(
            winner=_colour_to_proto(winner_of(score)),
            score=score,
            ownership=ownership.tolist(),
        )
    else:
        if resigned_winner not in (BLACK, WHITE):
            raise ValueError("resigned_winner must be BLACK or WHITE")
        default = 1.0 if resigned_winner == BLACK else -1.0
        result = records_pb2.GameResult(
            winner=_colour_to_proto(resigned_winner),
            score=default if resign_score is None else resign_score,
            ownership=ownership.tolist(),
            resigned=True,
        )
    return records_pb2.GameRecord(
        game_id=game_id,
        rules=board.rules.to_proto(),
        komi=board.komi,
        board_size=board.size,
        black_model=black_model,
        white_model=white_model,
        moves=board.moves,
        targets=targets,
        result=result,
        worker_id=worker_id,
        task_id=task_id,
        finished_unix_ms=finished_unix_ms,
        format_version=(
            RECORD_FORMAT_VERSION
            if all(t.played_visits > 0 for t in targets if t.full_search)
            else 1
        ),
    )
