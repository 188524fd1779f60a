"""Uniformly random play that never fills its own single-point eyes (light playouts).

Used by the ``kgrpc-bench rules`` benchmark, by the GTP engine's ``--model none`` player, and
usable by MCTS as a cheap rollout. A candidate point is drawn uniformly among the empty points
not tried yet; points that are illegal or the mover's own eye are swapped out of the draw, so a
move costs O(candidates tried), not a scan of the board.
"""

from __future__ import annotations

import random

import numpy as np

from kgrpc import native
from kgrpc.go.board import Board, NativeBoard

# The C implementation of random() every plain random.Random uses: the native playouts make
# exactly its draws (same Mersenne Twister), so they play exactly the Python games.
_C_RANDOM = random.Random.random


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


def _native_rng(rng: random.Random | None) -> random.Random | None:
    """The Random a native playout draws from, or None for one with its own random()."""
    r = rng if rng is not None else random._inst  # type: ignore[attr-defined]
    return r if type(r).random is _C_RANDOM else None


def _native(board: Board, r: random.Random, limit: int | None) -> int:
    ext = native.ext
    assert ext is not None
    if native.RANDOM_IN_PLACE:
        if limit is None:
            return ext.random_move_inplace(board, r)
        return ext.random_playout_inplace(board, r, limit)
    state = r.getstate()
    if limit is None:
        result, inner = ext.random_move(board, state[1])
    else:
        result, inner = ext.random_playout(board, state[1], limit)
    r.setstate((state[0], inner, state[2]))
    return result


def _public_move(board: Board, rnd) -> int:
    """The same choice through the board's public API (a native board, a custom Random)."""
    empties = np.flatnonzero(board.stones == 0).tolist()
    me = board.to_play
    i = len(empties)
    while i:
        k = int(rnd() * i)
        p = empties[k]
        if not board.is_own_eye(p, me) and board.is_legal(p):
            return p
        i -= 1
        empties[k], empties[i] = empties[i], empties[k]
    return board.pass_move


def random_move(board: Board, rng: random.Random | None = None) -> int:
    """A uniformly random legal move that does not fill the mover's own eye; pass if none."""
    if type(board) is NativeBoard:
        r = _native_rng(rng)
        return _native(board, r, None) if r is not None else _public_move(board, rng.random)
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
    limit = 3 * board.num_points if max_moves is None else max_moves
    if type(board) is NativeBoard:
        r = _native_rng(rng)
        if r is not None:
            return _native(board, r, limit)
        played = 0
        while played < limit and not board.is_over():
            board.play(_public_move(board, rng.random))
            played += 1
        return played
    rnd = (rng or random).random
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
