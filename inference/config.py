"""The daemon's configuration: one dataclass, loaded by kgrpc.settings.

TOML keys are the field names (top level or in an ``[inference]`` table), e.g.::

    listen = "0.0.0.0:50061"
    tls_cert = "server.pem"                   # + tls_key: serve TLS (clients: --tls-ca)
    tls_key = "server.key"
    models = ["models/kg-b6c96-s0-d0.onnx"]   # or coordinator = "host:50051", token = "..."
                                              # (+ coordinator_tls_ca = "ca.pem" for TLS)
    device = "auto"
    precision = "auto"                        # or fp32, fp16, int8 (kgrpc/precision.py)
    max_batch = 64
    max_delay_ms = 2.0

Each is also a flag (``--max-batch``; ``models`` is ``--model``, ``auth_tokens``
``--auth-token``, both repeatable; ``coordinator_tls_ca`` also ``--tls-ca``) and an environment
variable ``KGRPC_INFERENCE_<FIELD>`` (lists comma-separated); precedence flag > variable > file >
default (docs/operations.md, "Settings"). Tokens are best given in the environment
(``KGRPC_INFERENCE_TOKEN``, ``KGRPC_INFERENCE_AUTH_TOKENS``): a flag shows in ``ps``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kgrpc.devices import DEVICE_HELP, parse_device
from kgrpc.net.channel import load_ca
from kgrpc.precision import AUTO_HELP, check_precision
from kgrpc.precision import CHOICES as PRECISION_CHOICES
from kgrpc.settings import Settings, setting


@dataclass
class InferenceConfig:
    listen: str = setting("127.0.0.1:50061", "address to listen on", group="serving")
    tls_cert: str = setting(
        "", "serve TLS with this certificate chain (PEM file); plaintext if empty", metavar="FILE"
    )
    tls_key: str = setting("", "private key (PEM file) of tls_cert", metavar="FILE")
    models: list[str] = setting(
        default_factory=list,
        flag="--model",
        repeat=True,
        metavar="FILE",
        help="ONNX model file; repeat to serve several (the last is the default)",
        group="models",
    )
    coordinator: str = setting("", "follow this coordinator's model releases", metavar="ADDR")
    token: str = setting(
        "",
        "token for the coordinator (authorization: Bearer; keep it out "
        "of `ps`: use the environment)",
    )
    coordinator_tls_ca: str = setting(
        "",
        "CA (or self-signed) certificate of a TLS coordinator; without it the coordinator "
        "channel is plaintext",
        metavar="PEM",
        aliases=("--tls-ca",),
    )
    model_dir: str = setting(
        "inference_models", "where downloaded models are cached", metavar="DIR"
    )
    device: str = setting(
        "auto",
        f"{DEVICE_HELP}; one server per GPU (docs/operations.md, 'Several inference servers')",
        group="engine and batching",
    )
    precision: str = setting(
        "auto",
        f"model file to load: {AUTO_HELP}, fp32, fp16 or int8 (beside NAME.onnx)",
        choices=PRECISION_CHOICES,
    )
    intra_threads: int = setting(0, "ONNX Runtime threads per session (0 = all cores)")
    max_batch: int = setting(64, "positions per batch at most")
    max_delay_ms: float = setting(
        2.0, "longest wait for a batch to fill after its first request, ms"
    )
    max_queue: int = setting(8192, "queued positions at most; beyond: RESOURCE_EXHAUSTED")
    in_flight: int = setting(
        0, "batches run at once per model (0 = automatic: 2 on CUDA, 1 on the CPU)"
    )
    cache_size: int = setting(0, "evaluation cache entries (0 = off)")
    stream_window: int = setting(
        4096,
        "positions one Evaluate stream may have in flight or unwritten; while full, its "
        "next request is not read (a client that never reads stops sending)",
    )
    auth_tokens: list[str] = setting(
        default_factory=list,
        flag="--auth-token",
        repeat=True,
        metavar="TOKEN",
        help="require this client token (repeatable; keep them out of `ps`: use the "
        "environment, comma-separated); none = no auth",
        group="serving",
    )
    log_every_s: float = setting(10.0, "metrics log interval, seconds (0 = never)", group="logging")
    metrics_listen: str = setting(
        "",
        "serve Prometheus /metrics over HTTP on HOST:PORT or PORT (on 127.0.0.1); empty = "
        "off; needs the metrics extra",
        metavar="ADDR",
    )
    shutdown_grace_s: float = setting(
        5.0, "grace for in-flight calls on stop, seconds", group="serving"
    )

    def validate(self) -> None:
        if not self.models and not self.coordinator:
            raise ValueError("give --model FILE.onnx (one or more) or --coordinator ADDR")
        parse_device(self.device)
        check_precision(self.precision, allow_auto=True)
        for name in ("max_batch", "max_queue", "stream_window"):
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
            load_ca(self.coordinator_tls_ca)
        if bool(self.tls_cert) != bool(self.tls_key):
            raise ValueError("tls_cert and tls_key go together")
        if self.metrics_listen:
            from kgrpc.net.metrics import parse_listen, require

            parse_listen(self.metrics_listen)
            try:
                require()
            except RuntimeError as exc:
                raise ValueError(str(exc)) from None
        if self.max_delay_ms < 0 or self.cache_size < 0:
            raise ValueError("max_delay_ms and cache_size must be >= 0")


SETTINGS: Settings[InferenceConfig] = Settings(InferenceConfig, "inference")


def load_config(
    path: str | None, overrides: Mapping[str, Any], env: Mapping[str, str] | None = None
) -> InferenceConfig:
    """TOML file (optional), the environment (only when ``env`` is given), then
    ``overrides`` (None values ignored); validated."""
    cfg = SETTINGS.load(toml_path=path, flags=overrides, env=env)
    cfg.validate()
    return cfg
