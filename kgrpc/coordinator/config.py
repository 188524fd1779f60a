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
from dataclasses import dataclass
from pathlib import Path
from typing import Any


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


@dataclass
class Config:
    listen: str = "127.0.0.1:50051"
    data_dir: str = "./kgrpc-data"
    run: str = "run_001"
    # Access control
    auth: bool = True
    tls_cert: str = ""
    tls_key: str = ""
    max_receive_mb: int = 64
    # Validation
    min_moves: int = 11
    max_moves: int = 499
    allowed_rules: tuple[str, ...] = ("chinese",)
    validate_workers: int = 0  # 0 = os.cpu_count() processes; -1 = in-process thread (tests)
    max_games_per_message: int = 1000
    max_decompressed_mb: int = 256
    # Storage
    positions_per_shard: int = 50_000
    flush_interval_s: float = 600.0
    latest_window_positions: int = 250_000
    # Self-play settings handed to workers
    komi: float = 7.5
    rules: str = "chinese"
    games_per_batch: int = 25
    selfplay_task_games: int = 25
    full_search_prob: float = 0.25
    cheap_visits: int = 64
    temperature_moves_19: int = 30
    dirichlet_alpha_19: float = 0.03
    noise_fraction: float = 0.25
    resign_threshold: float = 0.0
    resign_playout_fraction: float = 0.1
    max_moves_per_point: float = 2.0
    heartbeat_interval_s: int = 30
    retry_after_s: int = 10
    # Gating
    gating_enabled: bool = True
    gating_games: int = 400
    gating_elo_threshold: float = 20.0
    release_every_steps: int = 10_000
    gating_sprt: bool = False
    match_chunk_games: int = 20
    match_task_timeout_s: float = 900.0
    # Curriculum
    curriculum: tuple[CurriculumStage, ...] = DEFAULT_CURRICULUM
    # Shutdown
    shutdown_grace_s: float = 10.0

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


def add_config_flags(parser: argparse.ArgumentParser) -> None:
    """One ``--flag`` per Config field; unset flags stay None so TOML values survive."""
    for f in dataclasses.fields(Config):
        flag = "--" + f.name.replace("_", "-")
        default = getattr(Config(), f.name)
        shown = default if not isinstance(default, tuple) else "(see docs)"
        if f.name == "curriculum":
            shown = "100000:9:200,500000:13:400,0:19:800"
        elif f.name == "allowed_rules":
            shown = ",".join(default)
        parser.add_argument(flag, dest=f.name, default=None, metavar=f.name.upper(), help=f"default: {shown}")


def flags_to_overrides(args: argparse.Namespace) -> dict[str, Any]:
    return {f.name: getattr(args, f.name) for f in dataclasses.fields(Config) if getattr(args, f.name, None) is not None}


