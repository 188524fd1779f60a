"""Network precisions loaded (issue 13): the engine's choice by device and its outputs in each
precision, float16 inputs, the local evaluator and a real inference server on a loopback port
serving each precision, and ``kgrpc-bench inference --precision``. The release is a tiny net
exported in every precision (tests/precision_helpers.py)."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest

from inference.client import InferenceClient
from inference.config import InferenceConfig
from inference.engine import Engine
from inference.local import LocalEvaluator
from inference.models import ModelRegistry
from inference.server import InferenceServer
from inference.wire import pack_planes
from kgrpc import precision as prec
from kgrpc.digest import file_digest
from tests.precision_helpers import ALL, LOOSE, NAME, Release, export_release, tiny_net
from trainer.export import export_onnx
from trainer.positions import from_random_games


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> Release:
    return export_release(tmp_path_factory.mktemp("release"))


def test_engine_picks_int8_on_cpu_unless_told(
    release: Release, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, path, _, _ = release
    # auto: int8 on a CPU with an int8 dot product, fp32 on one without (whose emulation can
    # saturate on the int8 file's 8-bit weights); int8 asked for by name loads anywhere.
    for fast, want in ((True, "int8"), (False, "fp32")):
        monkeypatch.setattr(prec, "cpu_int8_fast", lambda cpuinfo=None, fast=fast: fast)
        assert Engine(path, device="cpu", intra_threads=1).precision == want
    assert Engine(path, device="cpu", precision="int8", intra_threads=1).precision == "int8"
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

    model = tiny_net()
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
