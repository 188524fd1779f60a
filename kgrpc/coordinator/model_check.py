"""The publish check: a model file is stored only if workers can load and run it.

``PublishModel`` calls :func:`check_published` once the file's size and sha256 are
verified, before the file is moved into ``models/`` (so a refused file never becomes a
candidate, let alone a release). The file must be what its name and its header's precision
say (docs/formats.md section 5, constants in :mod:`kgrpc.schema`):

1. ONNX: it parses as one self-contained model (no external data) and passes
   ``onnx.checker.check_model`` (full check, with shape inference).
2. Inputs and outputs: ``bin_input`` float32 [batch, NUM_PLANES, N, N], ``global_input``
   float32 [batch, NUM_GLOBALS] (kgrpc/schema.py); outputs ``policy`` (rank 2), ``value``,
   ``score`` (rank 1), ``ownership`` (rank 3), all float32.
3. Metadata: ``kgrpc.name`` is the published name; ``kgrpc.blocks``/``channels`` and
   ``kgrpc.training_steps``/``training_rows`` are the name's ``bXcY``, ``sS`` and ``dD``;
   ``kgrpc.feature_version`` is the rules engine's ``FEATURE_VERSION`` and the header's;
   ``kgrpc.board_sizes`` a non-empty list of sizes in 2..19; ``kgrpc.precision`` (absent =
   fp32) is the header's precision. Other ``kgrpc.*`` keys (the parity figures of an export)
   are allowed.
4. Graph (:mod:`kgrpc.model_graph`): the 3x3 convolution on ``bin_input`` has ``channels``
   filters, and there are ``2 * blocks`` 3x3 convolutions from ``channels`` to ``channels``
   (the residual tower); the graph computes in its precision (fp32: float32 weights, no
   quantisation; fp16: float16 weights and activations; int8: QDQ with int8 convolution
   weights; float32 inputs and outputs in all three).
5. A test session on ONNX Runtime's CPU provider runs a batch of 2 positions at every
   declared board size and every size of the curriculum: outputs of the contract's shapes,
   finite, value and ownership within [-1, 1]. An fp16 file that the CPU provider cannot
   load or run (CPU kernels for float16 are not everywhere) is judged by 1-4 alone.
6. Parity, for an fp16 or int8 file: its outputs and those of the model's stored fp32 file
   on positions of legal random games at every declared board size
   (:func:`kgrpc.randgame.random_positions`), within the coordinator's ``parity_*`` bounds
   (:mod:`kgrpc.parity`; by default the bounds every export meets against torch). It is the
   same network in another number format, or it is refused.

Anything else is refused with INVALID_ARGUMENT and the reason. The check runs in a helper
process (spawn start method, started on the first publish, gone after
:data:`IDLE_EXIT_S` idle seconds), reached from a thread: the event loop never waits on it,
and a file crafted to crash or exhaust ONNX Runtime takes down only that process (refused
as such). It gets :data:`CHECK_TIMEOUT_S` seconds.

What the check needs, ``onnx`` and ``onnxruntime``, is the ``coordinator`` extra
(``pip install 'kgrpc[coordinator]'``; ``make install`` installs it): the coordinator
refuses to start without them (:func:`require_runtime`). The coordinator process itself
never imports either; only the helper does.
"""

from __future__ import annotations

import importlib.util
import multiprocessing
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import numpy as np

from kgrpc import schema
from kgrpc.parity import ParityBounds, ParityReport
from kgrpc.precision import FP16, FP32

CHECK_TIMEOUT_S = 120.0
IDLE_EXIT_S = 120.0
_TEST_BATCH = 2
# Per declared board size. 128, not fewer: with 32, top-1 moves in steps of 3%, and an int8
# file at 97.9% on 512 random-game positions scored 93.8% on the 32 and was refused
# (docs/results/int8-trunk8/calibration.txt).
PARITY_POSITIONS = 128
_RUNTIME_MODULES = ("onnx", "onnxruntime")


class ModelCheckError(ValueError):
    """The file is not a model workers can use; the message says why."""


class MissingRuntime(ValueError):
    """The install lacks the coordinator extra (a configuration error, reported in one line
    at start-up like the other ValueErrors of a bad configuration)."""


@dataclass(frozen=True)
class ModelFacts:
    """What the check established about an accepted file."""

    blocks: int
    channels: int
    feature_version: int
    board_sizes: tuple[int, ...]
    tested_sizes: tuple[int, ...]
    precision: str = FP32
    ran: bool = True  # False: an fp16 file the CPU provider cannot run, judged by its graph
    parity: ParityReport | None = None  # an fp16/int8 file against the fp32 file


