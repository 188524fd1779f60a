"""The checks of the coordinator's settings: :func:`check` (what ``Config.check`` runs after
every load) raises ValueError naming the first setting out of range or inconsistent with
another; :func:`check_selfplay` checks the self-play settings handed to workers by the rules
the worker's own search applies.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kgrpc.coordinator.config_values import MAX_KOMI_VALUES, format_komi_range
from kgrpc.protocol import parse_version

if TYPE_CHECKING:
    from kgrpc.coordinator.config import Config


def check(cfg: Config) -> None:
    """Raise ValueError naming the first inconsistent setting."""
    if cfg.min_moves < 1 or cfg.max_moves < cfg.min_moves:
        raise ValueError(f"need 1 <= min_moves <= max_moves, got {cfg.min_moves}, {cfg.max_moves}")
    if cfg.max_games_per_message < 1 or cfg.max_games_per_stream < cfg.max_games_per_message:
        raise ValueError("need 1 <= max_games_per_message <= max_games_per_stream")
    if cfg.max_moves_per_message < cfg.max_moves:
        raise ValueError("max_moves_per_message must be >= max_moves")
    if cfg.max_decompressed_mb < 1:
        raise ValueError("max_decompressed_mb must be >= 1")
    if cfg.positions_per_shard < 1:
        raise ValueError("positions_per_shard must be >= 1")
    if cfg.index and not cfg.index.startswith(("postgresql://", "postgres://")):
        raise ValueError(
            f"index {cfg.index!r}: expected empty (SQLite in data_dir) or a postgresql:// URL"
        )
    if not cfg.store_outage_journal_mb > 0:  # NaN too
        raise ValueError(f"store_outage_journal_mb must be > 0, got {cfg.store_outage_journal_mb}")
    if cfg.max_shard_groups < 1:
        raise ValueError("max_shard_groups must be >= 1")
    if cfg.min_worker_version and parse_version(cfg.min_worker_version) is None:
        raise ValueError(
            f"min_worker_version {cfg.min_worker_version!r}: expected a version, e.g. 0.2.0"
        )
    if not cfg.max_heartbeats_per_s >= 0:  # NaN too
        raise ValueError(f"max_heartbeats_per_s must be >= 0, got {cfg.max_heartbeats_per_s}")
    if cfg.heartbeat_interval_s < 1:
        raise ValueError(f"heartbeat_interval_s must be >= 1, got {cfg.heartbeat_interval_s}")
    if not cfg.latest_refresh_s >= 0:  # NaN too
        raise ValueError(f"latest_refresh_s must be >= 0, got {cfg.latest_refresh_s}")
    if cfg.gating_games < 2 or cfg.gating_games % 2:
        raise ValueError(f"gating_games must be even and >= 2, got {cfg.gating_games}")
    if cfg.match_chunk_games < 2 or cfg.match_chunk_games % 2:
        raise ValueError(f"match_chunk_games must be even and >= 2, got {cfg.match_chunk_games}")
    if cfg.gating_min_tokens < 1:
        raise ValueError(f"gating_min_tokens must be >= 1, got {cfg.gating_min_tokens}")
    if cfg.gating_min_tokens > 1 and not cfg.auth:
        raise ValueError(
            "gating_min_tokens above 1 needs auth: without tokens every game counts under "
            "one caller and no gating match could be decided"
        )
    if not 0.0 <= cfg.gating_outlier_p < 1.0:
        raise ValueError(f"gating_outlier_p must be within 0..1, got {cfg.gating_outlier_p}")
    if bool(cfg.tls_cert) != bool(cfg.tls_key):
        raise ValueError("tls_cert and tls_key go together")
    if not cfg.curriculum:
        raise ValueError("curriculum needs at least one stage")
    if cfg.rules not in cfg.allowed_rules:
        raise ValueError(
            f"rules {cfg.rules!r} handed to workers is not in allowed_rules "
            f"{list(cfg.allowed_rules)}"
        )
    check_selfplay(cfg)
    _check_komi(cfg)
    if cfg.task_retention_s <= 0:
        raise ValueError(f"task_retention_s must be > 0, got {cfg.task_retention_s}")
    if cfg.max_tasks_per_worker < 1:
        raise ValueError(f"max_tasks_per_worker must be >= 1, got {cfg.max_tasks_per_worker}")
    if not 0.0 <= cfg.sgf_share <= 1.0:
        raise ValueError(f"sgf_share must be within 0..1, got {cfg.sgf_share}")
    if cfg.http_listen:
        from kgrpc.net.metrics import parse_listen, require

        parse_listen(cfg.http_listen)
        try:
            require()
        except RuntimeError as exc:
            raise ValueError(str(exc)) from None
    if not cfg.run or "/" in cfg.run or cfg.run in ("current", ".", ".."):
        raise ValueError(f"bad run name {cfg.run!r}")
    cfg.parity_bounds  # noqa: B018 - raises ValueError naming a bound out of range


def check_selfplay(cfg: Config) -> None:
    """The self-play settings handed to workers, checked by the rules the worker's search
    applies to them (kgrpc.mcts.config), so no worker is handed what it must refuse."""
    from kgrpc.mcts.config import SearchConfig, SelfPlayConfig

    try:
        SelfPlayConfig(
            search=SearchConfig(
                score_utility_factor=cfg.score_utility_factor,
                gumbel=cfg.gumbel,
                gumbel_considered=cfg.gumbel_considered,
                gumbel_c_visit=cfg.gumbel_c_visit,
                gumbel_c_scale=cfg.gumbel_c_scale,
            ),
            full_search_prob=cfg.full_search_prob,
            cheap_visits=cfg.cheap_visits,
            dirichlet_alpha_19=cfg.dirichlet_alpha_19,
            noise_fraction=cfg.noise_fraction,
            max_moves_per_point=cfg.max_moves_per_point,
            forced_playouts_k=cfg.forced_playouts_k,
            opening_policy_prob=cfg.opening_policy_prob,
            opening_moves_19=cfg.opening_moves_19,
            opening_temperature=cfg.opening_temperature,
        )
    except ValueError as exc:
        raise ValueError(f"self-play settings: {exc}") from None


def _check_komi(cfg: Config) -> None:
    if not cfg.komi_range:
        return
    from kgrpc.coordinator.shard_cuts import group_komi
    from kgrpc.records.terms import komi_in_range, komi_values

    low, high, step = cfg.komi_range
    if (high - low) / step + 1 > MAX_KOMI_VALUES + 1e-6:
        raise ValueError(
            f"komi_range {format_komi_range(cfg.komi_range)} holds more than "
            f"{MAX_KOMI_VALUES} values"
        )
    values = komi_values(low, high, step)
    if not komi_in_range(cfg.komi, low, high, step):
        raise ValueError(
            f"komi {cfg.komi:g} is not one of komi_range's values (gating games and workers "
            "that ignore the range play it)"
        )
    groups = {group_komi(k) for k in values}
    if len(groups) > cfg.max_shard_groups:
        raise ValueError(
            f"komi_range {format_komi_range(cfg.komi_range)} spans {len(groups)} half-point "
            f"shard groups; max_shard_groups is {cfg.max_shard_groups}"
        )
