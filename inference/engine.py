"""One ONNX Runtime session for one model file, with provider selection.

``Engine.run(board_size, packed, globals_)`` takes packed planes (uint8 [B, K], see
inference/wire.py) and float32 globals [B, NUM_GLOBALS] and returns float32 policy probabilities
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

Precision selection (``--precision``, names and file layout in kgrpc/precision.py): ``path``
names a release; its fp16 and int8 files sit beside it (``NAME.fp16.onnx``,
``NAME.int8.onnx``). ``auto`` loads what :func:`kgrpc.precision.choose_precision` picks for
the device among the files there (fp16 with CUDA, int8 on a CPU with an int8 dot product);
given a variant file itself, ``auto`` loads that file.
``fp32|fp16|int8`` load that file or fail (FileNotFoundError). When CUDA was expected but the
session fell back to the CPU, the CPU's choice is loaded instead. The file's
``kgrpc.precision`` metadata must match its name. Inputs are cast to the graph's input type
(float32, or float16 for a graph exported with float16 I/O) and outputs returned as float32.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnxruntime as ort

from inference.wire import unpack_planes_f32
from kgrpc.devices import parse_device
from kgrpc.digest import file_digest
from kgrpc.precision import (
    AUTO,
    FP32,
    check_precision,
    choose_precision,
    existing_variants,
    precision_of_path,
    variant_path,
)
from kgrpc.schema import (
    MODEL_OUTPUTS,
    check_feature_version,
    model_feature_version,
    model_precision,
    model_props,
)

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
    precision: str = FP32


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


def _providers(on_cuda: bool, cuda_device_id: int) -> list[str | tuple[str, dict[str, object]]]:
    if not on_cuda:
        return [CPU]
    return [
        (
            CUDA,
            {
                "device_id": cuda_device_id,
                # EXHAUSTIVE would re-benchmark convolutions for every new batch shape.
                "cudnn_conv_algo_search": "HEURISTIC",
                "arena_extend_strategy": "kSameAsRequested",
                "do_copy_in_default_stream": True,
            },
        ),
        CPU,
    ]


def cuda_expected(device: str) -> bool:
    """Whether an engine for ``device`` (auto, cpu, cuda[:N]) expects to run on CUDA, before
    any session exists: for choosing which precision's file to download (``auto``: fp16 for
    CUDA). onnxruntime-gpu lists CUDA even without a usable GPU; such a machine downloads the
    fp16 file and runs it on the CPU unless told ``--device cpu``."""
    if device.startswith("cuda"):
        return True
    return device == "auto" and CUDA in ort.get_available_providers()


def _np_type(ort_type: str) -> type:
    return np.float16 if ort_type == "tensor(float16)" else np.float32


class Engine:
    """An ORT session for ``path``. ``device``: "auto" | "cpu" | "cuda" | "cuda:N"
    (:mod:`kgrpc.devices`; ``cuda:N`` overrides ``cuda_device_id``); ``precision``:
    "auto" | "fp32" | "fp16" | "int8"."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        device: str = "auto",
        precision: str = AUTO,
        intra_threads: int = 0,
        cuda_device_id: int = 0,
    ) -> None:
        kind, gpu = parse_device(device)
        if ":" in device:  # cuda:N names the GPU
            cuda_device_id = gpu
        device = kind
        check_precision(precision, allow_auto=True)
        if precision == AUTO and precision_of_path(path) != FP32:
            # A variant file named explicitly: that file.
            available = [precision_of_path(path)] if Path(path).is_file() else []
        else:
            available = existing_variants(path)
        if not available:
            raise FileNotFoundError(f"model file not found: {path}")
        if precision != AUTO and precision not in available:
            raise FileNotFoundError(
                f"no {precision} file for model {path}: {variant_path(path, precision)} is "
                f"missing (have: {', '.join(available) or 'none'})"
            )
        threads = intra_threads or (os.cpu_count() or 1)
        self._options = _session_options(threads)
        available_providers = ort.get_available_providers()
        want_cuda = device in ("auto", "cuda") and CUDA in available_providers
        if device == "cuda" and CUDA not in available_providers:
            raise RuntimeError(
                f"--device cuda but onnxruntime has no CUDA provider ({available_providers})"
            )
        chosen = choose_precision(precision, on_cuda=want_cuda, available=available)
        self._open(variant_path(path, chosen), want_cuda, cuda_device_id)
        if device == "cuda" and not self.on_cuda:
            raise RuntimeError("--device cuda: the session fell back to CPU (no usable GPU/CUDA)")
        if want_cuda and not self.on_cuda and precision == AUTO:
            cpu_choice = choose_precision(AUTO, on_cuda=False, available=available)
            if cpu_choice != chosen:  # e.g. fp16 was picked for a GPU that is not usable
                log.info("no usable GPU: loading the %s file instead of %s", cpu_choice, chosen)
                chosen = cpu_choice
                self._open(variant_path(path, chosen), False, cuda_device_id)
        if device == "cpu":
            reason = "requested --device cpu"
        elif self.on_cuda:
            reason = f"CUDA provider active, GPU {cuda_device_id}"
        elif want_cuda:
            reason = "CUDA provider listed but the session fell back to CPU (no usable GPU)"
        else:
            reason = "onnxruntime has no CUDA provider"
        kg = model_props(self.session.get_modelmeta().custom_metadata_map)
        feature_version = model_feature_version(kg, f"model file {self.path}")
        check_feature_version(feature_version, f"model file {self.path}")
        file_precision = model_precision(kg, f"model file {self.path}")
        if file_precision != chosen:
            raise ValueError(
                f"{self.path}: metadata says precision {file_precision} but the "
                f"file name says {chosen}"
            )
        self.info = ModelFileInfo(
            name=kg.get("name") or Path(self.path).stem,
            sha256=file_digest(self.path).sha256,
            path=self.path,
            feature_version=feature_version,
            metadata=kg,
            precision=chosen,
        )
        why = "requested" if precision != AUTO else f"auto of {', '.join(available)}"
        log.info(
            "model %s %s (%s) on %s (%s; intra-op threads %d)",
            self.info.name,
            chosen,
            why,
            self.provider,
            reason,
            threads,
        )
        self.reason = reason

    def _open(self, path: Path, cuda: bool, cuda_device_id: int) -> None:
        self.path = str(path)
        self.session = ort.InferenceSession(
            self.path, sess_options=self._options, providers=_providers(cuda, cuda_device_id)
        )
        self.provider = self.session.get_providers()[0]
        self.on_cuda = self.provider == CUDA
        types = {i.name: i.type for i in self.session.get_inputs()}
        self._x_type = _np_type(types.get("bin_input", ""))
        self._g_type = _np_type(types.get("global_input", ""))

    @property
    def precision(self) -> str:
        return self.info.precision

    @property
    def name(self) -> str:
        return self.info.name

    def run_outputs(self, x: np.ndarray, g: np.ndarray) -> list[np.ndarray]:
        """The graph's outputs as float32, unprocessed: policy logits [B, N*N+1], value [B],
        score [B], ownership [B, N, N], for float32 planes [B, NUM_PLANES, N, N] and globals
        [B, NUM_GLOBALS]."""
        x = x.astype(self._x_type, copy=False)
        g = g.astype(self._g_type, copy=False)
        feeds = {"bin_input": x, "global_input": g}
        if not self.on_cuda:
            outs = self.session.run(OUTPUTS, feeds)
        else:
            # IO binding: inputs copied to the GPU once, outputs written straight to host memory.
            io = self.session.io_binding()
            io.bind_cpu_input("bin_input", x)
            io.bind_cpu_input("global_input", g)
            for name in OUTPUTS:
                io.bind_output(name, "cpu")
            self.session.run_with_iobinding(io)
            outs = io.copy_outputs_to_cpu()
        return [o.astype(np.float32, copy=False) for o in outs]

    def run(
        self, board_size: int, packed: np.ndarray, globals_: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        x = unpack_planes_f32(packed, board_size)
        g = np.ascontiguousarray(globals_, dtype=np.float32)
        return self.run_float(x, g)

    def run_float(
        self, x: np.ndarray, g: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """float32 planes [B, NUM_PLANES, N, N] -> (policy probs, value, score, ownership
        [B, N*N])."""
        policy, value, score, own = self.run_outputs(x, g)
        b = x.shape[0]
        return _softmax(policy), value, score, own.reshape(b, -1)
