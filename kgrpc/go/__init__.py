"""The Go engine: rules, board, coordinates, input features, symmetries and random play.

Everything in kgrpc that needs to know the game stands on this package: the worker's MCTS plays
with :class:`~kgrpc.go.board.Board`, the coordinator replays every uploaded game through it, and
the trainer reads positions encoded by :mod:`kgrpc.go.features`.
"""

from kgrpc.go.board import BLACK, WHITE, Board, IllegalMoveError
from kgrpc.go.geometry import EMPTY
from kgrpc.go.rules import CHINESE, PRESETS, Rules

__all__ = ["BLACK", "CHINESE", "EMPTY", "PRESETS", "WHITE", "Board", "IllegalMoveError", "Rules"]
