"""Coordinator access control: tokens (none, unknown, the wrong role, revoked), health
without one, and TLS (a plaintext client to a TLS port fails; a key of another certificate
stops the start with one clear line)."""

from __future__ import annotations

import asyncio
import shutil

import grpc
import pytest

from kgrpc.v1 import coordinator_pb2, coordinator_pb2_grpc
from tests.model_files import publish_requests
from tests.process_helpers import cli
from tests.tls_helpers import self_signed_cert


async def test_auth_refusals(coordinator) -> None:
    async with coordinator.channel(None) as ch:  # no token
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)
        for call in (
            stub.GetStats(coordinator_pb2.GetStatsRequest()),
            stub.UploadGames(iter([])),
        ):
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await call
            assert (
                err.value.code() == grpc.StatusCode.UNAUTHENTICATED
                and "missing token" in err.value.details()
            )
        with pytest.raises(grpc.aio.AioRpcError) as err:
            async for _ in stub.WatchModels(coordinator_pb2.WatchModelsRequest()):
                pass
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.GetStats(
                coordinator_pb2.GetStatsRequest(), metadata=(("authorization", "Bearer kgt_wrong"),)
            )
        assert (
            err.value.code() == grpc.StatusCode.UNAUTHENTICATED and "unknown" in err.value.details()
        )
    async with coordinator.channel("worker") as ch:
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.PublishModel(iter(publish_requests("kg-b2c16-s0-d0", b"abc")))
        assert (
            err.value.code() == grpc.StatusCode.PERMISSION_DENIED
            and "trainer token" in err.value.details()
        )
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.ListShards(coordinator_pb2.ListShardsRequest())
        assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert (await stub.GetStats(coordinator_pb2.GetStatsRequest())).run == "run_001"
    # revocation takes effect on the next call
    from kgrpc.coordinator import auth, db

    conn = db.connect(coordinator.data_dir, index=coordinator.app.cfg.index)
    assert auth.revoke_token(conn, token=coordinator.worker_token)
    conn.close()
    async with coordinator.channel("worker") as ch:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await coordinator_pb2_grpc.CoordinatorStub(ch).GetStats(
                coordinator_pb2.GetStatsRequest()
            )
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    # health needs no token
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    async with coordinator.channel(None) as ch:
        h = await health_pb2_grpc.HealthStub(ch).Check(
            health_pb2.HealthCheckRequest(service="kgrpc.v1.Coordinator")
        )
        assert h.status == health_pb2.HealthCheckResponse.SERVING


@pytest.mark.skipif(
    shutil.which("openssl") is None, reason="needs the openssl CLI for a self-signed certificate"
)
async def test_tls(coordinator_factory, tmp_path) -> None:
    key, cert = self_signed_cert(tmp_path)
    coord = await coordinator_factory(tls_cert=str(cert), tls_key=str(key))
    async with coord.channel("worker") as ch:
        stats = await coordinator_pb2_grpc.CoordinatorStub(ch).GetStats(
            coordinator_pb2.GetStatsRequest(), timeout=10
        )
        assert stats.run == "run_001"
    from kgrpc.net import make_channel

    async with make_channel(
        coord.address, token=coord.worker_token
    ) as plain:  # plaintext to a TLS port fails
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await coordinator_pb2_grpc.CoordinatorStub(plain).GetStats(
                coordinator_pb2.GetStatsRequest(), timeout=3
            )
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    await asyncio.sleep(0)


@pytest.mark.skipif(
    shutil.which("openssl") is None, reason="needs the openssl CLI for a self-signed certificate"
)
@pytest.mark.slow
def test_a_tls_key_of_another_certificate_is_one_clear_line(tmp_path) -> None:
    paths = {}
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        key, cert = self_signed_cert(tmp_path / name)
        paths[name] = (cert, key)
    out = cli(
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        str(tmp_path / "d"),
        "--tls-cert",
        str(paths["a"][0]),
        "--tls-key",
        str(paths["b"][1]),
    )
    assert out.returncode == 2
    # Besides the start-up line naming the Go engine in use (INFO), one line, no traceback.
    lines = [x for x in out.stderr.strip().splitlines() if " INFO " not in x]
    assert lines == [
        f"kgrpc-coordinator: TLS: the key {paths['b'][1]} does not belong to the certificate "
        f"{paths['a'][0]}"
    ]
