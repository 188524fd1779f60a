"""``--device cuda:N`` and the in-process engine's thread cap (issue 28): ``cuda:1`` was
refused by the engine ("device must be auto, cuda or cpu") although the worker's help offered
it, and the in-process engine took every core with no way to leave some to the owner."""

from __future__ import annotations

from pathlib import Path

import pytest

from kgrpc.devices import parse_device
from kgrpc.worker.config import ConfigError, WorkerConfig


def test_device_names() -> None:
    assert parse_device("auto") == ("auto", 0)
    assert parse_device("cpu") == ("cpu", 0)
    assert parse_device("cuda") == ("cuda", 0)
    assert parse_device("cuda:3") == ("cuda", 3)
    for bad in ("gpu", "cuda:", "cuda:x", "cpu:1", ""):
        with pytest.raises(ValueError, match="auto, cpu, cuda or cuda:N"):
            parse_device(bad)


def _worker(**kw: object) -> WorkerConfig:
    return WorkerConfig(coordinator="h:1", token="t", **kw)  # type: ignore[arg-type]


def test_the_worker_takes_cuda_n_and_a_thread_cap() -> None:
    _worker(device="cuda:1", intra_threads=2).check()
    with pytest.raises(ConfigError, match="device must be"):
        _worker(device="gpu1").check()
    with pytest.raises(ConfigError, match="intra_threads must be >= 0"):
        _worker(intra_threads=-1).check()


def test_the_inference_server_takes_cuda_n() -> None:
    from inference.config import InferenceConfig

    InferenceConfig(models=("m.onnx",), device="cuda:1").validate()
    with pytest.raises(ValueError, match="device must be"):
        InferenceConfig(models=("m.onnx",), device="gpu").validate()


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("onnxruntime")
    from trainer.export import init_model

    path = tmp_path_factory.mktemp("m") / "kg-b1c8-s0-d0.onnx"
    init_model(5, blocks=1, channels=8, out=path)
    return path


def test_the_engine_parses_cuda_n_and_caps_its_threads(model: Path) -> None:
    import onnxruntime as ort

    from inference.engine import CUDA, Engine

    engine = Engine(model, device="cpu", intra_threads=1)
    assert engine._options.intra_op_num_threads == 1
    assert not engine.on_cuda
    if CUDA not in ort.get_available_providers():
        # Accepted as a device, then refused for what this machine lacks (no CUDA provider).
        with pytest.raises(RuntimeError, match="no CUDA provider"):
            Engine(model, device="cuda:1")
    with pytest.raises(ValueError, match="device must be"):
        Engine(model, device="cuda:one")


async def test_the_in_process_engine_gets_the_worker_thread_cap(model: Path) -> None:
    from inference.local import LocalEvaluator

    local = LocalEvaluator(str(model), device="cpu", intra_threads=1)
    await local.start()
    try:
        engines = [m.engine for m in local.registry.models.values()]
        assert engines and all(e._options.intra_op_num_threads == 1 for e in engines)
    finally:
        await local.close()
