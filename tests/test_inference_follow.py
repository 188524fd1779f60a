"""Coordinator-follow mode: a real in-process coordinator publishes, the server follows."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

import pytest

from inference.client import InferenceClient
from inference.follow import CoordinatorFollower
from inference.models import ModelRegistry
from inference.server import InferenceServer
from kgrpc.coordinator.testing import start_coordinator
from kgrpc.evaluator import EvaluationError
from kgrpc.v1 import coordinator_pb2, coordinator_pb2_grpc
from tests.inference_helpers import make_model, positions

A, B = "kg-b1c8-s0-d0", "kg-b1c8-s100-d1000"


async def publish(coord, path: Path, name: str, steps: int, rows: int) -> None:  # type: ignore[no-untyped-def]
    data = path.read_bytes()
    header = coordinator_pb2.PublishHeader(
        name=name, sha256=hashlib.sha256(data).hexdigest(), size_bytes=len(data), blocks=1,
        channels=8, training_steps=steps, training_rows=rows, feature_version=1,
    )
    reqs = [coordinator_pb2.PublishModelRequest(header=header)]
    reqs += [coordinator_pb2.PublishModelRequest(data=data[i:i + 65536])
             for i in range(0, len(data), 65536)]
    async with coord.channel("trainer") as ch:
        await coordinator_pb2_grpc.CoordinatorStub(ch).PublishModel(iter(reqs))


async def wait_for(cond, what: str) -> None:  # type: ignore[no-untyped-def]
    for _ in range(1000):
        if cond():
            return
        await asyncio.sleep(0.01)
    pytest.fail(f"timed out waiting for {what}")


async def test_follows_releases_and_fetches_on_demand(tmp_path: Path) -> None:
    coord = await start_coordinator(tmp_path, gating_enabled=False)
    path_a = make_model(tmp_path / "a.onnx", A, seed=0)
    path_b = make_model(tmp_path / "b.onnx", B, seed=1)
    await publish(coord, path_a, A, 0, 0)

    reg = ModelRegistry(device="cpu", intra_threads=1, on_demand_grace_s=0.0)
    follower = CoordinatorFollower(coord.address, coord.worker_token, tmp_path / "cache", reg,
                                   retry_s=0.05)
    reg.fetcher = follower.fetch
    server = InferenceServer(reg)
    addr = f"127.0.0.1:{await server.start('127.0.0.1:0')}"
    task = asyncio.ensure_future(follower.run())
    await wait_for(lambda: reg.default == A, "first release")
    client = InferenceClient(addr)
    planes, g = positions(2, 9, 1)
    assert (await client.evaluate(planes, g)).model == A

    await publish(coord, path_b, B, 100, 1000)
    await wait_for(lambda: reg.default == B, "second release")
    assert (await client.evaluate(planes, g)).model == B
    await wait_for(lambda: A not in reg.models, "old model unloaded")
    assert (tmp_path / "cache" / f"{A}.onnx").read_bytes() == path_a.read_bytes()

    # A gating match asks for the old model by name: fetched (from the cache dir) on demand.
    r = await client.evaluate(planes, g, model=A)
    assert r.model == A
    await wait_for(lambda: A not in reg.models, "on-demand model unloaded when idle")
    assert reg.default == B
    with pytest.raises(EvaluationError) as exc:
        await client.evaluate(planes, g, model="kg-b1c8-s999-d999")
    assert exc.value.code == "NOT_FOUND"

    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    await client.close()
    await follower.close()
    await server.stop(0)
    await coord.stop()
