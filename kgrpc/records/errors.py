"""How a game record is rejected: :class:`ReplayError` and its reason codes, and how a
rejection's detail names moves and colours.

A bad record raises :class:`ReplayError` with one of :data:`REASON_CODES`:

=====================  ======================================================================
reason code            meaning
=====================  ======================================================================
bad_board_size         board_size outside 2..19
unsupported_rules      rules unspecified/unknown, or not among the accepted presets
bad_komi               komi not finite or absurd
too_short / too_long   fewer than ``min_moves`` / more moves than the game's move cap
targets_mismatch       number of search targets differs from the number of moves
illegal_move           a move that the rules forbid (or off the board, or after the game end)
policy_invalid         a target's sparse policy is malformed or names an illegal move
value_invalid          a target's root value/score is not finite or the value not in [-1, 1]
played_move_unvisited  a full-search move that its own search never visited
result_mismatch        the recorded winner/score disagree with the replay (or are malformed)
ownership_mismatch     the recorded ownership disagrees with the replay's area ownership
resign_inconsistent    a resignation the record contradicts (game over, wrong winner)
unfinished             the game ended neither by two passes, nor by resignation, nor at its cap
task_mismatch          the game is not what the task it names asked for (``terms.check_task``)
=====================  ======================================================================

Its ``detail`` is for people: it names a move counted from 1 (:func:`move_label`: the first
move of the game is "move 1") and a colour by name (:func:`colour_label`: black, white), never
by an index or an encoding.
"""

from __future__ import annotations

from kgrpc.go.board import BLACK, WHITE

REASON_CODES = (
    "bad_board_size",
    "unsupported_rules",
    "bad_komi",
    "too_short",
    "too_long",
    "targets_mismatch",
    "illegal_move",
    "policy_invalid",
    "value_invalid",
    "played_move_unvisited",
    "result_mismatch",
    "ownership_mismatch",
    "resign_inconsistent",
    "unfinished",
    "task_mismatch",
)


class ReplayError(ValueError):
    """A record that fails replay or validation; ``reason_code`` is one of REASON_CODES."""

    def __init__(self, reason_code: str, detail: str) -> None:
        assert reason_code in REASON_CODES, reason_code
        super().__init__(f"{reason_code}: {detail}")
        self.reason_code = reason_code
        self.detail = detail


def move_label(index: int) -> str:
    """How a rejection's detail names the move at ``index`` of ``GameRecord.moves``: counted
    from 1, as people and SGF count them (index 0 is "move 1", black's first move). Every
    detail that names a move or a search target uses this (docs/clients.md, "The acks")."""
    return f"move {index + 1}"


def colour_label(colour: int) -> str:
    """How a rejection's detail names a winner or a player: ``black``, ``white`` (whatever the
    encoding: +1/-1 here, COLOR_BLACK = 1 / COLOR_WHITE = 2 on the wire) or ``none (a draw)``."""
    return "black" if colour == BLACK else "white" if colour == WHITE else "none (a draw)"
