#!/usr/bin/env bash
# GPU readiness check (issue 28, item 7). On a machine with an NVIDIA GPU and onnxruntime-gpu
# (pip install ".[gpu]"), it runs kgrpc's inference server at batch 256 in fp32 and in fp16,
# then self-play through that server in each precision, and prints every figure beside raw
# ONNX Runtime CUDA of the same model, precision and batch (measured in the same runs), with
# their ratios. Without CUDA it measures nothing and says why.
#
#   scripts/gpu-check.sh [OUT_DIR]    run it (default OUT_DIR: gpu-check-out)
#   scripts/gpu-check.sh --print      print the benchmark commands it runs, and exit
#
# Exit status: 0 measured; 3 no CUDA on this machine (nothing measured); else the status of
# the benchmark that failed. Variables: PYTHON (default .venv/bin/python, else python3),
# GPU_CHECK_SECONDS (seconds per measurement, default 10), GPU_CHECK_MODEL (an ONNX model;
# default a fresh b6c96 19x19 net, which needs the trainer extra's torch).
# Every figure is one run on one machine: see docs/performance.md before quoting one.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-$ROOT/.venv/bin/python}
[ -x "$PY" ] || PY=python3
BATCH=256
SECONDS_EACH=${GPU_CHECK_SECONDS:-10}
MODEL=${GPU_CHECK_MODEL:-}

print_only=0
if [ "${1:-}" = "--print" ]; then
    print_only=1
    shift
fi
OUT=${1:-gpu-check-out}

# The benchmark commands, one a line (kgrpc-bench's own flags: tests/test_gpu_check.py
# parses them with its parser).
commands() {
    local model=() p
    [ -n "$MODEL" ] && model=(--model "$MODEL")
    for p in fp32 fp16; do
        # The server at batch 256: 512 clients keep two batches of 1-position requests
        # queued; --batch 16: the same with 16 positions a request.
        echo "kgrpc-bench inference --device cuda --precision $p --max-batch $BATCH" \
            "--clients 512 --batch 16 --seconds $SECONDS_EACH ${model[*]:-}" \
            "--json $OUT/inference-$p.json"
    done
    for p in fp32 fp16; do
        # Self-play through the server: 64 games x 8 leaves a request fill batches of 256.
        echo "kgrpc-bench selfplay --device cuda --precision $p --modes remote" \
            "--max-batch $BATCH --parallel-games 64 --leaves-per-batch 8 --visits 100" \
            "--seconds $SECONDS_EACH ${model[*]:-} --json $OUT/selfplay-$p.json"
    done
}

if [ "$print_only" = 1 ]; then
    commands | tr -s ' '
    exit 0
fi

# Is there CUDA here? onnxruntime-gpu lists its CUDA provider even without a GPU, so the
# driver must list a GPU as well; the benchmarks' --device cuda then fails loudly if the
# session still falls back to the CPU (inference/engine.py).
if ! why=$("$PY" - <<'EOF' 2>&1
import shutil
import subprocess
import sys

try:
    import onnxruntime as ort
except ImportError as exc:
    sys.exit(f"onnxruntime is not installed ({exc}); install the gpu extra: pip install '.[gpu]'")
providers = ort.get_available_providers()
if "CUDAExecutionProvider" not in providers:
    sys.exit(
        f"onnxruntime {ort.__version__} has no CUDA provider (it has {', '.join(providers)}); "
        "install the gpu extra instead of the inference extra: pip install '.[gpu]'"
    )
smi = shutil.which("nvidia-smi")
if smi is None:
    sys.exit("nvidia-smi is not on PATH: no NVIDIA driver on this machine")
listed = subprocess.run([smi, "-L"], capture_output=True, text=True)
gpus = [line for line in listed.stdout.splitlines() if line.startswith("GPU ")]
if listed.returncode != 0 or not gpus:
    sys.exit(f"nvidia-smi lists no GPU: {(listed.stdout + listed.stderr).strip()[:300]}")
print(gpus[0])
EOF
); then
    echo "gpu-check: no CUDA on this machine: $why" >&2
    echo "gpu-check: nothing measured; run it on a machine with an NVIDIA GPU:" \
        "scripts/gpu-check.sh [OUT_DIR]" >&2
    exit 3
fi
gpu=$why
echo "gpu-check: $gpu"

mkdir -p "$OUT"
# (fd 3: the benchmarks keep the terminal's stdin)
while read -r line <&3; do
    echo "+ $line"
    # shellcheck disable=SC2086  # the command's words, split as printed
    set -- ${line#kgrpc-bench }
    "$PY" -m kgrpc.programs.bench.cli "$@" 2>&1 | tee -a "$OUT/gpu-check.log"
done 3< <(commands | tr -s ' ')

"$PY" "$ROOT/scripts/gpu_check_summary.py" "$OUT" "$gpu" | tee "$OUT/summary.txt"