def require_runtime() -> None:
    """Raise MissingRuntime unless onnx and onnxruntime can be imported (without importing
    them here: the coordinator process never loads them)."""
    missing = []
    for name in _RUNTIME_MODULES:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):  # ValueError: a module set to None in sys.modules
            found = False
        if not found:
            missing.append(name)
    if missing:
        raise MissingRuntime(
            f"the coordinator checks every published model with onnx and onnxruntime, and "
            f"{' and '.join(missing)} cannot be imported here: install the coordinator extra "
            "(pip install 'kgrpc[coordinator]'; make install does)"
        )


# ----------------------------------------------------------------------- the check itself


def _dims(value_info: Any) -> tuple[int, tuple[int | None, ...]]:
    t = value_info.type.tensor_type
    dims = tuple(d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim)
    return t.elem_type, dims


def _shape(dims: tuple[int | None, ...]) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"


def _check_io(graph: Any) -> None:
    import onnx

    f32 = onnx.TensorProto.FLOAT
    initializers = {i.name for i in graph.initializer}
    inputs = {i.name: i for i in graph.input if i.name not in initializers}
    if set(inputs) != set(schema.MODEL_INPUTS):
        raise ModelCheckError(
            f"inputs {sorted(inputs)}; a kgrpc model has exactly {list(schema.MODEL_INPUTS)}"
        )
    for name, want in schema.MODEL_INPUT_SHAPES.items():
        elem, dims = _dims(inputs[name])
        if (
            elem != f32
            or len(dims) != len(want)
            or any(w is not None and d != w for w, d in zip(want, dims, strict=True))
        ):
            raise ModelCheckError(
                f"input {name} is {onnx.TensorProto.DataType.Name(elem)} "
                f"{_shape(dims)}, the contract says FLOAT {_shape(want)}"
            )
    outputs = {o.name: o for o in graph.output}
    if set(outputs) != set(schema.MODEL_OUTPUTS):
        raise ModelCheckError(
            f"outputs {sorted(outputs)}; a kgrpc model has exactly {list(schema.MODEL_OUTPUTS)}"
        )
    for name, rank in schema.MODEL_OUTPUT_RANKS.items():
        elem, dims = _dims(outputs[name])
        if elem != f32 or len(dims) != rank:
            raise ModelCheckError(
                f"output {name} is {onnx.TensorProto.DataType.Name(elem)} "
                f"of rank {len(dims)}, the contract says FLOAT of rank {rank}"
            )


def _metadata(
    proto: Any, name: str, header_feature_version: int, precision: str
) -> tuple[int, int, tuple]:
    from kgrpc.coordinator.models import parse_name

    meta = {
        p.key[len(schema.MODEL_META_PREFIX) :]: p.value
        for p in proto.metadata_props
        if p.key.startswith(schema.MODEL_META_PREFIX)
    }
    missing = [k for k in schema.MODEL_META_KEYS if k not in meta]
    if missing:
        raise ModelCheckError(
            "metadata lacks " + ", ".join(schema.MODEL_META_PREFIX + k for k in missing)
        )
    if meta["name"] != name:
        raise ModelCheckError(
            f"the file's {schema.MODEL_META_PREFIX}name is {meta['name']!r}, "
            f"not the published name {name!r}"
        )
    parsed = parse_name(name)
    for key, want in (
        ("blocks", parsed["blocks"]),
        ("channels", parsed["channels"]),
        ("training_steps", parsed["steps"]),
        ("training_rows", parsed["rows"]),
    ):
        if meta[key] != str(want):
            raise ModelCheckError(
                f"metadata {schema.MODEL_META_PREFIX}{key}={meta[key]!r} "
                f"disagrees with the name {name!r} ({want})"
            )
    fv = meta["feature_version"]
    if fv != str(schema.FEATURE_VERSION):
        raise ModelCheckError(
            f"feature version {fv!r}: workers encode positions as version {schema.FEATURE_VERSION}"
        )
    if header_feature_version != schema.FEATURE_VERSION:
        raise ModelCheckError(
            f"the header's feature_version is {header_feature_version}, the file's {fv}"
        )
    try:
        recorded = schema.model_precision(meta, "the file")
    except ValueError as exc:
        raise ModelCheckError(str(exc)) from None
    if recorded != precision:
        raise ModelCheckError(
            f"metadata {schema.MODEL_META_PREFIX}{schema.MODEL_PRECISION_KEY} "
            f"is {recorded}, but it is published as the {precision} file"
        )
    try:
        sizes = schema.parse_board_sizes(meta["board_sizes"])
    except ValueError as exc:
        raise ModelCheckError(f"metadata {schema.MODEL_META_PREFIX}{exc}") from None
    return int(parsed["blocks"]), int(parsed["channels"]), sizes


