"""The worker's settings: one dataclass, filled from defaults < TOML file < command line."""

from __future__ import annotations

import socket
import tomllib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any


class ConfigError(ValueError):
    """A bad config file or option (the message names the key)."""


@dataclass(frozen=True)
class WorkerConfig:
    coordinator: str = ""
    token: str = ""
    username: str = ""
    hostname: str = field(default_factory=socket.gethostname)
    # "local" = run the model in this process; else inference server address(es),
    # comma-separated, balanced over.
    inference: str = "local"
    # Token for the inference servers (defaults to the coordinator token).
    inference_token: str = ""
    # In-process engine: most positions per net evaluation, and how long a batch may wait.
    max_batch: int = 64
    max_delay_ms: float = 2.0
    device: str = "auto"
    # Games played at once (asyncio tasks sharing the evaluator).
    parallel_games: int = 16
    # Games per upload stream; 0 = the coordinator's setting.
    games_per_batch: int = 0
    # Stop after this many games are played and acknowledged; 0 = run until stopped.
    games: int = 0
    # Leaves per evaluator request of one search (virtual loss).
    leaves_per_batch: int = 8
    # Override of the task's visits per full search (0 = the task's).
    visits: int = 0
    work_dir: Path = Path("kgrpc-worker")
    spool_dir: Path | None = None  # default work_dir/spool
    model_dir: Path | None = None  # default work_dir/models
    log_file: Path | None = None  # default work_dir/worker.log
    # Stop starting games while this many finished games wait in the spool.
    max_spooled_games: int = 100_000
    # Model files kept in the cache (newest first); 0 = keep every model ever downloaded.
    keep_models: int = 4
    # Upload whatever is spooled at least this often, even below games_per_batch.
    upload_interval_s: float = 60.0
    status_interval_s: float = 10.0
    quiet: bool = False
    # Backoff for coordinator/inference outages.
    retry_base_s: float = 1.0
    retry_cap_s: float = 120.0
    seed: int | None = None

    def __post_init__(self) -> None:
        for name in ("parallel_games", "max_batch", "leaves_per_batch"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("games", "games_per_batch", "visits", "max_spooled_games", "keep_models"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must be >= 0, got {getattr(self, name)}")

    @property
    def spool_path(self) -> Path:
        return Path(self.spool_dir) if self.spool_dir else Path(self.work_dir) / "spool"

    @property
    def model_path(self) -> Path:
        return Path(self.model_dir) if self.model_dir else Path(self.work_dir) / "models"

    @property
    def log_path(self) -> Path:
        return Path(self.log_file) if self.log_file else Path(self.work_dir) / "worker.log"

    @property
    def inference_addresses(self) -> list[str]:
        if self.inference.strip().lower() == "local":
            return []
        return [a.strip() for a in self.inference.split(",") if a.strip()]

    def check(self) -> None:
        """Errors that only matter when starting the daemon."""
        if not self.coordinator:
            raise ConfigError("no coordinator address (--coordinator or `coordinator` in the config)")
        if not self.token:
            raise ConfigError("no token (--token or `token` in the config)")
        if not self.inference.strip():
            raise ConfigError("inference must be 'local' or address[,address...]")


_FIELDS = {f.name: f for f in fields(WorkerConfig)}
_PATH_KEYS = {"work_dir", "spool_dir", "model_dir", "log_file"}


def _coerce(name: str, value: Any, where: str) -> Any:
    default = _FIELDS[name].default
    if name in _PATH_KEYS:
        if not isinstance(value, str | Path):
            raise ConfigError(f"{where}: {name} must be a path string, got {value!r}")
        return Path(value).expanduser()
    if name == "seed":
        if value is not None and not isinstance(value, int):
            raise ConfigError(f"{where}: seed must be an integer")
        return value
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: {name} must be true or false, got {value!r}")
        return value
    if isinstance(default, int):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: {name} must be an integer, got {value!r}")
        return value
    if isinstance(default, float):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{where}: {name} must be a number, got {value!r}")
        return float(value)
    if not isinstance(value, str):
        raise ConfigError(f"{where}: {name} must be a string, got {value!r}")
    return value


def load_toml(path: str | Path) -> dict[str, Any]:
    """Keys of a worker TOML file (top level or a [worker] table); '-' and '_' are the same."""
    p = Path(path)
    try:
        data = tomllib.loads(p.read_text())
    except FileNotFoundError:
        raise ConfigError(f"config file {p} does not exist") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {p}: {exc}") from None
    if isinstance(data.get("worker"), dict):
        data = {**{k: v for k, v in data.items() if k != "worker"}, **data["worker"]}
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = key.replace("-", "_")
        if name not in _FIELDS:
            known = ", ".join(sorted(_FIELDS))
            raise ConfigError(f"config file {p}: unknown key {key!r} (known: {known})")
        out[name] = _coerce(name, value, str(p))
    return out


def build_config(toml_path: str | Path | None = None, **overrides: Any) -> WorkerConfig:
    """Defaults, then the TOML file, then ``overrides`` (None values are ignored)."""
    values: dict[str, Any] = {}
    if toml_path:
        values.update(load_toml(toml_path))
    for name, value in overrides.items():
        if value is None:
            continue
        if name not in _FIELDS:
            raise ConfigError(f"unknown setting {name!r}")
        values[name] = _coerce(name, value, "command line")
    return WorkerConfig(**values)


def with_changes(cfg: WorkerConfig, **changes: Any) -> WorkerConfig:
    return replace(cfg, **changes)
