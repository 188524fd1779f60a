"""The network, its ONNX export and metadata: real torch model, real ONNX Runtime session."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from kgrpc.schema import FEATURE_VERSION, NUM_GLOBALS, NUM_PLANES
from trainer.cli import main as train_main
from trainer.export import (
    ParityError,
    check_parity,
    default_name,
    export_onnx,
    random_inputs,
    read_metadata,
)
from trainer.model import SCORE_SCALE, KgrpcNet, parse_arch


@pytest.fixture(scope="module")
def trained_like(tmp_path_factory: pytest.TempPathFactory) -> tuple[KgrpcNet, str]:
    torch.manual_seed(3)
    model = KgrpcNet(2, 16)
    # Non-trivial BatchNorm statistics, as a trained net would have.
    model.train()
    with torch.no_grad():
        for n in (9, 19):
            p, g = random_inputs(8, n, seed=n)
            model(torch.from_numpy(p), torch.from_numpy(g))
    model.eval()
    path = tmp_path_factory.mktemp("m") / "net.onnx"
    export_onnx(
        model,
        path,
        name="kg-b2c16-s100-d5000",
        board_sizes=[19, 9],
        training_steps=100,
        training_rows=5000,
    )
    return model, str(path)


def test_forward_shapes_any_board_size() -> None:
    model = KgrpcNet(2, 8).eval()
    for n in (5, 9, 13, 19):
        policy, value, score, own = model(
            torch.rand(3, NUM_PLANES, n, n), torch.rand(3, NUM_GLOBALS)
        )
        assert policy.shape == (3, n * n + 1)
        assert value.shape == score.shape == (3,)
        assert own.shape == (3, n, n)
        assert value.abs().max() <= 1 and own.abs().max() <= 1


def test_arch_names() -> None:
    assert KgrpcNet(6, 96).arch_name == "b6c96"
    assert KgrpcNet.from_arch("b3c24").arch_name == "b3c24"
    assert KgrpcNet.from_arch(blocks=1, channels=8).arch_name == "b1c8"
    assert parse_arch("b10c128") == (10, 128)
    with pytest.raises(ValueError, match="b<blocks>c<channels>"):
        parse_arch("6x96")
    assert default_name(6, 96) == "kg-b6c96-s0-d0"


@pytest.mark.parametrize("n", [9, 19, 7])
def test_torch_vs_onnxruntime_parity(trained_like: tuple[KgrpcNet, str], n: int) -> None:
    model, path = trained_like
    assert check_parity(model, path, n, batch=5) < 2e-3


def test_parity_detects_a_different_model(trained_like: tuple[KgrpcNet, str]) -> None:
    _, path = trained_like
    torch.manual_seed(99)
    other = KgrpcNet(2, 16).eval()
    with pytest.raises(ParityError):
        check_parity(other, path, 9)


def test_onnx_io_contract(trained_like: tuple[KgrpcNet, str]) -> None:
    _, path = trained_like
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    assert [i.name for i in sess.get_inputs()] == ["bin_input", "global_input"]
    assert [o.name for o in sess.get_outputs()] == ["policy", "value", "score", "ownership"]
    assert all(i.type == "tensor(float)" for i in sess.get_inputs())
    assert all(o.type == "tensor(float)" for o in sess.get_outputs())
    # Batch 1 and 33 at two sizes from the same file: dynamic batch and board axes.
    for batch, n in ((1, 9), (33, 19), (4, 5)):
        p, g = random_inputs(batch, n)
        policy, value, score, own = sess.run(None, {"bin_input": p, "global_input": g})
        assert policy.shape == (batch, n * n + 1)
        assert value.shape == score.shape == (batch,)
        assert own.shape == (batch, n, n)
    # One self-contained file: no external data references.
    proto = onnx.load(path, load_external_data=False)
    assert not any(t.data_location == onnx.TensorProto.EXTERNAL for t in proto.graph.initializer)


def test_metadata(trained_like: tuple[KgrpcNet, str]) -> None:
    _, path = trained_like
    meta = read_metadata(path)
    assert meta == {
        "name": "kg-b2c16-s100-d5000",
        "blocks": "2",
        "channels": "16",
        "board_sizes": "9,19",
        "feature_version": str(FEATURE_VERSION),
        "training_steps": "100",
        "training_rows": "5000",
        "precision": "fp32",
    }
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    assert sess.get_modelmeta().custom_metadata_map["kgrpc.name"] == "kg-b2c16-s100-d5000"


def test_score_scale_applied(trained_like: tuple[KgrpcNet, str]) -> None:
    model, _ = trained_like
    p, g = random_inputs(4, 9)
    with torch.no_grad():
        x = torch.from_numpy(p)
        _, _, score, _ = model(x, torch.from_numpy(g))
        # Recompute the head by hand: score is the raw second output times SCORE_SCALE.
        h = model.stem(x) + model.stem_global(torch.from_numpy(g))[:, :, None, None]
        h = torch.relu(model.stem_bn(h))
        for block in model.tower:
            h = block(h)
        v = torch.relu(model.value_bn(model.value_conv(h)))
        raw = model.value_out(torch.relu(model.value_fc(model.pool(v))))[:, 1]
    np.testing.assert_allclose(score.numpy(), raw.numpy() * SCORE_SCALE, rtol=1e-6)


def test_bad_board_sizes_rejected(tmp_path) -> None:
    with pytest.raises(ValueError, match="board_sizes"):
        export_onnx(KgrpcNet(1, 8), tmp_path / "x.onnx", name="x", board_sizes=[])
    assert not (tmp_path / "x.onnx").exists()


def test_read_metadata_rejects_foreign_onnx(tmp_path) -> None:
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("Identity", ["x"], ["y"])],
        "g",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1])],
    )
    onnx.save(onnx.helper.make_model(graph), tmp_path / "foreign.onnx")
    with pytest.raises(ValueError, match="not a kgrpc model"):
        read_metadata(tmp_path / "foreign.onnx")


@pytest.mark.slow
def test_cli_init_writes_a_runnable_model(tmp_path) -> None:
    out = tmp_path / "sub" / "init.onnx"
    rc = train_main(
        [
            "init",
            "--board-size",
            "9",
            "--board-size",
            "19",
            "--blocks",
            "1",
            "--channels",
            "8",
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    meta = read_metadata(out)
    assert meta["name"] == "kg-b1c8-s0-d0" and meta["board_sizes"] == "9,19"
    assert [p.name for p in out.parent.iterdir()] == ["init.onnx"]  # no temp file left
    sess = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    p, g = random_inputs(2, 9)
    policy = sess.run(["policy"], {"bin_input": p, "global_input": g})[0]
    # Warmed BatchNorm: a fresh net still gives position-dependent, non-constant policies.
    assert np.std(policy[0]) > 1e-3
    assert not np.allclose(policy[0], policy[1])