def _positions(batch: int, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    planes = rng.random((batch, schema.NUM_PLANES, n, n)) < 0.3
    planes[:, 0] = True
    globals_ = rng.uniform(-0.5, 0.5, (batch, schema.NUM_GLOBALS))
    return planes.astype(np.float32), globals_.astype(np.float32)


class _CannotRun(ModelCheckError):
    """ONNX Runtime's CPU provider cannot load or run the file."""


def _session(data: bytes) -> Any:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    try:
        return ort.InferenceSession(data, sess_options=opts, providers=["CPUExecutionProvider"])
    except Exception as exc:  # noqa: BLE001 - ORT raises its own error types
        raise _CannotRun(f"ONNX Runtime cannot load it: {exc}") from None


def _outputs(sess: Any, x: np.ndarray, g: np.ndarray) -> list[np.ndarray]:
    try:
        out = sess.run(list(schema.MODEL_OUTPUTS), {"bin_input": x, "global_input": g})
    except Exception as exc:  # noqa: BLE001
        n = x.shape[-1]
        raise _CannotRun(f"ONNX Runtime cannot run it on {n}x{n}: {exc}") from None
    return [np.asarray(a) for a in out]


def _run_session(sess: Any, sizes: Iterable[int]) -> None:
    rng = np.random.default_rng(0)
    b = _TEST_BATCH
    for n in sizes:
        x, g = _positions(b, n, rng)
        out = _outputs(sess, x, g)
        want = {"policy": (b, n * n + 1), "value": (b,), "score": (b,), "ownership": (b, n, n)}
        for name, arr in zip(schema.MODEL_OUTPUTS, out, strict=True):
            if arr.shape != want[name]:
                raise ModelCheckError(
                    f"on {n}x{n} output {name} has shape {list(arr.shape)}, "
                    f"expected {list(want[name])}"
                )
            if not np.isfinite(arr).all():
                raise ModelCheckError(f"on {n}x{n} output {name} is not finite")
            if name in ("value", "ownership") and np.abs(arr).max() > 1.0 + 1e-4:
                raise ModelCheckError(f"on {n}x{n} output {name} leaves [-1, 1]")


def _parity(
    sess: Any, reference: str | Path, sizes: Iterable[int], precision: str, bounds: ParityBounds
) -> ParityReport:
    """The file's outputs (``sess``) against the fp32 file ``reference`` on positions of random
    games; ModelCheckError outside ``bounds``."""
    from kgrpc.parity import compare
    from kgrpc.randgame import random_positions

    try:
        ref = _session(Path(reference).read_bytes())
    except (OSError, _CannotRun) as exc:  # the stored fp32 file: not the publisher's fault
        raise ModelCheckError(f"the model's fp32 file cannot be read or loaded: {exc}") from None
    refs, outs = [], []
    for n in sizes:
        x, g = random_positions(n, PARITY_POSITIONS, seed=n)
        refs.append(_outputs(ref, x, g))
        outs.append(_outputs(sess, x, g))
    report = compare(precision, refs, outs, reference="fp32")
    bad = report.violations(bounds)
    if bad:
        raise ModelCheckError(
            "not the same network as the model's fp32 file: "
            + "; ".join(bad)
            + f" (on {report.positions} positions of random games, sizes {report.sizes})"
        )
    return report


def check_model_file(
    path: str | Path,
    name: str,
    header_feature_version: int,
    curriculum_sizes: Iterable[int] = (),
    precision: str = FP32,
    reference: str | Path | None = None,
    bounds: ParityBounds | None = None,
) -> ModelFacts:
    """Every check of the module docstring, in this process; raises ModelCheckError.
    ``reference``: the model's fp32 file, which an fp16 or int8 file is compared with."""
    import onnx

    from kgrpc.model_graph import architecture, check_precision_graph

    data = Path(path).read_bytes()
    try:
        proto = onnx.load_from_string(data)
    except Exception as exc:  # noqa: BLE001 - protobuf DecodeError and friends
        raise ModelCheckError(f"not an ONNX model: {exc}") from None
    if any(t.data_location == onnx.TensorProto.EXTERNAL for t in proto.graph.initializer):
        raise ModelCheckError(
            "the model keeps tensors in external data files: publish one self-contained .onnx file"
        )
    try:
        onnx.checker.check_model(proto, full_check=True)
    except Exception as exc:  # noqa: BLE001 - ValidationError, InferenceError
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ModelCheckError(f"the ONNX checker refuses it: {first}") from None
    _check_io(proto.graph)
    blocks, channels, sizes = _metadata(proto, name, header_feature_version, precision)
    try:
        got_blocks, got_channels = architecture(proto.graph)
        check_precision_graph(proto, precision)
    except ValueError as exc:
        raise ModelCheckError(str(exc)) from None
    if (got_blocks, got_channels) != (blocks, channels):
        raise ModelCheckError(
            f"the name says b{blocks}c{channels} but the graph is b{got_blocks}c{got_channels}"
        )
    if precision != FP32 and reference is None:
        raise ValueError(f"a {precision} file is checked against its model's fp32 file")
    tested = tuple(sorted(set(sizes) | set(curriculum_sizes)))
    try:
        sess = _session(data)
        _run_session(sess, tested)
    except _CannotRun:
        if precision != FP16:
            raise
        # CPU kernels for float16 are not everywhere: the graph checks above judged it.
        return ModelFacts(blocks, channels, schema.FEATURE_VERSION, sizes, (), precision, False)
    report = None
    if precision != FP32:
        assert reference is not None
        report = _parity(sess, reference, sizes, precision, bounds or ParityBounds())
    return ModelFacts(
        blocks, channels, schema.FEATURE_VERSION, sizes, tested, precision, True, report
    )


# ----------------------------------------------------------------------- the helper process


def _serve(conn: Connection, idle_s: float) -> None:
    """The helper process: answer check requests until idle for ``idle_s`` or orphaned."""
    while conn.poll(idle_s):
        try:
            request = conn.recv()
        except EOFError:
            return
        try:
            answer: tuple[bool, Any] = (True, check_model_file(*request))
        except ModelCheckError as exc:
            answer = (False, str(exc))
        except Exception as exc:  # noqa: BLE001 - any failure refuses the file, with its cause
            answer = (False, f"the check failed: {type(exc).__name__}: {exc}")
        conn.send(answer)


class _Helper:
    """One helper process at a time, shared by every coordinator of this process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: Any = None
        self._conn: Connection | None = None

    def _start(self) -> None:
        ctx = multiprocessing.get_context("spawn")
        parent, child = ctx.Pipe()
        proc = ctx.Process(
            target=_serve, args=(child, IDLE_EXIT_S), daemon=True, name="kgrpc-model-check"
        )
        proc.start()
        child.close()
        self._proc, self._conn = proc, parent

    def _stop(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.join(5)
        if self._conn is not None:
            self._conn.close()
        self._proc = self._conn = None

    def run(self, request: tuple[Any, ...], timeout_s: float) -> ModelFacts:
        with self._lock:
            for attempt in range(2):
                if self._proc is None or not self._proc.is_alive():
                    self._stop()
                    self._start()
                assert self._conn is not None
                try:
                    self._conn.send(request)
                    if not self._conn.poll(timeout_s):
                        self._stop()
                        raise ModelCheckError(f"the check did not finish in {timeout_s:g} s")
                    ok, value = self._conn.recv()
                except (EOFError, OSError):
                    self._proc.join(5)
                    code = self._proc.exitcode
                    self._stop()
                    if code == 0 and attempt == 0:
                        continue  # it had just left, idle: start a new one and ask again
                    raise ModelCheckError(
                        f"the model crashed the checking process (exit code {code})"
                    ) from None
                if not ok:
                    raise ModelCheckError(value)
                return value
        raise AssertionError("unreachable")

    def close(self) -> None:
        with self._lock:
            self._stop()


_HELPER = _Helper()


async def check_published(
    path: Path,
    header: Any,
    curriculum: Iterable[Any] = (),
    timeout_s: float = CHECK_TIMEOUT_S,
    *,
    reference: Path | None = None,
    bounds: ParityBounds | None = None,
) -> ModelFacts:
    """The publish check of ``path`` (the received file) for ``header`` (PublishHeader), with
    a test run at the board sizes of ``curriculum`` (CurriculumStage) too; an fp16 or int8
    file is compared with ``reference``, the model's fp32 file, within ``bounds``. Raises
    CoordinatorError INVALID_ARGUMENT ``model NAME refused: REASON``."""
    import asyncio

    from kgrpc.coordinator.errors import invalid
    from kgrpc.precision import from_proto

    precision = from_proto(header.precision)
    sizes = tuple(sorted({int(stage.board_size) for stage in curriculum}))
    request = (
        str(path),
        header.name,
        int(header.feature_version),
        sizes,
        precision,
        str(reference) if reference is not None else None,
        bounds,
    )
    what = repr(header.name) if precision == FP32 else f"{header.name!r} ({precision} file)"
    try:
        return await asyncio.to_thread(_HELPER.run, request, timeout_s)
    except ModelCheckError as exc:
        raise invalid(f"model {what} refused: {exc}") from None
