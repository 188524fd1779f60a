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

The field list is here, once, but for the S3 settings that the trainer shares
(:class:`~kgrpc.blobstore.settings.StoreSettings`, which ``Config`` derives from); beside it
:mod:`~kgrpc.coordinator.config_values` (the curriculum and komi range: types, parsers,
formats), :mod:`~kgrpc.coordinator.config_checks` (the checks across settings,
:meth:`Config.check`) and :mod:`~kgrpc.coordinator.config_flags` (argparse helpers of its
flags).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kgrpc.blobstore.settings import StoreSettings
from kgrpc.coordinator import config_checks
from kgrpc.coordinator.config_values import (
    DEFAULT_CURRICULUM,
    MAX_KOMI_VALUES,
    CurriculumStage,
    format_curriculum,
    format_komi_range,
    parse_curriculum,
    parse_komi_range,
)
from kgrpc.parity import ParityBounds
from kgrpc.settings import Settings, setting

_BOUNDS = ParityBounds()  # the documented bounds every export meets against torch


@dataclass
class Config(StoreSettings):
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
        """Raise ValueError naming the first inconsistent setting
        (:func:`kgrpc.coordinator.config_checks.check`)."""
        config_checks.check(self)

    @property
    def parity_bounds(self) -> ParityBounds:
        """The bounds an fp16/int8 file must meet against the model's fp32 file."""
        return ParityBounds(
            self.parity_min_top1,
            self.parity_max_kl,
            self.parity_max_value_mae,
            self.parity_max_score_mae,
        )

    @property
    def data_path(self) -> Path:
        return Path(self.data_dir)


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
