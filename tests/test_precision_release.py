"""One release, several files (issue 13): fp32, fp16 and int8 files of one model through a real
coordinator, downloaded by the worker's cache and the inference server's follower, evaluated.

Real exports of tiny nets (b1c8 at 5x5 and 9x9, as tests/test_precision*.py), a real
coordinator and inference server on loopback ports. A tiny random net's nearly flat policy
makes top-1 agreement a coin toss between near-ties (precision_helpers.py explains), so the
coordinators here check parity within the looser bounds ``LOOSE``; a file of another network
is far outside them all the same.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import grpc
import numpy as np
import onnx
import pytest
import torch

from inference.client import InferenceClient
from inference.engine import Engine
from inference.follow import CoordinatorFollower
from inference.models import ModelRegistry
from inference.server import InferenceServer
from kgrpc import protocol
from kgrpc.coordinator.testing import RunningCoordinator
from kgrpc.digest import file_digest
from kgrpc.precision import to_proto, variant_path
from kgrpc.protocol import PRECISION_ABSENT
from kgrpc.schema import MODEL_META_PREFIX
from kgrpc.v1 import common_pb2, coordinator_pb2, coordinator_pb2_grpc
from kgrpc.worker.config import WorkerConfig
from kgrpc.worker.evaluators import Evaluators
from kgrpc.worker.models import ModelCache
from tests.dashboard_helpers import get_json, http_url
from tests.inference_helpers import positions
from tests.precision_helpers import ALL, LOOSE
from trainer.export import export_precisions
from trainer.model import KgrpcNet
from trainer.naming import parse_name
from trainer.positions import draw_sets
from trainer.publish import build_header, publish_release

A, B = "kg-b1c8-s0-d0", "kg-b1c8-s100-d1000"
COORD = dict(
    parity_min_top1=LOOSE.min_top1,
    parity_max_kl=LOOSE.max_kl,
    parity_max_value_mae=LOOSE.max_value_mae,
    parity_max_score_mae=LOOSE.max_score_mae,
)
P = {p: to_proto(p) for p in ALL}


@dataclass(frozen=True)
class Exports:
    a: Path  # A's fp32 file; its fp16 and int8 files beside it
    b: Path  # B's, another network
    other_a: Path  # an int8 file named A, of B's network (A's fp32 beside it)


def _export(path: Path, name: str, seed: int, precisions: list[str]) -> Path:
    torch.manual_seed(seed)
    parsed = parse_name(name)
    outcome = export_precisions(
        KgrpcNet(1, 8).eval(),
        path,
        precisions,
        name=name,
        board_sizes=[5, 9],
        training_steps=parsed.steps,
        training_rows=parsed.rows,
        sets=draw_sets([5, 9], 64, seed=1),
        bounds=LOOSE,
    )
    assert outcome.ok, outcome.refused
    return path


@pytest.fixture(scope="module")
def exports(tmp_path_factory: pytest.TempPathFactory) -> Exports:
    root = tmp_path_factory.mktemp("exports")
    a = _export(root / "a" / f"{A}.onnx", A, 3, list(ALL))
    b = _export(root / "b" / f"{B}.onnx", B, 4, list(ALL))
    other = _export(root / "other" / f"{A}.onnx", A, 4, ["int8"])
    (root / "other" / f"{A}.onnx").write_bytes(a.read_bytes())
    return Exports(a, b, other)


async def _coordinator(factory, **kw) -> RunningCoordinator:  # type: ignore[no-untyped-def]
    return await factory(**{**COORD, **kw})


def _requests(header: coordinator_pb2.PublishHeader, data: bytes):  # type: ignore[no-untyped-def]
    yield coordinator_pb2.PublishModelRequest(header=header)
    for i in range(0, len(data), 65536):
        yield coordinator_pb2.PublishModelRequest(data=data[i : i + 65536])


async def publish_file(
    coord: RunningCoordinator, path: Path, **header_changes: object
) -> coordinator_pb2.PublishModelResponse:
    """Publish one file with the header the trainer builds from it (``header_changes`` and a
    file whose name lies about it make bad publishes)."""
    header = build_header(path)
    for key, value in header_changes.items():
        setattr(header, key, value)
    async with coord.channel("trainer") as ch:
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)
        return await stub.PublishModel(_requests(header, path.read_bytes()))


async def download(stub, name: str, precision: str) -> tuple[bytes, coordinator_pb2.ModelChunk]:  # type: ignore[no-untyped-def]
    data, first = b"", None
    req = coordinator_pb2.DownloadModelRequest(name=name, precision=P[precision])
    async for chunk in stub.DownloadModel(req):
        first = first or chunk
        data += chunk.data
    assert first is not None
    return data, first


def _files(info: common_pb2.ModelInfo) -> dict[int, tuple[int, str]]:
    return {f.precision: (f.size_bytes, f.sha256) for f in info.files}


def _want_files(fp32: Path, precisions=ALL) -> dict[int, tuple[int, str]]:  # type: ignore[no-untyped-def]
    out = {}
    for p in precisions:
        data = variant_path(fp32, p).read_bytes()
        out[P[p]] = (len(data), hashlib.sha256(data).hexdigest())
    return out


# --- the coordinator ---------------------------------------------------------------------------


async def test_publish_download_and_evaluate_each_precision(
    coordinator_factory, exports: Exports, tmp_path: Path
) -> None:
    coord = await _coordinator(coordinator_factory, http_listen="127.0.0.1:0")
    # The trainer's publish: the fp32 file first (it creates the model), then the others.
    outcome = await publish_release(coord.address, coord.trainer_token, exports.a)
    assert outcome.sent == list(ALL) and not outcome.refused
    info = outcome.response.model
    assert info.status == common_pb2.MODEL_STATUS_RELEASED  # the run's first model
    assert [f.precision for f in info.files] == [P[p] for p in ALL]
    assert _files(info) == _want_files(exports.a)
    assert (info.size_bytes, info.sha256) == _want_files(exports.a)[P["fp32"]]
    for p in ALL:
        stored = coord.data_dir / "models" / variant_path(f"{A}.onnx", p).name
        assert stored.read_bytes() == variant_path(exports.a, p).read_bytes()

    async with coord.channel("worker") as ch:
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)
        (listed,) = (await stub.ListModels(coordinator_pb2.ListModelsRequest())).models
        assert _files(listed) == _want_files(exports.a)
        for p in ALL:
            data, first = await download(stub, A, p)
            assert data == variant_path(exports.a, p).read_bytes()
            assert first.file.precision == P[p] and first.file.sha256 == sha256_of(data)
            assert first.info.name == A and len(first.info.files) == 3
            local = tmp_path / variant_path(f"{A}.onnx", p).name
            local.write_bytes(data)
        # No precision named: the fp32 file, as for a client older than precisions.
        async for chunk in stub.DownloadModel(coordinator_pb2.DownloadModelRequest(name=A)):
            assert chunk.file.precision == P["fp32"]
            break

    # The dashboard offers every file of the release, each under its own name.
    base = http_url(coord)
    (model,) = await get_json(base + "/api/models")
    assert [f["precision"] for f in model["files"]] == list(ALL)
    async with aiohttp.ClientSession() as http:
        for f in model["files"]:
            async with http.get(base + f["download"]) as r:
                assert r.status == 200 and f["download"].endswith(r.content_disposition.filename)
                assert await r.read() == variant_path(exports.a, f["precision"]).read_bytes()
        async with http.get(f"{base}/models/{B}.int8.onnx") as r:  # not published
            assert r.status == 404

    # Each downloaded file evaluates through a real inference server, in its precision.
    planes, g = positions(6, 9, 2)
    values = {}
    for p in ALL:
        reg = ModelRegistry(device="cpu", precision=p, intra_threads=1, max_delay_ms=1)
        await reg.load(str(tmp_path / f"{A}.onnx"), pinned=True)
        server = InferenceServer(reg)
        client = InferenceClient(f"127.0.0.1:{await server.start('127.0.0.1:0')}")
        try:
            (loaded,) = (await client.model_info()).models
            assert loaded.sha256 == file_digest(tmp_path / variant_path(f"{A}.onnx", p).name).sha256
            res = await client.evaluate(planes, g)
            assert res.model == A and res.policy.shape == (6, 82)
            values[p] = res.value
        finally:
            await client.close()
            await server.stop(0)
    np.testing.assert_allclose(values["fp16"], values["fp32"], atol=5e-3)
    np.testing.assert_allclose(values["int8"], values["fp32"], atol=LOOSE.max_value_mae * 4)


def sha256_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


async def test_a_file_added_to_the_release_is_announced_gating_untouched(
    coordinator_factory, exports: Exports
) -> None:
    coord = await _coordinator(coordinator_factory, gating_enabled=True)
    await publish_file(coord, exports.a)
    async with coord.channel("worker") as ch:
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)
        watch = stub.WatchModels(coordinator_pb2.WatchModelsRequest())
        it = watch.__aiter__()
        first = (await it.__anext__()).model
        assert first.name == A and [f.precision for f in first.files] == [P["fp32"]]

        # A candidate gains a file: still a candidate, its match as it was, nothing announced.
        cand = await publish_file(coord, exports.b)
        assert cand.gating_scheduled and cand.model.status == common_pb2.MODEL_STATUS_CANDIDATE
        added = await publish_file(coord, variant_path(exports.b, "int8"))
        assert added.gating_scheduled and added.model.status == common_pb2.MODEL_STATUS_CANDIDATE
        assert _files(added.model) == _want_files(exports.b, ("fp32", "int8"))
        stats = await stub.GetStats(coordinator_pb2.GetStatsRequest())
        assert [(m.candidate_model, m.reference_model, m.decision) for m in stats.matches] == [
            (B, A, "pending")
        ]
        task = await stub.GetTask(coordinator_pb2.GetTaskRequest(worker_id=""))
        assert task.WhichOneof("kind") in ("selfplay", "match")
        if task.WhichOneof("kind") == "selfplay":
            assert task.selfplay.model == A  # the release is still A

        # The release gains a file: announced again, with its files; B's int8 was not.
        released = await publish_file(coord, variant_path(exports.a, "int8"))
        assert not released.gating_scheduled
        again = (await asyncio.wait_for(it.__anext__(), 30)).model
        assert again.name == A and [f.precision for f in again.files] == [P["fp32"], P["int8"]]
        assert again.status == common_pb2.MODEL_STATUS_RELEASED
        watch.cancel()
        latest = await stub.GetLatestModel(coordinator_pb2.GetLatestModelRequest())
        assert latest.model.name == A and len(latest.model.files) == 2


async def test_precision_files_are_checked_and_refused(
    coordinator_factory, exports: Exports, tmp_path: Path
) -> None:
    coord = await _coordinator(coordinator_factory)
    models_dir = coord.data_dir / "models"
    a_int8, a_fp16 = variant_path(exports.a, "int8"), variant_path(exports.a, "fp16")

    async def refused(path: Path, code: grpc.StatusCode, fragment: str, **kw: object) -> None:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await publish_file(coord, path, **kw)
        assert err.value.code() == code, err.value.details()
        assert fragment in err.value.details(), err.value.details()

    # Before its fp32 file, a model does not exist: nothing to add a file to.
    await refused(a_int8, grpc.StatusCode.FAILED_PRECONDITION, "publish its fp32 file first")
    assert list(models_dir.iterdir()) == []
    await publish_file(coord, exports.a)

    # The header's precision must be the file's own (metadata), and the graph's.
    await refused(
        a_fp16,
        grpc.StatusCode.INVALID_ARGUMENT,
        "kgrpc.precision is fp16, but it is published as the int8 file",
        precision=P["int8"],
    )
    fake = tmp_path / f"{A}.int8.onnx"  # the fp32 graph, its metadata saying int8
    proto = onnx.load(str(exports.a))
    for prop in proto.metadata_props:
        if prop.key == MODEL_META_PREFIX + "precision":
            prop.value = "int8"
    fake.write_bytes(proto.SerializeToString())
    await refused(fake, grpc.StatusCode.INVALID_ARGUMENT, "int8 graph")
    # Another network under the model's name: parity against the stored fp32 file.
    await refused(
        variant_path(exports.other_a, "int8"),
        grpc.StatusCode.INVALID_ARGUMENT,
        "not the same network as the model's fp32 file",
    )
    await refused(
        a_int8, grpc.StatusCode.INVALID_ARGUMENT, "unknown precision value 9", precision=9
    )
    assert sorted(p.name for p in models_dir.iterdir()) == [f"{A}.onnx"]

    # Accepted once; the same file again is the same answer; other content is refused.
    first = await publish_file(coord, a_int8)
    again = await publish_file(coord, a_int8)
    assert _files(first.model) == _files(again.model) == _want_files(exports.a, ("fp32", "int8"))
    await refused(
        variant_path(exports.other_a, "int8"),
        grpc.StatusCode.ALREADY_EXISTS,
        "already has a int8 file with different content",
    )

    async with coord.channel("worker") as ch:
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await download(stub, A, "fp16")
        assert err.value.code() == grpc.StatusCode.NOT_FOUND
        assert err.value.details().startswith(f"{PRECISION_ABSENT}: model {A!r} has no fp16 file")
        info = protocol.error_info(err.value)  # the structured form beside the message
        assert info is not None and info.reason == "PRECISION_ABSENT"
        assert dict(info.metadata) == {"model": A, "precision": "fp16", "available": "fp32,int8"}
        assert protocol.is_precision_absent(err.value)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await download(stub, B, "int8")
        assert err.value.code() == grpc.StatusCode.NOT_FOUND
        assert not err.value.details().startswith(PRECISION_ABSENT)
        assert protocol.error_info(err.value) is None
        assert not protocol.is_precision_absent(err.value)
        req = coordinator_pb2.DownloadModelRequest(name=A, precision=7)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            async for _ in stub.DownloadModel(req):
                pass
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_trainer_release_goes_on_without_a_refused_file(
    coordinator_factory, exports: Exports
) -> None:
    coord = await _coordinator(coordinator_factory)
    # The "other" release: A's fp32 file and an int8 file of another network beside it.
    outcome = await publish_release(coord.address, coord.trainer_token, exports.other_a)
    assert outcome.sent == ["fp32"] and list(outcome.refused) == ["int8"]
    assert "INVALID_ARGUMENT" in outcome.refused["int8"]
    assert [f.precision for f in outcome.response.model.files] == [P["fp32"]]
    # Published again (a retry): the fp32 file is answered as stored, the int8 refused again.
    outcome = await publish_release(coord.address, coord.trainer_token, exports.other_a)
    assert outcome.sent == ["fp32"] and list(outcome.refused) == ["int8"]


@pytest.mark.skipif(
    os.environ.get("KGRPC_TEST_INDEX") == "postgresql",
    reason="an index written by an older version is a SQLite file",
)
async def test_an_index_from_before_precisions_keeps_its_models_as_fp32(
    coordinator_factory, exports: Exports
) -> None:
    coord = await _coordinator(coordinator_factory)
    await publish_release(coord.address, coord.trainer_token, exports.a)
    await coord.stop()
    db = coord.data_dir / "coordinator.sqlite3"
    with sqlite3.connect(db) as conn:  # what an older coordinator's index holds
        conn.execute("DROP TABLE model_files")
    coord = await _coordinator(coordinator_factory, data_dir=str(coord.data_dir))
    async with coord.channel("worker") as ch:
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)
        (info,) = (await stub.ListModels(coordinator_pb2.ListModelsRequest())).models
        assert _files(info) == _want_files(exports.a, ("fp32",))
        data, _ = await download(stub, A, "fp32")
        assert data == exports.a.read_bytes()
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await download(stub, A, "int8")
        assert err.value.details().startswith(PRECISION_ABSENT)
    # Its int8 file can be published again, now that the model has a files index.
    added = await publish_file(coord, variant_path(exports.a, "int8"))
    assert _files(added.model) == _want_files(exports.a, ("fp32", "int8"))


# --- the worker's model cache and in-process engine ----------------------------------------


def _worker(coord: RunningCoordinator, work: Path, precision: str) -> WorkerConfig:
    return WorkerConfig(
        coordinator=coord.address,
        token=coord.worker_token,
        work_dir=work,
        inference="local",
        device="cpu",
        precision=precision,
        max_batch=8,
        quiet=True,
    )


@pytest.mark.usefixtures("int8_cpu")
async def test_worker_downloads_the_precision_it_is_set_to(
    coordinator_factory, exports: Exports, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    coord = await _coordinator(coordinator_factory)
    for p in ("fp32", "int8"):  # no fp16 file in this release
        await publish_file(coord, variant_path(exports.a, p))
    int8 = variant_path(exports.a, "int8").read_bytes()
    async with coord.channel("worker") as ch:
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)
        # int8 asked for: the int8 file, loaded in-process as int8.
        cfg = _worker(coord, tmp_path / "w8", "int8")
        ev = Evaluators(cfg, ModelCache(cfg.model_path))
        try:
            await ev.prepare(stub, A)
            cached = cfg.model_path / f"{A}.int8.onnx"
            assert cached.read_bytes() == int8
            assert file_digest(cached).sha256 == sha256_of(int8)
            assert not (cfg.model_path / f"{A}.onnx").exists()  # fp32 not fetched
            evaluator, arg = ev.get(A)
            assert ev.local.registry.models[arg].engine.precision == "int8"
            planes, g = positions(3, 5, 4)
            res = await evaluator.evaluate(planes, g, model=arg)
            want = Engine(exports.a, device="cpu", precision="int8").run_float(
                planes.astype(np.float32), g
            )
            np.testing.assert_allclose(res.value, want[1], atol=1e-5)
        finally:
            await ev.close()

        # fp16 asked for, the release has none: the fp32 file, said once in the log.
        caplog.set_level(logging.INFO, logger="kgrpc.worker.models")
        cache = ModelCache(tmp_path / "w16")
        path, precision = await cache.ensure_precision(stub, A, "fp16", on_cuda=True)
        assert precision == "fp32" and path.read_bytes() == exports.a.read_bytes()
        assert not (tmp_path / "w16" / f"{A}.fp16.onnx").exists()
        again = await cache.ensure_precision(stub, A, "fp16", on_cuda=True)
        assert again == (path, "fp32") and cache.downloads == 1
        notes = [r.getMessage() for r in caplog.records if "no fp16 file" in r.getMessage()]
        assert len(notes) == 1 and A in notes[0] and "using fp32" in notes[0]

        # With the release's ModelInfo the files are known up front (no failed request);
        # auto on a CPU takes int8, on CUDA (no fp16 here) fp32.
        (info,) = (await stub.ListModels(coordinator_pb2.ListModelsRequest())).models
        cache = ModelCache(tmp_path / "wauto")
        path, precision = await cache.ensure_precision(stub, A, "auto", on_cuda=False, info=info)
        assert precision == "int8" and path.read_bytes() == int8
        path, precision = await cache.ensure_precision(stub, A, "auto", on_cuda=True, info=info)
        assert precision == "fp32" and path.read_bytes() == exports.a.read_bytes()
        # Pruning keeps a model's files together.
        assert cache.prune() == [] and len(list((tmp_path / "wauto").glob("*.onnx"))) == 2


# --- the inference server's follower ----------------------------------------------------------


async def _follow(coord: RunningCoordinator, cache_dir: Path, precision: str):  # type: ignore[no-untyped-def]
    reg = ModelRegistry(device="cpu", precision=precision, intra_threads=1, on_demand_grace_s=0)
    follower = CoordinatorFollower(coord.address, coord.worker_token, cache_dir, reg, retry_s=0.05)
    reg.fetcher = follower.fetch
    task = asyncio.ensure_future(follower.run())
    for _ in range(1000):
        if reg.default:
            break
        await asyncio.sleep(0.01)
    assert reg.default == A
    return reg, follower, task


@pytest.mark.usefixtures("int8_cpu")
async def test_inference_follower_downloads_the_precision_it_serves(
    coordinator_factory, exports: Exports, tmp_path: Path
) -> None:
    coord = await _coordinator(coordinator_factory, gating_enabled=True)
    for p in ("fp32", "int8"):
        await publish_file(coord, variant_path(exports.a, p))
    await publish_file(coord, exports.b)  # a candidate, fp32 only: fetched for a match
    for precision, want in (("int8", "int8"), ("auto", "int8"), ("fp16", "fp32")):
        cache = tmp_path / f"cache-{precision}"
        reg, follower, task = await _follow(coord, cache, precision)
        try:
            engine = reg.models[A].engine
            assert engine.precision == want
            assert Path(engine.path).read_bytes() == variant_path(exports.a, want).read_bytes()
            assert sorted(p.name for p in cache.glob("*.onnx")) == [
                variant_path(f"{A}.onnx", want).name
            ]
            async with reg.use(B) as model:  # on demand: B has no int8 file, fp32 it is
                assert model.engine.precision == "fp32"
                assert Path(model.engine.path).read_bytes() == exports.b.read_bytes()
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await follower.close()
            await reg.close()
