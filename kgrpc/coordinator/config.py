"""The coordinator's settings: one dataclass, filled from TOML then CLI flags.

Every field is a TOML key (top level) and a CLI flag with dashes for underscores
(``positions_per_shard`` <-> ``--positions-per-shard``); a flag given on the command
line overrides the TOML value. Lists: ``allowed_rules`` is a TOML list of preset
names or a comma-separated flag; ``curriculum`` is a TOML array of tables
``{until_steps, board_size, visits}`` (``until_steps = 0`` = no upper bound) or a flag
``"100000:9:200,500000:13:400,0:19:800"``.

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
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class CurriculumStage:
    # Stage applies while the released model's training steps are below this (0 = forever).
    until_steps: int
    board_size: int
    visits: int


def _help(text: str) -> dict[str, str]:
    # The one-line help of a setting lives next to it (dataclass field metadata) so that
    # --help, and the test that every setting has one, cannot drift from the field list.
    return {"help": text}


DEFAULT_CURRICULUM = (
    CurriculumStage(100_000, 9, 200),
    CurriculumStage(500_000, 13, 400),
    CurriculumStage(0, 19, 800),
)


@dataclass
class Config:
    listen: str = field(default="127.0.0.1:50051", metadata=_help("address to listen on, HOST:PORT (port 0 = any free port; the bound one is written to DATA_DIR/coordinator.port)"))
    data_dir: str = field(default="./kgrpc-data", metadata=_help("directory holding the SQLite index, ingest journal, shards and models"))
    run: str = field(default="run_001", metadata=_help("run name: shards go to DATA_DIR/training_data/RUN/, the released model is tracked per run"))
    # Access control
    auth: bool = field(default=True, metadata=_help("require an access token on every call (false: no checks, trusted loopback only)"))
    tls_cert: str = field(default="", metadata=_help("server certificate chain (PEM file) to serve TLS; empty = plaintext; needs tls_key"))
    tls_key: str = field(default="", metadata=_help("private key (PEM file) of tls_cert"))
    max_receive_mb: int = field(default=64, metadata=_help("largest gRPC message received, MiB; a published model may total 16 times this"))
    # Validation
    min_moves: int = field(default=11, metadata=_help("uploaded games with fewer moves are rejected (too_short)"))
    max_moves: int = field(default=499, metadata=_help("uploaded games with more moves are rejected (too_long)"))
    allowed_rules: tuple[str, ...] = field(default=("chinese",), metadata=_help("rule presets accepted in uploaded games (comma-separated flag, TOML list)"))
    validate_workers: int = field(default=0, metadata=_help("processes replaying uploaded games; 0 = one per CPU, -1 = a thread in the server process (tests)"))
    max_games_per_message: int = field(default=1000, metadata=_help("most games one UploadGames message may carry"))
    max_decompressed_mb: int = field(default=256, metadata=_help("largest decompressed size of one upload message, MiB (guards against zstd bombs)"))
    # Storage
    positions_per_shard: int = field(default=50_000, metadata=_help("training rows per shard: a (board size, komi, rules) group is cut into a shard at this many"))
    flush_interval_s: float = field(default=600.0, metadata=_help("seconds after which waiting games are written to a shard even if it is not full"))
    latest_window_positions: int = field(default=250_000, metadata=_help("newest training rows kept in training_data/current/latest_games.npz"))
    # Self-play settings handed to workers
    komi: float = field(default=7.5, metadata=_help("komi of self-play games handed to workers"))
    rules: str = field(default="chinese", metadata=_help("rule preset of self-play games handed to workers (must be in allowed_rules)"))
    games_per_batch: int = field(default=25, metadata=_help("games a worker uploads per UploadGames stream"))
    selfplay_task_games: int = field(default=25, metadata=_help("games per self-play task before the worker asks for its next task"))
    full_search_prob: float = field(default=0.25, metadata=_help("probability that a move gets the full search and becomes a training row (playout cap randomisation)"))
    cheap_visits: int = field(default=64, metadata=_help("visits of the cheap search used for moves that are not training rows"))
    temperature_moves_19: int = field(default=30, metadata=_help("opening moves played with temperature 1 and root noise on 19x19, scaled by board area on smaller boards"))
    dirichlet_alpha_19: float = field(default=0.03, metadata=_help("Dirichlet root-noise alpha for 19x19, scaled by 361 / legal moves on other boards"))
    noise_fraction: float = field(default=0.25, metadata=_help("share of the root prior replaced by Dirichlet noise"))
    resign_threshold: float = field(default=0.0, metadata=_help("a worker resigns when the root value stays below -THIS; 0 = never resign"))
    resign_playout_fraction: float = field(default=0.1, metadata=_help("share of would-be-resigned games played to the end anyway (false-resign check)"))
    max_moves_per_point: float = field(default=2.0, metadata=_help("a self-play game is stopped and scored after this many moves per board point (2.0 = 722 on 19x19)"))
    heartbeat_interval_s: int = field(default=30, metadata=_help("seconds between worker heartbeats"))
    retry_after_s: int = field(default=10, metadata=_help("seconds a worker waits before asking again while there is no task (no model released yet)"))
    # Gating
    gating_enabled: bool = field(default=True, metadata=_help("play a gating match before releasing a new model (false: every published model is released at once)"))
    gating_games: int = field(default=400, metadata=_help("games per gating match (even)"))
    gating_elo_threshold: float = field(default=20.0, metadata=_help("Elo gain over the current best a candidate needs to be released"))
    release_every_steps: int = field(default=10_000, metadata=_help("a candidate crossing a new multiple of this many training steps is released whatever its Elo (0 = never)"))
    gating_sprt: bool = field(default=False, metadata=_help("let an SPRT end gating matches before gating_games"))
    match_chunk_games: int = field(default=20, metadata=_help("games of a gating match handed to one worker per task (even)"))
    match_task_timeout_s: float = field(default=900.0, metadata=_help("seconds after which an unreported match task's games are handed to another worker"))
    # Curriculum
    curriculum: tuple[CurriculumStage, ...] = field(default=DEFAULT_CURRICULUM, metadata=_help("board size and visits by the released model's training steps: UNTIL_STEPS:SIZE:VISITS,... (0 = no upper bound)"))
    # Dashboard, metrics, SGF
    http_listen: str = field(default="", metadata=_help(
        "serve the read-only dashboard, its JSON (/api/) and Prometheus /metrics over HTTP on "
        "this address, HOST:PORT or PORT (on 127.0.0.1); empty = off; needs the coordinator "
        "extra"))
    sgf_share: float = field(default=1.0, metadata=_help(
        "share of accepted self-play games kept as SGF under DATA_DIR/sgf/ (0..1; gating games "
        "sent with their record are always kept)"))
    # Shutdown
    shutdown_grace_s: float = field(default=10.0, metadata=_help("seconds in-flight calls get to finish on SIGTERM/SIGINT"))

    def resolved_validate_workers(self) -> int:
        return self.validate_workers if self.validate_workers != 0 else (os.cpu_count() or 1)

    def check(self) -> None:
        """Raise ValueError naming the first inconsistent setting."""
        if self.min_moves < 1 or self.max_moves < self.min_moves:
            raise ValueError(f"need 1 <= min_moves <= max_moves, got {self.min_moves}, {self.max_moves}")
        if self.positions_per_shard < 1:
            raise ValueError("positions_per_shard must be >= 1")
        if self.gating_games < 2 or self.gating_games % 2:
            raise ValueError(f"gating_games must be even and >= 2, got {self.gating_games}")
        if self.match_chunk_games < 2 or self.match_chunk_games % 2:
            raise ValueError(f"match_chunk_games must be even and >= 2, got {self.match_chunk_games}")
        if bool(self.tls_cert) != bool(self.tls_key):
            raise ValueError("tls_cert and tls_key go together")
        if not self.curriculum:
            raise ValueError("curriculum needs at least one stage")
        if self.rules not in self.allowed_rules:
            raise ValueError(f"rules {self.rules!r} handed to workers is not in allowed_rules {list(self.allowed_rules)}")
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

    @property
    def data_path(self) -> Path:
        return Path(self.data_dir)


def parse_curriculum(value: Any) -> tuple[CurriculumStage, ...]:
    """From a TOML list of tables or a ``steps:size:visits,...`` string."""
    stages: list[CurriculumStage] = []
    if isinstance(value, str):
        for part in value.split(","):
            try:
                until, size, visits = (int(x) for x in part.strip().split(":"))
            except ValueError as exc:
                raise ValueError(f"curriculum entry {part!r}: expected until_steps:board_size:visits") from exc
            stages.append(CurriculumStage(until, size, visits))
    else:
        for entry in value:
            try:
                stages.append(CurriculumStage(int(entry["until_steps"]), int(entry["board_size"]), int(entry["visits"])))
            except (KeyError, TypeError) as exc:
                raise ValueError(f"curriculum entry {entry!r}: needs until_steps, board_size, visits") from exc
    for s in stages:
        if not 2 <= s.board_size <= 25 or s.visits < 1 or s.until_steps < 0:
            raise ValueError(f"bad curriculum stage {s}")
    return tuple(stages)


def _convert(name: str, value: Any) -> Any:
    default = getattr(Config(), name)
    if name == "curriculum":
        return parse_curriculum(value)
    if name == "allowed_rules":
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        return tuple(str(v) for v in value)
    if isinstance(default, bool):
        if isinstance(value, str):
            if value.lower() in ("1", "true", "yes", "on"):
                return True
            if value.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError(f"{name}: expected true/false, got {value!r}")
        return bool(value)
    if isinstance(default, int):
        return int(value)
    if isinstance(default, float):
        return float(value)
    return str(value)


def config_from(toml_path: str | None = None, overrides: dict[str, Any] | None = None) -> Config:
    """TOML file values, then ``overrides`` (e.g. CLI flags), on top of the defaults."""
    values: dict[str, Any] = {}
    names = {f.name for f in dataclasses.fields(Config)}
    if toml_path:
        with open(toml_path, "rb") as f:
            data = tomllib.load(f)
        unknown = sorted(set(data) - names)
        if unknown:
            raise ValueError(f"{toml_path}: unknown setting(s): {', '.join(unknown)}")
        values.update({k: _convert(k, v) for k, v in data.items()})
    for k, v in (overrides or {}).items():
        if k not in names:
            raise ValueError(f"unknown setting {k!r}")
        values[k] = _convert(k, v)
    cfg = Config(**values)
    cfg.check()
    return cfg


def parse_bool(value: str) -> bool:
    """``true``/``false`` (also yes/no, on/off, 1/0) for boolean flags; argparse shows the error."""
    v = value.strip().lower()
    if v in ("1", "true", "yes", "on"):
        return True
    if v in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {value!r}")


def setting_help(f: dataclasses.Field[Any]) -> str:
    """The help text of a Config field ("" when it has none)."""
    return str(f.metadata.get("help", ""))


def add_config_flags(parser: argparse.ArgumentParser) -> None:
    """One ``--flag`` per Config field; unset flags stay None so TOML values survive."""
    defaults = Config()
    for f in dataclasses.fields(Config):
        flag = "--" + f.name.replace("_", "-")
        default = getattr(defaults, f.name)
        if f.name == "curriculum":
            shown = ",".join(f"{s.until_steps}:{s.board_size}:{s.visits}" for s in default)
        elif f.name == "allowed_rules":
            shown = ",".join(default)
        elif isinstance(default, bool):
            shown = str(default).lower()  # as written in TOML and on the command line
        else:
            shown = repr(default) if default == "" else str(default)
        # argparse %-formats help strings: escape any literal percent sign.
        text = f"{setting_help(f)} (default: {shown})".replace("%", "%%")
        if isinstance(default, bool):
            # `--auth false` / `--gating-sprt true`; a bare `--gating-sprt` means true.
            parser.add_argument(flag, dest=f.name, default=None, type=parse_bool, nargs="?", const=True,
                                metavar="true|false", help=text)
        else:
            parser.add_argument(flag, dest=f.name, default=None, metavar=f.name.upper(), help=text)


def flags_to_overrides(args: argparse.Namespace) -> dict[str, Any]:
    return {f.name: getattr(args, f.name) for f in dataclasses.fields(Config) if getattr(args, f.name, None) is not None}


