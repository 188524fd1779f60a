"""The worker's lifetime: the stop request every part watches, and the registry of the asyncio
tasks the worker started, so that shutting down cancels exactly those and nothing else."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine
from typing import Any


class Stop:
    """A stop request: an event the parts watch, a sleep it ends early, and the time limit on
    the last uploads and match reports when the coordinator is away.

    ``bounded=False`` (a run for a fixed number of games) waits for the coordinator for ever:
    its games count only once acknowledged.
    """

    def __init__(self, final_wait_s: float = 30.0, *, bounded: bool = True) -> None:
        self.event = asyncio.Event()
        self.final_wait_s = final_wait_s
        self.bounded = bounded
        self._give_up_at: float | None = None

    def request(self) -> None:
        self.event.set()

    def is_set(self) -> bool:
        return self.event.is_set()

    async def sleep(self, seconds: float) -> bool:
        """Sleep unless a stop is requested first; True when stopping."""
        try:
            await asyncio.wait_for(self.event.wait(), seconds)
        except TimeoutError:
            return False
        return True

    def final_wait_over(self) -> bool:
        """Stopped with the coordinator away: True once the last uploads and reports have been
        tried for ``final_wait_s`` since the first look (what is left waits for the next
        start). False while no stop is requested."""
        if not self.event.is_set() or not self.bounded:
            return False
        if self._give_up_at is None:
            self._give_up_at = time.monotonic() + self.final_wait_s
        return time.monotonic() > self._give_up_at


class TaskRegistry:
    """The named asyncio tasks one owner started and that still run.

    ``spawn`` names each task ``<owner>:<name>`` and forgets it once done; ``cancel_all``
    cancels and awaits exactly the tasks started here (also those started while it waits),
    never anything else running on the loop.
    """

    def __init__(self, owner: str = "worker") -> None:
        self.owner = owner
        self._tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, name: str, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro, name=f"{self.owner}:{name}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def names(self) -> list[str]:
        """Names of the tasks still running, sorted."""
        return sorted(t.get_name() for t in self._tasks)

    def __len__(self) -> int:
        return len(self._tasks)

    async def cancel_all(self) -> None:
        while self._tasks:
            tasks = list(self._tasks)
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self._tasks.difference_update(tasks)
