"""Search and self-play settings (plain dataclasses; the worker fills them from its task)."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any


@dataclass(frozen=True)
class SearchConfig:
    """How one tree search runs."""

    # Child visits of the root a search aims for (visits reused from the previous move count).
    visits: int = 800
    # Exploration constant of PUCT: U = c_puct * prior * sqrt(N_parent) / (1 + N_child).
    c_puct: float = 1.1
    # First-play urgency: an unvisited child is valued at the parent's value minus
    # fpu_reduction * sqrt(prior mass already visited) (KataGo's rule); less at the root,
    # where noise should be allowed to explore.
    fpu_reduction: float = 0.2
    root_fpu_reduction: float = 0.1
    # Leaves gathered per evaluator request (virtual loss keeps the paths apart).
    leaves_per_batch: int = 8
    virtual_loss: float = 1.0
    # Evaluate each leaf under a random board symmetry (averages out the net's asymmetries).
    random_symmetry: bool = True
    # Reuse the subtree of the played move for the next search.
    tree_reuse: bool = True
    # Root moves are the sensible ones (see search.sensible_root_moves): never fill one's own
    # single-point eye, and pass only when passing wins on the area count now. A weak net
    # otherwise passes at random and throws won games away, and its self-play games end early
    # with results that teach nothing.
    sensible_root_moves: bool = True

    def __post_init__(self) -> None:
        if self.visits < 1:
            raise ValueError(f"visits must be >= 1, got {self.visits}")
        if self.leaves_per_batch < 1:
            raise ValueError(f"leaves_per_batch must be >= 1, got {self.leaves_per_batch}")
        if self.c_puct <= 0:
            raise ValueError(f"c_puct must be > 0, got {self.c_puct}")
        if self.virtual_loss < 0:
            raise ValueError(f"virtual_loss must be >= 0, got {self.virtual_loss}")

    def with_visits(self, visits: int) -> SearchConfig:
        return replace(self, visits=visits)


@dataclass(frozen=True)
class SelfPlayConfig:
    """What makes a self-play game explore (defaults: the source design and KataGo)."""

    search: SearchConfig = SearchConfig()
    # Playout cap randomisation: a move gets a full search (`search.visits`, noise, recorded
    # as a training row) with this probability, otherwise a cheap search of `cheap_visits`.
    full_search_prob: float = 0.25
    cheap_visits: int = 100
    # Opening moves played by sampling visits with temperature 1 (greedy afterwards), for
    # 19x19; scaled by N*N/361 on smaller boards.
    temperature_moves_19: int = 30
    temperature: float = 1.0
    # Dirichlet noise at the root of full searches; alpha for 19x19, scaled by 361/legal moves.
    dirichlet_alpha_19: float = 0.03
    noise_fraction: float = 0.25
    # Resign when the root value of the mover stays below -resign_threshold for
    # `resign_consecutive` of its moves; 0 disables. A share of such games is played out
    # to measure false resignations.
    resign_threshold: float = 0.0
    resign_consecutive: int = 3
    resign_playout_fraction: float = 0.1
    # Move cap per board point (the game is scored when reached).
    max_moves_per_point: float = 2.0
    # The coordinator's own limit on a game's length (Task.max_moves); 0 = none.
    max_game_moves: int = 0

    def __post_init__(self) -> None:
        if not 0.0 <= self.full_search_prob <= 1.0:
            raise ValueError(f"full_search_prob must be in [0, 1], got {self.full_search_prob}")
        if self.cheap_visits < 1:
            raise ValueError(f"cheap_visits must be >= 1, got {self.cheap_visits}")
        if not 0.0 <= self.noise_fraction <= 1.0:
            raise ValueError(f"noise_fraction must be in [0, 1], got {self.noise_fraction}")
        if self.max_moves_per_point <= 0:
            raise ValueError(f"max_moves_per_point must be > 0, got {self.max_moves_per_point}")
        if self.temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {self.temperature}")

    def temperature_moves(self, size: int) -> int:
        return int(round(self.temperature_moves_19 * size * size / 361))

    def max_moves(self, size: int) -> int:
        """The game's move cap: records.move_cap, the rule the coordinator checks it by."""
        from kgrpc.records import move_cap

        return move_cap(size, self.max_game_moves, self.max_moves_per_point)

    def dirichlet_alpha(self, num_legal: int) -> float:
        return self.dirichlet_alpha_19 * 361 / max(1, num_legal)

    @classmethod
    def from_settings(cls, settings: Any, visits: int, **overrides: Any) -> SelfPlayConfig:
        """Build from a ``coordinator_pb2.SelfPlaySettings`` (zero fields keep the defaults)."""
        values: dict[str, Any] = {}
        for name in (
            "full_search_prob",
            "cheap_visits",
            "temperature_moves_19",
            "dirichlet_alpha_19",
            "noise_fraction",
            "resign_threshold",
            "resign_playout_fraction",
            "max_moves_per_point",
        ):
            v = getattr(settings, name, 0)
            if v:
                values[name] = type(getattr(cls, name) if hasattr(cls, name) else v)(v)
        # resign_threshold 0 means "disabled" on the wire too, so an explicit 0 is kept.
        values["resign_threshold"] = float(getattr(settings, "resign_threshold", 0.0))
        search_over = overrides.pop("search", None) or SearchConfig()
        values["search"] = search_over.with_visits(max(1, int(visits)))
        values["cheap_visits"] = min(
            values.get("cheap_visits", cls.cheap_visits), values["search"].visits
        )
        values.update(overrides)
        return cls(**values)


def config_fields(cls: type) -> list[str]:
    return [f.name for f in fields(cls)]
