"""``kgrpc-train publish FILE.onnx --coordinator ADDR --token T`` as a process against a real "
"coordinator."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

from kgrpc.v1 import common_pb2, coordinator_pb2, coordinator_pb2_grpc
from tests.inference_helpers import make_model
from trainer import cli
from trainer.config import TOKEN_ENV

FIRST, SECOND = "kg-b1c8-s0-d0", "kg-b1c8-s100-d1000"


async def publish_cli(*args: str) -> tuple[int, str, str]:
    """Run ``python -m trainer publish ARGS`` without blocking the coordinator's event loop."""
    env = {k: v for k, v in os.environ.items() if k != TOKEN_ENV}
    env["GRPC_VERBOSITY"] = "ERROR"
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "trainer",
        "publish",
        *args,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=120)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


@pytest.mark.slow
async def test_publish_command(coordinator, tmp_path: Path) -> None:
    first = make_model(tmp_path / "first.onnx", FIRST, seed=0)
    second = make_model(tmp_path / "second.onnx", SECOND, seed=1)
    addr = coordinator.address
    # Independent cases run side by side: each process spends ~2 s importing.
    (code, out, err), worker = await asyncio.gather(
        publish_cli(str(first), "--coordinator", addr, "--token", coordinator.trainer_token),
        publish_cli(str(second), "--coordinator", addr, "--token", coordinator.worker_token),
    )
    assert code == 0, err
    assert out.strip() == f"published {FIRST} ({first.stat().st_size} bytes): released; files fp32"

    code, out, err = worker
    assert code != 0 and out == ""
    assert "PERMISSION_DENIED" in err and "needs a trainer token" in err and "worker token" in err

    async with coordinator.channel("worker") as ch:
        models = (
            await coordinator_pb2_grpc.CoordinatorStub(ch).ListModels(
                coordinator_pb2.ListModelsRequest()
            )
        ).models
    # the first model of the run is released at once; the refused publishes stored nothing
    assert [(m.name, m.status) for m in models] == [(FIRST, common_pb2.MODEL_STATUS_RELEASED)]
    assert (models[0].blocks, models[0].channels, models[0].size_bytes) == (
        1,
        8,
        first.stat().st_size,
    )
    assert (coordinator.data_dir / "models" / f"{FIRST}.onnx").read_bytes() == first.read_bytes()
    assert not (coordinator.data_dir / "models" / f"{SECOND}.onnx").exists()


def test_publish_command_refuses_before_connecting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # These fail before any call: run in-process; no coordinator listens at this address.
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    nowhere = ["--coordinator", "127.0.0.1:9"]
    assert cli.main(["publish", str(tmp_path / "nope.onnx"), *nowhere, "--token", "t"]) == 2
    assert "nope.onnx: no such model file" in capsys.readouterr().err
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"not a model")
    assert cli.main(["publish", str(junk), *nowhere, "--token", "t"]) == 2
    assert "junk.onnx: not an ONNX model" in capsys.readouterr().err
    model = make_model(tmp_path / "m.onnx", FIRST)
    assert cli.main(["publish", str(model), *nowhere]) == 2
    assert f"needs a trainer token (--token or ${TOKEN_ENV})" in capsys.readouterr().err
