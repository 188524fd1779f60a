"""fp16 and int8 variants of an exported fp32 ONNX graph.

fp16 (for CUDA): onnxconverter-common's ``convert_float_to_float16`` with ``keep_io_types``:
every weight and activation is float16, the inputs and outputs stay float32 (one Cast after each
input, one before each output), so callers feed and read the same arrays as for fp32.
:func:`kgrpc.model_graph.check_fp16_graph` (the coordinator's check too) verifies that shape
of the graph.

int8 (for CPUs with an int8 dot product, see :func:`kgrpc.precision.cpu_int8_fast`): ONNX
Runtime's static quantisation in QDQ form (``QuantizeLinear`` / ``DequantizeLinear`` pairs that
its CPU provider fuses into ``QLinearConv`` and friends, with VNNI kernels where the CPU has
them) of the trunk only (TRUNK_SCOPES): full 8-bit int8 weights per output channel
(REDUCE_RANGE), uint8 activations with ranges (MinMax) calibrated by running the fp32 graph over
real positions; the heads stay float. The graph is first simplified by ``quant_pre_process``
(shape inference, constant folding) as ORT advises.
"""

from __future__ import annotations

import tempfile
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import onnx

from kgrpc.model_graph import check_fp16_graph
from trainer.positions import Positions

__all__ = ["check_fp16_graph", "to_fp16", "to_int8"]

CALIBRATION_BATCH = 16
# Full 8-bit weights. 7-bit weights (reduce_range) are what keeps x86 CPUs without VNNI exact:
# they multiply uint8 x int8 with VPMADDUBSW, whose int16 pair sums can saturate at 8 bits. But
# on a learn9 b4c32 net the extra rounding of 7 bits failed parity (score MAE 0.705 > 0.6 with
# the trunk alone quantised; docs/results/learn9-gumbel-xeon-40m/int8-variants.txt) where 8 bits
# passed (0.32). So the int8 file is for CPUs with an int8 dot product, which do not saturate;
# ``auto`` picks it only there (kgrpc.precision.choose_precision).
REDUCE_RANGE = False
# The parts of the graph that are quantised: the stem and the residual tower (ONNX node names
# start with the torch module's path, trainer/model.py's KgrpcNet.stem*, .tower). They hold
# nearly all the multiply-adds; the heads are small, and their int8 rounding lands directly in
# the outputs: quantising them too failed parity on top-1 (93.8% < 95%) on the same net.
TRUNK_SCOPES = ("/stem", "/tower")
# Random-game positions added to the calibration set, as a share of its real positions (per
# board size). MinMax ranges from a run's own positions alone clip what those never show:
# other rules and komi in the globals (a GUI user's game, GTP), odd stone patterns. Measured
# on learn9 nets (docs/results/int8-trunk8/calibration.txt): calibrated on 256 real positions
# only, the int8 files matched fp32 on held-out real positions but not on random-game ones
# (score MAE 1.1-2.7 points, KL up to 0.09), so the coordinator's check refused them; with
# 64 random-game positions added they passed both, for a little more rounding on real ones.
RANDOM_CALIBRATION_SHARE = 0.25


def to_fp16(proto: onnx.ModelProto) -> onnx.ModelProto:
    """A float16 copy of ``proto`` with float32 inputs and outputs (checked)."""
    from onnxconverter_common import float16

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "the float32 number 1e-08 will be truncated to 1e-07"
        out = float16.convert_float_to_float16(proto, keep_io_types=True)
    check_fp16_graph(out)
    return out


class _Reader:
    """``onnxruntime.quantization.CalibrationDataReader`` over position sets (duck-typed:
    the base class only declares ``get_next``)."""

    def __init__(self, sets: Sequence[Positions], batch: int) -> None:
        self._it: Iterator[dict[str, np.ndarray]] = (
            {"bin_input": s.planes[i : i + batch], "global_input": s.globals[i : i + batch]}
            for s in sets
            for i in range(0, len(s), batch)
        )

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._it, None)

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        return self._it


def to_int8(
    proto: onnx.ModelProto,
    calibration: Sequence[Positions],
    batch: int = CALIBRATION_BATCH,
    reduce_range: bool = REDUCE_RANGE,
) -> onnx.ModelProto:
    """A statically quantised (QDQ, int8) copy of the fp32 ``proto``, calibrated on
    ``calibration`` (one or more position sets, any board sizes), the TRUNK_SCOPES nodes only.
    ``reduce_range``: 7-bit weights (see REDUCE_RANGE). ValueError for a graph with no trunk
    nodes (not a KgrpcNet export)."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_static,
    )
    from onnxruntime.quantization.shape_inference import quant_pre_process

    if not calibration or not sum(len(s) for s in calibration):
        raise ValueError("int8 quantisation needs calibration positions")

    class Reader(_Reader, CalibrationDataReader):
        pass

    with tempfile.TemporaryDirectory(prefix="kgrpc-int8-") as tmp:
        src, pre, out = (Path(tmp) / f for f in ("fp32.onnx", "pre.onnx", "int8.onnx"))
        # From a file: given the proto itself, quant_pre_process rewrites its weights in place
        # into external-data references ("foo.bin"), breaking the caller's copy.
        src.write_bytes(proto.SerializeToString())
        quant_pre_process(src, pre, skip_symbolic_shape=True)
        trunk = [n.name for n in onnx.load(str(pre)).graph.node if n.name.startswith(TRUNK_SCOPES)]
        if not trunk:
            raise ValueError(
                "int8 quantisation found no trunk nodes (names starting with "
                f"{' or '.join(TRUNK_SCOPES)}): not a kgrpc network export"
            )
        quantize_static(
            pre,
            out,
            Reader(calibration, batch),
            quant_format=QuantFormat.QDQ,
            # uint8 activations x int8 weights is what VNNI multiplies natively: measured on
            # a b6c96 19x19 net, int8 activations (S8S8) ran no faster than fp32, U8S8 ~1.9x.
            activation_type=QuantType.QUInt8,
            weight_type=QuantType.QInt8,
            reduce_range=reduce_range,
            per_channel=True,
            calibrate_method=CalibrationMethod.MinMax,
            nodes_to_quantize=trunk,
            # BatchNormalization (the stem's, which an Add keeps apart from its Conv) stays
            # float: ORT has no int8 kernel for it and the per-channel axis does not fit.
            op_types_to_quantize=["Conv", "Gemm", "MatMul", "Add", "Mul", "Concat"],
        )
        return onnx.load(str(out))
