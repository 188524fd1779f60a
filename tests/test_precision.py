"""Network precisions (issue 13): fp16/int8 exports, parity and refusal, loading by device.

Real exports of tiny nets (b1c8 at 5x5 and 9x9), real ONNX Runtime sessions, a real inference
server on a loopback port. A tiny random net quantises coarsely (8 channels average little
rounding noise away) and its nearly flat policy makes top-1 a coin toss between near-ties, so
the exports here use the looser bounds ``LOOSE``; the default bounds are exercised by the
refusal tests and, on a b6c96 net, by ``kgrpc-bench inference --precision``.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch

from inference.client import InferenceClient
from inference.config import InferenceConfig
from inference.engine import Engine
from inference.local import LocalEvaluator
from inference.models import ModelRegistry
from inference.server import InferenceServer
from inference.wire import pack_planes
from kgrpc import precision as prec
from kgrpc.digest import file_digest
from kgrpc.programs.bench.train import write_synthetic_run
from kgrpc.schema import FEATURE_VERSION, MODEL_PARITY_PREFIX
from trainer.checkpoint import TrainState, save_checkpoint
from trainer.cli import main as train_main
from trainer.config import TrainConfig
from trainer.export import (
    ExportOutcome,
    export_onnx,
    export_precisions,
    fp32_proto,
    read_metadata,
)
from trainer.model import KgrpcNet
from trainer.parity import ParityBounds, ParityError, ParityReport, compare, torch_outputs
from trainer.positions import Positions, draw_sets, from_random_games
from trainer.quantize import check_fp16_graph, to_fp16
from trainer.synthetic import fit_teacher, teacher_targets

NAME = "kg-b1c8-s0-d0"
Release = tuple[KgrpcNet, Path, ExportOutcome, tuple[list[Positions], list[Positions]]]
LOOSE = ParityBounds(min_top1=0.5, max_kl=0.05, max_value_mae=0.05, max_score_mae=2.0)
ALL = ["fp32", "fp16", "int8"]


def _model(seed: int = 3) -> KgrpcNet:
    torch.manual_seed(seed)
    return KgrpcNet(1, 8).eval()


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> Release:
    model = _model()
    path = tmp_path_factory.mktemp("release") / f"{NAME}.onnx"
    sets = draw_sets([5, 9], 64, seed=1)
    # int8 first: converting must leave the fp32 graph intact for the next precisions.
    outcome = export_precisions(
        model,
        path,
        ["int8", "fp32", "fp16"],
        name=NAME,
        board_sizes=[5, 9],
        sets=sets,
        bounds=LOOSE,
    )
    assert outcome.ok, outcome.refused
    return model, path, outcome, sets


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
    ("on_cuda", "available", "want"),
    [
        (True, ALL, "fp16"),
        (False, ALL, "int8"),
        (True, ["fp32", "int8"], "fp32"),
        (False, ["fp32", "fp16"], "fp32"),
        (False, ["int8"], "int8"),
        (False, ["fp16"], "fp16"),
        (True, ["int8"], "int8"),
    ],
)
def test_auto_precision_by_device(on_cuda: bool, available: list[str], want: str) -> None:
    assert prec.choose_precision("auto", on_cuda=on_cuda, available=available) == want


def test_explicit_precision_must_exist() -> None:
    assert prec.choose_precision("fp16", on_cuda=False, available=ALL) == "fp16"
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
    int8_weights = [t for t in proto.graph.initializer if t.data_type == onnx.TensorProto.INT8]
    assert len(int8_weights) >= 4  # stem, 2 tower convs, head convs / gemms
    for v in [*proto.graph.input, *proto.graph.output]:
        assert v.type.tensor_type.elem_type == onnx.TensorProto.FLOAT


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
    a, b = _model(1), _model(2)
    report = compare("fp32", torch_outputs(a, sets), torch_outputs(b, sets))
    assert report.top1 < 0.95 and report.kl > 1e-4 and report.value_mae > 0.1
    with pytest.raises(ParityError, match="fp32 export refused: policy top-1 .* value MAE"):
        report.check(ParityBounds())


def test_out_of_bounds_precision_is_refused_and_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / f"{NAME}.onnx"
    old = prec.variant_path(path, "int8")
    old.write_bytes(b"an older int8 file")
    # fp32 is exact to ~1e-7; int8 rounding gives value errors of ~1e-3: refused.
    strict = ParityBounds(min_top1=0.5, max_kl=1e-4, max_value_mae=1e-4, max_score_mae=1e-2)
    outcome = export_precisions(
        _model(),
        path,
        ["fp32", "int8"],
        name=NAME,
        board_sizes=[9],
        sets=draw_sets([9], 32, seed=2),
        bounds=strict,
    )
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


@pytest.mark.slow
def test_export_command_precisions_from_shards(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_synthetic_run(tmp_path / "data", 1, 96, 6, 9)
    model = _model()
    ckpt = save_checkpoint(
        tmp_path / "ckpt", model, torch.optim.Adam(model.parameters()), TrainState()
    )
    out = tmp_path / "out"
    out.mkdir()
    loose = [
        "--min-top1",
        "0.5",
        "--max-kl",
        "0.05",
        "--max-value-mae",
        "0.05",
        "--max-score-mae",
        "2",
    ]
    rc = train_main(
        [
            "export",
            "--checkpoint",
            str(ckpt),
            "--out",
            str(out),
            "--board-size",
            "9",
            "--precision",
            "fp32,int8",
            "--data-dir",
            str(tmp_path / "data"),
            "--parity-positions",
            "32",
            *loose,
        ]
    )
    text = capsys.readouterr()
    assert rc == 0, text.err
    assert "calibration 32 at 9x9 (shards)" in text.out and "parity max diff" in text.out
    assert read_metadata(out / "kg-b1c8-s0-d0.int8.onnx")["calibration"] == "32 at 9x9 (shards)"
    assert not (out / "kg-b1c8-s0-d0.fp16.onnx").exists()
    # The same with a value bound no int8 file meets: exit 1, a clear message, no file.
    (out / "kg-b1c8-s0-d0.int8.onnx").unlink()
    rc = train_main(
        [
            "export",
            "--checkpoint",
            str(ckpt),
            "--out",
            str(out),
            "--board-size",
            "9",
            "--precision",
            "int8",
            "--parity-positions",
            "32",
            "--min-top1",
            "0.5",
            "--max-value-mae",
            "1e-6",
        ]
    )
    err = capsys.readouterr().err
    assert rc == 1 and "nothing written: int8 export refused: value MAE" in err, err
    assert not (out / "kg-b1c8-s0-d0.int8.onnx").exists()
    assert (
        train_main(["export", "--checkpoint", str(ckpt), "--out", str(out), "--precision", "fp8"])
        == 2
    )


@pytest.mark.slow
def test_trainer_loop_exports_the_configured_precisions(tmp_path: Path) -> None:
    from trainer.train import run_training

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
        publish=False,
        device="cpu",
        log_every_s=1e9,
        precisions="int8",
        parity_positions=32,
        parity_min_top1=0.5,
        parity_max_kl=0.05,
        parity_max_value_mae=0.05,
        parity_max_score_mae=2.0,
    ).validate()
    assert cfg.export_precisions == ["fp32", "int8"]
    state = run_training(cfg)
    models = tmp_path / "work" / "models"
    assert sorted(p.name for p in models.iterdir()) == [
        f"{state.last_model}.int8.onnx",
        f"{state.last_model}.onnx",
    ]
    meta = read_metadata(models / f"{state.last_model}.int8.onnx")
    assert meta["calibration"].endswith("(window)") and meta["precision"] == "int8"
    with pytest.raises(ValueError, match="precision must be one of"):
        TrainConfig(precisions="fp32,bf16").validate()


def test_train_settings_precisions() -> None:
    from kgrpc.settings import SettingsError
    from trainer.config import SETTINGS

    cfg = SETTINGS.load(flags={"precisions": "int8, fp16,int8"}, env={})
    assert cfg.precisions == "int8,fp16"
    assert cfg.validate().export_precisions == ["fp32", "int8", "fp16"]
    with pytest.raises(SettingsError, match="KGRPC_TRAINER_PRECISIONS.*precision must be one of"):
        SETTINGS.load(env={"KGRPC_TRAINER_PRECISIONS": "bf16"})
    with pytest.raises(ValueError, match="parity_min_top1 must be <= 1"):
        TrainConfig(parity_min_top1=1.5).validate()


# --- loading: engine, local inference, the server --------------------------------------------


def test_engine_picks_int8_on_cpu_unless_told(release: Release, tmp_path: Path) -> None:
    _, path, _, _ = release
    assert Engine(path, device="cpu", intra_threads=1).precision == "int8"
    for p in ALL:
        eng = Engine(path, device="cpu", precision=p, intra_threads=1)
        assert eng.precision == p and eng.path == str(prec.variant_path(path, p))
        assert (
            eng.name == NAME and eng.info.sha256 == file_digest(prec.variant_path(path, p)).sha256
        )
    # A variant file named directly is loaded as it is under auto.
    assert Engine(prec.variant_path(path, "fp16"), device="cpu").precision == "fp16"
    # Without an int8 file beside it, auto on a CPU is fp32; asking for int8 fails clearly.
    alone = tmp_path / f"{NAME}.onnx"
    shutil.copy(path, alone)
    assert Engine(alone, device="cpu").precision == "fp32"
    with pytest.raises(FileNotFoundError, match=r"no int8 file .*\.int8\.onnx is missing"):
        Engine(alone, device="cpu", precision="int8")
    # A file whose name and metadata disagree is not served.
    shutil.copy(path, prec.variant_path(alone, "int8"))
    with pytest.raises(ValueError, match="metadata says precision fp32 but the file name says"):
        Engine(alone, device="cpu", precision="int8")


def test_engine_outputs_agree_across_precisions(release: Release) -> None:
    _, path, _, sets = release
    s = sets[1][1]  # 9x9 held-out positions
    packed = pack_planes(s.planes.astype(bool))
    ref = Engine(path, device="cpu", precision="fp32").run(9, packed, s.globals)
    for p in ("fp16", "int8"):
        out = Engine(path, device="cpu", precision=p).run(9, packed, s.globals)
        assert all(o.dtype == np.float32 for o in out)
        np.testing.assert_allclose(out[0].sum(axis=1), 1.0, rtol=1e-5)
        assert np.abs(out[1] - ref[1]).mean() < LOOSE.max_value_mae
        assert np.abs(out[0] - ref[0]).max() < 0.1


def test_engine_feeds_float16_inputs(tmp_path: Path) -> None:
    """A graph with float16 inputs and outputs (exported without keep_io_types) works too."""
    from onnxconverter_common import float16

    model = _model()
    base = tmp_path / "h.onnx"
    export_onnx(model, base, name=NAME, board_sizes=[9])
    proto = float16.convert_float_to_float16(onnx.load(str(base)), keep_io_types=False)
    for entry in proto.metadata_props:
        if entry.key == "kgrpc.precision":
            entry.value = "fp16"
    onnx.save(proto, str(prec.variant_path(base, "fp16")))
    eng = Engine(base, device="cpu", precision="fp16")
    assert eng.session.get_inputs()[0].type == "tensor(float16)"
    s = from_random_games(9, 8, seed=4)
    got = eng.run_float(s.planes, s.globals)
    want = Engine(base, device="cpu", precision="fp32").run_float(s.planes, s.globals)
    assert got[1].dtype == np.float32
    np.testing.assert_allclose(got[1], want[1], atol=5e-3)


@pytest.mark.parametrize("precision", ALL)
async def test_local_evaluator_loads_each_precision(release: Release, precision: str) -> None:
    _, path, _, sets = release
    s = sets[1][0]  # 5x5
    ev = LocalEvaluator(str(path), device="cpu", precision=precision, intra_threads=1)
    try:
        res = await ev.evaluate(s.planes.astype(bool), s.globals, want_ownership=True)
        loaded = ev.registry.models[NAME].engine
        assert loaded.precision == precision and res.model == NAME
        assert res.policy.shape == (len(s), 26) and res.ownership.shape == (len(s), 25)
        want = Engine(path, device="cpu", precision=precision).run(
            5, pack_planes(s.planes.astype(bool)), s.globals
        )
        np.testing.assert_allclose(res.value, want[1], atol=1e-6)
    finally:
        await ev.close()


@pytest.mark.parametrize("precision", ALL)
async def test_server_serves_each_precision(release: Release, precision: str) -> None:
    _, path, _, sets = release
    reg = ModelRegistry(device="cpu", precision=precision, intra_threads=1, max_delay_ms=1)
    await reg.load(str(path), pinned=True)
    server = InferenceServer(reg)
    port = await server.start("127.0.0.1:0")
    client = InferenceClient(f"127.0.0.1:{port}", streams=2)
    try:
        info = await client.model_info()
        (loaded,) = info.models
        assert loaded.name == NAME
        assert loaded.sha256 == file_digest(prec.variant_path(path, precision)).sha256
        s = sets[1][1]
        results = await asyncio.gather(
            *[
                client.evaluate(s.planes[i : i + 4].astype(bool), s.globals[i : i + 4])
                for i in range(0, 16, 4)
            ]
        )
        value = np.concatenate([r.value for r in results])
        want = Engine(path, device="cpu", precision=precision).run(
            9, pack_planes(s.planes[:16].astype(bool)), s.globals[:16]
        )
        np.testing.assert_allclose(value, want[1], atol=1e-5)
    finally:
        await client.close()
        await server.stop(0)


def test_inference_config_precision() -> None:
    cfg = InferenceConfig(models=["m.onnx"], precision="int8")
    cfg.validate()
    with pytest.raises(ValueError, match="precision must be one of"):
        InferenceConfig(models=["m.onnx"], precision="fp64").validate()
    from inference.cli import build_parser

    assert build_parser().parse_args(["--model", "m", "--precision", "fp16"]).precision == "fp16"


# --- the synthetic teacher used by the benchmark ---------------------------------------------


@pytest.mark.slow
def test_teacher_targets_and_fit() -> None:
    s = from_random_games(5, 64, seed=9)
    policy, value, score, own = teacher_targets(s.planes, s.globals)
    assert np.allclose(policy.sum(axis=1), 1.0) and set(np.unique(policy)) <= {0.0, 1.0}
    assert np.allclose(value, np.tanh(score / 10.0)) and own.shape == (64, 5, 5)
    model = _model()
    before = compare("fp32", torch_outputs(model, [s]), torch_outputs(model, [s])).ref_entropy
    fit_teacher(model, 20, positions=[s], batch=32, lr=1e-2)
    after = compare("fp32", torch_outputs(model, [s]), torch_outputs(model, [s])).ref_entropy
    assert after < before - 0.5  # the policy sharpens towards the teacher's single move
    assert not model.training
    assert fp32_proto(model, [5]).graph.input[0].name == "bin_input"
    assert to_fp16(fp32_proto(model, [5])).graph.output[0].name == "policy"


# --- kgrpc-bench inference --precision -------------------------------------------------------


def _bench(tmp_path: Path, *args: str) -> tuple[dict, str]:
    import json
    import subprocess
    import sys

    out = tmp_path / "inference.json"
    proc = subprocess.run(
        [sys.executable, "-m", "kgrpc.programs.bench.cli", "inference", *args, "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return json.loads(out.read_text()), proc.stdout


@pytest.mark.slow
def test_bench_compares_precisions_of_a_given_model(release: Release, tmp_path: Path) -> None:
    _, path, _, _ = release
    alone = tmp_path / "given" / f"{NAME}.onnx"  # fp32 only: int8 is converted for the run
    alone.parent.mkdir()
    shutil.copy(path, alone)
    r, out = _bench(
        tmp_path,
        "--model",
        str(alone),
        "--precision",
        "fp32,int8",
        "--raw-only",
        "--seconds",
        "0.4",
        "--parity-positions",
        "16",
        "--max-batch",
        "8",
    )
    assert [row["precision"] for row in r["precisions"]] == ["fp32", "int8"]
    assert all(row["evals_per_s"] > 0 and len(row["rounds"]) == 4 for row in r["precisions"])
    fp32, int8 = (row["parity_vs_fp32_file"] for row in r["precisions"])
    assert fp32["top1"] == 1.0 and fp32["value_mae"] == 0.0
    assert int8["positions"] == 16 and int8["value_mae"] > 0
    # Flat figures for make bench's targets, from the same rows.
    rows = {row["precision"]: row for row in r["precisions"]}
    assert r["int8_over_fp32"] == pytest.approx(
        rows["int8"]["evals_per_s"] / rows["fp32"]["evals_per_s"]
    )
    assert (r["int8_top1"], r["int8_value_mae"]) == (int8["top1"], int8["value_mae"])
    assert "fp32_over_fp32" not in r
    assert "converted one from the fp32 file" in out and "x fp32" in out
    assert sorted(p.name for p in alone.parent.iterdir()) == [alone.name]  # nothing beside it


@pytest.mark.slow
def test_bench_fresh_model_each_precision_and_serving(tmp_path: Path) -> None:
    r, out = _bench(
        tmp_path,
        "--arch",
        "b1c8",
        "--board-size",
        "5",
        "--fit-steps",
        "3",
        "--precision",
        "int8,fp32,fp16",
        "--seconds",
        "0.4",
        "--clients",
        "4",
        "--batch",
        "2",
        "--parity-positions",
        "16",
        "--no-sweep",
    )
    assert [row["precision"] for row in r["precisions"]] == ["int8", "fp32", "fp16"]
    assert all(row["parity_at_export"]["positions"] == 16 for row in r["precisions"])
    assert r["precision"] == "int8" and r["grpc_evals_per_s"] > 0 and r["local_evals_per_s"] > 0
    assert "fitted the fresh net to the synthetic teacher: 3 steps" in out
