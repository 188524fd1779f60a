"""What the dashboard's board viewer steps through: a kept SGF replayed by the rules engine.

The browser only puts stones down and takes off what each move captured; captures, ko and
suicide are decided here, by :mod:`kgrpc.go` (one place for the rules), not in JavaScript.
Point index = row * N + col, row 0 the top row; a pass has ``point`` None.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kgrpc.go.board import BLACK, Board
from kgrpc.sgf import parse_sgf


def viewer_data(sgf_text: str) -> dict[str, Any]:
    """Board size, komi, rules, players, result, setup stones and, per move, its colour,
    point, the points it emptied, and the search's root value and visits when the SGF has
    them. Raises :class:`kgrpc.sgf.SgfError` or ``IllegalMoveError`` for a file that does not
    replay."""
    game = parse_sgf(sgf_text)
    board = Board(game.size, game.rules, game.komi)
    if game.setup_black or game.setup_white or game.first_player != BLACK:
        board.set_stones(game.setup_black, game.setup_white, game.first_player)
    nn = game.size * game.size
    moves: list[dict[str, Any]] = []
    before = board.stones
    for i, (colour, move) in enumerate(game.moves):
        if board.is_over():
            board.consecutive_passes = 0  # SGF games may go on after two passes
        board.set_to_play(colour)
        board.play(move)
        after = board.stones
        emptied = np.flatnonzero((before != 0) & (after == 0)).tolist()
        moves.append(
            {
                "color": "B" if colour == BLACK else "W",
                "point": None if move == nn else move,
                "captures": emptied,
                "value": game.values[i],
                "visits": game.visits[i],
            }
        )
        before = after
    return {
        "size": game.size,
        "komi": game.komi,
        "rules": game.rules.name or str(game.rules),
        "black": game.black,
        "white": game.white,
        "result": game.result,
        "setup": {"black": list(game.setup_black), "white": list(game.setup_white)},
        "moves": moves,
    }
