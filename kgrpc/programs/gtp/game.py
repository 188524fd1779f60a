"""The game a GTP session is about: the board, rebuilt from its setup (handicap stones or an
SGF's ``AB``/``AW``) and the (colour, move) pairs played since, so ``undo``, ``komi`` and a
change of rules replay it."""

from __future__ import annotations

import asyncio

from kgrpc.go.board import Board, IllegalMoveError
from kgrpc.go.rules import CHINESE, Rules
from kgrpc.programs.eval import scoring
from kgrpc.programs.gtp.analysis import AnalyzeError, parse_colour
from kgrpc.programs.gtp.clock import Clock
from kgrpc.programs.gtp.players import Player


class GtpError(Exception):
    """An error answer ("? message")."""


def colour_of(text: str) -> int:
    """A GTP colour (``b``, ``white``...); the GTP error for anything else."""
    try:
        return parse_colour(text)
    except AnalyzeError as exc:
        raise GtpError(str(exc)) from None


class GameState:
    """The position and its history (the base of the engine's command classes)."""

    def __init__(
        self,
        player: Player,
        rules: Rules = CHINESE,
        size: int = 19,
        komi: float = 7.5,
        *,
        analysis_max_visits: int = 20000,
    ) -> None:
        self.player = player
        self.rules = rules
        self.size = size
        self.komi = komi
        self.analysis_max_visits = analysis_max_visits
        self.clock = Clock()
        # (colour, move) pairs since the last clear: undo rebuilds the board from them.
        self.history: list[tuple[int, int]] = []
        self.setup: tuple[list[int], list[int], int] | None = None
        self.handicap = 0  # stones placed by the handicap commands (printsgf's HA)
        self.board = Board(size, rules, komi)
        self.done = False
        self._status_cache: tuple[bytes, scoring.StoneStatus] | None = None

    # ------------------------------------------------------------------ board handling
    def _rebuild(self) -> None:
        board = Board(self.size, self.rules, self.komi)
        if self.setup is not None:
            board.set_stones(*self.setup)
        for colour, move in self.history:
            self._apply(board, colour, move)
        self.board = board

    def _rebuild_or_restore(self, **changes: object) -> None:
        """Change ``rules``/``komi``/... and replay the game; when the game is illegal under
        the change (a superko repetition the new rules forbid), keep the old settings."""
        old = {k: getattr(self, k) for k in changes}
        for k, v in changes.items():
            setattr(self, k, v)
        try:
            self._rebuild()
        except (IllegalMoveError, ValueError) as exc:
            for k, v in old.items():
                setattr(self, k, v)
            self._rebuild()
            raise GtpError(f"the game so far is illegal under that change: {exc}") from None

    @staticmethod
    def _apply(board: Board, colour: int, move: int) -> None:
        if board.is_over():
            board.consecutive_passes = 0
        board.set_to_play(colour)
        board.play(move)

    def _play(self, colour: int, move: int) -> None:
        trial = self.board.copy()
        self._apply(trial, colour, move)  # raises IllegalMoveError, board untouched
        self.board = trial
        self.history.append((colour, move))

    def _view(self, colour: int) -> Board:
        """The position with ``colour`` to move, playable even after two passes."""
        view = self.board.copy()
        if view.is_over():
            view.consecutive_passes = 0
        view.set_to_play(colour)
        return view

    async def _status(self) -> scoring.StoneStatus:
        key = self.board.stones.tobytes()
        if self._status_cache is None or self._status_cache[0] != key:
            status = await asyncio.to_thread(scoring.stone_status, self.board.copy())
            self._status_cache = (key, status)
        return self._status_cache[1]
