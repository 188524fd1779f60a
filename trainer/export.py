"""ONNX export of :class:`trainer.model.KgrpcNet`, parity check and model metadata.

The file contract is docs/formats.md section 5, its names and layout defined in
kgrpc/schema.py: one self-contained ``.onnx`` file (no external data) with inputs
``bin_input`` float32 [batch, NUM_PLANES, N, N] and ``global_input`` float32
[batch, NUM_GLOBALS], outputs ``policy`` [batch, N*N+1] (logits), ``value`` [batch], ``score``
[batch], ``ownership`` [batch, N, N], batch and N dynamic, and string metadata props
``kgrpc.name``, ``kgrpc.blocks``, ``kgrpc.channels``, ``kgrpc.board_sizes`` (comma-separated),
``kgrpc.feature_version`` (always this code's ``FEATURE_VERSION``), ``kgrpc.training_steps``,
``kgrpc.training_rows`` (:class:`kgrpc.schema.ModelMetadata`), ``kgrpc.precision`` (fp32, fp16
or int8) and, for files written by :func:`export_precisions`, the parity figures
``kgrpc.parity_*`` (:mod:`trainer.parity`) and for int8 ``kgrpc.calibration`` (which positions
set the activation ranges); the keys are named in kgrpc/schema.py.

:func:`export_precisions` writes one release in several precisions (file names from
:mod:`kgrpc.precision`: ``NAME.onnx``, ``NAME.fp16.onnx``, ``NAME.int8.onnx``), each measured
against the torch model on held-out positions and refused (not written) outside the bounds.

We use the TorchScript exporter (``dynamo=False``): it gives dynamic batch *and* board axes from
``dynamic_axes`` in about a second, where the dynamo exporter needs ``Dim`` constraints per axis
and is several times slower. Models are exported in eval mode (BatchNorm folded by ORT).
"""

from __future__ import annotations

import io
import os
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import torch

from kgrpc.durable import atomic_write_bytes
from kgrpc.precision import FP16, FP32, INT8, check_precision, variant_path
from kgrpc.schema import (
    FEATURE_VERSION,
    MODEL_CALIBRATION_KEY,
    MODEL_INPUTS,
    MODEL_META_PREFIX,
    MODEL_OUTPUTS,
    MODEL_PARITY_PREFIX,
    NUM_GLOBALS,
    NUM_PLANES,
    ModelMetadata,
    model_props,
)
from trainer.model import KgrpcNet
from trainer.naming import parse_name
from trainer.parity import ParityBounds, ParityError, ParityReport
from trainer.positions import Positions

SERIES = "kg"
DEFAULT_ATOL = 2e-3
DEFAULT_PARITY_POSITIONS = 256


def default_name(
    blocks: int, channels: int, steps: int = 0, rows: int = 0, series: str = SERIES
) -> str:
    """``{series}-b{blocks}c{channels}-s{steps}-d{rows}`` (the coordinator checks this form)."""
    return f"{series}-b{blocks}c{channels}-s{steps}-d{rows}"


def _check_sizes(board_sizes: Iterable[int]) -> list[int]:
    sizes = sorted({int(s) for s in board_sizes})
    if not sizes or any(s < 2 or s > 25 for s in sizes):
        raise ValueError(f"board_sizes must be non-empty sizes in 2..25, got {sizes}")
    return sizes


def fp32_proto(model: KgrpcNet, board_sizes: Iterable[int], opset: int = 17) -> onnx.ModelProto:
    """The traced fp32 graph (no metadata); the model's mode is restored."""
    trace_n = _check_sizes(board_sizes)[-1]
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    example = (
        torch.zeros(2, model.num_planes, trace_n, trace_n, device=device),
        torch.zeros(2, model.num_globals, device=device),
    )
    buf = io.BytesIO()
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation notice
            torch.onnx.export(
                model,
                example,
                buf,
                input_names=list(MODEL_INPUTS),
                output_names=list(MODEL_OUTPUTS),
                dynamic_axes={
                    "bin_input": {0: "batch", 2: "board", 3: "board"},
                    "global_input": {0: "batch"},
                    "policy": {0: "batch", 1: "moves"},
                    "value": {0: "batch"},
                    "score": {0: "batch"},
                    "ownership": {0: "batch", 1: "board", 2: "board"},
                },
                opset_version=opset,
                do_constant_folding=True,
                dynamo=False,
            )
    finally:
        model.train(was_training)
    return onnx.load_from_string(buf.getvalue())


