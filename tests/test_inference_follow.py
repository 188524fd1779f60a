"""Coordinator-follow mode: a real in-process coordinator publishes, the server follows."""

from __future__ import annotations

import asyncio
import hashlib
import shutil
from pathlib import Path

import pytest

from inference.cli import build_parser
from inference.client import InferenceClient
from inference.config import load_config
from inference.follow import CoordinatorFollower
from inference.models import ModelRegistry
from inference.server import InferenceServer
from kgrpc.coordinator.testing import start_coordinator
from kgrpc.evaluator import EvaluationError
from kgrpc.schema import FEATURE_VERSION
from kgrpc.v1 import coordinator_pb2, coordinator_pb2_grpc
from tests.inference_helpers import make_model, positions
from tests.tls_helpers import self_signed_cert

A, B = "kg-b1c8-s0-d0", "kg-b1c8-s100-d1000"


async def publish(coord, path: Path, name: str, steps: int, rows: int) -> None:  # type: ignore[no-untyped-def]
    data = path.read_bytes()
    header = coordinator_pb2.PublishHeader(
        name=name,
        sha256=hashlib.sha256(data).hexdigest(),
        size_bytes=len(data),
        blocks=1,
        channels=8,
        training_steps=steps,
        training_rows=rows,
        feature_version=FEATURE_VERSION,
    )
    reqs = [coordinator_pb2.PublishModelRequest(header=header)]
    reqs += [
        coordinator_pb2.PublishModelRequest(data=data[i : i + 65536])
        for i in range(0, len(data), 65536)
    ]
    async with coord.channel("trainer") as ch:
        await coordinator_pb2_grpc.CoordinatorStub(ch).PublishModel(iter(reqs))


async def wait_for(cond, what: str) -> None:  # type: ignore[no-untyped-def]
    for _ in range(1000):
        if cond():
            return
        await asyncio.sleep(0.01)
    pytest.fail(f"timed out waiting for {what}")


@pytest.mark.slow
async def test_follows_releases_and_fetches_on_demand(tmp_path: Path) -> None:
    coord = await start_coordinator(tmp_path, gating_enabled=False)
    path_a = make_model(tmp_path / "a.onnx", A, seed=0)
    path_b = make_model(tmp_path / "b.onnx", B, seed=1)
    await publish(coord, path_a, A, 0, 0)

    reg = ModelRegistry(device="cpu", intra_threads=1, on_demand_grace_s=0.0)
    follower = CoordinatorFollower(
        coord.address, coord.worker_token, tmp_path / "cache", reg, retry_s=0.05
    )
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


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl CLI")
async def test_follows_a_tls_coordinator(tmp_path: Path) -> None:
    key, cert = self_signed_cert(tmp_path)
    coord = await start_coordinator(
        tmp_path, gating_enabled=False, tls_cert=str(cert), tls_key=str(key)
    )
    await publish(coord, make_model(tmp_path / "a.onnx", A, seed=0), A, 0, 0)
    reg = ModelRegistry(device="cpu", intra_threads=1)
    # the flag's value goes through the config, as `kgrpc-inference --coordinator-tls-ca`
    cfg = load_config(
        None,
        {
            "coordinator": coord.address,
            "token": coord.worker_token,
            "coordinator_tls_ca": str(cert),
        },
    )
    follower = CoordinatorFollower(
        cfg.coordinator,
        cfg.token,
        tmp_path / "cache",
        reg,
        retry_s=0.05,
        tls_ca=cfg.coordinator_tls_ca,
    )
    task = asyncio.ensure_future(follower.run())
    try:
        await wait_for(lambda: reg.default == A, "release over TLS")
        assert follower.releases_loaded == 1
        assert (tmp_path / "cache" / f"{A}.onnx").read_bytes() == (tmp_path / "a.onnx").read_bytes()
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await follower.close()
        await reg.close()
        await coord.stop()


def test_coordinator_tls_ca_flag_and_toml_key(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n(checked by the handshake)\n")
    args = build_parser().parse_args(["--coordinator", "c:1", "--coordinator-tls-ca", str(ca)])
    assert args.coordinator_tls_ca == str(ca)
    # --tls-ca is the name every client gives the CA of the servers it dials
    args = build_parser().parse_args(["--coordinator", "c:1", "--tls-ca", str(ca)])
    assert args.coordinator_tls_ca == str(ca)
    toml = tmp_path / "inf.toml"
    toml.write_text(f'[inference]\ncoordinator = "c:1"\ncoordinator_tls_ca = "{ca}"\n')
    assert load_config(str(toml), {}).coordinator_tls_ca == str(ca)
    with pytest.raises(ValueError, match="not a file"):
        load_config(
            None, {"coordinator": "c:1", "coordinator_tls_ca": str(tmp_path / "missing.pem")}
        )
    with pytest.raises(ValueError, match="only used with --coordinator"):
        load_config(None, {"models": ["m.onnx"], "coordinator_tls_ca": str(ca)})
    toml.write_text("not a certificate")
    with pytest.raises(ValueError, match="no PEM certificate"):
        load_config(None, {"coordinator": "c:1", "coordinator_tls_ca": str(toml)})


@pytest.mark.slow
async def test_a_release_that_fails_to_load_does_not_stop_the_following(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    coord = await start_coordinator(tmp_path, gating_enabled=False)
    C = "kg-b1c8-s200-d2000"
    paths = {n: make_model(tmp_path / f"{n}.onnx", n, seed=i) for i, n in enumerate([A, B, C])}
    reg = ModelRegistry(device="cpu", intra_threads=1)
    real_load = reg.load

    async def load(path: str, **kw):  # type: ignore[no-untyped-def]
        if Path(path).stem == B:  # e.g. an operator published a file ORT cannot run here
            raise RuntimeError("[ONNXRuntimeError] : 10 : INVALID_GRAPH")
        return await real_load(path, **kw)

    monkeypatch.setattr(reg, "load", load)
    follower = CoordinatorFollower(
        coord.address, coord.worker_token, tmp_path / "cache", reg, retry_s=0.05, max_retry_s=0.1
    )
    task = asyncio.ensure_future(follower.run())
    try:
        await publish(coord, paths[A], A, 0, 0)
        await wait_for(lambda: reg.default == A, "first release")
        await publish(coord, paths[B], B, 100, 1000)
        await asyncio.sleep(0.3)
        assert reg.default == A and not task.done()  # still serving A, still following
        await publish(coord, paths[C], C, 200, 2000)
        await wait_for(lambda: reg.default == C, "the next good release")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await follower.close()
        await reg.close()
        await coord.stop()
