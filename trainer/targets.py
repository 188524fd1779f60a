"""Training targets derived from a shard's rows beyond the ones it stores.

- :func:`short_value_returns`: the short-term value target (``short_value_weight``), a
  TD(lambda) return over the root values of a game's later searched rows, ending with the
  result (docs/training.md "Short-term value target");
- :func:`reply_rows`: which rows have the opponent's reply as the next row, for the
  opponent-reply policy target (``opponent_policy_weight``).

Both read only ``game_index``, ``move_number`` (and ``root_value``, ``value``) of
docs/formats.md section 4; :func:`trainer.data.load_shard_rows` computes them per shard.
"""

from __future__ import annotations

import numpy as np

# The short-term value's default lambda (trainer setting short_value_lambda): at 25% full
# searches a row is about 4 moves from the next, so 0.75 weighs the next few rows of a game
# (KataGo's short-term targets look about 6 and 16 moves ahead).
SHORT_VALUE_LAMBDA = 0.75


def short_value_returns(
    game_index: np.ndarray,
    move_number: np.ndarray,
    root_value: np.ndarray,
    value: np.ndarray,
    lam: float,
) -> np.ndarray:
    """float32 [R]: each row's short-term value, mover's view. Over the rows of its game in
    move order, G_i = (1 - lam) * v_i + lam * G_next, with v the search's root value (sign
    flipped for the other mover) and, past the game's last row, the result: lam = 0 is the
    row's own search value, lam -> 1 the game result. The searched rows are what a shard
    holds (full searches only), so the horizon is counted in rows."""
    out = np.empty(len(value), dtype=np.float32)
    order = np.lexsort((move_number, game_index))
    nxt_g: float | None = None  # G of the next row of the same game, mover's view there
    prev_game, prev_move = -1, 0
    for i in order[::-1]:
        g, m = int(game_index[i]), int(move_number[i])
        if g != prev_game:
            tail = float(value[i])  # the result, this row's mover's view
        else:
            assert nxt_g is not None
            tail = nxt_g if (prev_move - m) % 2 == 0 else -nxt_g
        nxt_g = (1.0 - lam) * float(root_value[i]) + lam * tail
        out[i] = nxt_g
        prev_game, prev_move = g, m
    return out


def reply_rows(game_index: np.ndarray, move_number: np.ndarray) -> np.ndarray:
    """bool [R]: row i + 1 is the very next move of row i's game, so its search target is
    the opponent's reply to the position of row i (the opponent-reply policy target). A
    shard holds full searches only, so about full_search_prob of rows have one."""
    out = np.zeros(len(game_index), dtype=bool)
    if len(game_index) > 1:
        out[:-1] = (game_index[1:] == game_index[:-1]) & (move_number[1:] == move_number[:-1] + 1)
    return out
