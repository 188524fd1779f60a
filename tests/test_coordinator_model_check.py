"""The publish check (issue 11, item 7): only files workers can load become models."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import grpc
import onnx
import pytest

from kgrpc.coordinator import model_check
from kgrpc.schema import FEATURE_VERSION
from kgrpc.v1 import common_pb2, coordinator_pb2, coordinator_pb2_grpc
from tests.model_files import model_bytes, publish


async def refused(coord, name: str, data: bytes, **kw) -> str:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await publish(coord, name, data, **kw)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, err.value.details()
    assert list((coord.data_dir / "models").iterdir()) == []  # nothing stored, no temp file
    async with coord.channel("worker") as ch:
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)
        assert not (await stub.ListModels(coordinator_pb2.ListModelsRequest())).models
        assert not (await stub.GetLatestModel(coordinator_pb2.GetLatestModelRequest())).found
    return err.value.details()


def restamped(data: bytes, **meta: str) -> bytes:
    proto = onnx.load_from_string(data)
    for prop in proto.metadata_props:
        key = prop.key.removeprefix("kgrpc.")
        if key in meta:
            prop.value = meta[key]
    return proto.SerializeToString()


async def test_random_bytes_with_a_matching_sha256_are_refused(coordinator) -> None:
    data = os.urandom(5000)
    detail = await refused(coordinator, "kg-b2c16-s0-d0", data)
    assert "not an ONNX model" in detail and "kg-b2c16-s0-d0" in detail


@pytest.mark.slow
async def test_a_b2c32_file_published_as_b40c256_is_refused(coordinator) -> None:
    real = model_bytes("kg-b2c32-s0-d0")
    # As it is: its metadata names another model.
    detail = await refused(coordinator, "kg-b40c256-s0-d0", real)
    assert "kgrpc.name is 'kg-b2c32-s0-d0'" in detail
    # Its metadata rewritten to the name: the graph still says b2c32.
    lying = restamped(real, name="kg-b40c256-s0-d0", blocks="40", channels="256")
    detail = await refused(coordinator, "kg-b40c256-s0-d0", lying)
    assert "the name says b40c256 but the graph is b2c32" in detail


async def test_feature_version_999_is_refused(coordinator) -> None:
    data = model_bytes("kg-b2c16-s0-d0", feature_version="999")
    detail = await refused(coordinator, "kg-b2c16-s0-d0", data)
    assert "feature version '999'" in detail


async def test_a_good_model_is_accepted_and_released(coordinator) -> None:
    resp = await publish(coordinator, "kg-b2c32-s0-d0", model_bytes("kg-b2c32-s0-d0"))
    assert resp.model.status == common_pb2.MODEL_STATUS_RELEASED
    model = resp.model
    assert (model.blocks, model.channels, model.feature_version) == (2, 32, FEATURE_VERSION)


# ---------------------------------------------------------------------- the check, in-process


def check(
    tmp_path: Path,
    data: bytes,
    name: str = "kg-b2c16-s0-d0",
    fv: int = FEATURE_VERSION,
    sizes: tuple[int, ...] = (),
) -> model_check.ModelFacts:
    path = tmp_path / "m.onnx"
    path.write_bytes(data)
    return model_check.check_model_file(path, name, fv, sizes)


def test_facts_of_a_good_file_and_the_sizes_it_was_run_at(tmp_path) -> None:
    facts = check(tmp_path, model_bytes("kg-b2c16-s0-d0"), sizes=(7, 19))
    assert (facts.blocks, facts.channels, facts.feature_version) == (2, 16, FEATURE_VERSION)
    assert facts.board_sizes == (5, 9) and facts.tested_sizes == (5, 7, 9, 19)


@pytest.mark.parametrize(
    ("meta", "fragment"),
    [
        (dict(training_steps="5"), "training_steps='5' disagrees"),
        (dict(channels="32"), "channels='32' disagrees"),
        (dict(board_sizes="9,25"), "sizes must be in 2..19"),
        (dict(board_sizes=""), "not a comma-separated list"),
        (dict(precision="int8"), "kgrpc.precision is int8, but it is published as the fp32 file"),
        (dict(precision="fp64"), "precision must be one of fp32, fp16, int8, got 'fp64'"),
    ],
)
def test_metadata_must_match_the_name(tmp_path, meta, fragment) -> None:
    with pytest.raises(model_check.ModelCheckError, match=fragment):
        check(tmp_path, restamped(model_bytes("kg-b2c16-s0-d0"), **meta))


def test_header_feature_version_must_be_the_files(tmp_path) -> None:
    with pytest.raises(model_check.ModelCheckError, match="header's feature_version is 0"):
        check(tmp_path, model_bytes("kg-b2c16-s0-d0"), fv=0)


def test_inputs_and_outputs_follow_the_contract(tmp_path) -> None:
    proto = onnx.load_from_string(model_bytes("kg-b2c16-s0-d0"))
    proto.graph.output.pop()  # no ownership output
    with pytest.raises(model_check.ModelCheckError, match="outputs .* exactly"):
        check(tmp_path, proto.SerializeToString())
    proto = onnx.load_from_string(model_bytes("kg-b2c16-s0-d0"))
    proto.graph.input[1].type.tensor_type.shape.dim[1].dim_param = "n"  # any number of globals
    want = r"global_input is FLOAT \[\?, \?\], .* FLOAT \[\?, 8\]"
    with pytest.raises(model_check.ModelCheckError, match=want):
        check(tmp_path, proto.SerializeToString())


def test_a_model_onnx_runtime_cannot_run_is_refused(tmp_path) -> None:
    proto = onnx.load_from_string(model_bytes("kg-b2c16-s0-d0"))
    # A tower weight of the wrong shape for its convolution: the checker's shape inference or
    # ONNX Runtime must catch it before any worker does.
    conv = next(n for n in proto.graph.node if n.op_type == "Conv" and n.input[0] != "bin_input")
    init = next(i for i in proto.graph.initializer if i.name == conv.input[1])
    init.CopyFrom(
        onnx.numpy_helper.from_array(onnx.numpy_helper.to_array(init)[:, :8].copy(), init.name)
    )
    with pytest.raises(model_check.ModelCheckError):
        check(tmp_path, proto.SerializeToString())


async def test_the_helper_process_times_out_and_comes_back(tmp_path) -> None:
    path = tmp_path / "m.onnx"
    path.write_bytes(model_bytes("kg-b2c16-s0-d0"))
    header = coordinator_pb2.PublishHeader(name="kg-b2c16-s0-d0", feature_version=FEATURE_VERSION)
    from kgrpc.coordinator.errors import CoordinatorError

    with pytest.raises(CoordinatorError) as err:
        await model_check.check_published(path, header, timeout_s=0.001)
    assert "did not finish" in err.value.message
    facts = await model_check.check_published(path, header)  # a fresh helper process
    assert facts.channels == 16


@pytest.mark.slow
def test_the_coordinator_refuses_to_start_without_the_extra(tmp_path) -> None:
    code = (
        "import sys; sys.modules['onnxruntime'] = None\n"
        "from kgrpc.coordinator.cli import main\n"
        f"sys.exit(main(['--listen', '127.0.0.1:0', '--data-dir', {str(tmp_path)!r}]))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert "onnxruntime cannot be imported" in last and "kgrpc[coordinator]" in last
