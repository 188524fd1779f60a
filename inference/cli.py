"""``kgrpc-inference``: the shared batching inference server (see docs/inference.md)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys

from inference.config import load_config

log = logging.getLogger("kgrpc.inference")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="kgrpc-inference",
        description=(
            "Serve a kgrpc network to many MCTS clients over gRPC, batching their positions "
            "across clients (batch cut at --max-batch positions or --max-delay-ms after the "
            "oldest request). Models come from --model files (the last is the default) or "
            "follow the coordinator's releases (--coordinator/--token)."
        ),
    )
    p.add_argument("--config", help="TOML file with the same settings (flags override it)")
    p.add_argument("--listen", help="address to listen on (default 127.0.0.1:50061)")
    p.add_argument("--model", dest="models", action="append",
                   help="ONNX model file; repeat to serve several (the last is the default)")
    p.add_argument("--coordinator", help="follow this coordinator's model releases")
    p.add_argument("--token", help="token for the coordinator (authorization: Bearer)")
    p.add_argument("--coordinator-tls-ca", metavar="PEM",
                   help="CA (or self-signed) certificate of a TLS coordinator; "
                        "without it the coordinator channel is plaintext")
    p.add_argument("--model-dir", help="where downloaded models are cached")
    p.add_argument("--device", choices=["auto", "cuda", "cpu"],
                   help="auto (CUDA when usable, else CPU), cuda or cpu")
    p.add_argument("--precision", choices=["auto", "fp32", "fp16", "int8"],
                   help="model file to load: auto (fp16 on CUDA, int8 on a CPU when that file "
                        "exists beside NAME.onnx, else fp32), fp32, fp16 or int8")
    p.add_argument("--intra-threads", type=int, help="ONNX Runtime threads per session (0 = all cores)")
    p.add_argument("--max-batch", type=int, help="positions per batch at most (default 64)")
    p.add_argument("--max-delay-ms", type=float,
                   help="longest wait for a batch to fill after its first request (default 2)")
    p.add_argument("--max-queue", type=int,
                   help="queued positions at most; beyond: RESOURCE_EXHAUSTED (default 8192)")
    p.add_argument("--in-flight", type=int,
                   help="batches run at once per model (default 0 = automatic: 2 on CUDA, 1 on the CPU)")
    p.add_argument("--cache-size", type=int, help="evaluation cache entries (0 = off)")
    p.add_argument("--auth-token", dest="auth_tokens", action="append",
                   help="require this client token (repeatable); none = no auth")
    p.add_argument("--log-every-s", type=float, help="metrics log interval (0 = never)")
    p.add_argument("--shutdown-grace-s", type=float, help="grace for in-flight calls on stop")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    return p


async def serve(cfg) -> None:  # type: ignore[no-untyped-def]
    from inference.follow import CoordinatorFollower
    from inference.models import ModelRegistry
    from inference.server import InferenceServer

    registry = ModelRegistry(
        device=cfg.device, precision=cfg.precision, intra_threads=cfg.intra_threads,
        max_batch=cfg.max_batch,
        max_delay_ms=cfg.max_delay_ms, max_queue=cfg.max_queue, in_flight=cfg.in_flight,
        cache_size=cfg.cache_size,
    )
    follower = None
    if cfg.coordinator:
        follower = CoordinatorFollower(cfg.coordinator, cfg.token or None, cfg.model_dir,
                                       registry, tls_ca=cfg.coordinator_tls_ca or None)
        registry.fetcher = follower.fetch
    for path in cfg.models:
        await registry.load(path, make_default=True, pinned=True)
    server = InferenceServer(registry, tokens=cfg.auth_tokens)
    await server.start(cfg.listen, log_every_s=cfg.log_every_s)
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
    await server.stop(cfg.shutdown_grace_s)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    overrides = {k: v for k, v in vars(args).items() if k not in ("config", "verbose")}
    try:
        cfg = load_config(args.config, overrides)
    except (ValueError, OSError) as exc:
        print(f"kgrpc-inference: {exc}", file=sys.stderr)
        return 2
    asyncio.run(serve(cfg))
    return 0


if __name__ == "__main__":
    sys.exit(main())
