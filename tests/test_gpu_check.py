"""``scripts/gpu-check.sh``: on a machine without CUDA it refuses (exit 3, saying why and that
nothing was measured); the benchmark commands it would run are kgrpc-bench's own; its summary
sets each figure beside raw ONNX Runtime of the same run. No GPU was lent to these tests, so
the run itself is exercised on the CPU (the same commands with --device cpu)."""

from __future__ import annotations

import importlib.util
import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from kgrpc.programs.bench.cli import build_parser
from tests.model_files import write_model

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu-check.sh"
NO_CUDA = 3  # the script's exit status when nothing could be measured


def _has_cuda() -> bool:
    import onnxruntime as ort

    if "CUDAExecutionProvider" not in ort.get_available_providers():
        return False
    smi = shutil.which("nvidia-smi")
    return smi is not None and subprocess.run([smi, "-L"], capture_output=True).returncode == 0


def _summary_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "gpu_check_summary", ROOT / "scripts" / "gpu_check_summary.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def printed_commands(out: str = "OUT", **env: str) -> list[list[str]]:
    done = subprocess.run(
        ["bash", str(SCRIPT), "--print", out],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", **env},
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return [shlex.split(line) for line in done.stdout.splitlines()]


def test_refuses_cleanly_without_cuda(tmp_path: Path) -> None:
    if _has_cuda():
        pytest.skip("this machine has CUDA: the script would measure")
    done = subprocess.run(
        ["bash", str(SCRIPT), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "PYTHON": sys.executable},
        timeout=120,
    )
    assert done.returncode == NO_CUDA, (done.stdout, done.stderr)
    assert "gpu-check: no CUDA on this machine: " in done.stderr
    assert "no CUDA provider" in done.stderr  # the reason: onnxruntime without CUDA
    assert "pip install '.[gpu]'" in done.stderr  # and what to install
    assert "nothing measured" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists()  # no benchmark ran


def test_the_commands_are_kgrpc_bench_s_own() -> None:
    commands = printed_commands("OUT", GPU_CHECK_MODEL="m.onnx", GPU_CHECK_SECONDS="7")
    parser = build_parser()
    seen = set()
    for argv in commands:
        assert argv[0] == "kgrpc-bench"
        args = parser.parse_args(argv[1:])  # a renamed flag: SystemExit here
        assert (args.device, args.max_batch, args.seconds, args.model) == ("cuda", 256, 7, "m.onnx")
        assert args.json == f"OUT/{args.benchmark}-{args.precision}.json"
        seen.add((args.benchmark, args.precision))
        if args.benchmark == "selfplay":
            assert args.modes == "remote"  # self-play through the inference server
            assert args.parallel_games * args.leaves_per_batch >= args.max_batch
    assert seen == {(b, p) for b in ("inference", "selfplay") for p in ("fp32", "fp16")}


def test_summary_sets_each_figure_beside_raw(tmp_path: Path) -> None:
    (tmp_path / "inference-fp32.json").write_text(
        json.dumps(
            {
                "max_batch": 256,
                "raw_evals_per_s": 40000.0,
                "grpc_evals_per_s": 30000.0,
                "grpc_over_raw": 0.75,
                "grpc_batched_evals_per_s": 36000.0,
                "mean_batch_size": 250.0,
            }
        )
    )
    text = _summary_module().summary(tmp_path, "GPU 0: test")
    fp32 = next(line for line in text.splitlines() if line.strip().startswith("fp32"))
    assert fp32.split() == ["fp32", "256", "40,000", "30,000", "0.75", "36,000", "0.90", "250.0"]
    assert text.count("not measured") == 3  # inference fp16, self-play fp32 and fp16


@pytest.mark.slow
def test_the_check_s_runs_on_the_cpu_give_its_summary(tmp_path: Path) -> None:
    """The fp32 pair of the check's commands, on the CPU with a tiny net and short windows:
    they run, write the JSON the summary reads, and the summary prints their ratios."""
    model = write_model(tmp_path / "kg-b1c8-s0-d0.onnx", "kg-b1c8-s0-d0")
    out = tmp_path / "out"
    out.mkdir()
    commands = printed_commands(str(out), GPU_CHECK_MODEL=str(model), GPU_CHECK_SECONDS="1")
    for argv in commands:
        if "fp32" not in argv:
            continue
        argv = [("cpu" if a == "cuda" else a) for a in argv[1:]]
        if argv[0] == "inference":
            argv += ["--clients", "64", "--no-sweep"]  # fewer clients: 2 cores
        done = subprocess.run(
            [sys.executable, "-m", "kgrpc.programs.bench.cli", *argv],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr[-2000:]
    summary = _summary_module().summary(out)
    inference = json.loads((out / "inference-fp32.json").read_text())
    selfplay = json.loads((out / "selfplay-fp32.json").read_text())
    assert selfplay["device"] == "cpu" and selfplay["raw_batch"] == 256
    rows = [line.split() for line in summary.splitlines() if line.strip().startswith("fp32")]
    assert rows[0][4] == f"{inference['grpc_over_raw']:.2f}"
    assert rows[1][4] == f"{selfplay['evals_over_raw']:.2f}"
    assert rows[1][5] == f"{selfplay['visits_over_raw_fp32']:.2f}"
