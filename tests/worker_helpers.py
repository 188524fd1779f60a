"""Shared by the tests that run a real kgrpc-worker (tests/test_worker_*.py, test_tls.py,
test_coordinator_pace.py, test_coordinator_gating.py): a tiny run's coordinator settings, its
two models, a worker's config, a coordinator with the first model published, a worker that
keeps its games, and the worker as a process.

Boards are 5x5 with 8 visits and a 25-move cap so a game takes a fraction of a second.
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from kgrpc import native
from kgrpc.coordinator.testing import RunningCoordinator, start_coordinator
from kgrpc.v1 import coordinator_pb2, coordinator_pb2_grpc
from kgrpc.worker.config import WorkerConfig
from kgrpc.worker.daemon import Worker
from kgrpc.worker.runner import AsyncioGameRunner, NativeGameRunner

COORD = dict(
    curriculum="0:5:8",
    min_moves=2,
    cheap_visits=4,
    max_moves_per_point=1.0,
    games_per_batch=2,
    selfplay_task_games=4,
    heartbeat_interval_s=1,
    retry_after_s=1,
    gating_enabled=False,
)
# The coordinator settings of the match tests: every second model gated over one chunk of 2.
GATING = {**COORD, "gating_enabled": True, "gating_games": 2, "match_chunk_games": 2}

M1, M2 = "kg-b1c8-s0-d0", "kg-b1c8-s100-d1000"
# The runner a Worker builds here (the native one whenever the native core is in use).
RUNNER = NativeGameRunner if native.ENABLED else AsyncioGameRunner
RUNNERS = [
    "python",
    pytest.param(
        "native",
        marks=pytest.mark.skipif(
            not native.ENABLED, reason=f"native runner needs the native core: {native.describe()}"
        ),
    ),
]


def write_models(directory: Path, names: tuple[str, ...] = (M1, M2)) -> dict[str, Path]:
    """Tiny 5x5 exports (b1c8) named ``names``, seeded by their place; name -> file."""
    from trainer.export import init_model

    out = {}
    for seed, name in enumerate(names):
        out[name] = directory / f"{name}.onnx"
        init_model(5, blocks=1, channels=8, out=out[name], name=name, seed=seed)
    return out


def worker_config(coord_address: str, token: str, work: Path, **kw: Any) -> WorkerConfig:
    base: dict[str, Any] = dict(
        coordinator=coord_address,
        token=token,
        work_dir=work,
        inference="local",
        parallel_games=3,
        quiet=True,
        status_interval_s=0.5,
        retry_base_s=0.05,
        retry_cap_s=0.5,
        max_batch=16,
        seed=1,
    )
    base.update(kw)
    return WorkerConfig(**base)


def free_port() -> int:
    """A loopback port nothing listens on (a coordinator or server that is away)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def stats(coord_address: str, token: str) -> coordinator_pb2.Stats:
    from kgrpc.net import make_channel

    async with make_channel(coord_address, token=token) as ch:
        return await coordinator_pb2_grpc.CoordinatorStub(ch).GetStats(
            coordinator_pb2.GetStatsRequest(), timeout=10
        )


@asynccontextmanager
async def coordinator_with(
    data_dir: Path, model: Path | None, **overrides: Any
) -> AsyncIterator[RunningCoordinator]:
    """A coordinator with :data:`COORD` (and ``overrides``) that has ``model`` published
    (None: nothing); stopped on leaving."""
    from trainer.publish import publish_model

    coord = await start_coordinator(data_dir, **{**COORD, **overrides})
    try:
        if model is not None:
            await publish_model(coord.address, coord.trainer_token, model)
        yield coord
    finally:
        await coord.stop()


def start_worker(cfg: WorkerConfig) -> tuple[Worker, asyncio.Future[int]]:
    """A Worker on ``cfg``, its ``run()`` started (no signal handlers: pytest's own stay)."""
    worker = Worker(cfg)
    return worker, asyncio.ensure_future(worker.run(install_signals=False))


async def until(
    check: Callable[[], bool],
    running: asyncio.Future[int] | asyncio.subprocess.Process,
    poll_s: float = 0.05,
) -> None:
    """Wait until ``check()`` holds; fails at once if ``running`` (a worker's ``run()`` or
    its process) ended first, instead of waiting for ever."""
    while not check():
        if isinstance(running, asyncio.Future):
            assert not running.done()
        else:
            assert running.returncode is None
        await asyncio.sleep(poll_s)


async def start_holding_worker(
    coord: RunningCoordinator, work: Path, **kw: Any
) -> tuple[Worker, asyncio.Future[int]]:
    """A worker that plays but keeps its games (a batch of 1000, an upload interval of
    1000 s), running and registered; and its ``run()``."""
    cfg = worker_config(
        coord.address,
        coord.worker_token,
        work,
        games_per_batch=1000,
        upload_interval_s=1000.0,
        **kw,
    )
    worker, run = start_worker(cfg)
    await until(lambda: bool(worker.source.worker_id), run, 0.02)
    return worker, run


async def spawn_worker(
    coord: RunningCoordinator, work: Path, *extra: str
) -> asyncio.subprocess.Process:
    """``python -m kgrpc.worker`` on ``coord`` with ``work`` as its work dir (``extra``: more
    flags); stderr piped, for the log."""
    env = {**os.environ, "KGRPC_TOKEN": coord.worker_token, "GRPC_VERBOSITY": "ERROR"}
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "kgrpc.worker",
        "--coordinator",
        coord.address,
        "--work-dir",
        str(work),
        "--parallel-games",
        "3",
        "--quiet",
        "--seed",
        "5",
        *extra,
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
