"""The pool that replays uploaded games (:mod:`kgrpc.coordinator.validate`).

Processes with the spawn start method (never fork after gRPC objects exist), or one thread
in the server process when ``validate_workers`` is -1 (tests). A pool whose process died
(killed for memory, crashed) is broken for good: it is replaced and the games are tried
once more; then the call fails with UNAVAILABLE.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import multiprocessing

import grpc

from kgrpc.coordinator import validate
from kgrpc.coordinator.errors import CoordinatorError
from kgrpc.coordinator.store import GameOutcome

log = logging.getLogger("kgrpc.coordinator")


def split_evenly(items: list[int], parts: int) -> list[list[int]]:
    """``items`` dealt round-robin into at most ``parts`` non-empty groups."""
    parts = max(1, min(parts, len(items)))
    return [items[i::parts] for i in range(parts)]


class ValidationPool:
    def __init__(self, workers: int, settings: validate.ValidationSettings) -> None:
        """``workers`` processes (-1: one thread in this process)."""
        self.workers = workers
        self.settings = settings
        self.pool = self._make_pool()
        self._stopped = False

    def _make_pool(self) -> concurrent.futures.Executor:
        if self.workers < 0:
            return concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="kgrpc-validate")
        return concurrent.futures.ProcessPoolExecutor(
            self.workers, mp_context=multiprocessing.get_context("spawn")
        )

    async def warm_up(self) -> None:
        """Start every process and import the replay's modules in it."""
        if self.workers >= 0:
            loop = asyncio.get_running_loop()
            await asyncio.gather(*(loop.run_in_executor(self.pool, validate.warm_up)
                                   for _ in range(self.workers)))

    async def validate(self, games: list[tuple[bytes, str]]) -> list[GameOutcome]:
        """The outcome of each (serialized game, worker id), in order, validated in about
        twice as many groups as there are processes."""
        if not games:
            return []
        groups = split_evenly(list(range(len(games))), max(1, 2 * max(1, self.workers)))
        results = await self._run([[games[i] for i in g] for g in groups])
        outcomes: list[GameOutcome | None] = [None] * len(games)
        for g, res in zip(groups, results, strict=True):
            for i, o in zip(g, res, strict=True):
                outcomes[i] = o
        return [o for o in outcomes if o is not None]

    async def _run(self, groups: list[list[tuple[bytes, str]]]) -> list[list[GameOutcome]]:
        loop = asyncio.get_running_loop()
        for attempt in range(2):
            pool = self.pool
            try:
                return list(await asyncio.gather(
                    *(loop.run_in_executor(pool, validate.validate_many, g, self.settings)
                      for g in groups)
                ))
            except concurrent.futures.BrokenExecutor as exc:
                if self.pool is pool and not self._stopped:
                    log.error("validation pool broken (%s): starting a new one", exc)
                    self.pool = self._make_pool()
                    pool.shutdown(wait=False, cancel_futures=True)
                if attempt or self._stopped:
                    raise CoordinatorError(
                        grpc.StatusCode.UNAVAILABLE,
                        "game validation failed (worker process died); retry later",
                    ) from None
        raise AssertionError("unreachable")

    def stop(self) -> None:
        self._stopped = True
        self.pool.shutdown(wait=True, cancel_futures=True)
