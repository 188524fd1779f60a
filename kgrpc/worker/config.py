"""The worker's settings: one dataclass, loaded by kgrpc.settings.

Every field is a TOML key (top level or in a ``[worker]`` table; ``-`` and ``_`` alike), a flag
(``--parallel-games``) and an environment variable ``KGRPC_WORKER_<FIELD>``
(``KGRPC_WORKER_TOKEN``); precedence flag > variable > file > default (docs/operations.md,
"Settings"). The token is also read from ``KGRPC_TOKEN`` when nothing else sets it.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from kgrpc.devices import DEVICE_HELP, parse_device
from kgrpc.net.channel import load_ca
from kgrpc.precision import AUTO_HELP, check_precision
from kgrpc.precision import CHOICES as PRECISION_CHOICES
from kgrpc.settings import Settings, SettingsError, setting

# A bad config file or option (the message names the key).
ConfigError = SettingsError


@dataclass(frozen=True)
class WorkerConfig:
    coordinator: str = setting(
        "",
        "coordinator address HOST:PORT, or a comma-separated list of replicas (balanced by gRPC)",
        metavar="ADDR",
        group="connection",
    )
    token: str = setting(
        "", "worker token (keep it out of `ps`: use the environment)", fallback_env=("KGRPC_TOKEN",)
    )
    tls_ca: str = setting(
        "",
        "CA certificate (PEM) of a TLS coordinator; plaintext if empty (and no --tls)",
        metavar="FILE",
    )
    tls: bool = setting(
        False,
        "TLS to the coordinator trusting the system's CA roots (a coordinator with an "
        "ordinary certificate); --tls-ca FILE trusts that CA instead",
    )
    username: str = setting(
        "",
        "display name shown beside your token's account in the coordinator's statistics, where "
        "it allows display names (games are credited to the token's account)",
    )
    hostname: str = setting(
        default_factory=socket.gethostname,
        help="host name shown in the coordinator's statistics",
        show="this machine's name",
    )
    inference: str = setting(
        "local",
        "'local' (in-process engine) or inference server address(es), comma-separated, "
        "balanced over",
        metavar="ADDR|local",
        group="inference",
    )
    inference_token: str = setting(
        "", "token for the inference servers", show="the coordinator token"
    )
    inference_tls_ca: str = setting(
        "", "CA certificate (PEM) of TLS inference servers; plaintext if empty", metavar="FILE"
    )
    max_batch: int = setting(
        64,
        "net batch (in-process engine): positions merged from several requests into one net "
        "run, at most; the native search's request (the leaves of all its games in one step) "
        "runs whole however large; not --leaves-per-batch (one search) nor --games-per-batch "
        "(uploads)",
    )
    max_delay_ms: float = setting(2.0, "in-process engine: longest wait for a batch to fill, ms")
    device: str = setting("auto", f"in-process engine: {DEVICE_HELP}")
    intra_threads: int = setting(
        0,
        "in-process engine: ONNX Runtime threads per session, at most (0 = one per core); "
        "leaves the other cores to the machine's owner",
        metavar="T",
    )
    precision: str = setting(
        "auto",
        f"in-process engine: the model file to download and run: {AUTO_HELP}, fp32, fp16 or "
        "int8; fp32 when the model lacks it",
        choices=PRECISION_CHOICES,
    )
    parallel_games: int = setting(
        16,
        "games played at once (asyncio tasks sharing the evaluator)",
        metavar="P",
        group="games and search",
    )
    games_per_batch: int = setting(
        0,
        "upload batch: finished games sent per upload stream (0 = the coordinator's setting); "
        "not a net batch (--max-batch, --leaves-per-batch)",
        metavar="G",
    )
    games: int = setting(
        0, "stop after N games are played and acknowledged (0 = run until stopped)", metavar="N"
    )
    leaves_per_batch: int = setting(
        8,
        "search batch: leaves one search sends per evaluator request (virtual loss); "
        "--max-batch gathers these from many games; not --games-per-batch (uploads)",
    )
    visits: int = setting(0, "override the task's visits per full search (0 = the task's)")
    nice: int = setting(
        0,
        "lower the worker's OS priority by N (0-19; its engine threads inherit it); --idle "
        "keeps it off the CPU your other programs want more strictly",
        metavar="N",
    )
    idle: bool = setting(
        False,
        "run at Linux's SCHED_IDLE policy (its engine threads inherit it): only on CPU time "
        "no other program wants, since a program that wakes up takes the core from it at "
        "once; stricter than --nice 19",
    )
    work_dir: Path = setting(
        Path("kgrpc-worker"),
        "spool, model cache, log and worker id",
        metavar="DIR",
        group="storage",
    )
    spool_dir: Path | None = setting(
        None, "finished games not yet acknowledged", show="WORK_DIR/spool", metavar="DIR"
    )
    model_dir: Path | None = setting(
        None, "downloaded models", show="WORK_DIR/models", metavar="DIR"
    )
    log_file: Path | None = setting(
        None, "log file", show="WORK_DIR/worker.log", metavar="FILE", group="logging"
    )
    max_spooled_games: int = setting(
        100_000,
        "stop starting games while this many finished games wait in the spool",
        group="storage",
    )
    keep_models: int = setting(
        4, "model files kept in the cache, newest first (0 = keep every model ever downloaded)"
    )
    upload_interval_s: float = setting(
        60.0, "upload whatever is spooled at least this often, seconds, even below games_per_batch"
    )
    status_interval_s: float = setting(
        10.0,
        "seconds between status lines",
        aliases=("--status-interval",),
        metavar="S",
        group="logging",
    )
    quiet: bool = setting(
        False, "no status line on stderr (for services; the log file still gets it)"
    )
    retry_base_s: float = setting(
        1.0, "first backoff after a coordinator or inference outage, seconds", group="connection"
    )
    retry_cap_s: float = setting(120.0, "longest backoff between retries, seconds")
    seed: int | None = setting(
        None, "random seed (reproducible games)", show="random", group="other"
    )

    def __post_init__(self) -> None:
        for name in ("parallel_games", "max_batch", "leaves_per_batch"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("games", "games_per_batch", "visits", "max_spooled_games", "keep_models"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must be >= 0, got {getattr(self, name)}")
        if not 0 <= self.nice <= 19:
            raise ConfigError(f"nice must be between 0 and 19, got {self.nice}")
        if self.idle and not hasattr(os, "SCHED_IDLE"):
            raise ConfigError("idle needs Linux's SCHED_IDLE policy; on this OS use nice = 19")
        try:
            check_precision(self.precision, allow_auto=True)
        except ValueError as exc:
            raise ConfigError(f"precision: {exc}") from None

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
            raise ConfigError(
                "no coordinator address (--coordinator, "
                f"${SETTINGS.env_var('coordinator')} or `coordinator` in the config)"
            )
        if not self.token:
            raise ConfigError(
                f"no token (--token, ${SETTINGS.env_var('token')}, $KGRPC_TOKEN or "
                "`token` in the config)"
            )
        if not self.inference.strip():
            raise ConfigError("inference must be 'local' or address[,address...]")
        try:
            parse_device(self.device)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        if self.intra_threads < 0:
            raise ConfigError(
                f"intra_threads must be >= 0 (0 = one per core), got {self.intra_threads}"
            )
        for name in ("tls_ca", "inference_tls_ca"):
            if getattr(self, name):
                try:  # a wrong file fails here, not as handshakes retried for ever
                    load_ca(getattr(self, name))
                except ValueError as exc:
                    raise ConfigError(f"{name}: {exc}") from None
        if self.inference_tls_ca and not self.inference_addresses:
            raise ConfigError(
                "inference_tls_ca is for inference servers (--inference ADDR), "
                "not the in-process engine"
            )


SETTINGS: Settings[WorkerConfig] = Settings(WorkerConfig, "worker")


def load_toml(path: str | Path) -> dict[str, Any]:
    """Keys of a worker TOML file (top level or a [worker] table); '-' and '_' are the same."""
    return SETTINGS.read_toml(path)


def build_config(
    toml_path: str | Path | None = None, *, env: Mapping[str, str] | None = None, **overrides: Any
) -> WorkerConfig:
    """Defaults, the TOML file, the environment (only when ``env`` is given), then
    ``overrides`` (None values are ignored)."""
    return SETTINGS.load(toml_path=toml_path, flags=overrides, env=env)


def with_changes(cfg: WorkerConfig, **changes: Any) -> WorkerConfig:
    return replace(cfg, **changes)
