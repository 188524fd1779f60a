"""One ladder row: a model against one reference, as ladder.csv and the coordinator hold it.

:class:`LadderRecord` converts between a rating of a model (:meth:`~LadderRecord.make`), a row
of ``ladder.csv`` (:meth:`~LadderRecord.to_row`, :meth:`~LadderRecord.from_row`) and the
coordinator's ``Rating`` message (:meth:`~LadderRecord.from_proto`); a :data:`Recorder` makes
the row of a result (locally, or by reporting it to a coordinator).

Columns added after ladder.csv was first written go at the end, are listed in
:data:`LATER_COLUMNS` and default to None: a ladder.csv written before them still reads,
with those values unknown.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, fields
from typing import TYPE_CHECKING

from kgrpc.programs.eval.ladder_models import Model
from kgrpc.rating import Rating

if TYPE_CHECKING:
    from kgrpc.v1 import coordinator_pb2

# ladder.csv columns a file written by an older version lacks (read as None).
LATER_COLUMNS = ("distinct_games",)


@dataclass(frozen=True)
class LadderRecord:
    """One model against one reference: the row of ladder.csv, and what the coordinator's
    ``Rating`` message carries (:meth:`from_proto`)."""

    model: str
    opponent: str
    games: int
    wins: int
    losses: int
    draws: int
    win_rate: float
    win_low: float
    win_high: float
    elo: float
    elo_low: float  # -inf when the interval has no lower end
    elo_high: float  # +inf when it has no upper end
    training_steps: int | None
    training_rows: int | None
    selfplay_games: int | None
    wall_seconds: float | None
    visits: int
    # Games that are distinct move sequences (kgrpc.programs.eval.match: deterministic engines
    # can repeat a game); None when not counted (a match or a ladder.csv from before).
    distinct_games: int | None = None

    @classmethod
    def make(
        cls,
        model: Model,
        opponent: str,
        rating: Rating,
        wall_seconds: float | None,
        visits: int,
        distinct_games: int | None = None,
    ) -> LadderRecord:
        return cls(
            model.name,
            opponent,
            rating.games,
            rating.wins,
            rating.losses,
            rating.draws,
            rating.rate,
            rating.rate_low,
            rating.rate_high,
            rating.elo,
            rating.elo_low,
            rating.elo_high,
            model.steps,
            model.rows,
            model.selfplay_games,
            wall_seconds,
            visits,
            distinct_games,
        )

    @staticmethod
    def columns() -> list[str]:
        return [f.name for f in fields(LadderRecord)]

    def to_row(self) -> dict[str, str]:
        out = {}
        for key, value in asdict(self).items():
            if value is None:
                out[key] = ""
            elif isinstance(value, float):
                out[key] = f"{value:.6g}"
            else:
                out[key] = str(value)
        return out

    @classmethod
    def from_row(cls, row: dict[str, str]) -> LadderRecord:
        kinds = {f.name: f.type for f in fields(cls)}
        values: dict[str, object] = {}
        for key, kind in kinds.items():
            text = row.get(key, "") if key in LATER_COLUMNS else row[key]
            if "None" in str(kind) and text == "":
                values[key] = None
            elif str(kind).startswith("int"):
                values[key] = int(text)
            elif str(kind).startswith("float"):
                values[key] = float(text)
            else:
                values[key] = text
        return cls(**values)  # type: ignore[arg-type]

    @classmethod
    def from_proto(cls, r: coordinator_pb2.Rating) -> LadderRecord:
        """A rating as the coordinator stores it (ReportRating, ListRatings, GetStats)."""
        return cls(
            r.model,
            r.opponent,
            r.games,
            r.wins,
            r.losses,
            r.draws,
            r.win_rate,
            r.win_low,
            r.win_high,
            r.elo,
            r.elo_low,
            r.elo_high,
            r.training_steps,
            r.training_rows,
            r.selfplay_games,
            r.wall_seconds,
            r.visits,
            r.distinct_games or None,  # 0: not counted
        )


# Turns one result (with its distinct games, None when unknown) into its ladder row: locally,
# or by reporting it to a coordinator.
Recorder = Callable[[Model, str, Rating, int | None], Awaitable[LadderRecord]]
