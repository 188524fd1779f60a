"""The game runner: plays the games the worker hands it and passes each one on as it ends.

This is the seam between the worker's plumbing (tasks, spool, uploads, match reports: asyncio
and gRPC) and the search that plays the games. :class:`AsyncioGameRunner` plays each game as
one asyncio task running the Python search (:mod:`kgrpc.mcts`). :class:`NativeGameRunner`
plays games on native game sets instead (:class:`~kgrpc.mcts.gameset.NativeSelfPlay`, and
:class:`~kgrpc.mcts.gameset.NativeMatch` for gating games: one C++ object holding many games,
one ``collect()``/evaluation/``apply()`` per batch for all of them). :func:`make_runner` picks
the native one when the native core is in use (:mod:`kgrpc.native`; ``KGRPC_NATIVE=0`` forces
Python).

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
import logging
import random
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

from kgrpc import native
from kgrpc.evaluator import Evaluator
from kgrpc.go.rules import Rules
from kgrpc.mcts.config import SelfPlayConfig
from kgrpc.mcts.gameset import MAX_ROWS, NativeMatch, NativeSelfPlay, new_cache
from kgrpc.mcts.search import SearchStats
from kgrpc.mcts.selfplay import GameSpec, PlayedGame, play_match_game, play_selfplay_game
from kgrpc.net import Backoff
from kgrpc.worker.lifecycle import Stop
from kgrpc.worker.source import Job

log = logging.getLogger(__name__)

# Positions the native runner's evaluation cache holds (about 1.5 KB each at 19x19).
EVAL_CACHE_POSITIONS = 100_000


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


def game_spec(job: Job, evaluators: Sequence[tuple[Evaluator, str]], komi: float) -> GameSpec:
    """The :class:`GameSpec` of ``job``'s games with ``komi``, played with ``evaluators``
    (``models.playing(job)``'s (evaluator, model argument) pairs: one in self-play, black's
    and white's in a match); the record names ``job.models``."""
    t = job.task
    arguments = [arg for _, arg in evaluators]
    return GameSpec(
        board_size=t.board_size,
        rules=Rules.from_proto(t.rules),
        komi=komi,
        config=job.config,
        model=arguments[0],
        model_name=job.models[0],
        white_model=arguments[1] if job.is_match else "",
        white_name=job.models[1] if job.is_match else "",
        task_id=t.task_id,
        worker_id=job.worker_id,
    )


class AsyncioGameRunner:
    """One asyncio task per slot, each playing one game at a time with the Python search;
    the slots' searches share the evaluators, so their requests batch together."""

    def __init__(
        self,
        models: GameModels,
        *,
        stats: SearchStats,
        rng: random.Random,
        backoff: Callable[[], Backoff],
        stop: Stop,
    ) -> None:
        self.models = models
        self.stats = stats
        self.rng = rng
        self.backoff = backoff
        self.stop = stop

    async def run(self, jobs: JobFeed, sink: GameSink, slots: int) -> None:
        tasks = [
            asyncio.get_running_loop().create_task(self._slot(jobs, sink), name=f"game-slot-{i}")
            for i in range(slots)
        ]
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
        seed = self.rng.getrandbits(62)
        async with self.models.playing(job) as evaluators:
            spec = game_spec(job, evaluators, job.game_komi)
            if not job.is_match:
                ((evaluator, _),) = evaluators
                return await play_selfplay_game(evaluator, spec, stats=self.stats, seed=seed)
            (black, _), (white, _) = evaluators
            return await play_match_game(black, white, spec, stats=self.stats, seed=seed)


# What games must share to play in one native game set: models (black's and white's in a match),
# board size, rules, search (each game has its own komi).
_SetKey = tuple[tuple[str, ...], int, bytes, SelfPlayConfig]


class _GameSet:
    """One :class:`NativeSelfPlay` and the games waiting on it. Its driver task steps the set
    while it has games; games join between steps (the C++ set is never touched while a step
    runs in a thread), and the set is dropped once its last game ended."""

    def __init__(self, play: NativeSelfPlay, on_empty: Callable[[], None]) -> None:
        self.play = play
        self.on_empty = on_empty
        self.joining: list[tuple[asyncio.Future[Any], float]] = []
        self.waiting: dict[int, asyncio.Future[Any]] = {}
        self.driver = asyncio.get_running_loop().create_task(self._drive(), name="game-set")

    def join(self, komi: float) -> asyncio.Future[Any]:
        """A game of ``komi`` joins; the future is its PlayedGame."""
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.joining.append((fut, komi))
        return fut

    async def _drive(self) -> None:
        try:
            while True:
                for fut, komi in self.joining:
                    if not fut.done():  # a game cancelled before it started is not started
                        (gid,) = self.play.add_games(1, komi)
                        self.waiting[gid] = fut
                self.joining.clear()
                if not any(not f.done() for f in self.waiting.values()):
                    return  # no await since the check: nobody joined in between
                for gid, game in await self.play.step_ids():
                    fut = self.waiting.pop(gid)
                    if not fut.done():
                        fut.set_result(game)
        except BaseException as exc:
            # The set is broken mid-step (an evaluation failed): its games all end with the
            # error, each judged by the sink like a failed game of the Python runner.
            for fut in [*self.waiting.values(), *(f for f, _ in self.joining)]:
                if fut.done():
                    continue
                if isinstance(exc, Exception):
                    fut.set_exception(exc)
                else:
                    fut.cancel()
            if not isinstance(exc, Exception):
                raise
        finally:
            self.on_empty()


class NativeGameRunner(AsyncioGameRunner):
    """Self-play and match games on native game sets.

    The slots are those of :class:`AsyncioGameRunner` (same job feed, sink, failure waits), but
    a game joins the game set of its models, board size and rules and search settings (with
    its own komi: a task's komi range does not split the sets), whose driver evaluates all its
    games' leaves in one request per step (a match set: one per model); a slot waits for its
    game to come out of the set. The self-play sets share one bounded evaluation cache
    (``cache_positions``; 0 turns it off; match sets use none), replaced by an empty one when
    a game of another model starts a set (a set still playing the old model keeps the old
    cache until it ends, so no game ever reads another model's answers).
    """

    def __init__(
        self,
        models: GameModels,
        *,
        stats: SearchStats,
        rng: random.Random,
        backoff: Callable[[], Backoff],
        stop: Stop,
        cache_positions: int = EVAL_CACHE_POSITIONS,
        max_rows: int = MAX_ROWS,
    ) -> None:
        if not native.ENABLED:
            raise RuntimeError(f"no native core: {native.describe()}")
        super().__init__(models, stats=stats, rng=rng, backoff=backoff, stop=stop)
        self.cache_positions = cache_positions
        self.max_rows = max_rows
        self.cache: Any = None
        self.cache_model: str | None = None
        self._sets: dict[_SetKey, _GameSet] = {}

    async def run(self, jobs: JobFeed, sink: GameSink, slots: int) -> None:
        try:
            await super().run(jobs, sink, slots)
        finally:
            drivers = [s.driver for s in self._sets.values()]
            for d in drivers:
                d.cancel()
            await asyncio.gather(*drivers, return_exceptions=True)

    async def play(self, job: Job) -> PlayedGame:
        t = job.task
        async with self.models.playing(job) as evaluators:
            game: PlayedGame = await self._game_set(job, evaluators).join(job.game_komi)
        # A set plays the games of several tasks: each record names its own.
        game.record.task_id = t.task_id
        game.record.worker_id = job.worker_id
        return game

    def _game_set(self, job: Job, evaluators: Sequence[tuple[Evaluator, str]]) -> _GameSet:
        t = job.task
        key = (
            tuple(job.models),
            t.board_size,
            t.rules.SerializeToString(deterministic=True),
            job.config,
        )
        found = self._sets.get(key)
        if found is not None:
            return found
        rows = max(self.max_rows, job.config.search.leaves_per_batch)
        # The set's komi is the task's; each game joins with its own (join(job.game_komi)).
        spec = game_spec(job, evaluators, t.komi)
        play: NativeSelfPlay
        if job.is_match:
            (black, _), (white, _) = evaluators
            play = NativeMatch(
                black,
                white,
                spec,
                stats=self.stats,
                seed=self.rng.getrandbits(62),
                max_rows=rows,
            )
        else:
            ((evaluator, _),) = evaluators
            play = self._selfplay(spec, evaluator, rows)
        made = _GameSet(play, lambda: self._forget(key, made))
        self._sets[key] = made
        return made

    def _selfplay(self, spec: GameSpec, evaluator: Evaluator, rows: int) -> NativeSelfPlay:
        name = spec.model_name
        if name != self.cache_model and self.cache_positions > 0:
            self.cache = new_cache(self.cache_positions)
            self.cache_model = name
        return NativeSelfPlay(
            evaluator,
            spec,
            stats=self.stats,
            cache=self.cache if name == self.cache_model else None,
            seed=self.rng.getrandbits(62),
            max_rows=rows,
        )

    def _forget(self, key: _SetKey, game_set: _GameSet) -> None:
        if self._sets.get(key) is game_set:
            del self._sets[key]


def make_runner(
    models: GameModels,
    *,
    stats: SearchStats,
    rng: random.Random,
    backoff: Callable[[], Backoff],
    stop: Stop,
) -> AsyncioGameRunner:
    """The native runner when the native core is in use, else the Python one."""
    if native.ENABLED:
        log.info("self-play and match games play on native game sets")
        return NativeGameRunner(models, stats=stats, rng=rng, backoff=backoff, stop=stop)
    log.info("games play on the Python search (%s)", native.describe())
    return AsyncioGameRunner(models, stats=stats, rng=rng, backoff=backoff, stop=stop)
