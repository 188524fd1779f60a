"""``kgrpc-inference``: the shared batching inference server (see docs/inference.md)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys

import grpc

from inference.config import SETTINGS, InferenceConfig
from kgrpc.cli_help import ProgramParser, env_flag

log = logging.getLogger("kgrpc.inference")


def build_parser() -> argparse.ArgumentParser:
    p = ProgramParser(
        prog="kgrpc-inference",
        env_program="inference",
        description=(
            "Serve a kgrpc network to many MCTS clients over gRPC, batching their positions "
            "across clients (batch cut at --max-batch positions or --max-delay-ms after the "
            "oldest request). Models come from --model files (the last is the default) or "
            "follow the coordinator's releases (--coordinator/--token). Settings come from "
            "--config FILE (TOML), then KGRPC_INFERENCE_* environment variables, then flags."
        ),
    )
    groups = SETTINGS.add_arguments(p)
    env_flag(
        p, "-v", "--verbose", action="store_true", help="debug logging", group=groups["logging"]
    )
    return p


async def serve(cfg: InferenceConfig, credentials: grpc.ServerCredentials | None = None) -> None:
    """Run the daemon until SIGTERM/SIGINT; TLS with ``credentials``
    (:func:`kgrpc.net.server.tls_credentials` of ``cfg.tls_cert``/``cfg.tls_key``)."""
    from inference.follow import CoordinatorFollower
    from inference.models import ModelRegistry
    from inference.server import InferenceServer

    registry = ModelRegistry(
        device=cfg.device,
        precision=cfg.precision,
        intra_threads=cfg.intra_threads,
        max_batch=cfg.max_batch,
        max_delay_ms=cfg.max_delay_ms,
        max_queue=cfg.max_queue,
        in_flight=cfg.in_flight,
        cache_size=cfg.cache_size,
    )
    follower = None
    if cfg.coordinator:
        follower = CoordinatorFollower(
            cfg.coordinator,
            cfg.token or None,
            cfg.model_dir,
            registry,
            tls_ca=cfg.coordinator_tls_ca or None,
        )
        registry.fetcher = follower.fetch
    for path in cfg.models:
        await registry.load(path, make_default=True, pinned=True)
    server = InferenceServer(registry, tokens=cfg.auth_tokens, stream_window=cfg.stream_window)
    await server.start(cfg.listen, log_every_s=cfg.log_every_s, credentials=credentials)
    metrics = None
    if cfg.metrics_listen:
        from inference.metrics import metrics_server

        metrics = metrics_server(registry)
        await metrics.start(cfg.metrics_listen)
    follow_task = asyncio.ensure_future(follower.run()) if follower else None
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("shutting down (grace %.1fs)", cfg.shutdown_grace_s)
    if follow_task is not None:
        follow_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await follow_task
        await follower.close()  # type: ignore[union-attr]
    if metrics is not None:
        await metrics.stop()
    await server.stop(cfg.shutdown_grace_s)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        cfg = SETTINGS.from_args(args)
        cfg.validate()
        from kgrpc.net.server import tls_credentials

        credentials = tls_credentials(cfg.tls_cert, cfg.tls_key)
    except (ValueError, OSError) as exc:
        print(f"kgrpc-inference: {exc}", file=sys.stderr)
        return 2
    for warning in SETTINGS.secrets_given_as_flags(args, ("token", "auth_tokens")):
        log.warning("%s", warning)
    try:
        asyncio.run(serve(cfg, credentials))
    except OSError as exc:  # the address cannot be bound, a model file cannot be read
        print(f"kgrpc-inference: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
