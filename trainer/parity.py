"""Parity of an exported model against the torch model (figures, bounds: :mod:`kgrpc.parity`).

Measured on held-out positions (:mod:`trainer.positions`), with the torch model in eval mode as
the reference and ONNX Runtime's CPU provider running the exported file. ``max_abs_diff``
divides score differences by SCORE_SCALE; fp32 exports also keep it under ``--parity-atol``.
An export outside any bound raises :class:`ParityError` and is not written.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from kgrpc import parity as _parity
from kgrpc.parity import Outputs, ParityBounds, ParityError, ParityReport

if TYPE_CHECKING:  # these import torch; kgrpc-train --help stays fast without it
    from trainer.model import KgrpcNet
    from trainer.positions import Positions

__all__ = [
    "Outputs",
    "ParityBounds",
    "ParityError",
    "ParityReport",
    "compare",
    "onnx_outputs",
    "torch_outputs",
]
CHUNK = 64


def compare(precision: str, refs: Sequence[Outputs], outs: Sequence[Outputs]) -> ParityReport:
    """Parity figures of an export (``outs``) against the torch model (``refs``)."""
    from trainer.model import SCORE_SCALE

    return _parity.compare(precision, refs, outs, score_scale=SCORE_SCALE)


def torch_outputs(model: KgrpcNet, sets: Sequence[Positions]) -> list[Outputs]:
    """The torch model's outputs (eval mode; its mode is restored)."""
    import torch

    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    result = []
    try:
        with torch.no_grad():
            for s in sets:
                parts = [
                    model(
                        torch.from_numpy(s.planes[i : i + CHUNK]).to(device),
                        torch.from_numpy(s.globals[i : i + CHUNK]).to(device),
                    )
                    for i in range(0, len(s), CHUNK)
                ]
                result.append(
                    [torch.cat([p[k] for p in parts]).float().cpu().numpy() for k in range(4)]
                )
    finally:
        model.train(was_training)
    return result


def onnx_outputs(model: bytes | str, sets: Sequence[Positions]) -> list[Outputs]:
    """ONNX Runtime CPU outputs of a model (serialized bytes or a path); inputs cast to the
    model's input type (float32 or float16), outputs returned as float32."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(model, sess_options=so, providers=["CPUExecutionProvider"])
    in_types = {
        i.name: (np.float16 if i.type == "tensor(float16)" else np.float32)
        for i in sess.get_inputs()
    }
    names = ["policy", "value", "score", "ownership"]
    result = []
    for s in sets:
        parts = [
            sess.run(
                names,
                {
                    "bin_input": s.planes[i : i + CHUNK].astype(in_types["bin_input"]),
                    "global_input": s.globals[i : i + CHUNK].astype(in_types["global_input"]),
                },
            )
            for i in range(0, len(s), CHUNK)
        ]
        result.append([np.concatenate([p[k] for p in parts]).astype(np.float32) for k in range(4)])
    return result
