"""The coordinator's file work: a shard cut's file and the rebuilds of the rolling window
``latest_games.npz`` (:mod:`kgrpc.coordinator.cut`), in one process of their own that runs
at a lower CPU priority (or, with ``validate_workers`` -1, tests, on one thread).

Neither is on the way of an acknowledgement: an upload is acknowledged once its games are in
the journal and the index, and a cut takes them from there later. So they must take nothing
an acknowledgement waits for. In the validation pool they did: a cut (half a second at 19x19)
or a window rebuild (250,000 rows read and written, a second or more) held one of its
processes, and both at once held the whole pool of a 2-core machine, so uploads waited for
them (a fleet's UploadGames p99 over a second: docs/performance.md, issue 26). Here they wait
for the CPU instead, behind the replays and the event loop (``nice`` :data:`NICE`), and one
file job runs at a time (cuts are one at a time already; a window rebuild queues behind a
cut, or a cut behind it). The journal they read is safe to read from another process
(:mod:`kgrpc.coordinator.cut`).

A process that died (killed for memory) is replaced for the next job; the job that failed
with it fails, and is retried as a failed cut or rebuild is (its games stay in the journal).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import multiprocessing
import os
from collections.abc import Callable
from typing import Any, TypeVar

from kgrpc.coordinator import validate
from kgrpc.coordinator.errors import unavailable

T = TypeVar("T")
log = logging.getLogger("kgrpc.coordinator")

# How much lower the file work's CPU priority is than the coordinator's (os.nice): under a
# full CPU it gets a small share until the replays and the event loop are served; on an idle
# one it runs at full speed.
NICE = 10


def start_process(parent_pid: int) -> None:
    """The file work process's initializer: end with the coordinator, and run below it."""
    validate.watch_parent(parent_pid)
    with contextlib.suppress(OSError):  # a platform without nice: the same priority
        os.nice(NICE)


class FileWork:
    """Runs file work jobs one at a time, off the event loop, the storage thread and the
    validation pool (this module's docstring). ``in_thread``: on a thread of this process
    instead (``validate_workers`` -1)."""

    def __init__(self, in_thread: bool = False) -> None:
        self.in_thread = in_thread
        self._pool = self._make()
        self._stopped = False

    def _make(self) -> concurrent.futures.Executor:
        if self.in_thread:
            return concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="kgrpc-filework")
        return concurrent.futures.ProcessPoolExecutor(
            1,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=start_process,
            initargs=(os.getpid(),),
        )

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in the file work process. A dead process raises (its caller retries
        later, by then on a new one); UNAVAILABLE once stopping."""
        if self._stopped:
            raise unavailable("the coordinator is stopping")
        pool = self._pool
        try:
            return await asyncio.get_running_loop().run_in_executor(pool, fn, *args)
        except concurrent.futures.BrokenExecutor as exc:
            if self._pool is pool and not self._stopped:
                log.error("file work process broken (%s): starting a new one", exc)
                self._pool = self._make()
                pool.shutdown(wait=False, cancel_futures=True)
            raise

    def stop(self) -> None:
        self._stopped = True
        self._pool.shutdown(wait=True, cancel_futures=True)
