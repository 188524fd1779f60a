"""One ONNX Runtime session for one model file, with provider selection.

``Engine.run(board_size, packed, globals_)`` takes packed planes (uint8 [B, K], see
inference/wire.py) and float32 globals [B, 8] and returns float32 policy probabilities
[B, N*N+1] (softmax done here, off the event loop), value [B], score [B], ownership [B, N*N].
It is blocking and thread-safe: callers run it in a worker thread (ORT releases the GIL).

Device selection (``--device``): ``cpu``; ``cuda`` (fail if the session does not actually get
the CUDA provider); ``auto`` (CUDA when the session gets it, else CPU). onnxruntime-gpu lists
CUDA as available even without a GPU, so the decision is made from ``session.get_providers()``
after the session exists, and the choice and its reason are logged.

A model whose ``kgrpc.feature_version`` metadata (docs/formats.md section 5; absent = 1) is
not this code's ``kgrpc.schema.FEATURE_VERSION`` is refused at load with
:class:`kgrpc.schema.FeatureVersionError`: the positions it would be given mean something else
to it.
"""

from __future__ import annotations

import hashlib
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnxruntime as ort

from inference.wire import unpack_planes_f32
from kgrpc.schema import MODEL_OUTPUTS, check_feature_version, model_feature_version, model_props

log = logging.getLogger("kgrpc.inference.engine")

CUDA = "CUDAExecutionProvider"
CPU = "CPUExecutionProvider"
OUTPUTS = list(MODEL_OUTPUTS)


@dataclass
class ModelFileInfo:
    name: str
    sha256: str
    path: str
    feature_version: int
    metadata: dict[str, str] = field(default_factory=dict)


def sha256_file(path: str | os.PathLike[str]) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _session_options(intra_threads: int) -> ort.SessionOptions:
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.intra_op_num_threads = intra_threads
    so.inter_op_num_threads = 1
    # Spinning intra-op threads would steal the CPU from the event loop between batches.
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    so.log_severity_level = 3
    return so


def _softmax(logits: np.ndarray) -> np.ndarray:
    z = logits - logits.max(axis=1, keepdims=True)
    np.exp(z, out=z)
    z /= z.sum(axis=1, keepdims=True)
    return z


class Engine:
    """An ORT session for ``path``. ``device``: "auto" | "cuda" | "cpu"."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        device: str = "auto",
        intra_threads: int = 0,
        cuda_device_id: int = 0,
    ) -> None:
        if device not in ("auto", "cuda", "cpu"):
            raise ValueError(f"device must be auto, cuda or cpu, got {device!r}")
        self.path = str(path)
        if not Path(self.path).is_file():
            raise FileNotFoundError(f"model file not found: {self.path}")
        threads = intra_threads or (os.cpu_count() or 1)
        available = ort.get_available_providers()
        want_cuda = device in ("auto", "cuda") and CUDA in available
        if device == "cuda" and CUDA not in available:
            raise RuntimeError(f"--device cuda but onnxruntime has no CUDA provider ({available})")
        providers: list[str | tuple[str, dict[str, object]]] = [CPU]
        if want_cuda:
            providers = [
                (CUDA, {
                    "device_id": cuda_device_id,
                    # EXHAUSTIVE would re-benchmark convolutions for every new batch shape.
                    "cudnn_conv_algo_search": "HEURISTIC",
                    "arena_extend_strategy": "kSameAsRequested",
                    "do_copy_in_default_stream": True,
                }),
                CPU,
            ]
        self.session = ort.InferenceSession(
            self.path, sess_options=_session_options(threads), providers=providers
        )
        actual = self.session.get_providers()
        self.provider = actual[0]
        self.on_cuda = self.provider == CUDA
        if device == "cuda" and not self.on_cuda:
            raise RuntimeError("--device cuda: the session fell back to CPU (no usable GPU/CUDA)")
        if device == "cpu":
            reason = "requested --device cpu"
        elif self.on_cuda:
            reason = "CUDA provider active"
        elif want_cuda:
            reason = "CUDA provider listed but the session fell back to CPU (no usable GPU)"
        else:
            reason = "onnxruntime has no CUDA provider"
        kg = model_props(self.session.get_modelmeta().custom_metadata_map)
        feature_version = model_feature_version(kg, f"model file {self.path}")
        check_feature_version(feature_version, f"model file {self.path}")
        self.info = ModelFileInfo(
            name=kg.get("name") or Path(self.path).stem,
            sha256=sha256_file(self.path),
            path=self.path,
            feature_version=feature_version,
            metadata=kg,
        )
        log.info("model %s on %s (%s; intra-op threads %d)", self.info.name, self.provider,
                 reason, threads)
        self.reason = reason

    @property
    def name(self) -> str:
        return self.info.name

    def _run_raw(self, x: np.ndarray, g: np.ndarray) -> list[np.ndarray]:
        feeds = {"bin_input": x, "global_input": g}
        if not self.on_cuda:
            return self.session.run(OUTPUTS, feeds)
        # IO binding: inputs copied to the GPU once, outputs written straight to host memory.
        io = self.session.io_binding()
        io.bind_cpu_input("bin_input", x)
        io.bind_cpu_input("global_input", g)
        for name in OUTPUTS:
            io.bind_output(name, "cpu")
        self.session.run_with_iobinding(io)
        return io.copy_outputs_to_cpu()

    def run(
        self, board_size: int, packed: np.ndarray, globals_: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        x = unpack_planes_f32(packed, board_size)
        g = np.ascontiguousarray(globals_, dtype=np.float32)
        return self.run_float(x, g)

    def run_float(
        self, x: np.ndarray, g: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """float32 planes [B, 15, N, N] -> (policy probs, value, score, ownership [B, N*N])."""
        policy, value, score, own = self._run_raw(x, g)
        b = x.shape[0]
        return _softmax(policy), value, score, own.reshape(b, -1)
