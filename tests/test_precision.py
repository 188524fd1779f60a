"""Network precisions (issue 13): the file names and the choice by device, fp16/int8 exports
with their metadata and parity figures, and the refusal of an export out of bounds
(test_precision_training.py: exports by the trainer; test_precision_loading.py: loading).

Real exports of tiny nets (b1c8 at 5x5 and 9x9, tests/precision_helpers.py), real ONNX Runtime
sessions; the looser bounds ``LOOSE`` are explained there.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
import torch

from kgrpc import precision as prec
from kgrpc.schema import FEATURE_VERSION, MODEL_PARITY_PREFIX
from tests.precision_helpers import ALL, LOOSE, NAME, Release, export_release, tiny_net
from trainer.export import ExportOutcome, export_precisions, read_metadata
from trainer.model import KgrpcNet
from trainer.parity import ParityBounds, ParityError, ParityReport, compare, torch_outputs
from trainer.positions import draw_sets, from_random_games
from trainer.quantize import TRUNK_SCOPES, check_fp16_graph, to_int8


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> Release:
    return export_release(tmp_path_factory.mktemp("release"))


# --- names and the choice by device --------------------------------------------------------


def test_variant_file_names() -> None:
    assert prec.variant_path("m/kg-b1c8-s0-d0.onnx", "int8") == Path("m/kg-b1c8-s0-d0.int8.onnx")
    assert prec.variant_path("m/x.fp16.onnx", "fp32") == Path("m/x.onnx")
    assert prec.variant_path("m/x.fp16.onnx", "int8") == Path("m/x.int8.onnx")
    assert prec.precision_of_path("x.int8.onnx") == "int8"
    assert prec.precision_of_path("x.onnx") == "fp32"
    assert prec.variant_file_name(NAME, "fp16") == f"{NAME}.fp16.onnx"
    assert prec.parse_precisions("int8, fp32,int8") == ["int8", "fp32"]
    for bad in ("fp8", "", "auto"):
        with pytest.raises(ValueError):
            prec.parse_precisions(bad)


@pytest.mark.parametrize(
    ("on_cuda", "cpu_int8", "available", "want"),
    [
        (True, True, ALL, "fp16"),
        (False, True, ALL, "int8"),
        # Without an int8 dot product the int8 file's 8-bit weights may saturate: fp32.
        (False, False, ALL, "fp32"),
        (False, False, ["int8", "fp16"], "int8"),  # the only files there: int8 before fp16
        (True, True, ["fp32", "int8"], "fp32"),
        (False, True, ["fp32", "fp16"], "fp32"),
        (False, True, ["int8"], "int8"),
        (False, True, ["fp16"], "fp16"),
        (True, False, ["int8"], "int8"),
    ],
)
def test_auto_precision_by_device(
    on_cuda: bool, cpu_int8: bool, available: list[str], want: str
) -> None:
    got = prec.choose_precision("auto", on_cuda=on_cuda, available=available, cpu_int8=cpu_int8)
    assert got == want
    assert prec.pick_file("auto", on_cuda=on_cuda, available=available, cpu_int8=cpu_int8) == (
        want,
        "",
    )


def test_auto_reads_this_cpu_unless_told(monkeypatch: pytest.MonkeyPatch) -> None:
    for fast, want in ((True, "int8"), (False, "fp32")):
        monkeypatch.setattr(prec, "cpu_int8_fast", lambda cpuinfo=None, fast=fast: fast)
        assert prec.choose_precision("auto", on_cuda=False, available=ALL) == want
        assert prec.pick_file("auto", on_cuda=False, available=ALL)[0] == want


def test_explicit_precision_must_exist() -> None:
    assert prec.choose_precision("fp16", on_cuda=False, available=ALL) == "fp16"
    # Asked for by name, int8 is loaded on any CPU.
    assert prec.choose_precision("int8", on_cuda=False, available=ALL, cpu_int8=False) == "int8"
    with pytest.raises(ValueError, match="precision int8 asked for but only fp32"):
        prec.choose_precision("int8", on_cuda=False, available=["fp32"])


# --- export ---------------------------------------------------------------------------------


def test_each_precision_written_with_metadata(release: Release) -> None:
    _, path, outcome, _ = release
    assert [e.precision for e in outcome.written] == ["int8", "fp32", "fp16"]
    for p in ALL:
        f = prec.variant_path(path, p)
        assert outcome.get(p).path == f and f.is_file()
        meta = read_metadata(f)
        assert meta["name"] == NAME and meta["precision"] == p
        assert meta["board_sizes"] == "5,9"
        recorded = ParityReport.from_metadata(meta, MODEL_PARITY_PREFIX, p)
        assert recorded is not None and recorded.positions == outcome.get(p).report.positions
        assert recorded.top1 == pytest.approx(outcome.get(p).report.top1, rel=1e-5)
    assert "random games" in read_metadata(prec.variant_path(path, "int8"))["calibration"]
    assert "calibration" not in read_metadata(path)


def test_coordinator_checks_each_precision_as_it_is_published(release: Release) -> None:
    from kgrpc.coordinator.model_check import ModelCheckError, check_model_file
    from trainer.publish import build_header

    _, path, _, _ = release
    # The fp32 file, parity figures in its metadata, passes the coordinator's publish check.
    facts = check_model_file(path, NAME, FEATURE_VERSION)
    assert (facts.blocks, facts.channels, facts.board_sizes) == (1, 8, (5, 9))
    assert facts.precision == "fp32" and facts.parity is None
    assert build_header(path).name == NAME
    assert build_header(path).precision == prec.to_proto("fp32")
    for p in ("fp16", "int8"):
        f = prec.variant_path(path, p)
        # Published as what it is: checked, and compared with the fp32 file.
        facts = check_model_file(f, NAME, FEATURE_VERSION, (), p, path, LOOSE)
        assert facts.precision == p and (facts.blocks, facts.channels) == (1, 8)
        if facts.ran:  # an fp16 file the CPU provider cannot run is judged by its graph
            assert facts.parity is not None and facts.parity.value_mae < LOOSE.max_value_mae
        assert build_header(f).precision == prec.to_proto(p)
        # Published as fp32 (it would be stored as NAME.onnx, which workers load as fp32).
        with pytest.raises(
            ModelCheckError, match=f"kgrpc.precision is {p}, but it is published as the fp32"
        ):
            check_model_file(f, NAME, FEATURE_VERSION)
    with pytest.raises(ModelCheckError, match="kgrpc.precision is fp32, but it is published as"):
        check_model_file(path, NAME, FEATURE_VERSION, (), "int8", path, LOOSE)


def test_fp16_graph_is_float16_inside_float32_outside(release: Release) -> None:
    _, path, _, _ = release
    proto = onnx.load(str(prec.variant_path(path, "fp16")))
    check_fp16_graph(proto)
    kinds = {t.data_type for t in proto.graph.initializer}
    assert onnx.TensorProto.FLOAT16 in kinds and onnx.TensorProto.FLOAT not in kinds
    # The check catches an fp32 graph passed off as fp16.
    with pytest.raises(ValueError, match="float32 weights"):
        check_fp16_graph(onnx.load(str(path)))


def test_int8_graph_is_quantised(release: Release) -> None:
    _, path, _, _ = release
    proto = onnx.load(str(prec.variant_path(path, "int8")))
    ops = {n.op_type for n in proto.graph.node}
    assert {"QuantizeLinear", "DequantizeLinear", "Conv"} <= ops
    int8_weights = {
        t.name: onnx.numpy_helper.to_array(t)
        for t in proto.graph.initializer
        if t.data_type == onnx.TensorProto.INT8
    }
    assert len(int8_weights) >= 3  # the stem and the block's two convs
    # Full 8-bit weights (REDUCE_RANGE False): per channel, the largest maps to +-127 (7 bits:
    # 63).
    assert max(int(np.abs(w).max()) for w in int8_weights.values()) == 127
    # The trunk is quantised, the heads are not: each head's Conv/Gemm reads float weights.
    quantised = {n.name for n in proto.graph.node if n.op_type == "DequantizeLinear"}
    assert any(name.startswith(TRUNK_SCOPES) for name in quantised)
    inits = {t.name: t for t in proto.graph.initializer}
    heads = [n for n in proto.graph.node if n.name.startswith(("/policy", "/value", "/pass"))]
    head_ops = [n for n in heads if n.op_type in ("Conv", "Gemm")]
    assert head_ops
    for node in head_ops:
        weight = inits[node.input[1]]
        assert weight.data_type == onnx.TensorProto.FLOAT, node.name
    for v in [*proto.graph.input, *proto.graph.output]:
        assert v.type.tensor_type.elem_type == onnx.TensorProto.FLOAT


def test_int8_refuses_a_graph_without_a_trunk(tmp_path: Path) -> None:
    from onnx import TensorProto, helper

    weight = onnx.numpy_helper.from_array(np.ones((1, 1, 1, 1), np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["bin_input", "w"], ["out"], name="conv")],
        "not-kgrpc",
        [helper.make_tensor_value_info("bin_input", TensorProto.FLOAT, [1, 1, 3, 3])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 1, 3, 3])],
        [weight],
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(ValueError, match="found no trunk nodes .*not a kgrpc network export"):
        to_int8(proto, [from_random_games(9, 4)])


def test_parity_figures(release: Release) -> None:
    _, _, outcome, sets = release
    fp32, fp16, int8 = (outcome.get(p).report for p in ALL)
    assert fp32.positions == sum(len(s) for s in sets[1]) and fp32.sizes == "5,9"
    assert fp32.top1 == 1.0 and fp32.kl < 1e-9 and fp32.max_abs_diff < 1e-4
    assert 0 < fp16.value_mae < 5e-3 and fp16.kl < 1e-4
    assert int8.value_mae > fp16.value_mae and int8.score_mae > fp16.score_mae
    assert 0 < fp32.ref_entropy <= np.log(82)
    assert "int8: top-1" in int8.summary()


def test_parity_tells_two_models_apart() -> None:
    sets = [from_random_games(9, 32, seed=5)]
    a, b = tiny_net(1), tiny_net(2)
    report = compare("fp32", torch_outputs(a, sets), torch_outputs(b, sets))
    assert report.kl > 1e-4 and report.value_mae > 0.1
    # Two fresh nets' policies are nearly flat: their top moves are near-ties of each other,
    # which top-1 counts as agreement; the value head tells them apart.
    assert report.ref_entropy > np.log(82) - 0.1
    with pytest.raises(ParityError, match="fp32 export refused: value MAE"):
        report.check(ParityBounds())


def _export_fp32_int8(path: Path, sets: Any, bounds: ParityBounds) -> ExportOutcome:
    """:func:`tiny_net` exported at 9x9 in fp32 and int8."""
    return export_precisions(
        tiny_net(), path, ["fp32", "int8"], name=NAME, board_sizes=[9], sets=sets, bounds=bounds
    )


def test_int8_calibration_adds_random_game_positions(tmp_path: Path) -> None:
    """Real positions alone leave the int8 ranges blind to inputs a run never shows (other
    rules and komi, odd shapes): a quarter as many random-game positions join the calibration
    set, and the file says so; the held-out set stays as drawn."""
    import dataclasses

    from trainer.positions import with_random_games

    calibration, held = draw_sets([9], 32, seed=4)
    as_window = [dataclasses.replace(p, source="window") for p in calibration]
    assert [(len(p), p.source) for p in with_random_games(as_window, 0.25)] == [
        (32, "window"),
        (8, "random games"),
    ]
    path = tmp_path / f"{NAME}.onnx"
    outcome = _export_fp32_int8(path, (as_window, held), LOOSE)
    assert outcome.ok, outcome.refused
    meta = read_metadata(prec.variant_path(path, "int8"))
    assert meta["calibration"] == "32 at 9x9 (window), 8 at 9x9 (random games)"
    assert outcome.get("int8").report.positions == 32  # judged on the held-out set only


def test_top1_counts_near_ties_as_agreement() -> None:
    """A file whose top move is one the reference rates within TOP1_TIE_RATIO of its own top
    agrees (rounding broke a tie); one whose top move the reference rates far lower does not."""
    from kgrpc.parity import TOP1_TIE_RATIO

    def outputs(logits: list[list[float]]) -> tuple[np.ndarray, ...]:
        b = len(logits)
        return np.array(logits), np.zeros(b), np.zeros(b), np.zeros((b, 2, 2))

    ref = outputs([[2.0, np.log(TOP1_TIE_RATIO) + 2.0 + 1e-6, 0, 0, 0], [2.0, 0.5, 0, 0, 0]])
    # Each file prefers the reference's second move in both positions.
    flipped = outputs([[0.0, 1.0, 0, 0, 0], [0.0, 1.0, 0, 0, 0]])
    assert compare("int8", [ref], [flipped]).top1 == 0.5  # the tie agrees, the flip does not
    assert compare("int8", [ref], [ref]).top1 == 1.0


def test_out_of_bounds_precision_is_refused_and_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / f"{NAME}.onnx"
    old = prec.variant_path(path, "int8")
    old.write_bytes(b"an older int8 file")
    # fp32 is exact to ~1e-7; int8 rounding gives value errors of ~1e-3: refused.
    strict = ParityBounds(min_top1=0.5, max_kl=1e-4, max_value_mae=1e-4, max_score_mae=1e-2)
    outcome = _export_fp32_int8(path, draw_sets([9], 32, seed=2), strict)
    assert [e.precision for e in outcome.written] == ["fp32"] and not outcome.ok
    msg = str(outcome.refused["int8"])
    assert msg.startswith("int8 export refused: value MAE") and "held-out positions" in msg
    assert old.read_bytes() == b"an older int8 file"  # left as it was


class _BrokenNet(KgrpcNet):
    """Exports a graph whose value head differs from the torch model's (a broken exporter)."""

    def forward(self, bin_input, global_input):  # type: ignore[no-untyped-def,override]
        policy, value, score, own = super().forward(bin_input, global_input)
        if torch.onnx.is_in_onnx_export():
            value = value * 0.5 + 0.25
        return policy, value, score, own


def test_broken_export_is_refused_even_in_fp32(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = _BrokenNet(1, 8).eval()
    outcome = export_precisions(
        model, tmp_path / "b.onnx", ["fp32"], name=NAME, board_sizes=[9], sets=draw_sets([9], 32)
    )
    assert outcome.written == [] and "value MAE" in str(outcome.refused["fp32"])
    assert not (tmp_path / "b.onnx").exists()
