"""The coordinator's settings: one dataclass, loaded by kgrpc.settings.

Every field is a TOML key (top level or in a ``[coordinator]`` table), a CLI flag with dashes
for underscores (``positions_per_shard`` <-> ``--positions-per-shard``) and an environment
variable ``KGRPC_COORDINATOR_<FIELD>`` (``KGRPC_COORDINATOR_POSITIONS_PER_SHARD``); a flag
overrides the variable, which overrides the file (docs/operations.md, "Settings"). Lists:
``allowed_rules`` is a TOML list of preset names or a comma-separated flag; ``curriculum`` is
a TOML array of tables ``{until_steps, board_size, visits}`` (``until_steps = 0`` = no upper
bound) or a flag ``"100000:9:200,500000:13:400,0:19:800"``.

Example ``coordinator.toml``::

    listen = "0.0.0.0:50051"
    data_dir = "/srv/kgrpc"
    run = "run_001"
    positions_per_shard = 50000
    gating_games = 400
    [[curriculum]]
    until_steps = 100000
    board_size = 9
    visits = 200
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kgrpc import settings
from kgrpc.blobstore import S3Options
from kgrpc.parity import ParityBounds
from kgrpc.protocol import parse_version
from kgrpc.settings import Settings, setting

_BOUNDS = ParityBounds()  # the documented bounds every export meets against torch


@dataclass(frozen=True)
class CurriculumStage:
    # Stage applies while the released model's training steps are below this (0 = forever).
    until_steps: int
    board_size: int
    visits: int


DEFAULT_CURRICULUM = (
    CurriculumStage(100_000, 9, 200),
    CurriculumStage(500_000, 13, 400),
    CurriculumStage(0, 19, 800),
)


def parse_curriculum(value: Any) -> tuple[CurriculumStage, ...]:
    """From a TOML list of tables, a ``steps:size:visits,...`` string, or stages."""
    stages: list[CurriculumStage] = []
    if isinstance(value, str):
        for part in value.split(","):
            try:
                until, size, visits = (int(x) for x in part.strip().split(":"))
            except ValueError as exc:
                raise ValueError(
                    f"curriculum entry {part!r}: expected until_steps:board_size:visits"
                ) from exc
            stages.append(CurriculumStage(until, size, visits))
    else:
        for entry in value:
            if isinstance(entry, CurriculumStage):
                stages.append(entry)
                continue
            try:
                stages.append(
                    CurriculumStage(
                        int(entry["until_steps"]), int(entry["board_size"]), int(entry["visits"])
                    )
                )
            except (KeyError, TypeError) as exc:
                raise ValueError(
                    f"curriculum entry {entry!r}: needs until_steps, board_size, visits"
                ) from exc
    for s in stages:
        if not 2 <= s.board_size <= 25 or s.visits < 1 or s.until_steps < 0:
            raise ValueError(f"bad curriculum stage {s}")
    return tuple(stages)


def format_curriculum(stages: tuple[CurriculumStage, ...]) -> str:
    """``until_steps:board_size:visits,...``, as the flag takes it."""
    return ",".join(f"{s.until_steps}:{s.board_size}:{s.visits}" for s in stages)


# Most komi values one komi range may hold (each may become a shard group of its own).
MAX_KOMI_VALUES = 64


def parse_komi_range(value: Any) -> tuple[float, ...]:
    """``()`` (off) from ``""``, ``"none"`` or an empty list; else ``(low, high, step)`` from
    ``"LOW:HIGH:STEP"`` or a TOML list ``[low, high, step]``."""
    if isinstance(value, str):
        text = value.strip()
        if text.lower() in ("", "none", "off"):
            return ()
        parts: list[Any] = text.split(":")
    else:
        parts = list(value)
        if not parts:
            return ()
    try:
        low, high, step = (float(p) for p in parts)
    except (TypeError, ValueError):
        raise ValueError(
            f"komi_range {value!r}: expected LOW:HIGH:STEP, e.g. 6.5:8.5:0.5"
        ) from None
    if not all(math.isfinite(x) for x in (low, high, step)) or step <= 0 or high < low:
        raise ValueError(f"komi_range {value!r}: need finite LOW <= HIGH and STEP > 0")
    return (low, high, step)


def format_komi_range(value: tuple[float, ...]) -> str:
    return ":".join(f"{x:g}" for x in value) if value else "none"


@dataclass
class Config:
    listen: str = setting(
        "127.0.0.1:50051",
        "address to listen on, HOST:PORT (port 0 = any free port; the bound one is written to "
        "DATA_DIR/coordinator.port)",
        group="connection",
    )
    data_dir: str = setting(
        "./kgrpc-data",
        "directory holding the SQLite index, ingest journal, shards and models",
        group="storage",
    )
    index: str = setting(
        "",
        "the index of games, shards, models, matches and tokens: empty for SQLite in DATA_DIR, "
        "or a postgresql://USER:PASSWORD@HOST:PORT/DB URL shared by every replica (the ingest "
        "journal stays in DATA_DIR, one per replica)",
    )
    store: str = setting(
        "",
        "where shards, model files and SGF are kept: empty for DATA_DIR itself (as always), a "
        "directory, or s3://BUCKET/PREFIX for any S3-API store (endpoint, region and "
        "credentials from the store_* settings or the AWS_* variables: docs/operations.md)",
    )
    store_endpoint: str = setting(
        "", "S3 endpoint URL (e.g. http://127.0.0.1:8333); empty = AWS_ENDPOINT_URL, else AWS"
    )
    store_region: str = setting("", "S3 region; empty = AWS_REGION or AWS_DEFAULT_REGION")
    store_access_key_id: str = setting("", "S3 access key id; empty = AWS_ACCESS_KEY_ID")
    store_secret_access_key: str = setting(
        "", "S3 secret key; empty = AWS_SECRET_ACCESS_KEY (better: a variable, not a flag)"
    )
    store_outage_journal_mb: float = setting(
        1024.0,
        "while the object store is unreachable, uploads are acknowledged into the local ingest "
        "journal until it holds this many MiB, then answered UNAVAILABLE until it is back",
    )
    run: str = setting(
        "run_001",
        "run name: shards go to DATA_DIR/training_data/RUN/, the released model is tracked per run",
    )
    # Access control
    auth: bool = setting(
        True,
        "require an access token on every call (false: no checks, trusted loopback only)",
        group="access",
    )
    tls_cert: str = setting(
        "", "server certificate chain (PEM file) to serve TLS; empty = plaintext; needs tls_key"
    )
    tls_key: str = setting("", "private key (PEM file) of tls_cert")
    display_names: bool = setting(
        False,
        "show each worker's --username beside its token's label in statistics and on the "
        "dashboard; games are credited to the label either way (token create --label). Off by "
        "default: anyone can type another volunteer's name",
    )
    max_receive_mb: int = setting(
        64, "largest gRPC message received, MiB; a published model may total 16 times this"
    )
    # Validation
    min_moves: int = setting(
        11, "uploaded games with fewer moves are rejected (too_short)", group="validation"
    )
    max_moves: int = setting(499, "uploaded games with more moves are rejected (too_long)")
    allowed_rules: tuple[str, ...] = setting(
        ("chinese",), "rule presets accepted in uploaded games (comma-separated flag, TOML list)"
    )
    require_task: bool = setting(
        True,
        "every uploaded game must name (task_id) a task this coordinator issued within "
        "task_retention_s and fit its terms (else unknown_task, task_mismatch); false: games "
        "without a known task are checked against the settings only (tests, trusted imports)",
    )
    task_retention_s: float = setting(
        7 * 86400.0,
        "seconds an issued task stays stored: its games (spooled across restarts and "
        "releases) are accepted until then",
    )
    min_worker_version: str = setting(
        "",
        "refuse workers older than this kgrpc version at Register (FAILED_PRECONDITION, "
        "telling them what to install), e.g. 0.2.0; empty = any version",
    )
    max_tasks_per_worker: int = setting(
        1000,
        "issued tasks stored per worker (or per token bucket); a worker asking for more loses "
        "its oldest, whose games are then refused as unknown_task",
    )
    validate_workers: int = setting(
        0,
        "processes replaying uploaded games; 0 = one per CPU, -1 = a thread in the server process "
        "(tests)",
    )
    max_games_per_message: int = setting(1000, "most games one UploadGames message may carry")
    max_games_per_stream: int = setting(
        10_000,
        "most games one UploadGames stream takes: then the reply comes at once, for the games "
        "taken; the client sends the rest on a new stream",
    )
    max_moves_per_message: int = setting(
        50_000,
        "most moves (of all games) taken from one UploadGames message, counted before parsing; "
        "the stream's reply then comes at once and the client sends the rest again",
    )
    max_decompressed_mb: int = setting(
        64, "largest decompressed size of one upload message, MiB (guards against zstd bombs)"
    )
    # Storage
    positions_per_shard: int = setting(
        50_000,
        "training rows per shard: a (board size, komi, rules) group is cut into a shard at this "
        "many",
        group="shards",
    )
    max_shard_groups: int = setting(
        32,
        "most (board size, komi, rules) groups waiting for their shard at once (komi rounded "
        "to half points); beyond it the oldest group is cut into a shard early",
    )
    flush_interval_s: float = setting(
        600.0, "seconds after which waiting games are written to a shard even if it is not full"
    )
    latest_window_positions: int = setting(
        250_000, "newest training rows kept in training_data/current/latest_games.npz"
    )
    latest_refresh_s: float = setting(
        60.0,
        "shortest time between two rebuilds of latest_games.npz, which happen at shard cuts "
        "(0: at every cut); each rebuild rewrites the whole window",
    )
    # Self-play settings handed to workers
    komi: float = setting(
        7.5,
        "komi of self-play and gating games handed to workers (one of komi_range's values)",
        group="self-play",
    )
    komi_range: tuple[float, ...] = setting(
        (),
        "komi values of self-play tasks, LOW:HIGH:STEP (each game's komi is drawn from LOW, "
        f"LOW+STEP, ..., HIGH; at most {MAX_KOMI_VALUES} values, and no more half-point shard "
        "groups than max_shard_groups); none = every game at komi",
        parse=parse_komi_range,
        show=format_komi_range,
        metavar="LOW:HIGH:STEP",
    )
    rules: str = setting(
        "chinese", "rule preset of self-play games handed to workers (must be in allowed_rules)"
    )
    games_per_batch: int = setting(25, "games a worker uploads per UploadGames stream")
    selfplay_task_games: int = setting(
        25, "games per self-play task before the worker asks for its next task"
    )
    full_search_prob: float = setting(
        0.25,
        "probability that a move gets the full search and becomes a training row (playout cap "
        "randomisation)",
    )
    cheap_visits: int = setting(
        64, "visits of the cheap search used for moves that are not training rows"
    )
    temperature_moves_19: int = setting(
        30,
        "opening moves played with temperature 1 and root noise on 19x19, scaled by board area on "
        "smaller boards",
    )
    dirichlet_alpha_19: float = setting(
        0.03, "Dirichlet root-noise alpha for 19x19, scaled by 361 / legal moves on other boards"
    )
    noise_fraction: float = setting(0.25, "share of the root prior replaced by Dirichlet noise")
    resign_threshold: float = setting(
        0.0, "a worker resigns when the root value stays below -THIS; 0 = never resign"
    )
    resign_playout_fraction: float = setting(
        0.1, "share of would-be-resigned games played to the end anyway (false-resign check)"
    )
    max_moves_per_point: float = setting(
        2.0,
        "a self-play game is stopped and scored after this many moves per board point (2.0 = 722 "
        "on 19x19)",
    )
    forced_playouts_k: float = setting(
        2.0,
        "forced playouts at the root of full searches with noise, sqrt(K * prior * root visits) "
        "per visited child, and policy target pruning (KataGo: 2); 0 = off",
    )
    score_utility_factor: float = setting(
        0.5,
        "weight of the score utility 2/pi * atan((mean score - root's expected score) / board "
        "width) added to each child's value in the search (KataGo: 0.5); 0 = off",
    )
    opening_policy_prob: float = setting(
        0.0,
        "share of self-play games that start with moves drawn from the net's raw policy (no "
        "search, no training rows); 0 = off",
    )
    opening_moves_19: float = setting(
        16.0,
        "mean number of those raw-policy opening moves on 19x19 (exponential draw), scaled by "
        "board area on smaller boards",
    )
    opening_temperature: float = setting(
        1.5, "the raw policy is raised to 1 / THIS for those opening moves (above 1: flatter)"
    )
    gumbel: bool = setting(
        False,
        "self-play searches with a Gumbel root (Gumbel-top-k of gumbel_considered moves, "
        "sequential halving over the visits, the policy target the prior improved by completed "
        "Q-values) instead of PUCT; it replaces root noise, forced playouts and temperature",
    )
    gumbel_considered: int = setting(16, "with gumbel: root moves sampled (the paper's m)")
    gumbel_c_visit: float = setting(
        50.0, "with gumbel: c_visit of sigma(q) = (c_visit + max visits) * c_scale * q"
    )
    gumbel_c_scale: float = setting(1.0, "with gumbel: c_scale of that sigma (the paper's 1.0)")
    heartbeat_interval_s: int = setting(30, "seconds between worker heartbeats", group="workers")
    max_heartbeats_per_s: float = setting(
        50.0,
        "the most heartbeats a second the whole fleet sends: with more workers online than "
        "heartbeat_interval_s * THIS, they are told a longer interval, online / THIS seconds "
        "(at most an hour; 0: always heartbeat_interval_s)",
    )
    retry_after_s: int = setting(
        10,
        "seconds a worker waits before asking again while there is no task (no model released yet)",
    )
    # Gating
    gating_enabled: bool = setting(
        True,
        "play a gating match before releasing a new model (false: every published model is "
        "released at once)",
        group="gating",
    )
    gating_games: int = setting(400, "games per gating match (even)")
    gating_elo_threshold: float = setting(
        20.0, "Elo gain over the current best a candidate needs to be released"
    )
    release_every_steps: int = setting(
        10_000,
        "a candidate crossing a new multiple of this many training steps is released whatever its "
        "Elo (0 = never)",
    )
    gating_sprt: bool = setting(False, "let an SPRT end gating matches before gating_games")
    match_chunk_games: int = setting(
        20, "games of a gating match handed to one worker per task (even)"
    )
    match_task_timeout_s: float = setting(
        900.0, "seconds after which an unreported match task's games are handed to another worker"
    )
    match_records_required: bool = setting(
        True,
        "every reported gating game must carry its record, which is replayed (rules, legality, "
        "how it ended, the score) and whose result is the one counted; false: results without "
        "records count as reported (trusted private setups only)",
    )
    gating_min_tokens: int = setting(
        1,
        "a gating decision counts games from at least this many distinct worker tokens, and "
        "a match's chunks go to different tokens before any token gets a second; a public "
        "run should use 3 or more (docs/operations.md)",
    )
    gating_outlier_p: float = setting(
        0.001,
        "level of the test that sets aside a token whose candidate win rate on a pairing "
        "differs from the other tokens' (two-sided Fisher exact test, Bonferroni over the "
        "tokens; needs 3 tokens or more); 0 = off",
    )
    # Precision files (an fp16 or int8 file against the model's fp32 file, at publish)
    parity_min_top1: float = setting(
        _BOUNDS.min_top1,
        "fp16/int8 publish: least policy top-1 agreement with the fp32 file",
        group="precision files",
    )
    parity_max_kl: float = setting(
        _BOUNDS.max_kl, "fp16/int8 publish: largest mean policy KL (nats) from the fp32 file"
    )
    parity_max_value_mae: float = setting(
        _BOUNDS.max_value_mae, "fp16/int8 publish: largest value MAE against the fp32 file"
    )
    parity_max_score_mae: float = setting(
        _BOUNDS.max_score_mae, "fp16/int8 publish: largest score MAE (points) against the fp32 file"
    )
    # Curriculum
    curriculum: tuple[CurriculumStage, ...] = setting(
        DEFAULT_CURRICULUM,
        "board size and visits by the released model's training steps: "
        "UNTIL_STEPS:SIZE:VISITS,... (0 = no upper bound)",
        parse=parse_curriculum,
        show=format_curriculum,
        group="curriculum",
    )
    # Dashboard, metrics, SGF
    http_listen: str = setting(
        "",
        "serve the read-only dashboard, its JSON (/api/) and Prometheus /metrics over HTTP on "
        "this address, HOST:PORT or PORT (on 127.0.0.1); empty = off; needs the coordinator "
        "extra",
        metavar="ADDR",
        group="dashboard and metrics",
    )
    sgf_share: float = setting(
        1.0,
        "share of accepted self-play games kept as SGF under DATA_DIR/sgf/ (0..1; gating games "
        "sent with their record are always kept)",
    )
    # Shutdown
    shutdown_grace_s: float = setting(
        10.0, "seconds in-flight calls get to finish on SIGTERM/SIGINT", group="connection"
    )

    def resolved_validate_workers(self) -> int:
        return self.validate_workers if self.validate_workers != 0 else (os.cpu_count() or 1)

    def check(self) -> None:
        """Raise ValueError naming the first inconsistent setting."""
        if self.min_moves < 1 or self.max_moves < self.min_moves:
            raise ValueError(
                f"need 1 <= min_moves <= max_moves, got {self.min_moves}, {self.max_moves}"
            )
        if self.max_games_per_message < 1 or self.max_games_per_stream < self.max_games_per_message:
            raise ValueError("need 1 <= max_games_per_message <= max_games_per_stream")
        if self.max_moves_per_message < self.max_moves:
            raise ValueError("max_moves_per_message must be >= max_moves")
        if self.max_decompressed_mb < 1:
            raise ValueError("max_decompressed_mb must be >= 1")
        if self.positions_per_shard < 1:
            raise ValueError("positions_per_shard must be >= 1")
        if self.index and not self.index.startswith(("postgresql://", "postgres://")):
            raise ValueError(
                f"index {self.index!r}: expected empty (SQLite in data_dir) or a postgresql:// URL"
            )
        if not self.store_outage_journal_mb > 0:  # NaN too
            raise ValueError(
                f"store_outage_journal_mb must be > 0, got {self.store_outage_journal_mb}"
            )
        if self.max_shard_groups < 1:
            raise ValueError("max_shard_groups must be >= 1")
        if self.min_worker_version and parse_version(self.min_worker_version) is None:
            raise ValueError(
                f"min_worker_version {self.min_worker_version!r}: expected a version, e.g. 0.2.0"
            )
        if not self.max_heartbeats_per_s >= 0:  # NaN too
            raise ValueError(f"max_heartbeats_per_s must be >= 0, got {self.max_heartbeats_per_s}")
        if self.heartbeat_interval_s < 1:
            raise ValueError(f"heartbeat_interval_s must be >= 1, got {self.heartbeat_interval_s}")
        if not self.latest_refresh_s >= 0:  # NaN too
            raise ValueError(f"latest_refresh_s must be >= 0, got {self.latest_refresh_s}")
        if self.gating_games < 2 or self.gating_games % 2:
            raise ValueError(f"gating_games must be even and >= 2, got {self.gating_games}")
        if self.match_chunk_games < 2 or self.match_chunk_games % 2:
            raise ValueError(
                f"match_chunk_games must be even and >= 2, got {self.match_chunk_games}"
            )
        if self.gating_min_tokens < 1:
            raise ValueError(f"gating_min_tokens must be >= 1, got {self.gating_min_tokens}")
        if self.gating_min_tokens > 1 and not self.auth:
            raise ValueError(
                "gating_min_tokens above 1 needs auth: without tokens every game counts under "
                "one caller and no gating match could be decided"
            )
        if not 0.0 <= self.gating_outlier_p < 1.0:
            raise ValueError(f"gating_outlier_p must be within 0..1, got {self.gating_outlier_p}")
        if bool(self.tls_cert) != bool(self.tls_key):
            raise ValueError("tls_cert and tls_key go together")
        if not self.curriculum:
            raise ValueError("curriculum needs at least one stage")
        if self.rules not in self.allowed_rules:
            raise ValueError(
                f"rules {self.rules!r} handed to workers is not in allowed_rules "
                f"{list(self.allowed_rules)}"
            )
        self.check_selfplay()
        self._check_komi()
        if self.task_retention_s <= 0:
            raise ValueError(f"task_retention_s must be > 0, got {self.task_retention_s}")
        if self.max_tasks_per_worker < 1:
            raise ValueError(f"max_tasks_per_worker must be >= 1, got {self.max_tasks_per_worker}")
        if not 0.0 <= self.sgf_share <= 1.0:
            raise ValueError(f"sgf_share must be within 0..1, got {self.sgf_share}")
        if self.http_listen:
            from kgrpc.net.metrics import parse_listen, require

            parse_listen(self.http_listen)
            try:
                require()
            except RuntimeError as exc:
                raise ValueError(str(exc)) from None
        if not self.run or "/" in self.run or self.run in ("current", ".", ".."):
            raise ValueError(f"bad run name {self.run!r}")
        self.parity_bounds  # noqa: B018 - raises ValueError naming a bound out of range

    @property
    def parity_bounds(self) -> ParityBounds:
        """The bounds an fp16/int8 file must meet against the model's fp32 file."""
        return ParityBounds(
            self.parity_min_top1,
            self.parity_max_kl,
            self.parity_max_value_mae,
            self.parity_max_score_mae,
        )

    def check_selfplay(self) -> None:
        """The self-play settings handed to workers, checked by the rules the worker's search
        applies to them (kgrpc.mcts.config), so no worker is handed what it must refuse."""
        from kgrpc.mcts.config import SearchConfig, SelfPlayConfig

        try:
            SelfPlayConfig(
                search=SearchConfig(
                    score_utility_factor=self.score_utility_factor,
                    gumbel=self.gumbel,
                    gumbel_considered=self.gumbel_considered,
                    gumbel_c_visit=self.gumbel_c_visit,
                    gumbel_c_scale=self.gumbel_c_scale,
                ),
                full_search_prob=self.full_search_prob,
                cheap_visits=self.cheap_visits,
                dirichlet_alpha_19=self.dirichlet_alpha_19,
                noise_fraction=self.noise_fraction,
                max_moves_per_point=self.max_moves_per_point,
                forced_playouts_k=self.forced_playouts_k,
                opening_policy_prob=self.opening_policy_prob,
                opening_moves_19=self.opening_moves_19,
                opening_temperature=self.opening_temperature,
            )
        except ValueError as exc:
            raise ValueError(f"self-play settings: {exc}") from None

    def _check_komi(self) -> None:
        if not self.komi_range:
            return
        from kgrpc.coordinator.shard_cuts import group_komi
        from kgrpc.records.terms import komi_in_range, komi_values

        low, high, step = self.komi_range
        if (high - low) / step + 1 > MAX_KOMI_VALUES + 1e-6:
            raise ValueError(
                f"komi_range {format_komi_range(self.komi_range)} holds more than "
                f"{MAX_KOMI_VALUES} values"
            )
        values = komi_values(low, high, step)
        if not komi_in_range(self.komi, low, high, step):
            raise ValueError(
                f"komi {self.komi:g} is not one of komi_range's values (gating games and workers "
                "that ignore the range play it)"
            )
        groups = {group_komi(k) for k in values}
        if len(groups) > self.max_shard_groups:
            raise ValueError(
                f"komi_range {format_komi_range(self.komi_range)} spans {len(groups)} half-point "
                f"shard groups; max_shard_groups is {self.max_shard_groups}"
            )

    @property
    def data_path(self) -> Path:
        return Path(self.data_dir)

    def store_options(self) -> S3Options:
        """The S3 settings (each empty one is read from its AWS variable when opened)."""
        return S3Options(
            endpoint=self.store_endpoint,
            region=self.store_region,
            access_key_id=self.store_access_key_id,
            secret_access_key=self.store_secret_access_key,
        )


