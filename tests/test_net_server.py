"""The shared server scaffold and its one token check, on both daemons: real servers on
127.0.0.1:0 (a coordinator with SQLite tokens, an inference server with a static token)."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import grpc
import pytest
import pytest_asyncio
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from inference.models import ModelRegistry
from inference.server import InferenceServer
from kgrpc.coordinator.testing import RunningCoordinator
from kgrpc.net import make_channel
from kgrpc.net.server import (
    MAX_UNREQUESTED_S,
    UNREQUESTED_OPTION,
    GrpcServer,
    bearer_token,
    server_options,
    static_token_lookup,
    tls_credentials,
)
from kgrpc.v1 import coordinator_pb2, coordinator_pb2_grpc, inference_pb2, inference_pb2_grpc
from tests.tls_helpers import self_signed_cert

INFERENCE_TOKEN = "inference-secret"


@dataclass
class Daemon:
    address: str
    token: str
    service: str
    # A unary call that needs a token: (channel, metadata) -> awaitable
    unary: Callable[[grpc.aio.Channel, Any], Awaitable[Any]]


@pytest_asyncio.fixture(params=["coordinator", "inference"])
async def daemon(
    request: pytest.FixtureRequest,
    coordinator_factory: Callable[..., Awaitable[RunningCoordinator]],
) -> AsyncIterator[Daemon]:
    if request.param == "coordinator":
        coord = await coordinator_factory()

        def stats(ch: grpc.aio.Channel, md: Any) -> Awaitable[Any]:
            stub = coordinator_pb2_grpc.CoordinatorStub(ch)
            return stub.GetStats(coordinator_pb2.GetStatsRequest(), metadata=md, timeout=10)

        yield Daemon(coord.address, coord.worker_token, "kgrpc.v1.Coordinator", stats)
        return
    async with inference_server([INFERENCE_TOKEN]) as address:

        def info(ch: grpc.aio.Channel, md: Any) -> Awaitable[Any]:
            stub = inference_pb2_grpc.InferenceStub(ch)
            return stub.GetModelInfo(inference_pb2.GetModelInfoRequest(), metadata=md, timeout=10)

        yield Daemon(address, INFERENCE_TOKEN, "kgrpc.v1.Inference", info)


@contextlib.asynccontextmanager
async def inference_server(
    tokens: list[str], credentials: grpc.ServerCredentials | None = None
) -> AsyncIterator[str]:
    """An inference server without models (enough for every check but evaluation)."""
    server = InferenceServer(ModelRegistry(device="cpu", intra_threads=1), tokens=tokens)
    port = await server.start("127.0.0.1:0", credentials=credentials)
    try:
        yield f"127.0.0.1:{port}"
    finally:
        await server.stop(0)


def auth(value: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", value),)


async def list_services(ch: grpc.aio.Channel, md: Any = None, *, send: bool = True) -> list[str]:
    """The services reflection lists. ``send=False`` opens the stream without writing: a
    write racing the server's refusal fails in grpc.aio with INTERNAL "Internal error from
    Core", reported as the call's status too (grpc/grpc#36066), so a test of the refusal's
    status must not write."""
    stub = reflection_pb2_grpc.ServerReflectionStub(ch)
    names: list[str] = []
    request = reflection_pb2.ServerReflectionRequest(list_services="")
    requests = [request] if send else []
    async for r in stub.ServerReflectionInfo(iter(requests), metadata=md, timeout=10):
        names = [s.name for s in r.list_services_response.service]
    return names


async def test_health_is_open_without_a_token(daemon: Daemon) -> None:
    async with grpc.aio.insecure_channel(daemon.address) as ch:
        stub = health_pb2_grpc.HealthStub(ch)
        for service in ("", daemon.service):
            resp = await stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
            assert resp.status == health_pb2.HealthCheckResponse.SERVING
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.Check(health_pb2.HealthCheckRequest(service="no.such.Service"))
        assert err.value.code() == grpc.StatusCode.NOT_FOUND  # the health service answered


async def test_reflection_needs_a_token(daemon: Daemon) -> None:
    async with grpc.aio.insecure_channel(daemon.address) as ch:
        with pytest.raises(grpc.aio.AioRpcError) as err:  # bidi streaming refused
            await list_services(ch, send=False)
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert "missing token" in (err.value.details() or "")
        names = await list_services(ch, auth(f"Bearer {daemon.token}"))
    assert daemon.service in names and "grpc.health.v1.Health" in names


@pytest.mark.parametrize("scheme", ["Bearer", "bearer", "BEARER", "bEaReR"])
async def test_scheme_name_in_any_case_is_accepted(daemon: Daemon, scheme: str) -> None:
    async with grpc.aio.insecure_channel(daemon.address) as ch:
        await daemon.unary(ch, auth(f"{scheme} {daemon.token}"))


@pytest.mark.parametrize(
    "value, fragment",
    [
        (None, "missing token"),
        ("Basic dXNlcjpwYXNz", "missing token"),  # another scheme is no bearer token
        ("Bearer", "missing token"),
        ("Bearer not-a-token", "unknown or revoked token"),
    ],
)
async def test_unary_refusals_are_unauthenticated(
    daemon: Daemon, value: str | None, fragment: str
) -> None:
    async with grpc.aio.insecure_channel(daemon.address) as ch:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await daemon.unary(ch, auth(value) if value is not None else None)
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert fragment in (err.value.details() or "")


async def test_inference_bidi_stream_is_refused_without_a_token() -> None:
    async with (
        inference_server([INFERENCE_TOKEN]) as address,
        grpc.aio.insecure_channel(address) as ch,
    ):
        stub = inference_pb2_grpc.InferenceStub(ch)
        # No write: one racing the refusal would be reported as INTERNAL (grpc#36066); a server
        # that let the stream through would end it OK and fail the test.
        call = stub.Evaluate(iter([]), timeout=10)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            async for _ in call:
                pass
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
        # with the token the stream runs (an empty registry answers each request with an error)
        call = stub.Evaluate(
            iter([inference_pb2.EvalRequest(request_id=1)]),
            timeout=10,
            metadata=auth(f"bearer {INFERENCE_TOKEN}"),
        )
        answers = [r async for r in call]
    assert [r.request_id for r in answers] == [1] and answers[0].error_code


async def test_coordinator_refuses_every_rpc_kind(coordinator: RunningCoordinator) -> None:
    """UNAUTHENTICATED without a token, PERMISSION_DENIED for a worker token on trainer-only
    methods: unary, client streaming and server streaming."""
    async with grpc.aio.insecure_channel(coordinator.address) as ch:
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)
        worker = auth(f"bearer {coordinator.worker_token}")

        async def drain(call: Any) -> None:
            async for _ in call:
                pass

        cases: list[tuple[Callable[[Any], Awaitable[Any]], Any, grpc.StatusCode]] = [
            (
                lambda md: stub.GetTask(coordinator_pb2.GetTaskRequest(), metadata=md),
                None,
                grpc.StatusCode.UNAUTHENTICATED,
            ),
            (
                lambda md: stub.UploadGames(iter([]), metadata=md),
                None,
                grpc.StatusCode.UNAUTHENTICATED,
            ),
            (
                lambda md: drain(
                    stub.WatchModels(coordinator_pb2.WatchModelsRequest(), metadata=md)
                ),
                None,
                grpc.StatusCode.UNAUTHENTICATED,
            ),
            (
                lambda md: stub.ListShards(coordinator_pb2.ListShardsRequest(), metadata=md),
                worker,
                grpc.StatusCode.PERMISSION_DENIED,
            ),
            (
                lambda md: stub.PublishModel(iter([]), metadata=md),
                worker,
                grpc.StatusCode.PERMISSION_DENIED,
            ),
            (
                lambda md: drain(
                    stub.DownloadShard(
                        coordinator_pb2.DownloadShardRequest(file_name="games_00001.npz"),
                        metadata=md,
                    )
                ),
                worker,
                grpc.StatusCode.PERMISSION_DENIED,
            ),
        ]
        for i, (call, md, code) in enumerate(cases):
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await call(md)
            assert err.value.code() == code, f"case {i}: {err.value}"
        # the same worker token, lower-case scheme, on a method it may call
        assert (await stub.GetStats(coordinator_pb2.GetStatsRequest(), metadata=worker)).run
        # a trainer token passes the role check (the shard does not exist)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await drain(
                stub.DownloadShard(
                    coordinator_pb2.DownloadShardRequest(file_name="games_00001.npz"),
                    metadata=auth(f"BEARER {coordinator.trainer_token}"),
                )
            )
        assert err.value.code() == grpc.StatusCode.NOT_FOUND


async def test_without_tokens_nothing_is_checked() -> None:
    async with inference_server([""]) as address, grpc.aio.insecure_channel(address) as ch:
        assert "kgrpc.v1.Inference" in await list_services(ch)
        stub = inference_pb2_grpc.InferenceStub(ch)
        await stub.GetModelInfo(inference_pb2.GetModelInfoRequest(), timeout=10)


def test_bearer_token_parsing() -> None:
    assert bearer_token([("authorization", "Bearer abc")]) == "abc"
    assert bearer_token([("x", "y"), ("authorization", b"bearer  abc ")]) == "abc"
    assert bearer_token([("authorization", "Token abc")]) is None
    assert bearer_token([("authorization", "Bearer ")]) is None
    assert bearer_token(None) is None
    lookup = static_token_lookup(["one", "", "two"])
    assert lookup("two") == "two" and lookup("three") is None and lookup("") is None


@pytest.mark.skipif(
    shutil.which("openssl") is None, reason="needs the openssl CLI for a self-signed certificate"
)
async def test_inference_server_serves_tls_through_the_scaffold(tmp_path: Any) -> None:
    key, cert = self_signed_cert(tmp_path)
    creds = tls_credentials(str(cert), str(key))
    async with inference_server([INFERENCE_TOKEN], creds) as address:
        async with make_channel(
            address, token=INFERENCE_TOKEN, tls_ca=cert, server_name="localhost"
        ) as ch:
            stub = inference_pb2_grpc.InferenceStub(ch)
            await stub.GetModelInfo(inference_pb2.GetModelInfoRequest(), timeout=10)
        async with make_channel(address, token=INFERENCE_TOKEN) as plain:
            with pytest.raises(grpc.aio.AioRpcError) as err:  # plaintext to a TLS port
                await inference_pb2_grpc.InferenceStub(plain).GetModelInfo(
                    inference_pb2.GetModelInfoRequest(), timeout=3
                )
            assert err.value.code() == grpc.StatusCode.UNAVAILABLE


def test_tls_credentials_need_both_files(tmp_path: Any) -> None:
    assert tls_credentials("", "") is None
    with pytest.raises(ValueError, match="go together"):
        tls_credentials(str(tmp_path / "cert.pem"), "")
    with pytest.raises(ValueError, match="cannot read the TLS certificate or key"):
        tls_credentials(str(tmp_path / "cert.pem"), str(tmp_path / "key.pem"))


# How long the one held call blocks the server's event loop in the tests below: longer than
# the short unrequested time they set (1 s), with a margin for a loaded machine.
HOLD_S = 2.0


async def queued_call_codes(server: grpc.aio.Server) -> list[str]:
    """Start ``server`` with a handler whose first call holds the event loop ``HOLD_S`` s (as
    a coordinator's loop busy with a burst does) while three more calls are sent; each call's
    status. A grpc.aio server takes calls from its event loop, so calls sent meanwhile queue
    in gRPC core, unrequested, all the while (but one, already requested before the hold)."""
    holding = threading.Event()

    async def call(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        if request == b"hold":
            holding.set()
            time.sleep(HOLD_S)  # blocks the loop
        return request

    handler = grpc.method_handlers_generic_handler(
        "kgrpc.test.Hold", {"Call": grpc.unary_unary_rpc_method_handler(call)}
    )
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()

    def client() -> list[str]:
        # A blocking channel on a thread of its own: it sends while the loop is held.
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            stub = ch.unary_unary("/kgrpc.test.Hold/Call")
            stub(b"warm", timeout=30)  # connected before the hold
            calls = [stub.future(b"hold", timeout=30)]
            assert holding.wait(30)
            calls += [stub.future(b"queued", timeout=30) for _ in range(3)]
            codes = []
            for c in calls:
                try:
                    c.result()
                    codes.append("OK")
                except grpc.RpcError as exc:
                    codes.append(exc.code().name)
            return codes

    try:
        return await asyncio.to_thread(client)
    finally:
        await server.stop(0)


async def test_grpc_cancels_calls_left_unrequested_past_the_limit() -> None:
    """The option does what the coordinator sets it for: with 1 s, calls that queued while
    the loop was held for 2 s end CANCELLED (with gRPC's default of 30 s, a loop held that
    long by a burst of 10,000 registrations cancelled a third of them: docs/performance.md)."""
    server = grpc.aio.server(options=server_options(1 << 20, max_unrequested_s=1))
    codes = await queued_call_codes(server)
    assert codes[0] == "OK" and "CANCELLED" in codes[1:], codes


async def test_daemons_let_queued_calls_wait_for_the_loop() -> None:
    """The daemons' scaffold (coordinator and inference server) keeps queued calls as long
    as the longest client deadline, a model download's 600 s: the same held loop loses
    nothing."""
    assert dict(server_options(1 << 20))[UNREQUESTED_OPTION] == MAX_UNREQUESTED_S >= 600
    server = GrpcServer(("kgrpc.test.Hold",), max_message_bytes=1 << 20)
    codes = await queued_call_codes(server.server)
    assert codes == ["OK"] * 4, codes
