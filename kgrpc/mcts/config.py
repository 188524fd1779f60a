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
    # Score in the utility (KataGo): a visited child is valued at its mean value plus
    # score_utility_factor * 2/pi * atan((its mean score - centre) / scale), the centre being
    # the root's expected score when the search starts (each player's own view) and the scale
    # score_utility_scale points (0: the board's width). 0 turns it off. The recorded root value
    # stays the pure win/loss value.
    score_utility_factor: float = 0.0
    score_utility_scale: float = 0.0
    # Gumbel root search (kgrpc/mcts/gumbel.py; Danihelka et al., ICLR 2022) instead of PUCT at
    # the root: gumbel_considered moves sampled by Gumbel-top-k, sequential halving over
    # exactly `visits` new simulations, the move its best survivor, the policy target the prior
    # improved by completed Q-values with sigma(q) = (gumbel_c_visit + max visits) *
    # gumbel_c_scale * q (the paper's 50 and 1.0). It replaces Dirichlet noise, forced
    # playouts and temperature (its draws explore); gumbel_scale 0 makes it deterministic.
    gumbel: bool = False
    gumbel_considered: int = 16
    gumbel_c_visit: float = 50.0
    gumbel_c_scale: float = 1.0
    gumbel_scale: float = 1.0

    def __post_init__(self) -> None:
        if self.visits < 1:
            raise ValueError(f"visits must be >= 1, got {self.visits}")
        if self.leaves_per_batch < 1:
            raise ValueError(f"leaves_per_batch must be >= 1, got {self.leaves_per_batch}")
        if self.c_puct <= 0:
            raise ValueError(f"c_puct must be > 0, got {self.c_puct}")
        if self.virtual_loss < 0:
            raise ValueError(f"virtual_loss must be >= 0, got {self.virtual_loss}")
        if not 0.0 <= self.score_utility_factor <= 10.0:
            raise ValueError(
                f"score_utility_factor must be in [0, 10], got {self.score_utility_factor}"
            )
        if not 0.0 <= self.score_utility_scale <= 1000.0:
            raise ValueError(
                f"score_utility_scale must be in [0, 1000] points (0: the board's width), "
                f"got {self.score_utility_scale}"
            )

        if not 1 <= self.gumbel_considered <= 362:
            raise ValueError(f"gumbel_considered must be in [1, 362], got {self.gumbel_considered}")
        if not 0.0 <= self.gumbel_c_visit <= 1e6:
            raise ValueError(f"gumbel_c_visit must be in [0, 1e6], got {self.gumbel_c_visit}")
        if not 0.0 <= self.gumbel_c_scale <= 1e3:
            raise ValueError(f"gumbel_c_scale must be in [0, 1000], got {self.gumbel_c_scale}")
        if not 0.0 <= self.gumbel_scale <= 10.0:
            raise ValueError(f"gumbel_scale must be in [0, 10], got {self.gumbel_scale}")

    def utility_scale(self, size: int) -> float:
        """The score utility's scale in points on a board of that size."""
        return self.score_utility_scale or float(size)

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
    # Forced playouts and policy target pruning (KataGo), at the root of full searches with
    # noise: a visited child with fewer than sqrt(k * prior * root visits) visits is chosen
    # before any other; the recorded policy target then takes back, from every child but the
    # most visited, the forced visits that its PUCT value would not have earned (and drops a
    # child left with one visit or less). A temperature move is drawn from that pruned target.
    # k = 0 turns it off (KataGo: 2).
    forced_playouts_k: float = 0.0
    # With forced playouts: prune the target (off only to see the raw forced visits, in tests
    # and ablations; the coordinator does not hand it out).
    prune_policy_target: bool = True
    # Opening diversity: this share of games starts with about `opening_moves_19` moves (a
    # 19x19 figure, scaled by N*N/361; the count is drawn from an exponential distribution)
    # drawn from the net's raw policy ** (1 / opening_temperature), without a search; those
    # moves are recorded as cheap (no training row). 0 turns it off.
    opening_policy_prob: float = 0.0
    opening_moves_19: float = 16.0
    opening_temperature: float = 1.5
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
        if not 0.0 <= self.forced_playouts_k <= 100.0:
            raise ValueError(f"forced_playouts_k must be in [0, 100], got {self.forced_playouts_k}")
        if not 0.0 <= self.opening_policy_prob <= 1.0:
            raise ValueError(
                f"opening_policy_prob must be in [0, 1], got {self.opening_policy_prob}"
            )
        if not 0.0 <= self.opening_moves_19 <= 361.0:
            raise ValueError(f"opening_moves_19 must be in [0, 361], got {self.opening_moves_19}")
        if not 0.0 < self.opening_temperature <= 100.0:
            raise ValueError(
                f"opening_temperature must be in (0, 100], got {self.opening_temperature}"
            )

    def temperature_moves(self, size: int) -> int:
        return int(round(self.temperature_moves_19 * size * size / 361))

    def opening_moves(self, size: int) -> float:
        """Mean number of raw-policy opening moves on a board of that size."""
        return self.opening_moves_19 * size * size / 361

    def max_moves(self, size: int) -> int:
        """The game's move cap: records.move_cap, the rule the coordinator checks it by."""
        from kgrpc.records.terms import move_cap

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
            "opening_moves_19",
            "opening_temperature",
        ):
            v = getattr(settings, name, 0)
            if v:
                values[name] = type(getattr(cls, name) if hasattr(cls, name) else v)(v)
        # These mean "off" at 0 on the wire too (and 0 is their default), so an explicit 0 is
        # kept.
        for name in ("resign_threshold", "forced_playouts_k", "opening_policy_prob"):
            values[name] = float(getattr(settings, name, 0.0))
        search_over = overrides.pop("search", None) or SearchConfig()
        search_over = replace(
            search_over,
            score_utility_factor=float(getattr(settings, "score_utility_factor", 0.0)),
            gumbel=bool(getattr(settings, "gumbel", False)),
        )
        for name in ("gumbel_considered", "gumbel_c_visit", "gumbel_c_scale"):
            v = getattr(settings, name, 0)
            if v:  # 0 on the wire: the default
                search_over = replace(search_over, **{name: type(getattr(search_over, name))(v)})
        values["search"] = search_over.with_visits(max(1, int(visits)))
        values["cheap_visits"] = min(
            values.get("cheap_visits", cls.cheap_visits), values["search"].visits
        )
        values.update(overrides)
        return cls(**values)


def config_fields(cls: type) -> list[str]:
    return [f.name for f in fields(cls)]
