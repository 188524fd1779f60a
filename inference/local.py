"""``LocalEvaluator``: the same engine, batcher and cache in-process (``--inference local``).

For a worker without an inference server: its MCTS coroutines call ``evaluate`` concurrently
and the batcher turns them into batches exactly as the server would, minus the network.
Several model files may be given (a gating match needs two); the last is the default, and
``model=`` picks one by name (unknown -> EvaluationError("NOT_FOUND")). A model file of another
feature version is refused when the models load: ``start()`` raises
:class:`kgrpc.schema.FeatureVersionError`, ``evaluate()`` EvaluationError("FAILED_PRECONDITION").
``precision`` picks the file of each model (auto: see
:func:`kgrpc.precision.choose_precision` and inference/engine.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import os

import numpy as np

from inference.batcher import BatcherClosedError, QueueFullError
from inference.models import ModelNotFoundError, ModelRegistry
from inference.wire import pack_planes
from kgrpc.evaluator import EvalResult, EvaluationError
from kgrpc.schema import NUM_GLOBALS, NUM_PLANES, FeatureVersionError


class LocalEvaluator:
    def __init__(
        self,
        model_path: str | os.PathLike[str] | list[str | os.PathLike[str]],
        *,
        device: str = "auto",
        precision: str = "auto",
        max_batch: int = 64,
        max_delay_ms: float = 2.0,
        max_queue: int = 65536,
        in_flight: int = 0,
        cache_size: int = 0,
        intra_threads: int = 0,
    ) -> None:
        paths = model_path if isinstance(model_path, list) else [model_path]
        self.paths = [str(p) for p in paths]
        self.registry = ModelRegistry(
            device=device,
            precision=precision,
            intra_threads=intra_threads,
            max_batch=max_batch,
            max_delay_ms=max_delay_ms,
            max_queue=max_queue,
            in_flight=in_flight,
            cache_size=cache_size,
        )
        self.evals = 0
        self.requests = 0
        self._started: asyncio.Future[None] | None = None

    async def start(self) -> None:
        """Load the models (done on the first evaluate() otherwise)."""
        if self._started is None:
            self._started = asyncio.ensure_future(self._load())
        await asyncio.shield(self._started)

    async def _load(self) -> None:
        for p in self.paths:
            await self.registry.load(p, make_default=True, pinned=True)

    @property
    def metrics(self):  # type: ignore[no-untyped-def]
        return self.registry.metrics

    async def evaluate(
        self,
        planes: np.ndarray,
        globals_: np.ndarray,
        *,
        model: str = "",
        want_ownership: bool = False,
    ) -> EvalResult:
        if planes.ndim != 4 or planes.shape[1] != NUM_PLANES or planes.shape[2] != planes.shape[3]:
            raise EvaluationError(
                "INVALID_ARGUMENT", f"planes must be [B, {NUM_PLANES}, N, N], got {planes.shape}"
            )
        if globals_.shape != (planes.shape[0], NUM_GLOBALS):
            raise EvaluationError(
                "INVALID_ARGUMENT",
                f"globals must be [{planes.shape[0]}, {NUM_GLOBALS}], got {globals_.shape}",
            )
        try:
            await self.start()
        except FeatureVersionError as exc:
            raise EvaluationError("FAILED_PRECONDITION", str(exc)) from exc
        n = planes.shape[2]
        packed = pack_planes(planes)
        g = np.ascontiguousarray(globals_, dtype=np.float32)
        try:
            async with self.registry.use(model) as m:
                policy, value, score, own = await m.evaluate(n, packed, g)
                name = m.name
        except ModelNotFoundError as exc:
            raise EvaluationError("NOT_FOUND", exc.message) from exc
        except QueueFullError as exc:
            raise EvaluationError("RESOURCE_EXHAUSTED", str(exc)) from exc
        except BatcherClosedError as exc:
            raise EvaluationError("UNAVAILABLE", str(exc)) from exc
        self.requests += 1
        self.evals += int(value.shape[0])
        self.registry.metrics.record_answered(int(value.shape[0]))
        return EvalResult(policy, value, score, own if want_ownership else None, model=name)

    async def close(self) -> None:
        if self._started is not None:
            with contextlib.suppress(Exception):
                await self._started  # a failed load was raised to whoever awaited start()
            await self.registry.close()
