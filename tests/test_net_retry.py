"""kgrpc.net.retry / Backoff: growth, cap, jitter bounds, which errors are retried, giving up,
fatal codes, stopping, one log line per outage.

Calls go to a real gRPC health server on 127.0.0.1 that is down, then brought up (or a real
coordinator, for a status no retry can change).
"""

from __future__ import annotations

import asyncio
import logging
import random
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from kgrpc.net import (
    Backoff,
    FatalError,
    Outage,
    RetryPolicy,
    describe,
    is_fatal,
    is_not_found,
    is_rpc_error,
    is_transient,
    make_channel,
    retry,
    status_code,
)
from kgrpc.v1 import coordinator_pb2, coordinator_pb2_grpc

# The channel's own reconnect backoff (1 s by default) would make calls right after the
# server comes up fail fast with UNAVAILABLE for a while; keep it short in tests.
FAST_RECONNECT = [
    ("grpc.initial_reconnect_backoff_ms", 50),
    ("grpc.min_reconnect_backoff_ms", 50),
    ("grpc.max_reconnect_backoff_ms", 100),
]


async def start_health_server(port: int = 0) -> tuple[grpc.aio.Server, int]:
    server = grpc.aio.server()
    health_pb2_grpc.add_HealthServicer_to_server(health.aio.HealthServicer(), server)
    bound = server.add_insecure_port(f"127.0.0.1:{port}")
    assert bound
    await server.start()
    return server, bound


async def port_of_a_stopped_server() -> int:
    server, port = await start_health_server()
    await server.stop(None)
    return port


class FixedRandom(random.Random):
    """random() always returns ``value``: pins the jitter draw to an end of its range."""

    def __init__(self, value: float) -> None:
        super().__init__(0)
        self.value = value

    def random(self) -> float:
        return self.value


def test_backoff_grows_by_factor_up_to_cap_and_resets() -> None:
    b = Backoff(base_s=2.0, factor=3.0, cap_s=100.0, jitter=0.0)
    assert [b.next_delay() for _ in range(6)] == [2.0, 6.0, 18.0, 54.0, 100.0, 100.0]
    b.reset()
    assert b.next_delay() == 2.0


def test_backoff_jitter_stays_within_bounds() -> None:
    b = Backoff(base_s=10.0, factor=1.0, cap_s=10.0, jitter=0.3, rng=random.Random(7))
    delays = [b.next_delay() for _ in range(2000)]
    assert all(7.0 <= d <= 10.0 for d in delays)
    assert min(delays) < 7.5 and max(delays) > 9.5  # the whole range is used, not one value
    # the ends of the range: no jitter draw -> full wait, largest draw -> (1 - jitter) of it
    assert Backoff(base_s=4.0, jitter=0.5, rng=FixedRandom(0.0)).next_delay() == 4.0
    assert Backoff(base_s=4.0, jitter=0.5, rng=FixedRandom(0.999999)).next_delay() == pytest.approx(
        2.0, abs=1e-5
    )
    capped = Backoff(
        base_s=1.0, factor=2.0, cap_s=8.0, jitter=0.5, rng=FixedRandom(0.999999), attempt=10
    )
    assert capped.next_delay() == pytest.approx(4.0, abs=1e-5)  # jitter applies to the capped wait


def test_backoff_keeps_waiting_cap_after_very_many_attempts() -> None:
    # A worker retrying forever reaches attempts where factor**attempt overflows a float.
    b = Backoff(base_s=1.0, factor=1.5, cap_s=120.0, jitter=0.0)
    delays = [b.next_delay() for _ in range(3000)]
    assert delays[-1] == 120.0 and b.attempt == 3000
    assert Backoff(cap_s=5.0, jitter=0.0, attempt=10**6).next_delay() == 5.0


async def test_retry_waits_for_a_server_that_comes_up() -> None:
    port = await port_of_a_stopped_server()
    servers: list[grpc.aio.Server] = []
    failures: list[grpc.StatusCode] = []
    try:
        async with make_channel(f"127.0.0.1:{port}", options=FAST_RECONNECT) as ch:
            stub = health_pb2_grpc.HealthStub(ch)

            async def check() -> health_pb2.HealthCheckResponse:
                if len(failures) == 2 and not servers:  # down for two attempts, then up
                    servers.append((await start_health_server(port))[0])
                try:
                    return await stub.Check(health_pb2.HealthCheckRequest(), timeout=10)
                except grpc.aio.AioRpcError as exc:
                    failures.append(exc.code())
                    raise

            backoff = Backoff(base_s=0.01, factor=2.0, cap_s=0.05, jitter=0.0)
            resp = await retry(check, backoff=backoff, what="health check")
        assert resp.status == health_pb2.HealthCheckResponse.SERVING
        assert servers and len(failures) >= 2 and set(failures) == {grpc.StatusCode.UNAVAILABLE}
        assert backoff.attempt == len(failures)  # one wait per failed attempt
    finally:
        for s in servers:
            await s.stop(None)


