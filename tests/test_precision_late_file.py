"""An int8 file published after its release (issue 32): the trainer sends fp32 first, and with
gating off the coordinator releases the model on that file, so followers hear of it before
its int8 file exists. The worker's model follower (in-process engine) and the inference
server's follower, both set to ``auto`` on a CPU with an int8 dot product, start on the fp32
file and move to the int8 one when the coordinator announces the release again with it. (In
the first VNNI learn9 run the worker played fp32 throughout for this reason.)

A real coordinator on loopback, real exports of a tiny net (tests/precision_helpers.py), real
ONNX Runtime sessions; the parity bounds are the loose ones of test_precision_release.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("torch")

from inference.engine import Engine  # noqa: E402
from inference.follow import CoordinatorFollower  # noqa: E402
from inference.models import ModelRegistry  # noqa: E402
from kgrpc.precision import info_precisions, variant_path  # noqa: E402
from kgrpc.v1 import coordinator_pb2, coordinator_pb2_grpc  # noqa: E402
from tests.inference_helpers import positions  # noqa: E402
from tests.precision_helpers import NAME, export_release  # noqa: E402
from tests.test_precision_release import COORD, _worker, publish_file  # noqa: E402
from tests.test_worker_parts import worker_parts  # noqa: E402


@pytest.fixture(scope="module")
def fp32_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    _, path, _, _ = export_release(tmp_path_factory.mktemp("late"))
    return path


async def _until(check: Callable[[], bool], what: str, timeout_s: float = 20.0) -> None:
    for _ in range(int(timeout_s / 0.02)):
        if check():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.usefixtures("int8_cpu")
async def test_worker_moves_to_an_int8_file_published_after_the_release(
    coordinator_factory, fp32_file: Path, tmp_path: Path
) -> None:
    coord = await coordinator_factory(**COORD)
    await publish_file(coord, fp32_file)  # released on its fp32 file (gating is off)
    cfg = _worker(coord, tmp_path / "w", "auto")
    async with worker_parts(cfg) as parts:
        follower = parts.follower
        parts.tasks.spawn("follow", follower.run())
        ev = follower.evaluators
        assert ev is not None

        def playing() -> str | None:
            if ev.local is None or NAME not in ev._local_names:
                return None
            return ev.local.registry.models[ev.get(NAME)[1]].engine.precision

        await _until(lambda: playing() == "fp32", "the fp32 file loaded")
        old = ev.local.registry.models[ev.get(NAME)[1]]
        await publish_file(coord, variant_path(fp32_file, "int8"))
        await _until(lambda: playing() == "int8", "the int8 file loaded")
        assert follower.latest_info is not None
        assert info_precisions(follower.latest_info) == ["fp32", "int8"]
        assert (cfg.model_path / f"{NAME}.int8.onnx").is_file()
        evaluator, arg = ev.get(NAME)
        planes, g = positions(3, 9, 4)
        res = await evaluator.evaluate(planes, g, model=arg)
        want = Engine(fp32_file, device="cpu", precision="int8").run_float(
            planes.astype(np.float32), g
        )
        np.testing.assert_allclose(res.value, want[1], atol=1e-5)
        # The fp32 session is unloaded once idle; the int8 one serves the name.
        await _until(lambda: old.batcher._closed, "the fp32 session unloaded")
        assert ev.local.registry.models[arg] is not old
        # Announced again with nothing new: nothing more is downloaded.
        downloads = follower.cache.downloads
        await ev.prepare(parts.link.stub, NAME, follower.latest_info)
        assert follower.cache.downloads == downloads


@pytest.mark.usefixtures("int8_cpu")
async def test_inference_follower_moves_to_an_int8_file_published_after_the_release(
    coordinator_factory, fp32_file: Path, tmp_path: Path
) -> None:
    coord = await coordinator_factory(**COORD)
    await publish_file(coord, fp32_file)
    reg = ModelRegistry(device="cpu", precision="auto", intra_threads=1, on_demand_grace_s=0)
    follower = CoordinatorFollower(
        coord.address, coord.worker_token, tmp_path / "cache", reg, retry_s=0.05
    )
    reg.fetcher = follower.fetch
    task = asyncio.ensure_future(follower.run())
    try:
        await _until(lambda: reg.default == NAME, "the release loaded")
        assert reg.models[NAME].engine.precision == "fp32"
        await publish_file(coord, variant_path(fp32_file, "int8"))
        await _until(lambda: reg.models[NAME].engine.precision == "int8", "the int8 file served")
        served = Path(reg.models[NAME].engine.path)
        assert served.read_bytes() == variant_path(fp32_file, "int8").read_bytes()
        assert follower.releases_loaded == 1  # the same release, not a new one
        async with coord.channel("worker") as ch:
            stub = coordinator_pb2_grpc.CoordinatorStub(ch)
            latest = await stub.GetLatestModel(coordinator_pb2.GetLatestModelRequest())
            assert latest.model.name == NAME
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await follower.close()
        await reg.close()
