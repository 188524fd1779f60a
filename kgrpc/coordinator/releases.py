"""Model releases as a stream: each WatchModels call follows the releases from its start."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

from kgrpc.v1 import common_pb2

log = logging.getLogger("kgrpc.coordinator")


class Releases:
    def __init__(self) -> None:
        self._watchers: set[asyncio.Queue[common_pb2.ModelInfo]] = set()

    def announce(self, info: common_pb2.ModelInfo) -> None:
        """Tell every watcher that ``info`` is the new best model."""
        log.info("released model %s (elo %.1f)", info.name, info.elo)
        for q in list(self._watchers):
            q.put_nowait(info)

    async def watch(
        self, known_model: str, best: Callable[[], Awaitable[common_pb2.ModelInfo | None]]
    ) -> AsyncIterator[common_pb2.ModelInfo]:
        """The current best model (``best()``) unless it is ``known_model``, then each
        release as it happens, never the same name twice in a row; runs until cancelled."""
        queue: asyncio.Queue[common_pb2.ModelInfo] = asyncio.Queue()
        self._watchers.add(queue)
        try:
            current = await best()
            last = known_model
            if current is not None and current.name != last:
                last = current.name
                yield current
            while True:
                info = await queue.get()
                if info.name != last:
                    last = info.name
                    yield info
        finally:
            self._watchers.discard(queue)