SETTINGS: Settings[Config] = Settings(Config, "coordinator")


def config_from(
    toml_path: str | None = None,
    overrides: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
) -> Config:
    """Defaults, the TOML file, the environment (only when ``env`` is given), then
    ``overrides`` (e.g. CLI flags, as text or values); checked."""
    cfg = SETTINGS.load(toml_path=toml_path, flags=overrides, env=env)
    cfg.check()
    return cfg


def config_from_args(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> Config:
    """The config of ``kgrpc-coordinator serve``: ``--config``, ``os.environ``, the flags."""
    cfg = SETTINGS.from_args(args, env)
    cfg.check()
    return cfg


def parse_bool(value: str) -> bool:
    """``true``/``false`` (also yes/no, on/off, 1/0) for boolean flags; argparse shows the
    error."""
    try:
        return settings.parse_bool(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def setting_help(f: dataclasses.Field[Any]) -> str:
    """The help text of a Config field ("" when it has none)."""
    return str(f.metadata.get("help", ""))


def add_config_flags(parser: argparse.ArgumentParser) -> None:
    """One ``--flag`` per Config field (no ``--config``); flags not given stay absent."""
    SETTINGS.add_arguments(parser, config_flag=False)


def flags_to_overrides(args: argparse.Namespace) -> dict[str, Any]:
    return SETTINGS.flag_values(args)