def model_metadata(
    model: KgrpcNet,
    *,
    name: str,
    board_sizes: Iterable[int],
    training_steps: int = 0,
    training_rows: int = 0,
    precision: str = FP32,
) -> dict[str, str]:
    """The ``kgrpc.*`` metadata props of an export (:class:`kgrpc.schema.ModelMetadata`)."""
    meta = ModelMetadata(
        name=name,
        blocks=model.blocks,
        channels=model.channels,
        board_sizes=tuple(_check_sizes(board_sizes)),
        feature_version=FEATURE_VERSION,
        training_steps=int(training_steps),
        training_rows=int(training_rows),
        precision=precision,
    )
    return meta.to_props()


def _with_metadata(proto: onnx.ModelProto, props: dict[str, str]) -> bytes:
    del proto.metadata_props[:]
    for key, value in props.items():
        entry = proto.metadata_props.add()
        entry.key = key
        entry.value = value
    proto.producer_name = "kgrpc"
    return proto.SerializeToString()


def export_onnx(
    model: KgrpcNet,
    path: str | os.PathLike[str],
    *,
    name: str,
    board_sizes: Iterable[int],
    training_steps: int = 0,
    training_rows: int = 0,
    opset: int = 17,
) -> None:
    """Export ``model`` (any mode; exported in eval mode, mode restored) to one fp32 ONNX
    file, without a parity report (see :func:`export_precisions` for that)."""
    meta = model_metadata(
        model,
        name=name,
        board_sizes=board_sizes,
        training_steps=training_steps,
        training_rows=training_rows,
    )
    data = _with_metadata(fp32_proto(model, board_sizes, opset), meta)
    atomic_write_bytes(Path(path), data, mkdir=True)


@dataclass(frozen=True)
class Exported:
    """One precision of an export that passed its parity check and was written."""

    precision: str
    path: Path
    report: ParityReport


@dataclass
class ExportOutcome:
    written: list[Exported]
    refused: dict[str, ParityError]  # precision -> why (nothing written for it)

    @property
    def ok(self) -> bool:
        return not self.refused

    def get(self, precision: str) -> Exported | None:
        return next((e for e in self.written if e.precision == precision), None)


def convert(
    proto: onnx.ModelProto, precision: str, calibration: Sequence[Positions] = ()
) -> onnx.ModelProto:
    """The fp32 ``proto`` in ``precision``: always a new proto, ``proto`` is left as it was
    (several precisions are made from one trace)."""
    from trainer import quantize

    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    if check_precision(precision) == FP16:
        return quantize.to_fp16(copy)
    if precision == INT8:
        return quantize.to_int8(copy, calibration)
    return copy


def export_precisions(
    model: KgrpcNet,
    path: str | os.PathLike[str],
    precisions: Sequence[str],
    *,
    name: str,
    board_sizes: Iterable[int],
    training_steps: int = 0,
    training_rows: int = 0,
    sets: tuple[list[Positions], list[Positions]] | None = None,
    bounds: ParityBounds | None = None,
    atol: float = DEFAULT_ATOL,
    opset: int = 17,
) -> ExportOutcome:
    """Export ``model`` in each of ``precisions``; ``path`` is the release's fp32 file
    (``NAME.onnx``), the others go beside it (``NAME.fp16.onnx``, ``NAME.int8.onnx``).

    ``sets`` = (calibration, held-out) positions (:func:`trainer.positions.draw_sets`; default:
    random-game positions of ``board_sizes``); int8 calibrates on the calibration set plus
    random-game positions (trainer/quantize.py, RANDOM_CALIBRATION_SHARE), recorded in
    ``kgrpc.calibration``. Each precision is compared with the torch model
    on the held-out set; one outside ``bounds`` (or, for fp32, with an output more than
    ``atol`` away) is refused: not written, and an existing file of that precision is left as
    it was. The others are written atomically with their parity figures in the metadata.
    """
    from trainer import parity
    from trainer.positions import describe, draw_sets, with_random_games
    from trainer.quantize import RANDOM_CALIBRATION_SHARE

    sizes = _check_sizes(board_sizes)
    bounds = bounds or ParityBounds()
    if sets is None:
        sets = draw_sets(sizes, DEFAULT_PARITY_POSITIONS)
    calibration, held_out = sets
    if INT8 in precisions and not all(p.source == "random games" for p in calibration):
        calibration = with_random_games(calibration, RANDOM_CALIBRATION_SHARE)
    base = fp32_proto(model, sizes, opset)
    refs = parity.torch_outputs(model, held_out)
    outcome = ExportOutcome([], {})
    for precision in dict.fromkeys(precisions):
        converted = convert(base, precision, calibration)
        report = parity.compare(
            precision, refs, parity.onnx_outputs(converted.SerializeToString(), held_out)
        )
        try:
            report.check(bounds)
            if precision == FP32 and report.max_abs_diff > atol:
                raise ParityError(
                    f"fp32 export refused: torch vs ONNX Runtime differ by "
                    f"{report.max_abs_diff:.3g} > atol {atol:.3g}"
                )
        except ParityError as exc:
            outcome.refused[precision] = exc
            continue
        meta = model_metadata(
            model,
            name=name,
            board_sizes=sizes,
            training_steps=training_steps,
            training_rows=training_rows,
            precision=precision,
        )
        meta.update(report.to_metadata(MODEL_META_PREFIX + MODEL_PARITY_PREFIX))
        if precision == INT8:
            meta[MODEL_META_PREFIX + MODEL_CALIBRATION_KEY] = describe(calibration)
        target = variant_path(path, precision)
        atomic_write_bytes(target, _with_metadata(converted, meta), mkdir=True)
        outcome.written.append(Exported(precision, target, report))
    return outcome


