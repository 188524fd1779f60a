"""Network precisions: their names, where each variant file lives, and which one a device gets.

One release (one model name) can exist in several precisions, each a complete ONNX file of the
docs/formats.md section 5 contract with the same ``kgrpc.name`` and its own
``kgrpc.precision`` metadata:

========= ======================= ==============================================================
precision file                    for
========= ======================= ==============================================================
fp32      ``NAME.onnx``           any device; the reference (every model has this file)
fp16      ``NAME.fp16.onnx``      CUDA: float16 weights and activations, float32 inputs/outputs
int8      ``NAME.int8.onnx``      CPUs with an int8 dot product: the trunk in int8 (static QDQ)
========= ======================= ==============================================================

``auto`` picks fp16 on CUDA and int8 on a CPU with an int8 dot product (:func:`cpu_int8_fast`)
when that file exists, else fp32. On the wire a
precision is the ``kgrpc.v1.Precision`` enum (:func:`to_proto`, :func:`from_proto`); a model's
``ModelInfo.files`` lists its files. No numpy, no ONNX: the coordinator, the worker, the
inference server and the trainer all use it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from kgrpc.v1 import common_pb2

FP32 = "fp32"
FP16 = "fp16"
INT8 = "int8"
PRECISIONS = (FP32, FP16, INT8)
AUTO = "auto"
CHOICES = (AUTO, *PRECISIONS)
SUFFIX = ".onnx"
# What auto does, for the settings' help texts (choose_precision is the rule itself).
AUTO_HELP = (
    "auto (fp16 with CUDA, int8 on a CPU with an int8 dot product such as VNNI, "
    "each when the model has that file; else fp32)"
)


_TO_PROTO = {
    FP32: common_pb2.PRECISION_FP32,
    FP16: common_pb2.PRECISION_FP16,
    INT8: common_pb2.PRECISION_INT8,
}
_FROM_PROTO = {v: k for k, v in _TO_PROTO.items()}


def to_proto(precision: str) -> common_pb2.Precision.ValueType:
    """``"int8"`` -> ``PRECISION_INT8``."""
    return _TO_PROTO[check_precision(precision)]


def from_proto(value: int) -> str:
    """``PRECISION_INT8`` -> ``"int8"``; UNSPECIFIED (a request that does not say) is fp32;
    ValueError for a value this version does not know."""
    if value == common_pb2.PRECISION_UNSPECIFIED:
        return FP32
    try:
        return _FROM_PROTO[value]
    except KeyError:
        raise ValueError(
            f"unknown precision value {value}; known: "
            + ", ".join(f"{common_pb2.Precision.Name(v)} ({v})" for v in _FROM_PROTO)
        ) from None


def info_precisions(info: common_pb2.ModelInfo) -> list[str]:
    """The precisions a ``ModelInfo`` lists files for, in PRECISIONS order; an info without
    ``files`` (from a coordinator older than precisions) has the fp32 file only."""
    have = {from_proto(f.precision) for f in info.files if f.precision in _FROM_PROTO}
    return [p for p in PRECISIONS if p in have] or [FP32]


def pick_file(
    requested: str, *, on_cuda: bool, available: Iterable[str], cpu_int8: bool | None = None
) -> tuple[str, str]:
    """The precision whose file a client downloads for a model with the files ``available``:
    ``(precision, note)``. ``auto`` as :func:`choose_precision`; an explicit precision the
    model lacks falls back to fp32 (every model has it), with ``note`` saying so for the log
    (empty otherwise). A client keeps working when the trainer exports fewer precisions."""
    have = list(available)
    if requested == AUTO:
        return choose_precision(AUTO, on_cuda=on_cuda, available=have, cpu_int8=cpu_int8), ""
    if check_precision(requested) in have or requested == FP32:
        return requested, ""
    return FP32, (f"no {requested} file (the model has {', '.join(have) or 'none'}): using {FP32}")


def check_precision(precision: str, *, allow_auto: bool = False) -> str:
    """``precision`` itself, or ValueError naming the allowed values."""
    allowed = CHOICES if allow_auto else PRECISIONS
    if precision not in allowed:
        raise ValueError(f"precision must be one of {', '.join(allowed)}, got {precision!r}")
    return precision


def parse_precisions(text: str) -> list[str]:
    """``"fp32,int8"`` -> ``["fp32", "int8"]`` (checked, duplicates dropped, order kept)."""
    out: list[str] = []
    for part in text.split(","):
        p = part.strip()
        if p and check_precision(p) not in out:
            out.append(p)
    if not out:
        raise ValueError(f"no precision in {text!r}; use {', '.join(PRECISIONS)}")
    return out


def precision_of_path(path: str | os.PathLike[str]) -> str:
    """The precision a file name says (``NAME.int8.onnx`` -> int8; ``NAME.onnx`` -> fp32)."""
    name = Path(path).name
    for p in (FP16, INT8):
        if name.endswith(f".{p}{SUFFIX}"):
            return p
    return FP32


def base_path(path: str | os.PathLike[str]) -> Path:
    """The fp32 file of the release that ``path`` (any variant) belongs to."""
    p = Path(path)
    precision = precision_of_path(p)
    if precision == FP32:
        return p
    return p.with_name(p.name[: -len(f".{precision}{SUFFIX}")] + SUFFIX)


# CPU features that multiply int8 natively (x86 VNNI, AMX; Arm's dot product): where one is
# present the int8 file runs well ahead of fp32 (make bench measured about 2.5x with VNNI);
# without, ONNX Runtime emulates the products, the gain is small or none, and on x86 the
# emulation (VPMADDUBSW) can saturate on the int8 file's full 8-bit weights
# (trainer/quantize.py, REDUCE_RANGE), so auto does not pick int8 there.
INT8_CPU_FLAGS = ("avx512_vnni", "avx_vnni", "amx_int8", "asimddp")


def cpu_flags(cpuinfo: str | None = None) -> set[str]:
    """The feature flags of this CPU (or of the ``/proc/cpuinfo`` text ``cpuinfo``); empty
    where they cannot be told (no /proc/cpuinfo)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return set()
    have: set[str] = set()
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() in ("flags", "Features"):
            have.update(value.split())
    return have


