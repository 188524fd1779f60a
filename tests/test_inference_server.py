"""The gRPC inference server end to end: real server on 127.0.0.1:0, real ORT sessions."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from inference.client import InferenceClient
from inference.engine import Engine
from inference.models import ModelRegistry
from inference.server import InferenceServer
from inference.wire import STREAM_OPEN, encode_request, pack_planes
from kgrpc.evaluator import EvaluationError
from kgrpc.v1 import inference_pb2, inference_pb2_grpc
from tests.inference_helpers import make_model, positions

A, B = "kg-b1c8-s0-d0", "kg-b1c8-s5-d50"


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("models")
    return {A: make_model(d / "a.onnx", A, seed=0), B: make_model(d / "b.onnx", B, seed=1)}


@pytest.fixture(scope="module")
def engines(models: dict[str, Path]) -> dict[str, Engine]:
    return {k: Engine(p, device="cpu", intra_threads=1) for k, p in models.items()}


async def start(
    paths: list[Path], tokens: list[str] | None = None, **kw: object
) -> tuple[InferenceServer, str]:
    reg = ModelRegistry(device="cpu", intra_threads=1, max_delay_ms=2, **kw)  # type: ignore[arg-type]
    for p in paths:
        await reg.load(str(p), pinned=True)
    server = InferenceServer(reg, tokens=tokens)
    port = await server.start("127.0.0.1:0")
    return server, f"127.0.0.1:{port}"


@pytest.fixture
async def server_ab(models: dict[str, Path]) -> AsyncIterator[tuple[InferenceServer, str]]:
    server, addr = await start([models[A], models[B]])  # B (last) is the default
    yield server, addr
    await server.stop(0)


def check(result_policy: np.ndarray, want_policy: np.ndarray) -> None:
    # Policy travels as float16: compare at float16 precision.
    np.testing.assert_allclose(result_policy, want_policy, rtol=2e-3, atol=2e-4)


async def test_many_concurrent_streams_match_direct_ort(
    server_ab: tuple[InferenceServer, str], engines: dict[str, Engine]
) -> None:
    server, addr = server_ab
    client = InferenceClient(addr, streams=4)
    planes, g = positions(64, 9, 11)
    want = engines[A].run(9, pack_planes(planes), g)

    async def one(i: int):  # type: ignore[no-untyped-def]
        return await client.evaluate(planes[i : i + 1], g[i : i + 1], model=A, want_ownership=True)

    results = await asyncio.gather(*[one(i) for i in range(64)])
    for i, r in enumerate(results):
        assert r.model == A
        check(r.policy[0], want[0][i])
        np.testing.assert_allclose(r.value[0], want[1][i], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(r.score[0], want[2][i], rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(r.ownership[0], want[3][i], atol=1e-3)
    stats = await client.stats()
    assert stats.positions == 64 and stats.requests == 64
    assert stats.mean_batch_size > 1  # positions from different streams shared batches
    assert sum(stats.batch_size_counts) == stats.batches
    assert len(stats.batch_size_buckets) == len(stats.batch_size_counts)
    assert (client.evals, client.requests) == (64, 64)
    await client.close()


async def test_two_models_at_once_and_multi_position_requests(
    server_ab: tuple[InferenceServer, str], engines: dict[str, Engine]
) -> None:
    _, addr = server_ab
    async with InferenceClient([addr], streams=2) as client:
        planes, g = positions(5, 9, 3)
        ra, rb, rd = await asyncio.gather(
            client.evaluate(planes, g, model=A),
            client.evaluate(planes, g, model=B),
            client.evaluate(planes, g),
        )
        assert (ra.model, rb.model, rd.model) == (A, B, B)
        check(ra.policy, engines[A].run(9, pack_planes(planes), g)[0])
        check(rb.policy, engines[B].run(9, pack_planes(planes), g)[0])
        assert not np.allclose(ra.policy, rb.policy, atol=1e-3)
        assert ra.ownership is None
        info = await client.model_info()
        assert info.default_model == B
        assert {m.name for m in info.models} == {A, B}
        assert all(
            m.provider == "CPUExecutionProvider" and len(m.sha256) == 64 for m in info.models
        )


async def test_malformed_requests_get_errors_and_the_stream_goes_on(
    server_ab: tuple[InferenceServer, str],
) -> None:
    _, addr = server_ab
    planes, g = positions(2, 9, 4)
    good = encode_request(1, planes, g)
    short = inference_pb2.EvalRequest()
    short.CopyFrom(good)
    short.request_id, short.planes = 2, good.planes[:-1]
    unknown = inference_pb2.EvalRequest()
    unknown.CopyFrom(good)
    unknown.request_id, unknown.model = 3, "no-such-model"
    bad_size = inference_pb2.EvalRequest()
    bad_size.CopyFrom(good)
    bad_size.request_id, bad_size.board_size = 4, 1
    again = inference_pb2.EvalRequest()
    again.CopyFrom(good)
    again.request_id = 5
    async with grpc.aio.insecure_channel(addr) as ch:
        stub = inference_pb2_grpc.InferenceStub(ch)
        call = stub.Evaluate()
        for r in (good, short, unknown, bad_size, again):
            await call.write(r)
        await call.done_writing()
        got = {r.request_id: r async for r in call}
        assert set(got) == {1, 2, 3, 4, 5}
        assert got[1].error_code == 0 and got[5].error_code == 0 and got[5].count == 2
        assert got[2].error_code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
        assert "planes" in got[2].error and "expected" in got[2].error
        assert got[3].error_code == grpc.StatusCode.NOT_FOUND.value[0]
        assert "no-such-model" in got[3].error
        assert got[4].error_code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
        assert "board_size" in got[4].error
        # The unary call maps the same errors to gRPC statuses.
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.EvaluateOne(short)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.EvaluateOne(unknown)
        assert err.value.code() == grpc.StatusCode.NOT_FOUND
        ok = await stub.EvaluateOne(good)
        assert ok.count == 2 and len(ok.policy) == 2 * 82 * 2
    # The client surfaces the status name.
    async with InferenceClient(addr) as client:
        with pytest.raises(EvaluationError) as exc:
            await client.evaluate(planes, g, model="no-such-model")
        assert exc.value.code == "NOT_FOUND"


async def test_full_queue_is_resource_exhausted(models: dict[str, Path]) -> None:
    server, addr = await start([models[A]], max_queue=2)
    planes, g = positions(3, 9, 5)
    async with grpc.aio.insecure_channel(addr) as ch:
        stub = inference_pb2_grpc.InferenceStub(ch)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.EvaluateOne(encode_request(1, planes, g))
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        ok = await stub.EvaluateOne(encode_request(2, planes[:2], g[:2]))
        assert ok.count == 2
        stats = await stub.GetInferenceStats(inference_pb2.GetInferenceStatsRequest())
        assert stats.rejected_queue_full == 1
    await server.stop(0)


async def test_hot_swap_under_load_drops_nothing(models: dict[str, Path], tmp_path: Path) -> None:
    reg = ModelRegistry(device="cpu", intra_threads=1, max_delay_ms=2)
    await reg.load(str(models[A]))
    server = InferenceServer(reg)
    addr = f"127.0.0.1:{await server.start('127.0.0.1:0')}"
    client = InferenceClient(addr, streams=3)
    planes, g = positions(1, 9, 6)
    seen: list[str] = []
    stop = asyncio.Event()

    async def load_loop() -> None:
        while not stop.is_set():
            r = await client.evaluate(planes, g)  # raises on any failed request
            seen.append(r.model)

    workers = [asyncio.ensure_future(load_loop()) for _ in range(16)]
    while len(seen) < 50:
        await asyncio.sleep(0.01)
    await reg.load(str(models[B]), make_default=True, retire_previous=True)
    n_at_swap = len(seen)
    while len(seen) < n_at_swap + 50:
        await asyncio.sleep(0.01)
    stop.set()
    await asyncio.gather(*workers)
    assert seen[0] == A and seen[-1] == B
    # Requests in flight at the switch may finish on A; after that, only B.
    first_b = seen.index(B)
    assert A not in seen[first_b + 20 :]
    for _ in range(500):  # the old model is unloaded once idle
        if A not in reg.models:
            break
        await asyncio.sleep(0.01)
    assert list(reg.models) == [B]
    assert client.retries == 0
    await client.close()
    await server.stop(0)


async def test_health_reflection_and_auth(models: dict[str, Path]) -> None:
    server, addr = await start([models[A]], tokens=["secret"])
    planes, g = positions(1, 9, 8)
    async with grpc.aio.insecure_channel(addr) as ch:
        health = health_pb2_grpc.HealthStub(ch)
        resp = await health.Check(health_pb2.HealthCheckRequest(service="kgrpc.v1.Inference"))
        assert resp.status == health_pb2.HealthCheckResponse.SERVING
        from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

        refl = reflection_pb2_grpc.ServerReflectionStub(ch)
        names = []
        listing = reflection_pb2.ServerReflectionRequest(list_services="")
        with pytest.raises(grpc.aio.AioRpcError) as err:  # only health is open
            # No write: one racing the refusal would be reported as INTERNAL (grpc#36066).
            async for _ in refl.ServerReflectionInfo(iter([])):
                pass
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
        async for r in refl.ServerReflectionInfo(
            iter([listing]), metadata=(("authorization", "Bearer secret"),)
        ):
            names = [s.name for s in r.list_services_response.service]
        assert "kgrpc.v1.Inference" in names
        stub = inference_pb2_grpc.InferenceStub(ch)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.EvaluateOne(encode_request(1, planes, g))
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    # A refused stream reports the server's status every time: the client waits for the
    # stream to be accepted before writing, so no write races the refusal (which grpc.aio
    # would report as INTERNAL "Internal error from Core").
    for _ in range(30):
        async with InferenceClient(addr, token="wrong", max_retries=0, streams=1) as client:
            with pytest.raises(EvaluationError) as exc:
                await client.evaluate(planes, g)
            assert exc.value.code == "UNAUTHENTICATED", exc.value.message
    async with InferenceClient(addr, token="secret") as client:
        r = await client.evaluate(planes, g)
        assert r.model == A
    # An accepted stream opens with STREAM_OPEN before any answer.
    async with grpc.aio.insecure_channel(addr) as ch:
        call = inference_pb2_grpc.InferenceStub(ch).Evaluate(
            metadata=(("authorization", "Bearer secret"),)
        )
        assert STREAM_OPEN in tuple(await call.initial_metadata())
        call.cancel()
    await server.stop(0)


async def test_client_retries_until_server_comes_up(models: dict[str, Path]) -> None:
    # Reserve a port, start the client first, then the server on that port.
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = InferenceClient(
        f"127.0.0.1:{port}", streams=1, max_retries=30, backoff_s=0.02, max_backoff_s=0.1
    )
    planes, g = positions(1, 9, 9)
    pending = asyncio.ensure_future(client.evaluate(planes, g))
    await asyncio.sleep(0.1)
    reg = ModelRegistry(device="cpu", intra_threads=1)
    await reg.load(str(models[A]))
    server = InferenceServer(reg)
    await server.start(f"127.0.0.1:{port}")
    r = await pending
    assert r.model == A and client.retries >= 1
    await client.close()
    await server.stop(0)


async def test_client_going_away_leaves_server_serving(
    server_ab: tuple[InferenceServer, str],
) -> None:
    _, addr = server_ab
    planes, g = positions(1, 9, 10)
    quitter = InferenceClient(addr, streams=1)
    tasks = [asyncio.ensure_future(quitter.evaluate(planes, g)) for _ in range(30)]
    await asyncio.sleep(0)
    await quitter.close()
    await asyncio.gather(*tasks, return_exceptions=True)
    async with InferenceClient(addr) as other:
        r = await other.evaluate(planes, g)
        assert r.model == B


async def test_on_demand_model_stays_loaded_while_it_keeps_being_asked(
    models: dict[str, Path],
) -> None:
    fetches: list[str] = []

    async def fetch(name: str) -> str:
        fetches.append(name)
        return str(models[A])

    reg = ModelRegistry(device="cpu", intra_threads=1, fetcher=fetch, on_demand_grace_s=0.3)
    await reg.load(str(models[B]), pinned=True)
    planes, g = positions(1, 9, 3)
    packed = pack_planes(planes)
    for _ in range(16):  # a gating match: requests with gaps, for longer than the grace
        async with reg.use(A) as m:
            await m.evaluate(9, packed, g)
        await asyncio.sleep(0.05)
    assert fetches == [A]  # loaded once, never unloaded and fetched again mid-match
    for _ in range(100):
        if A not in reg.models:
            break
        await asyncio.sleep(0.02)
    assert A not in reg.models and B in reg.models  # quiet for the grace: unloaded
    await reg.close()
