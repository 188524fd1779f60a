"""Coordinator models: publish (integrity, names, concurrent publishes of one name), the
resumable download, and every publish released at once when gating is off."""

from __future__ import annotations

import asyncio
import hashlib

import grpc
import pytest

from kgrpc.v1 import common_pb2, coordinator_pb2, coordinator_pb2_grpc
from tests.model_files import model_bytes, publish, publish_requests


async def test_publish_and_resumable_download(coordinator) -> None:
    data = model_bytes("kg-b2c16-s0-d0")
    resp = await publish(coordinator, "kg-b2c16-s0-d0", data)
    assert not resp.gating_scheduled and resp.model.status == common_pb2.MODEL_STATUS_RELEASED
    assert (coordinator.data_dir / "models" / "kg-b2c16-s0-d0.onnx").read_bytes() == data
    async with coordinator.channel("worker") as ch:
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)
        latest = await stub.GetLatestModel(coordinator_pb2.GetLatestModelRequest())
        assert latest.found and latest.model.name == "kg-b2c16-s0-d0"
        # interrupted after the first part: resume from an offset
        got = b""
        async for chunk in stub.DownloadModel(
            coordinator_pb2.DownloadModelRequest(name="kg-b2c16-s0-d0", offset=0)
        ):
            assert chunk.offset == len(got)
            got += chunk.data[:100]
            info = chunk.info
            break
        assert info.size_bytes == len(data) and info.sha256 == hashlib.sha256(data).hexdigest()
        async for chunk in stub.DownloadModel(
            coordinator_pb2.DownloadModelRequest(name="kg-b2c16-s0-d0", offset=len(got))
        ):
            assert chunk.offset == len(got)
            got += chunk.data
        assert hashlib.sha256(got).hexdigest() == info.sha256
        with pytest.raises(grpc.aio.AioRpcError) as err:
            async for _ in stub.DownloadModel(
                coordinator_pb2.DownloadModelRequest(name="nope-b1c1-s0-d0")
            ):
                pass
        assert err.value.code() == grpc.StatusCode.NOT_FOUND
        with pytest.raises(grpc.aio.AioRpcError) as err:
            async for _ in stub.DownloadModel(
                coordinator_pb2.DownloadModelRequest(name="kg-b2c16-s0-d0", offset=10**6)
            ):
                pass
        assert err.value.code() == grpc.StatusCode.OUT_OF_RANGE


async def test_download_model_first_message_carries_info_and_data(coordinator) -> None:
    # The contract (coordinator.proto, docs/clients.md section 6): the first ModelChunk has
    # `info` and the first bytes of data, later ones data only; at offset == size, one
    # message with `info` and no data.
    data = model_bytes("kg-b2c16-s0-d0")
    await publish(coordinator, "kg-b2c16-s0-d0", data)
    async with coordinator.channel() as ch:
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)

        async def chunks(offset: int) -> list[coordinator_pb2.ModelChunk]:
            req = coordinator_pb2.DownloadModelRequest(name="kg-b2c16-s0-d0", offset=offset)
            return [c async for c in stub.DownloadModel(req)]

        got = await chunks(0)
        assert got[0].HasField("info") and got[0].info.size_bytes == len(data)
        assert got[0].offset == 0 and len(got[0].data) > 0
        assert not any(c.HasField("info") for c in got[1:])
        assert b"".join(c.data for c in got) == data
        assert [c.offset for c in got] == [
            sum(len(c.data) for c in got[:i]) for i in range(len(got))
        ]
        mid = await chunks(100)
        assert mid[0].HasField("info") and mid[0].offset == 100
        assert b"".join(c.data for c in mid) == data[100:]
        (end,) = await chunks(len(data))
        assert end.HasField("info") and end.offset == len(data) and end.data == b""


@pytest.mark.parametrize(
    "kw,fragment",
    [
        (dict(sha="0" * 64), "sha256 mismatch"),
        (dict(size=10), "more data than the declared"),
        (dict(size=99999), "header declared"),
    ],
)
async def test_publish_integrity_failures_store_nothing(coordinator, kw, fragment) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await publish(coordinator, "kg-b2c16-s0-d0", b"x" * 3000, **kw)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and fragment in err.value.details()
    assert list((coordinator.data_dir / "models").iterdir()) == []


async def test_publish_bad_name_and_conflict(coordinator) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await publish(coordinator, "bad name", b"abc")
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    await publish(coordinator, "kg-b2c16-s0-d0")
    again = await publish(coordinator, "kg-b2c16-s0-d0")  # same bytes: idempotent
    assert again.model.name == "kg-b2c16-s0-d0"
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await publish(coordinator, "kg-b2c16-s0-d0", model_bytes("kg-b2c16-s0-d0", seed=1))
    assert err.value.code() == grpc.StatusCode.ALREADY_EXISTS


@pytest.mark.parametrize(
    "name",
    [
        "kg-b2c16-s0-d0\n",  # a trailing newline
        ".kg.tmp-b2c16-s0-d0",  # hidden, and taken for a temporary file (deleted) at the next start
        "kg-b2c16-s99999999999999999999-d0",  # beyond SQLite's integers
        "k" * 300 + "-b2c16-s0-d0",  # beyond a file name's length
    ],
)
async def test_publish_refuses_odd_names_cleanly(coordinator, name) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await publish(coordinator, name, b"abc")
    details = err.value.details()
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "does not follow" in details or "PublishHeader.name has 312 characters" in details
    assert list((coordinator.data_dir / "models").iterdir()) == []
    async with coordinator.channel("worker") as ch:
        assert not (
            await coordinator_pb2_grpc.CoordinatorStub(ch).ListModels(
                coordinator_pb2.ListModelsRequest()
            )
        ).models


async def test_concurrent_publishes_of_one_name_keep_file_and_index_in_agreement(
    coordinator,
) -> None:
    name = "kg-b2c16-s0-d0"
    models_dir = coordinator.data_dir / "models"
    gates = [asyncio.Event(), asyncio.Event()]

    async def gated(data: bytes, gate: asyncio.Event):
        msgs = publish_requests(name, data)
        for m in msgs[:-1]:
            yield m
        await gate.wait()
        yield msgs[-1]

    async with coordinator.channel("trainer") as ch:
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)
        contents = (model_bytes(name), model_bytes(name, seed=1))
        calls = [
            asyncio.ensure_future(stub.PublishModel(gated(d, g)))
            for d, g in zip(contents, gates, strict=True)
        ]
        for _ in range(500):  # both streams past the header checks, receiving data
            if len(list(models_dir.glob(".*.tmp*"))) == 2:
                break
            await asyncio.sleep(0.01)
        gates[0].set()
        first = await calls[0]
        gates[1].set()
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await calls[1]
    assert err.value.code() == grpc.StatusCode.ALREADY_EXISTS
    assert (
        hashlib.sha256((models_dir / f"{name}.onnx").read_bytes()).hexdigest() == first.model.sha256
    )


async def test_gating_disabled_releases_every_publish(coordinator_factory) -> None:
    coord = await coordinator_factory(gating_enabled=False)
    await publish(coord, "kg-b2c16-s0-d0")
    resp = await publish(coord, "kg-b2c16-s10-d5")
    assert not resp.gating_scheduled and resp.model.status == common_pb2.MODEL_STATUS_RELEASED
