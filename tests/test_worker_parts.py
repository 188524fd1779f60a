"""The worker's parts on their own, each against a real coordinator on loopback (real gRPC, real
tiny ONNX models, real files): the game runner's contract (the seam a batched native game set
satisfies as well, each runner test runs against both), the match reporter across a coordinator
restart, the task source while
the coordinator is away, and the registry of the worker's tasks.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from inference.models import ModelRegistry
from inference.server import InferenceServer
from kgrpc import native
from kgrpc.coordinator.testing import match_game, start_coordinator
from kgrpc.go.rules import Rules
from kgrpc.mcts.config import SearchConfig, SelfPlayConfig
from kgrpc.mcts.selfplay import PlayedGame
from kgrpc.net import FatalError, Outage
from kgrpc.records.validate import validate_record
from kgrpc.v1 import common_pb2, coordinator_pb2
from kgrpc.worker.config import WorkerConfig
from kgrpc.worker.follower import ModelFollower
from kgrpc.worker.games import SERVICE_ERRORS
from kgrpc.worker.lifecycle import Stop, TaskRegistry
from kgrpc.worker.link import CoordinatorLink
from kgrpc.worker.matches import MatchReporter
from kgrpc.worker.models import ModelCache
from kgrpc.worker.runner import AsyncioGameRunner, NativeGameRunner
from kgrpc.worker.source import Job, TaskSource
from kgrpc.worker.status import WorkerCounters
from tests.worker_helpers import COORD, GATING, M1, M2, RUNNERS, worker_config
from trainer.publish import publish_model


@dataclass
class Parts:
    cfg: WorkerConfig
    stop: Stop
    tasks: TaskRegistry
    link: CoordinatorLink
    source: TaskSource
    follower: ModelFollower


@asynccontextmanager
async def worker_parts(cfg: WorkerConfig) -> AsyncIterator[Parts]:
    """The parts a Worker would build, wired the same way, without the Worker."""
    stop, tasks, rng = Stop(), TaskRegistry("test"), random.Random(1)
    link = CoordinatorLink(cfg, Outage(f"coordinator {cfg.coordinator}"), stop.event, rng)
    source = TaskSource(cfg, link, stop)
    follower = ModelFollower(
        cfg,
        link,
        source,
        ModelCache(cfg.model_path),
        inference_outage=Outage("inference"),
        stop=stop,
        tasks=tasks,
        counters=WorkerCounters(),
        rng=rng,
    )
    link.open()
    follower.open()
    try:
        yield Parts(cfg, stop, tasks, link, source, follower)
    finally:
        await tasks.cancel_all()
        await follower.close()
        await link.close()


class Recorder:
    """A job feed and game sink that hands out fixed jobs and keeps what comes back."""

    def __init__(self, jobs: list[Job], *, fatal: bool = False) -> None:
        self.jobs = list(jobs)
        self.fatal = fatal  # raise FatalError for the first failed game
        self.done: list[tuple[Job, PlayedGame]] = []
        self.failures: list[tuple[Job, BaseException]] = []
        self.playing = 0
        self.most_playing = 0

    async def next_job(self) -> Job | None:
        if not self.jobs:
            return None
        self.playing += 1
        self.most_playing = max(self.most_playing, self.playing)
        return self.jobs.pop(0)

    async def finished(self, job: Job, game: PlayedGame) -> None:
        self.playing -= 1
        self.done.append((job, game))

    def failed(self, job: Job, exc: BaseException) -> None:
        self.playing -= 1
        self.failures.append((job, exc))
        if self.fatal and isinstance(exc, Exception):
            raise FatalError("refused")


def selfplay_job(model: str, index: int = 0, visits: int = 8) -> Job:
    task = coordinator_pb2.Task(
        task_id=f"sp-{model}",
        rules=Rules.from_name("chinese").to_proto(),
        komi=7.5,
        board_size=5,
        visits=visits,
        max_moves=25,
        selfplay=coordinator_pb2.SelfPlayTask(model=model, games=4),
    )
    return Job(task, index, game_config(visits), "w-test")


def match_job(index: int) -> Job:
    task = coordinator_pb2.Task(
        task_id="match-1",
        rules=Rules.from_name("chinese").to_proto(),
        komi=7.5,
        board_size=5,
        visits=8,
        max_moves=25,
        match=coordinator_pb2.MatchTask(candidate_model=M2, reference_model=M1, games=2),
    )
    return Job(task, index, game_config(8), "w-test")


def game_config(visits: int) -> SelfPlayConfig:
    return SelfPlayConfig(
        search=SearchConfig(visits=visits, leaves_per_batch=4),
        cheap_visits=min(4, visits),
        max_moves_per_point=1.0,
        max_game_moves=25,
    )


@pytest.fixture(params=RUNNERS)
def runner_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def runner_for(parts: Parts, kind: str = "python") -> AsyncioGameRunner:
    cls = NativeGameRunner if kind == "native" else AsyncioGameRunner
    return cls(
        parts.follower,
        stats=parts.follower.counters.search,
        rng=random.Random(2),
        backoff=parts.link.policy.backoff,
        stop=parts.stop,
    )


async def test_runner_plays_every_job_with_at_most_slots_games_at_once(
    tmp_path: Path, worker_models: dict[str, Path], runner_kind: str
) -> None:
    coord = await start_coordinator(tmp_path, **COORD)
    try:
        for path in worker_models.values():
            await publish_model(coord.address, coord.trainer_token, path)
        cfg = worker_config(coord.address, coord.worker_token, tmp_path / "w")
        async with worker_parts(cfg) as parts:
            jobs = [selfplay_job(M1, i) for i in range(4)] + [match_job(0), match_job(1)]
            sink = Recorder(jobs)
            await asyncio.wait_for(runner_for(parts, runner_kind).run(sink, sink, 2), 120)
        assert sink.failures == [] and len(sink.done) == 6
        assert sink.most_playing == 2 and sink.playing == 0
        for job, game in sink.done:
            rec = game.record
            assert (rec.black_model, rec.white_model) == (job.models * 2)[:2]
            assert rec.task_id == job.task.task_id and rec.worker_id == "w-test"
            validate_record(rec, min_moves=1, max_moves=25)  # a legal, complete game
        matches = sorted(
            (job.index, game.record.black_model) for job, game in sink.done if job.is_match
        )
        assert matches == [(0, M2), (1, M1)]  # the candidate alternates colours
        assert parts.follower.counters.search.nn_evals > 0
        # Both models came from the coordinator into the cache, sha256-checked.
        for name, path in worker_models.items():
            assert (cfg.model_path / f"{name}.onnx").read_bytes() == path.read_bytes()
    finally:
        await coord.stop()


async def test_runner_hands_failed_games_to_the_sink_and_plays_on(
    tmp_path: Path, worker_models: dict[str, Path], runner_kind: str
) -> None:
    coord = await start_coordinator(tmp_path, **COORD)
    try:
        await publish_model(coord.address, coord.trainer_token, worker_models[M1])
        cfg = worker_config(coord.address, coord.worker_token, tmp_path / "w")
        async with worker_parts(cfg) as parts:
            sink = Recorder(
                [selfplay_job("kg-nobody-has-it"), selfplay_job(M1, 0), selfplay_job(M1, 1)]
            )
            await asyncio.wait_for(runner_for(parts, runner_kind).run(sink, sink, 1), 120)
        ((job, exc),) = sink.failures
        assert job.models == ("kg-nobody-has-it",)
        assert isinstance(exc, grpc.aio.AioRpcError) and exc.code() == grpc.StatusCode.NOT_FOUND
        assert [j.index for j, _ in sink.done] == [0, 1] and sink.playing == 0
    finally:
        await coord.stop()


async def test_a_fatal_error_from_the_sink_ends_the_run_and_cancels_the_other_games(
    tmp_path: Path, worker_models: dict[str, Path], runner_kind: str
) -> None:
    coord = await start_coordinator(tmp_path, **COORD)
    try:
        await publish_model(coord.address, coord.trainer_token, worker_models[M1])
        cfg = worker_config(coord.address, coord.worker_token, tmp_path / "w")
        async with worker_parts(cfg) as parts:
            long_game = selfplay_job(M1, 0, visits=400)  # still playing when the other fails
            sink = Recorder(
                [long_game, selfplay_job("kg-nobody-has-it"), selfplay_job(M1, 1)], fatal=True
            )
            with pytest.raises(FatalError):
                await asyncio.wait_for(runner_for(parts, runner_kind).run(sink, sink, 2), 120)
        kinds = [(job.models[0], type(exc)) for job, exc in sink.failures]
        assert kinds == [("kg-nobody-has-it", grpc.aio.AioRpcError), (M1, asyncio.CancelledError)]
        assert sink.done == [] and sink.playing == 0 and len(sink.jobs) == 1
    finally:
        await coord.stop()


async def test_games_hit_by_a_failed_evaluation_go_to_the_sink_as_failed(
    tmp_path: Path, worker_models: dict[str, Path], runner_kind: str
) -> None:
    registry = ModelRegistry(device="cpu", max_batch=16)
    await registry.load(str(worker_models[M1]), pinned=True)
    server = InferenceServer(registry)
    port = await server.start("127.0.0.1:0")
    coord = await start_coordinator(tmp_path, **COORD)
    try:
        cfg = worker_config(
            coord.address, coord.worker_token, tmp_path / "w", inference=f"127.0.0.1:{port}"
        )
        async with worker_parts(cfg) as parts:
            sink = Recorder([selfplay_job(M1, i, visits=400) for i in range(2)])
            runner = runner_for(parts, runner_kind)
            run = asyncio.ensure_future(runner.run(sink, sink, 2))
            search = parts.follower.counters.search
            while search.nn_evals < 50:  # both games under way
                assert not run.done()
                await asyncio.sleep(0.01)
            parts.stop.request()  # stopping: an inference error is no longer waited out
            await server.stop(0)
            await asyncio.wait_for(run, 60)
        assert sink.done == [] and sink.playing == 0
        if isinstance(runner, NativeGameRunner):
            assert runner._sets == {}  # the broken set is gone; a new game starts a new one
        assert sorted(job.index for job, _ in sink.failures) == [0, 1]
        for _, exc in sink.failures:
            assert isinstance(exc, SERVICE_ERRORS), repr(exc)
    finally:
        await server.stop(0)
        await coord.stop()


@pytest.mark.skipif(not native.ENABLED, reason=f"needs the native core: {native.describe()}")
async def test_native_runner_plays_each_model_in_its_own_set_with_a_fresh_cache(
    tmp_path: Path, worker_models: dict[str, Path]
) -> None:
    coord = await start_coordinator(tmp_path, **COORD)
    try:
        for path in worker_models.values():
            await publish_model(coord.address, coord.trainer_token, path)
        cfg = worker_config(coord.address, coord.worker_token, tmp_path / "w")
        async with worker_parts(cfg) as parts:
            runner = runner_for(parts, "native")
            assert isinstance(runner, NativeGameRunner)
            first = Recorder([selfplay_job(M1, i) for i in range(3)])
            await asyncio.wait_for(runner.run(first, first, 3), 120)
            m1_cache = runner.cache
            assert runner.cache_model == M1 and runner._sets == {}  # sets end with their games
            # Another model, and a task of the first model under other search settings.
            second = Recorder(
                [selfplay_job(M2, 0), selfplay_job(M2, 1), selfplay_job(M1, 3, visits=12)]
            )
            await asyncio.wait_for(runner.run(second, second, 3), 120)
        assert first.failures == [] and second.failures == []
        assert first.most_playing == 3 and second.playing == 0
        for job, game in first.done + second.done:
            rec = game.record
            assert (rec.black_model, rec.white_model) == (job.models[0],) * 2
            assert rec.task_id == job.task.task_id and rec.worker_id == "w-test"
            validate_record(rec, min_moves=1, max_moves=25)
        assert sorted(j.index for j, _ in first.done) == [0, 1, 2]
        # A new model got an empty cache (the first model's answers are never reused for it).
        assert runner.cache is not m1_cache and runner.cache_model in (M1, M2)
        assert len(m1_cache) > 0
    finally:
        await coord.stop()


async def _match_job(parts: Parts) -> Job:
    await parts.source.register()
    job = await asyncio.wait_for(parts.source.next_job(), 30)
    assert job is not None and job.is_match, job
    return job


@pytest.mark.slow
async def test_match_reports_stay_pending_across_a_coordinator_restart(
    tmp_path: Path, worker_models: dict[str, Path]
) -> None:
    coord = await start_coordinator(tmp_path, **GATING)
    address = coord.address
    cfg = worker_config(address, coord.worker_token, tmp_path / "w")
    try:
        await publish_model(address, coord.trainer_token, worker_models[M1])
        assert (
            await publish_model(address, coord.trainer_token, worker_models[M2])
        ).gating_scheduled
        async with worker_parts(cfg) as parts:
            job = await _match_job(parts)
            reporter = MatchReporter(parts.link, parts.tasks)
            await coord.stop()
            # With its record, as every match game (match_records_required).
            game = match_game(job.task, common_pb2.COLOR_BLACK, True, game_id="g-restart")
            reporter.submit(job, game)
            await asyncio.sleep(1.0)
            assert list(reporter.pending) == ["g-restart"] and parts.link.outage.down
            assert parts.tasks.names() == ["test:match-report:g-restart"]
            coord = await start_coordinator(tmp_path, listen=address, **GATING)  # same data
            assert await asyncio.wait_for(reporter.drain(lambda: False), 60)
            assert reporter.pending == {} and reporter.decisions == {job.task.task_id: "pending"}
            assert not parts.link.outage.down
            # A report the coordinator refuses (a task it never issued) is dropped, not retried.
            other = Job(
                coordinator_pb2.Task(task_id="never-issued", match=job.task.match),
                0,
                job.config,
                job.worker_id,
            )
            reporter.submit(other, coordinator_pb2.MatchGame(game_id="g-refused"))
            assert await asyncio.wait_for(reporter.drain(lambda: False), 30)
            assert "never-issued" not in reporter.decisions and len(parts.tasks) == 0
        async with coord.channel("worker") as ch:
            from kgrpc.v1 import coordinator_pb2_grpc

            stats = await coordinator_pb2_grpc.CoordinatorStub(ch).GetStats(
                coordinator_pb2.GetStatsRequest(), timeout=10
            )
        (match,) = [m for m in stats.matches if m.candidate_model == M2]
        assert (match.wins, match.losses, match.draws) == (1, 0, 0)
    finally:
        await coord.stop()


async def test_task_source_replays_the_last_selfplay_task_while_the_coordinator_is_away(
    tmp_path: Path, worker_models: dict[str, Path]
) -> None:
    coord = await start_coordinator(tmp_path, **COORD)  # self-play tasks of 4 games
    try:
        await publish_model(coord.address, coord.trainer_token, worker_models[M1])
        cfg = worker_config(coord.address, coord.worker_token, tmp_path / "w")
        async with worker_parts(cfg) as parts:
            source = parts.source
            await source.register()

            async def take(n: int) -> list[Job]:
                jobs = [await asyncio.wait_for(source.next_job(), 10) for _ in range(n)]
                assert None not in jobs
                return jobs  # type: ignore[return-value]

            first = await take(4)
            task_id = first[0].task.task_id
            assert [(j.task.task_id, j.index) for j in first] == [(task_id, i) for i in range(4)]
            await coord.stop()
            more = await take(3)
            assert [(j.task.task_id, j.index) for j in more] == [(task_id, i) for i in (4, 5, 6)]
            assert parts.link.outage.down
            # Without a task to replay it keeps asking; a stop request ends the wait.
            source.abandon(more[-1].task)
            waiting = asyncio.ensure_future(source.next_job())
            await asyncio.sleep(0.5)
            assert not waiting.done() and source.current_models() == ()
            parts.stop.request()
            assert await asyncio.wait_for(waiting, 5) is None
    finally:
        await coord.stop()


async def test_task_registry_cancels_exactly_what_it_started() -> None:
    registry = TaskRegistry("w")
    outsider = asyncio.ensure_future(asyncio.sleep(30))
    cancelled: list[str] = []

    async def forever(name: str) -> None:
        try:
            await asyncio.sleep(30)
        finally:
            cancelled.append(name)
            if name == "a":  # started while shutting down: cancelled as well
                registry.spawn("late", forever("late"))

    async def quick() -> None:
        return None

    registry.spawn("a", forever("a"))
    registry.spawn("b", forever("b"))
    done = registry.spawn("quick", quick())
    await done
    assert registry.names() == ["w:a", "w:b"] and len(registry) == 2
    await registry.cancel_all()
    assert sorted(cancelled) == ["a", "b", "late"] and len(registry) == 0
    assert not outsider.done()
    outsider.cancel()