async def test_retry_gives_up_after_attempts() -> None:
    port = await port_of_a_stopped_server()
    calls = 0
    async with make_channel(f"127.0.0.1:{port}") as ch:
        stub = health_pb2_grpc.HealthStub(ch)

        async def check() -> health_pb2.HealthCheckResponse:
            nonlocal calls
            calls += 1
            return await stub.Check(health_pb2.HealthCheckRequest(), timeout=10)

        backoff = Backoff(base_s=0.01, cap_s=0.02, jitter=0.0)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await retry(check, attempts=3, backoff=backoff)
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    assert calls == 3 and backoff.attempt == 2  # no wait after the last attempt


async def test_retry_raises_non_retryable_errors_at_once() -> None:
    server, port = await start_health_server()
    try:
        async with make_channel(f"127.0.0.1:{port}") as ch:
            stub = health_pb2_grpc.HealthStub(ch)
            calls = 0

            async def check_unknown_service() -> health_pb2.HealthCheckResponse:
                nonlocal calls
                calls += 1
                return await stub.Check(
                    health_pb2.HealthCheckRequest(service="no.such.Service"), timeout=10
                )

            backoff = Backoff(base_s=0.01, jitter=0.0)
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await retry(check_unknown_service, attempts=5, backoff=backoff)
            assert err.value.code() == grpc.StatusCode.NOT_FOUND
            assert calls == 1 and backoff.attempt == 0

            async def broken() -> None:
                raise ValueError("a bug, not an outage")

            with pytest.raises(ValueError):
                await retry(broken, attempts=5, backoff=backoff)
            assert backoff.attempt == 0
    finally:
        await server.stop(None)


async def test_retry_with_own_predicate() -> None:
    calls = 0

    async def flaky() -> str:
        nonlocal calls
        calls += 1
        if calls < 3:
            raise ConnectionError("try again")
        return "ok"

    backoff = Backoff(base_s=0.001, jitter=0.0)
    assert (
        await retry(flaky, backoff=backoff, retryable=lambda e: isinstance(e, ConnectionError))
        == "ok"
    )
    assert calls == 3 and backoff.attempt == 2


async def test_an_outage_is_logged_once_not_per_try(caplog: pytest.LogCaptureFixture) -> None:
    port = await port_of_a_stopped_server()
    servers: list[grpc.aio.Server] = []
    tries = 0
    outage = Outage("health server", meanwhile="nothing else to do")
    try:
        async with make_channel(f"127.0.0.1:{port}", options=FAST_RECONNECT) as ch:
            stub = health_pb2_grpc.HealthStub(ch)

            async def check() -> health_pb2.HealthCheckResponse:
                nonlocal tries
                tries += 1
                if tries == 5 and not servers:  # down for four tries, then up
                    servers.append((await start_health_server(port))[0])
                return await stub.Check(health_pb2.HealthCheckRequest(), timeout=10)

            backoff = Backoff(base_s=0.01, factor=1.0, cap_s=0.01, jitter=0.0)
            with caplog.at_level(logging.INFO, logger="kgrpc.net.retry"):
                await retry(check, backoff=backoff, outage=outage, what="health check")
                assert not outage.down
                await retry(check, backoff=backoff, outage=outage)  # up: nothing to say
        assert tries >= 6 and backoff.attempt >= 4
        lines = [r.getMessage() for r in caplog.records if r.name == "kgrpc.net.retry"]
        assert len(lines) == 2, lines  # not one per failed try
        assert lines[0].startswith("health server unreachable (UNAVAILABLE")
        assert lines[0].endswith("retrying with backoff, nothing else to do")
        assert lines[1].startswith("health server reachable again after")
    finally:
        for s in servers:
            await s.stop(None)


