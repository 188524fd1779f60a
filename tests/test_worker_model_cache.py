"""The worker's model cache keeps only the newest models on disk (real coordinator downloads)."""

from __future__ import annotations

import time
from pathlib import Path

from kgrpc.v1 import coordinator_pb2_grpc
from kgrpc.worker.models import ModelCache
from tests.model_files import model_bytes, publish


async def test_cache_keeps_the_newest_models_and_fetches_a_pruned_one_again(
    coordinator_factory, tmp_path: Path
) -> None:
    coord = await coordinator_factory(gating_enabled=False)
    names = [f"kg-b2c16-s{i}-d{i}" for i in range(4)]
    for name in names:
        await publish(coord, name)
    cache = ModelCache(tmp_path / "models", keep=2)
    async with coord.channel("worker") as ch:
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)
        for name in names:
            await cache.ensure(stub, name)
            time.sleep(0.01)  # distinct mtimes even on coarse file-system clocks
        assert sorted(p.stem for p in (tmp_path / "models").glob("*.onnx")) == names[2:]
        again = await cache.ensure(stub, names[0])  # e.g. the reference of a gating match
        assert again.read_bytes() == model_bytes(names[0])
        assert cache.downloads == 5
        assert names[0] in {p.stem for p in (tmp_path / "models").glob("*.onnx")}
        assert len(list((tmp_path / "models").glob("*.onnx"))) == 2