def cpu_int8_fast(cpuinfo: str | None = None) -> bool:
    """Does this CPU (or the ``/proc/cpuinfo`` text ``cpuinfo``) have an int8 dot-product
    instruction (:data:`INT8_CPU_FLAGS`)? False where it cannot be told (no /proc/cpuinfo)."""
    return not cpu_flags(cpuinfo).isdisjoint(INT8_CPU_FLAGS)


# CPU features that multiply bf16 natively in matrix tiles (Intel AMX): there the trainer's
# step under bf16 autocast ran about twice the fp32 samples/s (docs/training.md, "Arithmetic
# of the step"). AVX-512 BF16 alone (dot products in vector registers) is not measured, so
# the trainer's autocast auto stays fp32 there.
BF16_CPU_FLAGS = ("amx_bf16",)


def cpu_bf16_fast(cpuinfo: str | None = None) -> bool:
    """Does this CPU (or the ``/proc/cpuinfo`` text ``cpuinfo``) multiply bf16 matrices
    natively (:data:`BF16_CPU_FLAGS`)? False where it cannot be told."""
    return not cpu_flags(cpuinfo).isdisjoint(BF16_CPU_FLAGS)


def variant_path(path: str | os.PathLike[str], precision: str) -> Path:
    """Where the ``precision`` file of the release of ``path`` lives (beside it)."""
    base = base_path(path)
    if check_precision(precision) == FP32:
        return base
    stem = base.name[: -len(SUFFIX)] if base.name.endswith(SUFFIX) else base.name
    return base.with_name(f"{stem}.{precision}{SUFFIX}")


def variant_file_name(model_name: str, precision: str) -> str:
    """``kg-b6c96-s0-d0`` + int8 -> ``kg-b6c96-s0-d0.int8.onnx``."""
    return variant_path(model_name + SUFFIX, precision).name


def existing_variants(path: str | os.PathLike[str]) -> list[str]:
    """The precisions whose files exist for the release of ``path``, in PRECISIONS order."""
    return [p for p in PRECISIONS if variant_path(path, p).is_file()]


def choose_precision(
    requested: str, *, on_cuda: bool, available: Iterable[str], cpu_int8: bool | None = None
) -> str:
    """The precision to load: ``requested`` unless auto; auto = fp16 on CUDA, int8 on a CPU
    with an int8 dot product (``cpu_int8``; None: :func:`cpu_int8_fast` of this host), each only
    when ``available`` has it, else fp32 (else the one file there is). An explicit precision
    that is not available is a ValueError (asking for int8 and silently getting fp32 hides a
    mistake); an explicit int8 is honoured on any CPU."""
    have = set(available)
    check_precision(requested, allow_auto=True)
    if requested != AUTO:
        if requested not in have:
            raise ValueError(
                f"precision {requested} asked for but only "
                f"{', '.join(p for p in PRECISIONS if p in have) or 'none'} "
                "available"
            )
        return requested
    # The device's own precision, else the reference, else the only file there is (fp16 runs
    # on a CPU and int8 on CUDA, only slower).
    if on_cuda:
        order = (FP16, FP32, INT8)
    elif cpu_int8_fast() if cpu_int8 is None else cpu_int8:
        order = (INT8, FP32, FP16)
    else:
        order = (FP32, INT8, FP16)
    for p in order:
        if p in have:
            return p
    raise ValueError("no model file available in any precision")
