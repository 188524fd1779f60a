"""A match result from one side's view: W-L-D, score rate with its Wilson 95% interval, Elo.

The arithmetic is :mod:`kgrpc.elo`'s (one place): the score rate counts a draw as half a
win; the Elo difference is ``400 * log10(rate / (1 - rate))`` (a 0% or 100% result is pulled
half a game from the edge first); the interval of both is the Wilson score interval, converted
to Elo at its ends (an end at 0% or 100% is -inf / +inf Elo).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kgrpc import elo


@dataclass(frozen=True)
class Rating:
    wins: int
    losses: int
    draws: int
    rate: float  # (wins + draws / 2) / games
    rate_low: float
    rate_high: float
    elo: float
    elo_low: float
    elo_high: float

    @property
    def games(self) -> int:
        return self.wins + self.losses + self.draws

    @classmethod
    def from_results(cls, wins: int, losses: int, draws: int) -> Rating:
        est = elo.elo_interval(wins, losses, draws)
        low, high = elo.wilson_interval(est.rate, est.games)
        return cls(wins, losses, draws, est.rate, low, high, est.elo, est.low, est.high)

    def describe(self) -> str:
        """``7-4-1  62.5% [35.4%, 84.8%]  Elo +89 [-110, +300]``."""
        return (
            f"{self.wins}-{self.losses}-{self.draws}  {100 * self.rate:.1f}% "
            f"[{100 * self.rate_low:.1f}%, {100 * self.rate_high:.1f}%]  "
            f"Elo {format_elo(self.elo)} [{format_elo(self.elo_low)}, "
            f"{format_elo(self.elo_high)}]"
        )


def format_elo(x: float) -> str:
    if math.isinf(x):
        return "+inf" if x > 0 else "-inf"
    return f"{x:+.0f}"
