"""``kgrpc-worker``: turn this machine's GPU (or CPU) into training games (docs/worker.md)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import logging.handlers
import os
import signal
import sys

from kgrpc import native
from kgrpc.cli_help import ProgramParser, env_flag
from kgrpc.worker.config import SETTINGS, ConfigError, WorkerConfig

CONTROLS = {"pause": signal.SIGUSR1, "resume": signal.SIGUSR2}


def build_parser() -> argparse.ArgumentParser:
    p = ProgramParser(
        prog="kgrpc-worker",
        env_program="worker",
        description="Self-play worker: plays games for a kgrpc coordinator and uploads them. "
        "Settings come from --config FILE (TOML, see docs/worker.md), then "
        "KGRPC_WORKER_* environment variables, then options (the last wins).",
        epilog="kgrpc-worker pause|resume [--work-dir DIR] pauses or resumes the worker "
        "running in DIR (SIGUSR1 / SIGUSR2 to its process): paused, it starts no game and "
        "its searches wait, losing none; see kgrpc-worker pause --help.",
    )
    groups = SETTINGS.add_arguments(p)
    env_flag(
        p, "-v", "--verbose", action="store_true", help="debug logging", group=groups["logging"]
    )
    return p


def config_from_args(args: argparse.Namespace) -> WorkerConfig:
    """``--config``, the environment (``KGRPC_WORKER_*``; the token also from
    ``KGRPC_TOKEN``, which keeps it out of `ps`) and the options."""
    return SETTINGS.from_args(args)


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


def build_control_parser(command: str) -> argparse.ArgumentParser:
    p = ProgramParser(
        prog=f"kgrpc-worker {command}",
        env_program="worker",
        description=f"{command.capitalize()} the worker running in --work-dir (it gets "
        f"{CONTROLS[command].name}); its status line says PAUSED while paused.",
    )
    env_flag(p, "--work-dir", default="kgrpc-worker", help="the running worker's work dir")
    return p


def control(command: str, argv: list[str]) -> int:
    """``kgrpc-worker pause|resume``: signal the worker of a work dir."""
    from kgrpc.worker.lifecycle import signal_worker

    args = build_control_parser(command).parse_args(argv)
    try:
        pid = signal_worker(args.work_dir, CONTROLS[command])
    except OSError as exc:
        print(f"kgrpc-worker {command}: {exc}", file=sys.stderr)
        return 1
    print(f"kgrpc-worker {command}: sent {CONTROLS[command].name} to pid {pid}")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in CONTROLS:
        return control(argv[0], argv[1:])
    args = build_parser().parse_args(argv)
    try:
        cfg = config_from_args(args)
        cfg.check()
    except ConfigError as exc:
        print(f"kgrpc-worker: {exc}", file=sys.stderr)
        return 2
    # Before any thread starts: on Linux each thread has its own priority and policy, and a
    # new thread inherits its creator's.
    if cfg.nice:
        os.nice(cfg.nice)
    if cfg.idle:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    setup_logging(cfg, args.verbose)
    for warning in SETTINGS.secrets_given_as_flags(args, ("token", "inference_token")):
        logging.getLogger("kgrpc.worker").warning("%s", warning)
    native.log_implementation()
    from kgrpc.worker.daemon import Worker

    async def _run() -> int:
        return await Worker(cfg).run()

    try:
        return asyncio.run(_run())
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
