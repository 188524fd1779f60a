"""The pool that replays uploaded games (:mod:`kgrpc.coordinator.validate`), shared fairly.

Processes with the spawn start method (never fork after gRPC objects exist), or one thread
in the server process when ``validate_workers`` is -1 (tests). A pool whose process died
(killed for memory, crashed) is broken for good: it is replaced and the games are tried
once more; then the call fails with UNAVAILABLE.

Fairness: a message's games are cut into jobs of at most :data:`JOB_MOVES` moves (one game at
least), queued per caller, and the pool holds :data:`JOBS_PER_PROCESS` hand-offs per process at
a time, taking the next job round robin over the tokens that have jobs waiting and, within a
token, over its upload streams (:class:`FairQueue`). However much one caller sends, another
caller's game waits for at most a few jobs of each caller ahead of it, not for the whole
backlog.

Hand-offs are batched: one hand-off to a process carries the jobs waiting, taken in that
same round-robin order, up to :data:`JOB_MOVES` moves (:meth:`FairQueue.take_batch`). A
hand-off costs a few turns of the event loop whatever it carries (the submit, the result's
way back, the next dispatch), and only so many are in flight, so one game per hand-off made
the pool's throughput that of the event loop's turns: with a fleet's thousands of one-game
uploads keeping the loop busy it fell near the upload rate, and a cut or window rebuild
taking one process for a moment left a backlog of over a second (docs/performance.md,
issue 26). As the group commit does for fsyncs, the games per hand-off now grow with the
backlog.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import multiprocessing
import os
from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass

import grpc

from kgrpc.coordinator import validate
from kgrpc.coordinator.errors import CoordinatorError
from kgrpc.coordinator.store import GameOutcome

log = logging.getLogger("kgrpc.coordinator")

# Moves replayed in one job (a few tenths of a second of one process in Python, a few
# milliseconds with the native core): the most another caller's game waits behind each caller
# that is ahead of it.
JOB_MOVES = 1000
# Jobs handed to each process at once: one it runs and one waiting in its queue, so that a
# process does not sit idle while a finished job's rows travel back and the event loop sends
# the next one (two per process gave 1.10x games/s in kgrpc-bench ingest, docs/performance.md).
JOBS_PER_PROCESS = 2


def split_jobs(moves: list[int], job_moves: int) -> list[list[int]]:
    """Indices of consecutive games grouped into jobs of at most ``job_moves`` moves (a
    longer game is a job of its own)."""
    jobs: list[list[int]] = []
    total = 0
    for i, m in enumerate(moves):
        if not jobs or total + m > job_moves:
            jobs.append([])
            total = 0
        jobs[-1].append(i)
        total += m
    return jobs


@dataclass
class _Job:
    items: list[validate.Item]
    moves: int  # of its games, counted on the wire
    future: asyncio.Future[list[GameOutcome]]


class FairQueue:
    """Jobs taken round robin over owners (tokens), and over the streams of one owner."""

    def __init__(self) -> None:
        # Insertion order is the turn order: a key served goes to the back.
        self._owners: dict[Hashable, dict[Hashable, deque[_Job]]] = {}

    def put(self, owner: Hashable, stream: Hashable, job: _Job) -> None:
        self._owners.setdefault(owner, {}).setdefault(stream, deque()).append(job)

    def take(self) -> _Job | None:
        """The next job whose caller still waits for it, or None."""
        while self._owners:
            owner, streams = next(iter(self._owners.items()))
            del self._owners[owner]
            stream, jobs = next(iter(streams.items()))
            del streams[stream]
            job = jobs.popleft()
            if jobs:
                streams[stream] = jobs
            if streams:
                self._owners[owner] = streams
            if not job.future.done():  # done: cancelled, its caller left
                return job
        return None

    def _front(self) -> _Job | None:
        """The job :meth:`take` would return next, left in place (jobs whose caller left are
        dropped on the way)."""
        while self._owners:
            owner, streams = next(iter(self._owners.items()))
            stream, jobs = next(iter(streams.items()))
            if not jobs[0].future.done():
                return jobs[0]
            jobs.popleft()
            if not jobs:
                del streams[stream]
            if not streams:
                del self._owners[owner]
        return None

    def take_batch(self, max_moves: int) -> list[_Job]:
        """The jobs of one hand-off, in :meth:`take` order: the next job, then the next ones
        while the moves of them all stay within ``max_moves``; [] when none waits."""
        batch: list[_Job] = []
        moves = 0
        while (job := self._front()) is not None:
            if batch and moves + job.moves > max_moves:
                break
            batch.append(job)
            moves += job.moves
            self.take()  # job itself: the front is taken next
        return batch

    def __len__(self) -> int:
        return sum(len(q) for s in self._owners.values() for q in s.values())


class ValidationPool:
    def __init__(self, workers: int, settings: validate.ValidationSettings) -> None:
        """``workers`` processes (-1: one thread in this process)."""
        self.workers = workers
        self.settings = settings
        self.pool = self._make_pool()
        self.slots = JOBS_PER_PROCESS * max(1, workers)  # jobs handed to the pool at once
        self.queue = FairQueue()
        self._running = 0
        self.handoffs = 0  # calls into the pool's processes (games / hand-offs: the batching)
        self._tasks: set[asyncio.Future[None]] = set()
        self._stopped = False

    def _make_pool(self) -> concurrent.futures.Executor:
        if self.workers < 0:
            return concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="kgrpc-validate")
        return concurrent.futures.ProcessPoolExecutor(
            self.workers,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=validate.watch_parent,
            initargs=(os.getpid(),),
        )

    async def warm_up(self) -> None:
        """Start every process and import the replay's modules in it."""
        if self.workers >= 0:
            loop = asyncio.get_running_loop()
            await asyncio.gather(
                *(loop.run_in_executor(self.pool, validate.warm_up) for _ in range(self.workers))
            )

    async def validate(
        self,
        games: list[validate.Item],
        moves: list[int],
        owner: Hashable = None,
        stream: Hashable = None,
    ) -> list[GameOutcome]:
        """The outcome of each (serialized game, worker id[, its task's terms]), in order
        (:data:`kgrpc.coordinator.validate.Item`); ``moves``: each game's
        move count, ``owner`` and ``stream``: whose games these are (fairness)."""
        if not games:
            return []
        loop = asyncio.get_running_loop()
        # Small messages spread over every process; large ones in jobs of JOB_MOVES.
        size = max(1, min(JOB_MOVES, -(-sum(moves) // max(1, self.workers))))
        jobs = [
            _Job([games[i] for i in idx], sum(moves[i] for i in idx), loop.create_future())
            for idx in split_jobs(moves, size)
        ]
        for job in jobs:
            self.queue.put(owner, stream, job)
        self._dispatch()
        try:
            results = await asyncio.gather(*(j.future for j in jobs))
        except BaseException:
            for j in jobs:
                j.future.cancel()
            raise
        return [o for res in results for o in res]

    def _dispatch(self) -> None:
        while self._running < self.slots:
            batch = self.queue.take_batch(JOB_MOVES)
            if not batch:
                return
            self._running += 1
            self.handoffs += 1
            task = asyncio.ensure_future(self._run_batch(batch))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _run_batch(self, batch: list[_Job]) -> None:
        """One hand-off: the games of ``batch``'s jobs in one call, each job's share of the
        outcomes (or the failure) handed to its caller."""
        try:
            result = await self._run([item for job in batch for item in job.items])
        except Exception as exc:  # noqa: BLE001 - handed to the callers waiting for the jobs
            for job in batch:
                if not job.future.done():
                    job.future.set_exception(exc)
        else:
            start = 0
            for job in batch:
                share = result[start : start + len(job.items)]
                start += len(job.items)
                if not job.future.done():
                    job.future.set_result(share)
        finally:
            self._running -= 1
            self._dispatch()

    async def _run(self, items: list[validate.Item]) -> list[GameOutcome]:
        loop = asyncio.get_running_loop()
        for attempt in range(2):
            pool = self.pool
            if self._stopped:
                break
            try:
                return await loop.run_in_executor(
                    pool, validate.validate_many, items, self.settings
                )
            except concurrent.futures.BrokenExecutor as exc:
                if self.pool is pool and not self._stopped:
                    log.error("validation pool broken (%s): starting a new one", exc)
                    self.pool = self._make_pool()
                    pool.shutdown(wait=False, cancel_futures=True)
                if attempt:
                    break
        raise CoordinatorError(
            grpc.StatusCode.UNAVAILABLE,
            "game validation failed (worker process died, or the coordinator is stopping); "
            "retry later",
        )

    def stop(self) -> None:
        self._stopped = True
        self.pool.shutdown(wait=True, cancel_futures=True)
