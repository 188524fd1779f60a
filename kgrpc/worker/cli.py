"""``kgrpc-worker``: turn this machine's GPU (or CPU) into training games (docs/worker.md)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import logging.handlers
import os
import sys

from kgrpc.worker.config import ConfigError, WorkerConfig, build_config


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="kgrpc-worker",
        description="Self-play worker: plays games for a kgrpc coordinator and uploads them. "
                    "Settings come from --config FILE (TOML) and are overridden by options.")
    p.add_argument("--config", metavar="FILE", help="TOML config file (see docs/worker.md)")
    p.add_argument("--coordinator", metavar="ADDR", help="coordinator host:port")
    p.add_argument("--token", help="worker token (or env KGRPC_TOKEN)")
    p.add_argument("--username", help="name shown in the coordinator's statistics")
    p.add_argument("--inference", metavar="ADDR|local",
                   help="'local' (in-process engine, default) or inference server "
                        "address(es), comma-separated")
    p.add_argument("--inference-token", help="token for the inference servers")
    p.add_argument("--parallel-games", type=int, metavar="P", help="games played at once")
    p.add_argument("--games", type=int, metavar="N",
                   help="stop after N games are played and uploaded (default: run until stopped)")
    p.add_argument("--games-per-batch", type=int, metavar="G", help="games per upload")
    p.add_argument("--max-batch", type=int, help="in-process engine: max positions per net run")
    p.add_argument("--device", help="in-process engine: auto, cpu or cuda[:N]")
    p.add_argument("--visits", type=int, help="override the task's visits per full search")
    p.add_argument("--leaves-per-batch", type=int, help="leaves per evaluator request (virtual loss)")
    p.add_argument("--work-dir", metavar="DIR", help="spool, model cache, log and worker id")
    p.add_argument("--spool-dir", metavar="DIR", help="finished games not yet acknowledged")
    p.add_argument("--model-dir", metavar="DIR", help="downloaded models")
    p.add_argument("--log-file", metavar="FILE", help="log file (default WORK_DIR/worker.log)")
    p.add_argument("--status-interval", type=float, dest="status_interval_s", metavar="S")
    p.add_argument("--seed", type=int, help="random seed (reproducible games)")
    p.add_argument("--quiet", action="store_true", default=None,
                   help="no status line on stderr (for services; the log file still gets it)")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    return p


def config_from_args(args: argparse.Namespace) -> WorkerConfig:
    overrides = {k: v for k, v in vars(args).items()
                 if k not in ("config", "verbose")}
    cfg = build_config(args.config, **overrides)
    if not cfg.token and os.environ.get("KGRPC_TOKEN"):  # keeps the token out of `ps`
        cfg = build_config(args.config, **{**overrides, "token": os.environ["KGRPC_TOKEN"]})
    return cfg


def setup_logging(cfg: WorkerConfig, verbose: bool) -> None:
    root = logging.getLogger()
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    cfg.log_path.parent.mkdir(parents=True, exist_ok=True)
    fh = logging.handlers.RotatingFileHandler(cfg.log_path, maxBytes=20 << 20, backupCount=3)
    fh.setFormatter(fmt)
    root.addHandler(fh)
    console = logging.StreamHandler(sys.stderr)
    console.setFormatter(fmt)
    # With the status line on, the console only gets warnings; --quiet services log everything.
    console.setLevel(logging.INFO if cfg.quiet else logging.WARNING)
    root.addHandler(console)
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        cfg = config_from_args(args)
        cfg.check()
    except ConfigError as exc:
        print(f"kgrpc-worker: {exc}", file=sys.stderr)
        return 2
    setup_logging(cfg, args.verbose)
    from kgrpc.worker.daemon import Worker

    async def _run() -> int:
        return await Worker(cfg).run()

    try:
        return asyncio.run(_run())
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
