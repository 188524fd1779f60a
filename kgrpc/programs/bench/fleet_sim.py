"""The simulated volunteers of ``kgrpc-bench fleet``: one asyncio task each, over a few
shared channels, doing what a worker does on the wire without playing.

A volunteer registers, opens a WatchModels stream (its latency: until the first release
arrives) and keeps it open, heartbeats every ``heartbeat_interval_s`` the coordinator gives
(in the Register reply, then in each Heartbeat reply: it grows with the fleet),
asks for a task and uploads one game at a time at its rate (the first at a random point of
its period, so the fleet's load is even), asking for the next task when a task's games are
played. Games are random legal games (kgrpc.randgame) made once per kind of task (board
size, rules, komi, move cap, model) and sent again with a fresh game id, the task's id and
the volunteer's worker id: the coordinator replays and validates every one as it would a
real game. Latencies are kept per RPC; an error is an RPC that failed (by status code) or a
game that was not accepted.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field

import grpc

from kgrpc.go.rules import Rules
from kgrpc.v1 import coordinator_pb2, records_pb2

RPCS = ("Register", "Heartbeat", "GetTask", "WatchModels", "UploadGames")
RPC_TIMEOUT_S = 60.0  # a call slower than this is an error (DEADLINE_EXCEEDED), not a figure
GAMES_PER_KIND = 8  # distinct game bodies per kind of task, sent again under fresh ids


@dataclass
class Recorder:
    """Latencies (ms) per RPC, errors per (RPC, status code), games' outcomes."""

    latencies: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    # The same, of the calls started once every volunteer had been started (the steady load).
    steady: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    steady_from: float = 0.0  # time.perf_counter() of the end of the ramp
    ramp_s: float = 0.0
    first_error: dict[tuple[str, str], str] = field(default_factory=dict)
    errors: Counter[tuple[str, str]] = field(default_factory=Counter)
    accepted: int = 0
    not_accepted: Counter[str] = field(default_factory=Counter)  # reason -> games
    registered: int = 0
    waits: int = 0  # GetTask answered "no model released yet, retry"
    # The heartbeat intervals the coordinator gave (Register, Heartbeat), shortest and longest.
    interval_min_s: int = 0
    interval_max_s: int = 0

    def heard_interval(self, seconds: int) -> None:
        self.interval_min_s = min(self.interval_min_s or seconds, seconds)
        self.interval_max_s = max(self.interval_max_s, seconds)

    def ok(self, rpc: str, start: float) -> None:
        ms = (time.perf_counter() - start) * 1000
        self.latencies[rpc].append(ms)
        if start >= self.steady_from:
            self.steady[rpc].append(ms)

    def failed(self, rpc: str, exc: grpc.aio.AioRpcError) -> None:
        key = (rpc, exc.code().name)
        self.errors[key] += 1
        # The first message of each kind, and when it came (s from the start): what went wrong.
        if key not in self.first_error:
            at = time.perf_counter() - (self.steady_from - self.ramp_s)
            self.first_error[key] = f"at {at:.1f} s: {(exc.details() or '')[:200]}"

    def cancelled_inside(self, rpc: str) -> None:
        """A call that raised asyncio.CancelledError although nobody cancelled its task (grpc.aio
        does so for some calls that end under load): an error of that RPC, not the end of the
        run; a real cancellation of the task is raised again."""
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise asyncio.CancelledError
        key = (rpc, "CANCELLED_IN_CLIENT")
        self.errors[key] += 1
        if key not in self.first_error:
            at = time.perf_counter() - (self.steady_from - self.ramp_s)
            self.first_error[key] = f"at {at:.1f} s: asyncio.CancelledError from grpc.aio"

    def total_errors(self) -> int:
        return sum(self.errors.values()) + sum(self.not_accepted.values())


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values``, nearest rank; 0 for none."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = min(len(ordered) - 1, max(0, int(round(q * len(ordered) + 0.5)) - 1))
    return ordered[rank]


class GamePool:
    """Games fitting a task's terms, made once per kind of task and reused."""

    def __init__(self, seed: int = 0) -> None:
        self._by_kind: dict[tuple[object, ...], list[records_pb2.GameRecord]] = {}
        self._seed = seed
        self._next = 0

    @staticmethod
    def _terms(task: coordinator_pb2.Task) -> tuple[int, str, float, int, str]:
        komi = task.komi_range.low if task.HasField("komi_range") else task.komi
        rules = Rules.from_proto(task.rules).name
        return task.board_size, rules, komi, task.max_moves, task.selfplay.model

    def game(self, task: coordinator_pb2.Task, worker_id: str) -> records_pb2.GameRecord:
        """A game of ``task`` under a fresh id, claimed by ``worker_id``."""
        from kgrpc.randgame import make_random_game

        kind = self._terms(task)
        bodies = self._by_kind.get(kind)
        if bodies is None:
            size, rules, komi, cap, model = kind
            bodies = [
                make_random_game(
                    size, rules, komi, self._seed + i, max_moves=cap or None, model=model
                )
                for i in range(GAMES_PER_KIND)
            ]
            self._by_kind[kind] = bodies
        self._next += 1
        rec = records_pb2.GameRecord()
        rec.CopyFrom(bodies[self._next % len(bodies)])
        rec.game_id = str(uuid.uuid4())
        rec.task_id = task.task_id
        rec.worker_id = worker_id
        rec.finished_unix_ms = int(time.time() * 1000)
        return rec


