"""Which device an in-process engine (``kgrpc-worker --device``) or an inference server
(``kgrpc-inference --device``) runs its net on: ``auto`` (CUDA when usable, else the CPU),
``cpu``, ``cuda`` (GPU 0) or ``cuda:N`` (GPU N, as CUDA numbers the GPUs this process sees:
``CUDA_VISIBLE_DEVICES`` renumbers them). One process per GPU is the layout docs/worker.md and
docs/operations.md describe. Parsed here, without ONNX Runtime, so the worker's core install
can check its settings."""

from __future__ import annotations

DEVICE_HELP = "auto (CUDA when usable, else CPU), cpu, cuda or cuda:N (GPU N)"


def parse_device(text: str) -> tuple[str, int]:
    """``auto`` -> ("auto", 0), ``cpu``, ``cuda`` -> ("cuda", 0), ``cuda:1`` -> ("cuda", 1).
    ValueError saying what is accepted for anything else."""
    kind, sep, index = text.strip().lower().partition(":")
    if kind in ("auto", "cpu") and not sep:
        return kind, 0
    if kind == "cuda" and (not sep or index.isdigit()):
        return "cuda", int(index) if sep else 0
    raise ValueError(f"device must be auto, cpu, cuda or cuda:N (GPU N), got {text!r}")