async def test_fatal_status_raises_fatal_error_without_retrying(coordinator: Any) -> None:
    calls = 0
    outage = Outage("coordinator")
    async with coordinator.channel(role=None) as ch:  # no token
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)

        async def register() -> coordinator_pb2.RegisterResponse:
            nonlocal calls
            calls += 1
            return await stub.Register(coordinator_pb2.RegisterRequest(username="u"), timeout=10)

        backoff = Backoff(base_s=0.01, jitter=0.0)
        with pytest.raises(FatalError, match="Register refused: UNAUTHENTICATED") as err:
            await retry(
                register,
                backoff=backoff,
                fatal=is_fatal,
                retryable=is_rpc_error,
                outage=outage,
                what="Register",
            )
    assert isinstance(err.value.__cause__, grpc.aio.AioRpcError)
    assert calls == 1 and backoff.attempt == 0 and not outage.down


async def test_stop_ends_the_wait_and_raises_the_last_error() -> None:
    port = await port_of_a_stopped_server()
    stop = asyncio.Event()
    outage = Outage("health server")
    async with make_channel(f"127.0.0.1:{port}") as ch:
        stub = health_pb2_grpc.HealthStub(ch)
        backoff = Backoff(base_s=60.0, jitter=0.0)
        asyncio.get_running_loop().call_later(0.2, stop.set)
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await retry(
                lambda: stub.Check(health_pb2.HealthCheckRequest(), timeout=10),
                backoff=backoff,
                stop=stop,
                outage=outage,
            )
        assert loop.time() - started < 30  # not the 60 s wait
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        assert backoff.attempt == 1 and outage.down
        calls = 0

        async def check() -> health_pb2.HealthCheckResponse:
            nonlocal calls
            calls += 1
            return await stub.Check(health_pb2.HealthCheckRequest(), timeout=10)

        with pytest.raises(grpc.aio.AioRpcError):  # already stopping: one try, no wait
            await retry(check, backoff=backoff, stop=stop)
        assert calls == 1 and backoff.attempt == 1


async def test_give_up_and_a_backoff_made_only_at_the_first_failure() -> None:
    made: list[Backoff] = []

    def new_backoff() -> Backoff:
        made.append(Backoff(base_s=0.001, jitter=0.0))
        return made[-1]

    async def fine() -> int:
        return 7

    assert await retry(fine, backoff=new_backoff) == 7
    assert made == []  # a call that succeeds draws no backoff (and no random numbers)
    calls = 0

    async def flaky() -> None:
        nonlocal calls
        calls += 1
        raise ConnectionError("down")

    with pytest.raises(ConnectionError):
        await retry(
            flaky,
            backoff=new_backoff,
            give_up=lambda: calls >= 3,
            retryable=lambda e: isinstance(e, ConnectionError),
        )
    assert calls == 3 and len(made) == 1 and made[0].attempt == 2


def test_status_codes_of_grpc_and_relayed_errors() -> None:
    from kgrpc.evaluator import EvaluationError

    assert status_code(EvaluationError("NOT_FOUND", "no model x")) == grpc.StatusCode.NOT_FOUND
    assert is_not_found(EvaluationError("NOT_FOUND", "no model x"))
    assert is_transient(EvaluationError("UNAVAILABLE", "restarting"))
    assert is_fatal(EvaluationError("PERMISSION_DENIED", "token"))
    assert status_code(EvaluationError("NO_SUCH_CODE", "?")) is None
    assert status_code(ValueError("a bug")) is None and not is_fatal(ValueError())
    assert not is_transient(ValueError()) and not is_rpc_error(ValueError())
    assert describe(ValueError("a bug")) == "ValueError: a bug"


async def test_policy_binds_settings_and_calls_may_change_them() -> None:
    outage = Outage("service")
    policy = RetryPolicy(
        outage,
        base_s=0.001,
        cap_s=0.002,
        rng=random.Random(3),
        retryable=lambda e: isinstance(e, ConnectionError),
        fatal=None,
    )
    b1, b2 = policy.backoff(), policy.backoff()
    assert (b1.base_s, b1.cap_s) == (0.001, 0.002) and b1.rng is not b2.rng
    calls = 0

    async def down() -> None:
        nonlocal calls
        calls += 1
        raise ConnectionError("down")

    with pytest.raises(ConnectionError):  # one try: reported to the outage, then raised
        await policy.call(down, what="ping", attempts=1)
    assert calls == 1 and outage.down

    async def up() -> str:
        return "pong"

    assert await policy.call(up, what="ping") == "pong" and not outage.down
