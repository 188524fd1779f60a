"""The worker's lifetime: the stop request every part watches, pausing, and the registry of
the asyncio tasks the worker started, so that shutting down cancels exactly those and nothing
else."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

# WORK_DIR/worker.pid: the running worker's process id, for `kgrpc-worker pause|resume`.
PID_FILE = "worker.pid"


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


class Pause:
    """The volunteer's pause (``kgrpc-worker pause``, SIGUSR1) and resume (``kgrpc-worker
    resume``, SIGUSR2): while paused no game starts and every search waits at its next net
    evaluation, so the games in progress keep their moves and go on at resume (none is lost,
    and the machine's GPU or CPU is free within one evaluation). Uploads, heartbeats and model
    downloads go on. A stop request ends the wait: the games in progress then finish as any
    stop finishes them."""

    def __init__(self, stop: Stop) -> None:
        self.stop = stop
        self._resumed = asyncio.Event()
        self._resumed.set()

    @property
    def paused(self) -> bool:
        return not self._resumed.is_set()

    def pause(self) -> None:
        self._resumed.clear()

    def resume(self) -> None:
        self._resumed.set()

    async def wait(self) -> None:
        """Return at once unless paused; else once resumed or a stop is requested."""
        while self.paused and not self.stop.is_set():
            resumed = asyncio.ensure_future(self._resumed.wait())
            stopping = asyncio.ensure_future(self.stop.event.wait())
            try:
                await asyncio.wait({resumed, stopping}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                resumed.cancel()
                stopping.cancel()


def write_pid_file(work_dir: str | os.PathLike[str]) -> None:
    path = Path(work_dir) / PID_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{os.getpid()}\n")


def remove_pid_file(work_dir: str | os.PathLike[str]) -> None:
    """Remove the pid file if it is still this process's (another worker may have taken the
    work dir over since)."""
    path = Path(work_dir) / PID_FILE
    try:
        if path.read_text().strip() == str(os.getpid()):
            path.unlink()
    except (OSError, ValueError):
        pass


def signal_worker(work_dir: str | os.PathLike[str], sig: signal.Signals) -> int:
    """Send ``sig`` to the worker running in ``work_dir``; its process id. OSError with a
    message saying what is wrong (no worker there, or it is gone)."""
    path = Path(work_dir) / PID_FILE
    try:
        pid = int(path.read_text().strip())
    except FileNotFoundError:
        raise OSError(f"no worker is running in {work_dir} (no {path})") from None
    except ValueError:
        raise OSError(f"{path} does not hold a process id") from None
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        raise OSError(f"the worker of {path} (pid {pid}) is not running any more") from None
    return pid


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
