"""What a model file's ONNX graph says about itself: its architecture and its precision.

The publish check (:mod:`kgrpc.coordinator.model_check`) and the trainer's export
(:mod:`trainer.quantize`) read graphs the same way, here:

- :func:`architecture`: (blocks, channels) from the convolutions: the 3x3 convolution of the
  input planes (the stem) has ``channels`` filters, the residual tower ``2 * blocks`` 3x3
  convolutions from ``channels`` to ``channels``. Weights are found through the nodes an
  fp16 or int8 graph puts between a tensor and its use (Cast, QuantizeLinear,
  DequantizeLinear, Identity).
- :func:`check_precision_graph`: the graph computes in the precision it claims (fp32: float32
  weights, no quantisation; fp16: :func:`check_fp16_graph`; int8: QDQ, int8 weights of every
  3x3 convolution, i.e. the stem's and the tower's; the heads' 1x1 convolutions and dense
  layers may stay float, as trainer/quantize.py leaves them). Inputs and outputs are float32 in
  every precision.

onnx is imported inside the functions: the coordinator process imports this module's users
but never onnx itself (only its checking process does).
"""

from __future__ import annotations

from typing import Any

from kgrpc import schema
from kgrpc.precision import FP16, FP32, INT8, check_precision

# Nodes that pass a tensor on without changing what it means (its shape and role).
_PASS_THROUGH = ("Cast", "QuantizeLinear", "DequantizeLinear", "Identity")


def _origins(graph: Any) -> dict[str, str]:
    """Each tensor name -> the name it passes through from (a pass-through node's input)."""
    return {
        out: node.input[0]
        for node in graph.node
        if node.op_type in _PASS_THROUGH and node.input
        for out in node.output
    }


def _root(name: str, origins: dict[str, str]) -> str:
    seen = set()
    while name in origins and name not in seen:
        seen.add(name)
        name = origins[name]
    return name


def architecture(graph: Any) -> tuple[int, int]:
    """(blocks, channels) as the graph's convolutions say; ValueError without a readable stem."""
    from onnx import numpy_helper

    shapes: dict[str, tuple[int, ...]] = {i.name: tuple(i.dims) for i in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
            shapes[node.output[0]] = tuple(numpy_helper.to_array(node.attribute[0].t).shape)
    origins = _origins(graph)
    convs = [n for n in graph.node if n.op_type == "Conv" and len(n.input) > 1]
    planes = schema.NUM_PLANES
    stem = [
        shapes.get(_root(n.input[1], origins))
        for n in convs
        if _root(n.input[0], origins) == "bin_input"
    ]
    if len(stem) != 1 or stem[0] is None or len(stem[0]) != 4 or stem[0][1:] != (planes, 3, 3):
        raise ValueError(
            "the graph has no 3x3 convolution of the input planes with "
            "readable weights (the stem of a kgrpc net)"
        )
    channels = stem[0][0]
    tower = sum(
        1 for n in convs if shapes.get(_root(n.input[1], origins)) == (channels, channels, 3, 3)
    )
    return tower // 2, channels


def check_fp16_graph(proto: Any) -> None:
    """ValueError unless every float weight is float16, the inputs/outputs are float32, and
    the only casts to float32 are the ones feeding the graph's outputs."""
    import onnx

    graph = proto.graph
    wide = [t.name for t in graph.initializer if t.data_type == onnx.TensorProto.FLOAT]
    if wide:
        raise ValueError(f"fp16 graph keeps float32 weights: {wide[:5]}")
    if not any(t.data_type == onnx.TensorProto.FLOAT16 for t in graph.initializer):
        raise ValueError("fp16 graph has no float16 weights")
    _float_io(graph, FP16)
    outputs = {o.name for o in graph.output}
    for node in graph.node:
        to = next((a.i for a in node.attribute if a.name == "to"), None)
        if (
            node.op_type == "Cast"
            and to == onnx.TensorProto.FLOAT
            and not set(node.output) & outputs
        ):
            raise ValueError(f"fp16 graph computes in float32 after node {node.name}")
        if node.op_type == "Constant":
            for a in node.attribute:
                if a.name == "value" and a.t.data_type == onnx.TensorProto.FLOAT:
                    raise ValueError(f"fp16 graph keeps a float32 constant in {node.name}")


def _float_io(graph: Any, precision: str) -> None:
    import onnx

    for v in [*graph.input, *graph.output]:
        if v.type.tensor_type.elem_type != onnx.TensorProto.FLOAT:
            raise ValueError(f"{precision} graph: {v.name} is not float32")


def _check_int8_graph(graph: Any) -> None:
    import onnx

    _float_io(graph, INT8)
    weights = {t.name: t for t in graph.initializer}
    origins = _origins(graph)
    trunk = [
        (n, weights.get(_root(n.input[1], origins)))
        for n in graph.node
        if n.op_type == "Conv" and len(n.input) > 1
    ]
    trunk = [(n, w) for n, w in trunk if w is None or tuple(w.dims[2:]) == (3, 3)]
    if not any(n.op_type == "QuantizeLinear" for n in graph.node):
        raise ValueError("int8 graph quantises no activation (no QuantizeLinear)")
    wide = [
        n.name or n.input[1] for n, w in trunk if w is None or w.data_type != onnx.TensorProto.INT8
    ]
    if not trunk or wide:
        raise ValueError(f"int8 graph has 3x3 convolutions without int8 weights: {wide[:5]}")


def _check_fp32_graph(graph: Any) -> None:
    import onnx

    _float_io(graph, FP32)
    narrow = [
        t.name
        for t in graph.initializer
        if t.data_type in (onnx.TensorProto.FLOAT16, onnx.TensorProto.INT8)
    ]
    quantised = [n.name for n in graph.node if n.op_type in ("QuantizeLinear", "DequantizeLinear")]
    if narrow or quantised:
        raise ValueError(
            f"fp32 graph holds float16 or int8 weights or quantisation: {(narrow + quantised)[:5]}"
        )


def check_precision_graph(proto: Any, precision: str) -> None:
    """ValueError unless ``proto``'s graph computes in ``precision`` (module docstring)."""
    if check_precision(precision) == FP16:
        check_fp16_graph(proto)
    elif precision == INT8:
        _check_int8_graph(proto.graph)
    else:
        _check_fp32_graph(proto.graph)
