"""Uniformly random play that never fills its own single-point eyes (light playouts).

Used by the ``kgrpc-bench rules`` benchmark, by the GTP engine's ``--model none`` player, and
usable by MCTS as a cheap rollout. A candidate point is drawn uniformly among the empty points
not tried yet; points that are illegal or the mover's own eye are swapped out of the draw, so a
move costs O(candidates tried), not a scan of the board.
"""

from __future__ import annotations

import random

from kgrpc.go.board import Board


def _choose(board: Board, empties: list[int], rnd) -> int:
    """Index in ``empties`` of a random legal non-eye move, or -1 (then the mover passes)."""
    c = board._tp
    is_eye = board._is_eye
    reason = board._illegal_reason
    i = len(empties)
    while i:
        k = int(rnd() * i)
        p = empties[k]
        if not is_eye(p, c) and reason(p) is None:
            return k
        i -= 1
        empties[k], empties[i] = empties[i], empties[k]
    return -1


def random_move(board: Board, rng: random.Random | None = None) -> int:
    """A uniformly random legal move that does not fill the mover's own eye; pass if none."""
    rnd = (rng or random).random
    empties = [p for p, s in enumerate(board._stones) if not s]
    k = _choose(board, empties, rnd)
    return board.pass_move if k < 0 else empties[k]


def random_playout(
    board: Board, rng: random.Random | None = None, max_moves: int | None = None
) -> int:
    """Play random moves on ``board`` (in place) until the game ends; return the moves played.

    The game ends with two consecutive passes, the board's own move cap, or ``max_moves`` more
    moves (default: 3 * N*N, enough for any sane random game).
    """
    rnd = (rng or random).random
    limit = 3 * board.num_points if max_moves is None else max_moves
    empties = [p for p, s in enumerate(board._stones) if not s]
    nn = board.num_points
    place = board._place
    played = 0
    while played < limit and not board.is_over():
        k = _choose(board, empties, rnd)
        if k < 0:
            board.play(nn)
        else:
            p = empties[k]
            empties[k] = empties[-1]
            empties.pop()
            freed = place(p)
            if freed:
                empties.extend(freed)
        played += 1
    return played
