"""The daemon's configuration: one dataclass, filled from a TOML file and then CLI flags.

TOML keys are the field names (top level or in an ``[inference]`` table), e.g.::

    listen = "0.0.0.0:50061"
    models = ["models/kg-b6c96-s0-d0.onnx"]   # or coordinator = "host:50051", token = "..."
                                              # (+ coordinator_tls_ca = "ca.pem" for TLS)
    device = "auto"
    precision = "auto"                        # or fp32, fp16, int8 (kgrpc/precision.py)
    max_batch = 64
    max_delay_ms = 2.0

Flags given on the command line override the file.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from kgrpc.precision import check_precision


@dataclass
class InferenceConfig:
    listen: str = "127.0.0.1:50061"
    models: list[str] = field(default_factory=list)
    coordinator: str = ""
    token: str = ""
    # CA / self-signed certificate (PEM file) of a TLS coordinator; "" = plaintext.
    coordinator_tls_ca: str = ""
    model_dir: str = "inference_models"
    device: str = "auto"
    precision: str = "auto"
    intra_threads: int = 0
    max_batch: int = 64
    max_delay_ms: float = 2.0
    max_queue: int = 8192
    in_flight: int = 0  # 0 = automatic: 2 on CUDA, 1 on the CPU
    cache_size: int = 0
    auth_tokens: list[str] = field(default_factory=list)
    log_every_s: float = 10.0
    shutdown_grace_s: float = 5.0

    def validate(self) -> None:
        if not self.models and not self.coordinator:
            raise ValueError("give --model FILE.onnx (one or more) or --coordinator ADDR")
        if self.device not in ("auto", "cuda", "cpu"):
            raise ValueError(f"device must be auto, cuda or cpu, got {self.device!r}")
        check_precision(self.precision, allow_auto=True)
        for name in ("max_batch", "max_queue"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.in_flight < 0:
            raise ValueError(f"in_flight must be >= 0 (0 = automatic), got {self.in_flight}")
        if self.coordinator_tls_ca:
            # Checked here so that a typo fails at start-up, not as endless follow retries.
            if not self.coordinator:
                raise ValueError("coordinator_tls_ca is only used with --coordinator")
            if not Path(self.coordinator_tls_ca).is_file():
                raise ValueError(f"coordinator_tls_ca {self.coordinator_tls_ca!r} is not a file")
        if self.max_delay_ms < 0 or self.cache_size < 0:
            raise ValueError("max_delay_ms and cache_size must be >= 0")


def load_config(path: str | None, overrides: dict[str, Any]) -> InferenceConfig:
    """TOML file (optional) then ``overrides`` (None values ignored); validated."""
    values: dict[str, Any] = {}
    if path:
        data = tomllib.loads(Path(path).read_text())
        data = data.get("inference", data)
        known = {f.name for f in fields(InferenceConfig)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"{path}: unknown keys {sorted(unknown)}; known: {sorted(known)}")
        values.update(data)
    values.update({k: v for k, v in overrides.items() if v is not None})
    cfg = InferenceConfig(**values)
    cfg.validate()
    return cfg
