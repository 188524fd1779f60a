"""A coordinator's version floor (``min_worker_version``): Register refuses an older worker with
FAILED_PRECONDITION and a message saying what to install, and the worker stops on it (exit
status 2) instead of retrying; workers send their real version (kgrpc.__version__)."""

from __future__ import annotations

import logging
from pathlib import Path

import grpc
import pytest

from kgrpc import __version__, protocol
from kgrpc.coordinator.testing import start_coordinator
from kgrpc.net import make_channel
from kgrpc.v1 import coordinator_pb2, coordinator_pb2_grpc
from kgrpc.worker.daemon import Worker
from kgrpc.worker.source import VERSION
from tests.worker_helpers import worker_config


async def _register(address: str, token: str, version: str) -> coordinator_pb2.RegisterResponse:
    async with make_channel(address, token=token) as ch:
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)
        return await stub.Register(
            coordinator_pb2.RegisterRequest(username="v", hostname="h", version=version),
            timeout=10,
        )


def test_versions_compare_by_their_numbers() -> None:
    assert f"kgrpc-worker/{__version__}" == VERSION
    assert protocol.parse_version("kgrpc-worker/0.10.2") == (0, 10, 2)
    assert protocol.older_than("kgrpc-worker/0.9.9", "0.10")
    assert not protocol.older_than("kgrpc-worker/0.10", "0.10.0")
    assert not protocol.older_than("kgrpc-worker/1.0.0rc1", "0.10")
    assert protocol.older_than("kgrpc-worker/dev", "0.1")  # no numbers: older than any
    with pytest.raises(ValueError, match="not a version"):
        protocol.older_than("0.1", "latest")


async def test_register_refuses_an_older_worker_saying_what_to_install(tmp_path: Path) -> None:
    coord = await start_coordinator(tmp_path, min_worker_version="0.2.0")
    try:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await _register(coord.address, coord.worker_token, "kgrpc-worker/0.1.9")
        assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        details = err.value.details()
        assert protocol.is_version_too_old(err.value)
        # The structured form: an ErrorInfo in the status details trailer, beside the message
        # (which keeps the old prefix for clients of the last release).
        info = protocol.error_info(err.value)
        assert info is not None and info.domain == protocol.ERROR_DOMAIN
        assert info.reason == "VERSION_TOO_OLD" and details.startswith("version_too_old: ")
        assert dict(info.metadata) == {"minimum": "0.2.0", "version": "kgrpc-worker/0.1.9"}
        assert "accepts kgrpc workers 0.2.0 or newer" in details
        assert "this one is kgrpc-worker/0.1.9: install kgrpc 0.2.0 or newer" in details
        with pytest.raises(grpc.aio.AioRpcError) as unnamed:
            await _register(coord.address, coord.worker_token, "")
        assert "of no stated version" in unnamed.value.details()
        ok = await _register(coord.address, coord.worker_token, "kgrpc-worker/0.2")
        assert ok.worker_id
    finally:
        await coord.stop()


async def test_a_refused_worker_stops_with_the_message(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    coord = await start_coordinator(tmp_path, min_worker_version="99.0")
    try:
        worker = Worker(worker_config(coord.address, coord.worker_token, tmp_path / "w"))
        with caplog.at_level(logging.ERROR, logger="kgrpc.worker"):
            assert await worker.run(install_signals=False) == 2
        text = "\n".join(r.getMessage() for r in caplog.records)
        assert "install kgrpc 99.0 or newer" in text, text
        assert f"this one is kgrpc-worker/{__version__}" in text
    finally:
        await coord.stop()


async def test_without_a_floor_any_version_registers(tmp_path: Path) -> None:
    coord = await start_coordinator(tmp_path)
    try:
        assert (await _register(coord.address, coord.worker_token, "something/else")).worker_id
    finally:
        await coord.stop()


def test_a_bad_floor_is_refused_at_start() -> None:
    from kgrpc.coordinator.config import Config

    with pytest.raises(ValueError, match="min_worker_version 'latest'"):
        Config(data_dir="x", min_worker_version="latest").check()
