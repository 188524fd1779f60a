"""The summary of ``scripts/gpu-check.sh``: the GPU figures against raw ONNX Runtime CUDA.

``python scripts/gpu_check_summary.py OUT_DIR [GPU_NAME]`` reads the JSON that the check's
``kgrpc-bench inference`` and ``kgrpc-bench selfplay`` runs wrote there
(``inference-<precision>.json``, ``selfplay-<precision>.json``) and prints one table per
benchmark: each figure beside the raw ONNX Runtime figure of the same run, and their ratio.
Every ratio divides two figures of one command's run (as docs/performance.md asks).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

PRECISIONS = ("fp32", "fp16")


def _load(out: Path, bench: str, precision: str) -> dict[str, Any] | None:
    path = out / f"{bench}-{precision}.json"
    return json.loads(path.read_text()) if path.exists() else None


def summary(out: Path, gpu: str = "") -> str:
    """The tables of the runs found in ``out`` (a precision whose file is missing: a line
    saying so)."""
    lines = [f"GPU check{': ' + gpu if gpu else ''}", ""]
    lines.append(
        f"{'inference server':<18}{'batch':>6}{'raw ORT':>12}{'server':>12}{'server/raw':>12}"
        f"{'K/request':>12}{'K/raw':>8}{'mean batch':>12}"
    )
    raw_fp32 = 0.0
    for p in PRECISIONS:
        r = _load(out, "inference", p)
        if r is None:
            lines.append(f"  {p:<16}not measured")
            continue
        raw = r["raw_evals_per_s"]
        raw_fp32 = raw if p == "fp32" else raw_fp32
        lines.append(
            f"  {p:<16}{r['max_batch']:>6}{raw:>12,.0f}{r['grpc_evals_per_s']:>12,.0f}"
            f"{r['grpc_over_raw']:>12.2f}{r['grpc_batched_evals_per_s']:>12,.0f}"
            f"{r['grpc_batched_evals_per_s'] / raw if raw else 0.0:>8.2f}"
            f"{r['mean_batch_size']:>12.1f}"
        )
        if p != "fp32" and raw_fp32:
            lines.append(f"  {'':<16}raw {p} / raw fp32 (separate runs): {raw / raw_fp32:.2f}")
    lines += [
        "",
        f"{'self-play (server)':<18}{'batch':>6}{'visits/s':>12}{'NN evals/s':>12}"
        f"{'evals/raw':>12}{'visits/raw fp32':>17}{'mean batch':>12}",
    ]
    for p in PRECISIONS:
        r = _load(out, "selfplay", p)
        if r is None:
            lines.append(f"  {p:<16}not measured")
            continue
        lines.append(
            f"  {p:<16}{r['raw_batch']:>6}{r['visits_per_s']:>12,.0f}{r['nn_evals_per_s']:>12,.0f}"
            f"{r['evals_over_raw']:>12.2f}{r['visits_over_raw_fp32']:>17.2f}"
            f"{r['mean_batch_size']:>12.1f}"
        )
    lines += [
        "",
        "raw ORT: raw ONNX Runtime CUDA evals/s of the same model and precision at that batch, "
        "measured in the same run;",
        "server: 1 position per request; K/request: several (kgrpc-bench inference --batch); "
        "visits/raw fp32: the fp32 file's raw figure.",
    ]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: gpu_check_summary.py OUT_DIR [GPU_NAME]", file=sys.stderr)
        return 2
    print(summary(Path(argv[0]), argv[1] if len(argv) > 1 else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
