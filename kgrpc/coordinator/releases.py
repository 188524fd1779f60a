"""Model releases as a stream: each WatchModels call follows the releases from its start.

A release is sent once per change: a new best model, or a file of another precision added to
the current best (``ModelInfo.files`` grew). A client that already took the release by name
sees the same name again with more files and may fetch the file it prefers.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

from kgrpc.v1 import common_pb2

log = logging.getLogger("kgrpc.coordinator")


def _key(info: common_pb2.ModelInfo) -> tuple[str, tuple[int, ...]]:
    return info.name, tuple(sorted(f.precision for f in info.files))


class Releases:
    def __init__(self) -> None:
        self._watchers: set[asyncio.Queue[common_pb2.ModelInfo]] = set()

    def announce(self, info: common_pb2.ModelInfo) -> None:
        """Tell every watcher that ``info`` is the new best model (or the best model with a
        new file)."""
        log.info(
            "released model %s (elo %.1f, %d file%s)",
            info.name,
            info.elo,
            len(info.files),
            "" if len(info.files) == 1 else "s",
        )
        for q in list(self._watchers):
            q.put_nowait(info)

    async def watch(
        self, known_model: str, best: Callable[[], Awaitable[common_pb2.ModelInfo | None]]
    ) -> AsyncIterator[common_pb2.ModelInfo]:
        """The current best model (``best()``) unless it is ``known_model``, then each
        release as it happens, never the same (name, files) twice in a row; runs until
        cancelled."""
        queue: asyncio.Queue[common_pb2.ModelInfo] = asyncio.Queue()
        self._watchers.add(queue)
        try:
            current = await best()
            last: tuple[str, tuple[int, ...]] = (known_model, ())
            if current is not None and current.name != known_model:
                last = _key(current)
                yield current
            elif current is not None:
                last = _key(current)  # the client has it; only news from here on
            while True:
                info = await queue.get()
                if _key(info) != last:
                    last = _key(info)
                    yield info
        finally:
            self._watchers.discard(queue)
