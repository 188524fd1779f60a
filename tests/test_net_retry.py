"""kgrpc.net.retry / Backoff: growth, cap, jitter bounds, which errors are retried, giving up.

Calls go to a real gRPC health server on 127.0.0.1 that is down, then brought up.
"""

from __future__ import annotations

import random

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from kgrpc.net import Backoff, make_channel, retry

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
    assert Backoff(base_s=4.0, jitter=0.5, rng=FixedRandom(0.999999)).next_delay() == pytest.approx(2.0, abs=1e-5)
    capped = Backoff(base_s=1.0, factor=2.0, cap_s=8.0, jitter=0.5, rng=FixedRandom(0.999999), attempt=10)
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
                return await stub.Check(health_pb2.HealthCheckRequest(service="no.such.Service"), timeout=10)

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
    assert await retry(flaky, backoff=backoff, retryable=lambda e: isinstance(e, ConnectionError)) == "ok"
    assert calls == 3 and backoff.attempt == 2