def read_metadata(path: str | os.PathLike[str]) -> dict[str, str]:
    """The ``kgrpc.*`` metadata props of an ONNX file, keys without the prefix.

    Reads only the model proto (weights included; models are small). Raises ValueError
    when the file has no ``kgrpc.name``.
    """
    proto = onnx.load(str(path), load_external_data=False)
    meta = model_props({p.key: p.value for p in proto.metadata_props})
    if "name" not in meta:
        raise ValueError(f"{path}: not a kgrpc model (no {MODEL_META_PREFIX}name metadata)")
    return meta


def random_inputs(batch: int, board_size: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Random 0/1 planes and globals of the contract's shapes (for tests and parity)."""
    rng = np.random.default_rng(seed)
    planes = (rng.random((batch, NUM_PLANES, board_size, board_size)) < 0.3).astype(np.float32)
    planes[:, 0] = 1.0
    globals_ = rng.uniform(-1, 1, (batch, NUM_GLOBALS)).astype(np.float32)
    return planes, globals_


def check_parity(
    model: KgrpcNet,
    onnx_path: str | os.PathLike[str],
    board_size: int,
    batch: int = 8,
    atol: float = DEFAULT_ATOL,
    seed: int = 0,
) -> float:
    """Max abs difference over all four outputs, torch (eval) vs ONNX Runtime (CPU).

    Score is compared after dividing by SCORE_SCALE so one tolerance fits every head.
    Raises :class:`ParityError` over ``atol``.
    """
    import onnxruntime as ort

    from trainer.model import SCORE_SCALE

    planes, globals_ = random_inputs(batch, board_size, seed)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            device = next(model.parameters()).device
            ref = model(torch.from_numpy(planes).to(device), torch.from_numpy(globals_).to(device))
    finally:
        model.train(was_training)
    ref_np = [t.detach().cpu().numpy() for t in ref]
    sess = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    out = sess.run(list(MODEL_OUTPUTS), {"bin_input": planes, "global_input": globals_})
    worst = 0.0
    for name, a, b in zip(MODEL_OUTPUTS, ref_np, out, strict=True):
        if a.shape != b.shape:
            raise ParityError(f"{name}: torch shape {a.shape} != onnx shape {b.shape}")
        scale = SCORE_SCALE if name == "score" else 1.0
        worst = max(worst, float(np.max(np.abs(a - b))) / scale)
    if worst > atol:
        raise ParityError(f"torch vs ONNX Runtime differ by {worst:.3g} > atol {atol:.3g}")
    return worst


def fresh_model(
    board_size: int | Sequence[int], blocks: int, channels: int, seed: int = 0
) -> KgrpcNet:
    """A randomly initialised net in eval mode, BatchNorm running statistics warmed on a few
    random batches so its outputs are not degenerate (all-equal policies)."""
    torch.manual_seed(seed)
    model = KgrpcNet(blocks, channels)
    sizes = [board_size] if isinstance(board_size, int) else list(board_size)
    model.train()
    with torch.no_grad():
        for i, n in enumerate(sizes * 2):
            planes, globals_ = random_inputs(16, n, seed=seed + 1000 + i)
            model(torch.from_numpy(planes), torch.from_numpy(globals_))
    return model.eval()


def init_model(
    board_size: int | Sequence[int],
    blocks: int,
    channels: int,
    out: str | os.PathLike[str],
    name: str | None = None,
    seed: int = 0,
) -> str:
    """Write a randomly initialised model (:func:`fresh_model`) to ``out``; returns its name.

    Default name ``kg-b{B}c{C}-s0-d0``.
    """
    model = fresh_model(board_size, blocks, channels, seed)
    sizes = [board_size] if isinstance(board_size, int) else list(board_size)
    name = name or default_name(blocks, channels)
    try:  # the metadata says what the name says (the coordinator's publish check compares)
        parsed = parse_name(name)
        steps, rows = parsed.steps, parsed.rows
    except ValueError:
        steps = rows = 0
    export_onnx(model, out, name=name, board_sizes=sizes, training_steps=steps, training_rows=rows)
    return name
