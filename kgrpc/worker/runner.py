"""The game runner: plays the games the worker hands it and passes each one on as it ends.

This is the seam between the worker's plumbing (tasks, spool, uploads, match reports: asyncio
and gRPC) and the search that plays the games. :class:`AsyncioGameRunner` plays each game as
one asyncio task running the Python search (:mod:`kgrpc.mcts`); a batched native game set (one
C++ object holding many games, Python calling ``collect()``/``apply()`` once per batch) is to
replace it behind the same interface.

The interface, :class:`GameRunner`, is one coroutine::

    async def run(self, jobs: JobFeed, sink: GameSink, slots: int) -> None

* keep up to ``slots`` games in progress, each started from ``job = await jobs.next_job()``
  (a :class:`~kgrpc.worker.source.Job`: the task, the game's number in it, the search config,
  the worker id); ``None`` means start no more: return once the games in progress have ended;
* hand each finished game to ``await sink.finished(job, game)`` (a
  :class:`~kgrpc.mcts.selfplay.PlayedGame`: the ``GameRecord`` and resignation bookkeeping);
* report each game that ends without a result to ``sink.failed(job, exc)``, with
  ``CancelledError`` too when the run is cancelled, and wait before starting another game in
  that slot (growing waits while games keep failing, reset by a finished game). A
  :class:`~kgrpc.net.FatalError` that ``failed`` raises ends the run: the other games are
  cancelled and ``run`` raises it.

A runner gets the evaluators of a game from ``models.playing(job)`` (:class:`GameModels`),
which prepares the job's models (download, load) and holds them while the game plays; what it
yields are evaluators that wait out inference outages. Everything else (which task comes next,
limits, spooling, uploads, match reports, counters) stays outside the runner.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Protocol

from kgrpc.evaluator import Evaluator
from kgrpc.go.rules import Rules
from kgrpc.mcts.search import SearchStats
from kgrpc.mcts.selfplay import PlayedGame, play_match_game, play_selfplay_game
from kgrpc.net import Backoff
from kgrpc.worker.lifecycle import Stop
from kgrpc.worker.source import Job


class JobFeed(Protocol):
    async def next_job(self) -> Job | None:
        """The next game to start; None once no more may start (stop requested, limit)."""
        ...


class GameSink(Protocol):
    async def finished(self, job: Job, game: PlayedGame) -> None:
        """A game ended with a result."""
        ...

    def failed(self, job: Job, exc: BaseException) -> None:
        """A game ended without one (``exc`` says why); may raise ``FatalError``."""
        ...


class GameModels(Protocol):
    def playing(self, job: Job) -> AbstractAsyncContextManager[Sequence[tuple[Evaluator, str]]]:
        """``(evaluator, model argument)`` per name in ``job.models``, held while playing."""
        ...


class GameRunner(Protocol):
    async def run(self, jobs: JobFeed, sink: GameSink, slots: int) -> None:
        """Play games from ``jobs`` in up to ``slots`` at once until it runs dry (see the
        module docstring for the whole contract)."""
        ...


class AsyncioGameRunner:
    """One asyncio task per slot, each playing one game at a time with the Python search;
    the slots' searches share the evaluators, so their requests batch together."""

    def __init__(self, models: GameModels, *, stats: SearchStats, rng: random.Random,
                 backoff: Callable[[], Backoff], stop: Stop) -> None:
        self.models = models
        self.stats = stats
        self.rng = rng
        self.backoff = backoff
        self.stop = stop

    async def run(self, jobs: JobFeed, sink: GameSink, slots: int) -> None:
        tasks = [asyncio.get_running_loop().create_task(self._slot(jobs, sink),
                                                        name=f"game-slot-{i}")
                 for i in range(slots)]
        try:
            pending = set(tasks)
            while pending:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_EXCEPTION)
                for t in done:
                    t.result()  # a fatal error ends the run
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _slot(self, jobs: JobFeed, sink: GameSink) -> None:
        backoff = self.backoff()
        while (job := await jobs.next_job()) is not None:
            try:
                game = await self.play(job)
                await sink.finished(job, game)
            except Exception as exc:
                # A bug or an outage hit by one game must not stop a worker that runs
                # unattended for days: the sink judges it, and this slot slows down.
                sink.failed(job, exc)
                await self.stop.sleep(backoff.next_delay())
                continue
            except BaseException as exc:
                sink.failed(job, exc)
                raise
            backoff.reset()

    async def play(self, job: Job) -> PlayedGame:
        """Play one game of ``job`` with the Python search."""
        t = job.task
        rules = Rules.from_proto(t.rules)
        seed = self.rng.getrandbits(62)
        async with self.models.playing(job) as evaluators:
            if not job.is_match:
                ((ev, arg),) = evaluators
                return await play_selfplay_game(
                    ev, t.board_size, rules, t.komi, job.config, model=arg,
                    model_name=job.models[0], task_id=t.task_id, worker_id=job.worker_id,
                    stats=self.stats, seed=seed)
            (bev, barg), (wev, warg) = evaluators
            black, white = job.models
            return await play_match_game(
                bev, wev, t.board_size, rules, t.komi, job.config, black_model=barg,
                white_model=warg, black_name=black, white_name=white, task_id=t.task_id,
                worker_id=job.worker_id, stats=self.stats, seed=seed)
