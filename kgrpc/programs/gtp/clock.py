"""GTP time control (``time_settings``, ``time_left``) turned into a budget per move."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from kgrpc.go.board import Board


@dataclass
class Clock:
    """GTP time control (``time_settings``, ``time_left``) turned into a budget per move.

    GTP's rules: byo-yomi time > 0 with 0 stones means no limit; 0 and 0 means absolute time
    (main time only). ``time_left colour T S``: T seconds left, S stones to play in them
    (0 = still in main time). Without time_left the engine counts its own time.
    """

    main: float = 0.0
    byo_time: float = 0.0
    byo_stones: int = 0
    limited: bool = False
    left: dict[int, tuple[float, int]] = field(default_factory=dict)
    # Share of the computed time a move may use, and a margin for the pipes and process lag.
    safety: float = 0.8
    lag: float = 0.05
    min_budget: float = 0.02

    def set(self, main: float, byo_time: float, byo_stones: int) -> None:
        self.main, self.byo_time, self.byo_stones = main, byo_time, byo_stones
        self.limited = not (byo_stones == 0 and byo_time > 0)
        self.left = {}

    def update(self, colour: int, seconds: float, stones: int) -> None:
        self.left[colour] = (seconds, stones)

    def _state(self, colour: int) -> tuple[float, int]:
        if colour in self.left:
            return self.left[colour]
        if self.main > 0 or self.byo_stones == 0:
            return self.main, 0
        return self.byo_time, self.byo_stones

    def budget(self, colour: int, board: Board) -> float | None:
        """Seconds the next move of ``colour`` may take; None without a time limit."""
        if not self.limited:
            return None
        seconds, stones = self._state(colour)
        if stones > 0:
            per_move = seconds / stones
        else:
            empty = int(np.count_nonzero(board.stones == 0))
            per_move = seconds / max(10, empty // 2)
            if self.byo_stones > 0:
                # The move that ends the main time opens a fresh byo-yomi period.
                per_move = max(per_move, self.byo_time / self.byo_stones)
        return max(self.min_budget, per_move * self.safety - self.lag)

    def spent(self, colour: int, seconds: float) -> None:
        """Count ``seconds`` against ``colour`` until the controller's next time_left."""
        if not self.limited:
            return
        left, stones = self._state(colour)
        left -= seconds
        if stones > 0:
            stones -= 1
            if stones == 0:
                left, stones = self.byo_time, self.byo_stones
        elif left <= 0 and self.byo_stones > 0:
            left, stones = self.byo_time, self.byo_stones
        self.left[colour] = (max(left, 0.0), stones)
