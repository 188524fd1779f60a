"""The trainer retries unpublished candidates (issue 11, item 13), against a coordinator
process that starts only after the first publish failed.

The coordinator runs as a separate process: the publisher's thread owns this process's
only grpc.aio event loop, as it does in ``kgrpc-train run``.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from kgrpc.coordinator.testing import create_tokens
from kgrpc.net import Backoff, make_channel
from kgrpc.programs.bench.train import write_synthetic_run
from kgrpc.v1 import common_pb2, coordinator_pb2, coordinator_pb2_grpc
from tests.model_files import write_model
from trainer.config import TrainConfig
from trainer.publish import PUBLISHED_SUFFIX, REFUSED_SUFFIX, Publisher, unpublished_candidate
from trainer.train import run_training

REPO = Path(__file__).resolve().parent.parent
A, B = "kg-b1c8-s10-d100", "kg-b1c8-s20-d200"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LateCoordinator:
    """A ``kgrpc-coordinator`` process on a fixed port, started on demand."""

    def __init__(self, tmp_path: Path, **flags: str) -> None:
        self.data_dir = tmp_path / "coordinator"
        self.worker_token, self.trainer_token = create_tokens(self.data_dir)
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.flags = flags
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        args = [
            sys.executable,
            "-m",
            "kgrpc.coordinator",
            "--listen",
            self.address,
            "--data-dir",
            str(self.data_dir),
            "--validate-workers",
            "-1",
            "--log-level",
            "WARNING",
        ]
        for key, value in self.flags.items():
            args += [f"--{key.replace('_', '-')}", value]
        env = {**os.environ, "GRPC_VERBOSITY": "ERROR", "PYTHONPATH": str(REPO)}
        self.proc = subprocess.Popen(args, env=env, cwd=REPO)

    def wait_up(self) -> None:
        wait_until(lambda: (self.data_dir / "coordinator.port").exists())

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(30)

    def models(self) -> dict[str, int]:
        async def go() -> dict[str, int]:
            async with make_channel(self.address, token=self.worker_token) as ch:
                stub = coordinator_pb2_grpc.CoordinatorStub(ch)
                resp = await stub.ListModels(coordinator_pb2.ListModelsRequest(), timeout=30)
                return {m.name: m.status for m in resp.models}

        return asyncio.run(go())


@pytest.fixture
def late(tmp_path: Path):  # type: ignore[no-untyped-def]
    coord = LateCoordinator(tmp_path)
    yield coord
    coord.stop()


def fast_backoff() -> Backoff:
    return Backoff(base_s=0.1, factor=1.5, cap_s=0.5, jitter=0.2)


def wait_until(cond, seconds: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.mark.slow
def test_a_publish_during_an_outage_goes_out_once_the_coordinator_is_up(late, tmp_path) -> None:
    path = write_model(tmp_path / f"{A}.onnx", A)
    lines: list[str] = []
    pub = Publisher(
        late.address, late.trainer_token, backoff=fast_backoff(), timeout_s=60, report=lines.append
    )
    try:
        pub.submit(path)
        wait_until(lambda: pub.attempts >= 3)  # refused connections, retried with backoff
        assert pub.pending == path and not pub.published
        assert any("UNAVAILABLE" in line and "retrying" in line for line in lines)
        late.start()
        assert pub.wait(120), lines[-3:]
    finally:
        pub.close()
    assert pub.published == [A]
    assert path.with_name(path.name + PUBLISHED_SUFFIX).exists()
    assert late.models() == {A: common_pb2.MODEL_STATUS_RELEASED}
    assert unpublished_candidate(tmp_path) is None


@pytest.mark.slow
def test_a_newer_candidate_supersedes_a_waiting_one(late, tmp_path) -> None:
    old = write_model(tmp_path / f"{A}.onnx", A)
    new = write_model(tmp_path / f"{B}.onnx", B)
    lines: list[str] = []
    pub = Publisher(
        late.address, late.trainer_token, backoff=fast_backoff(), timeout_s=60, report=lines.append
    )
    try:
        pub.submit(old)
        wait_until(lambda: pub.attempts >= 2)
        pub.submit(new)
        assert f"{A}.onnx not published: superseded by {B}.onnx" in lines
        late.start()
        assert pub.wait(120), lines[-3:]
    finally:
        pub.close()
    assert pub.published == [B]
    assert late.models() == {B: common_pb2.MODEL_STATUS_RELEASED}


@pytest.mark.slow
def test_a_refusal_is_final_and_noted(late, tmp_path) -> None:
    late.start()
    late.wait_up()
    bad = tmp_path / f"{A}.onnx"
    # Passes the trainer's own checks (name, feature version, precision); the coordinator's
    # model check refuses board sizes over 19.
    write_model(bad, A, board_sizes=(20,))
    lines: list[str] = []
    pub = Publisher(
        late.address, late.trainer_token, backoff=fast_backoff(), timeout_s=60, report=lines.append
    )
    try:
        pub.submit(bad)
        assert pub.wait(120)
    finally:
        pub.close()
    assert pub.attempts == 1 and not pub.published
    assert sum("refused by the coordinator: INVALID_ARGUMENT" in line for line in lines) == 1, lines
    note = bad.with_name(bad.name + REFUSED_SUFFIX).read_text()
    assert note.startswith("INVALID_ARGUMENT") and "board_sizes" in note
    assert unpublished_candidate(tmp_path) is None  # not retried at the next start either
    assert late.models() == {}


def test_unpublished_candidate_is_the_newest_export_only(tmp_path) -> None:
    for name in (A, B, "kg-b1c8-s5-d50"):
        (tmp_path / f"{name}.onnx").write_bytes(b"")
    (tmp_path / "notes.onnx").write_bytes(b"")
    assert unpublished_candidate(tmp_path) == tmp_path / f"{B}.onnx"
    (tmp_path / f"{B}.onnx{PUBLISHED_SUFFIX}").write_text("sha\n")
    assert unpublished_candidate(tmp_path) is None  # the older ones were superseded by B


@pytest.mark.slow
def test_a_training_run_publishes_to_a_coordinator_that_starts_late(late, tmp_path, capsys) -> None:
    write_synthetic_run(tmp_path / "data", 1, 64, 8, 5)
    cfg = TrainConfig(
        data_dir=str(tmp_path / "data"),
        work_dir=str(tmp_path / "work"),
        blocks=1,
        channels=8,
        batch_size=16,
        steps_per_generation=2,
        min_new_rows=0,
        generations=1,
        publish=True,
        coordinator=late.address,
        token=late.trainer_token,
        poll_interval_s=0.05,
        prefetch=2,
        device="cpu",
        log_every_s=1e9,
    ).validate()
    models = tmp_path / "work" / "models"

    def start_late() -> None:  # once the first publish of the export has failed
        wait_until(lambda: any(models.glob("*.onnx")), 300)
        time.sleep(1.0)
        late.start()

    starter = threading.Thread(target=start_late, daemon=True)
    starter.start()
    state = run_training(cfg)  # ends once its candidate is in
    starter.join(60)
    out = capsys.readouterr()
    text = out.out + out.err
    name = state.last_model
    assert f"publishing {name}.onnx failed (UNAVAILABLE" in text
    assert f"published {name}" in text
    assert late.models() == {name: common_pb2.MODEL_STATUS_RELEASED}
    assert (tmp_path / "work" / "models" / f"{name}.onnx{PUBLISHED_SUFFIX}").exists()