@dataclass
class Plan:
    workers: int
    games_per_minute: float
    ramp_s: float  # registrations spread over this long
    stop_at: float  # time.perf_counter() when every volunteer stops


class Volunteer:
    """One simulated worker on ``stub`` (a CoordinatorStub of a shared channel)."""

    def __init__(self, n: int, stub: object, rec: Recorder, pool: GamePool, plan: Plan) -> None:
        self.n, self.stub, self.rec, self.pool, self.plan = n, stub, rec, pool, plan
        self.rng = random.Random(n)
        self.worker_id = ""
        self.uploaded = 0

    def _left(self) -> float:
        return self.plan.stop_at - time.perf_counter()

    async def _sleep(self, seconds: float) -> bool:
        """Sleep, but not past the end; False when the end came first."""
        left = self._left()
        await asyncio.sleep(max(0.0, min(seconds, left)))
        return seconds < left

    async def _call(self, rpc: str, request: object) -> object | None:
        start = time.perf_counter()
        try:
            resp = await getattr(self.stub, rpc)(request, timeout=RPC_TIMEOUT_S)
        except grpc.aio.AioRpcError as exc:
            self.rec.failed(rpc, exc)
            return None
        except asyncio.CancelledError:
            self.rec.cancelled_inside(rpc)
            return None
        self.rec.ok(rpc, start)
        return resp

    async def run(self) -> None:
        if not await self._sleep(self.plan.ramp_s * self.n / max(1, self.plan.workers)):
            return
        reg = await self._call(
            "Register",
            coordinator_pb2.RegisterRequest(
                username=f"fleet-{self.n % 100}",
                hostname=f"sim-{self.n}",
                version="kgrpc-bench-fleet",
                parallel_games=1,
            ),
        )
        if reg is None:
            return
        self.rec.registered += 1
        self.worker_id = reg.worker_id  # type: ignore[attr-defined]
        interval = float(reg.heartbeat_interval_s or 30)  # type: ignore[attr-defined]
        self.rec.heard_interval(int(interval))
        loops = [self._watch(), self._heartbeats(interval), self._play()]
        await asyncio.gather(*loops)

    async def _watch(self) -> None:
        start = time.perf_counter()
        call = self.stub.WatchModels(coordinator_pb2.WatchModelsRequest())  # type: ignore[attr-defined]
        first = True

        async def read() -> None:
            nonlocal first
            async for _ in call:
                if first:
                    self.rec.ok("WatchModels", start)
                    first = False

        reader = asyncio.ensure_future(read())
        try:
            await asyncio.wait_for(asyncio.shield(reader), max(0.0, self._left()))
            self.rec.errors[("WatchModels", "ENDED_EARLY")] += 1  # a stream must stay open
        except TimeoutError:
            pass  # the run is over: the stream was open all along, as it should be
        except grpc.aio.AioRpcError as exc:
            self.rec.failed("WatchModels", exc)
        finally:
            call.cancel()
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, grpc.aio.AioRpcError):
                await reader

    async def _heartbeats(self, interval: float) -> None:
        if not await self._sleep(self.rng.uniform(0, interval)):
            return
        while True:
            stats = coordinator_pb2.WorkerStats(
                games_finished=self.uploaded, games_uploaded=self.uploaded
            )
            resp = await self._call(
                "Heartbeat", coordinator_pb2.HeartbeatRequest(worker_id=self.worker_id, stats=stats)
            )
            # The coordinator paces a large fleet (max_heartbeats_per_s): follow it, as a
            # worker does.
            given = getattr(resp, "heartbeat_interval_s", 0)
            if given > 0:
                interval = float(given)
                self.rec.heard_interval(given)
            if not await self._sleep(interval):
                return

    async def _task(self) -> coordinator_pb2.Task | None:
        while self._left() > 0:
            task = await self._call(
                "GetTask", coordinator_pb2.GetTaskRequest(worker_id=self.worker_id)
            )
            if task is None:
                return None
            assert isinstance(task, coordinator_pb2.Task)
            if task.HasField("selfplay"):
                return task
            # No model released yet (or a match, which a simulated volunteer does not play).
            self.rec.waits += 1
            if not await self._sleep(float(task.retry_after_s or 5)):
                return None
        return None

    async def _play(self) -> None:
        from kgrpc.coordinator.testing import upload_request

        period = 60.0 / self.plan.games_per_minute if self.plan.games_per_minute > 0 else 0.0
        task = await self._task()
        if task is None or period <= 0:
            return
        left = task.selfplay.games or 1
        if not await self._sleep(self.rng.uniform(0, period)):
            return
        while True:
            if left <= 0:
                task = await self._task()
                if task is None:
                    return
                left = task.selfplay.games or 1
            game = self.pool.game(task, self.worker_id)
            start = time.perf_counter()
            try:
                resp = await self.stub.UploadGames(  # type: ignore[attr-defined]
                    iter([upload_request([game], level=1)]), timeout=RPC_TIMEOUT_S
                )
            except grpc.aio.AioRpcError as exc:
                self.rec.failed("UploadGames", exc)
            except asyncio.CancelledError:
                self.rec.cancelled_inside("UploadGames")
            else:
                self.rec.ok("UploadGames", start)
                for ack in resp.acks:
                    if ack.status == coordinator_pb2.GAME_STATUS_ACCEPTED:
                        self.rec.accepted += 1
                        self.uploaded += 1
                    else:
                        self.rec.not_accepted[ack.reason or "duplicate"] += 1
            left -= 1
            if not await self._sleep(period - (time.perf_counter() - start)):
                return
