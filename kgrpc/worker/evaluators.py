"""Which evaluator plays a given model, and the evaluator games play through.

Remote inference: one shared :class:`inference.client.InferenceClient`; each request names the
model and the server loads it (in the precision the server is set to). Local inference: one
in-process :class:`inference.local.LocalEvaluator`; the worker downloads the model's file in its
``precision`` setting (auto: :func:`kgrpc.precision.choose_precision`; fp32 when the model
has no such file, :meth:`kgrpc.worker.models.ModelCache.ensure_precision`), sha256-checked,
into its cache and loads it into the evaluator's registry before the first game with it.
Games evaluate through a :class:`PatientEvaluator`, which waits out inference outages.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import grpc

from kgrpc.evaluator import EvalResult, Evaluator
from kgrpc.net import RetryPolicy, status_code
from kgrpc.precision import info_precisions, pick_file
from kgrpc.v1 import common_pb2, coordinator_pb2_grpc
from kgrpc.worker.config import WorkerConfig
from kgrpc.worker.lifecycle import Pause
from kgrpc.worker.models import ModelCache

log = logging.getLogger(__name__)

# Inference outages a game waits out: a server restart longer than the client's own few seconds
# of retries (UNAVAILABLE), or a server refusing work for now (RESOURCE_EXHAUSTED).
WAIT_OUT_CODES = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED})


def is_inference_outage(exc: BaseException) -> bool:
    return status_code(exc) in WAIT_OUT_CODES


class PatientEvaluator:
    """The evaluator a game plays through: an inference outage (:data:`WAIT_OUT_CODES`) pauses
    the game until the server is back instead of throwing away the moves played so far. Once the
    worker is stopping (the policy's stop event), the error goes through: the game is dropped,
    as it must end. ``policy`` retries only inference outages and reports them to its outage."""

    def __init__(self, inner: Evaluator, policy: RetryPolicy, pause: Pause | None = None) -> None:
        self.inner = inner
        self.policy = policy
        self.pause = pause  # a paused worker's searches wait here, between two evaluations

    @property
    def evals(self) -> int:
        return int(self.inner.evals)

    @property
    def requests(self) -> int:
        return int(self.inner.requests)

    async def evaluate(
        self, planes: Any, globals_: Any, *, model: str = "", want_ownership: bool = False
    ) -> EvalResult:
        if self.pause is not None:
            await self.pause.wait()
        return await self.policy.call(
            lambda: self.inner.evaluate(
                planes, globals_, model=model, want_ownership=want_ownership
            ),
            what="inference",
        )

    async def close(self) -> None:  # the evaluators it wraps are closed by their owner
        pass


class Evaluators:
    def __init__(self, cfg: WorkerConfig, cache: ModelCache) -> None:
        self.cfg = cfg
        self.cache = cache
        self.remote: Any = None
        self.local: Any = None
        self._local_names: dict[str, str] = {}  # coordinator name -> registry name
        self._local_precisions: dict[str, str] = {}  # coordinator name -> precision loaded
        self._on_cuda: bool | None = None  # whether the in-process engine expects CUDA
        self._lock = asyncio.Lock()
        if cfg.inference_addresses:
            from inference.client import InferenceClient

            self.remote = InferenceClient(
                cfg.inference_addresses,
                token=cfg.inference_token or cfg.token,
                tls_ca=cfg.inference_tls_ca,
            )

    @property
    def is_local(self) -> bool:
        return self.remote is None

    @property
    def on_cuda(self) -> bool:
        """Whether the in-process engine will run on CUDA (so ``auto`` wants fp16)."""
        if self._on_cuda is None:
            from inference.engine import cuda_expected

            self._on_cuda = cuda_expected(self.cfg.device)
        return self._on_cuda

    async def prepare(
        self,
        stub: coordinator_pb2_grpc.CoordinatorStub,
        name: str,
        info: common_pb2.ModelInfo | None = None,
    ) -> None:
        """Make ``name`` playable (local: download + load; remote: nothing to do). ``info``:
        the model's release, which lists its files (else the coordinator is asked); when it
        lists a file that suits this device better than the one loaded (published after the
        release), that file is downloaded and replaces it."""
        if self.remote is not None:
            return
        if name in self._local_names:
            await self._take_better_file(stub, name, info)
            return
        path, precision = await self.cache.ensure_precision(
            stub, name, self.cfg.precision, on_cuda=self.on_cuda, info=info
        )
        async with self._lock:
            if name in self._local_names:
                return
            if self.local is None:
                from inference.local import LocalEvaluator

                local = LocalEvaluator(
                    str(path),
                    device=self.cfg.device,
                    precision=precision,
                    max_batch=self.cfg.max_batch,
                    max_delay_ms=self.cfg.max_delay_ms,
                    intra_threads=self.cfg.intra_threads,
                )
                try:
                    await local.start()
                except BaseException:
                    # Keep no evaluator whose start failed: it would re-raise that failure
                    # on every later request, whatever model the request names.
                    with contextlib.suppress(Exception):
                        await local.close()
                    raise
                self.local = local
                self._local_names[name] = local.registry.default
            else:
                loaded = await self.local.registry.load(
                    str(path), make_default=False, pinned=True, precision=precision
                )
                self._local_names[name] = loaded.name
            self._local_precisions[name] = precision
            log.info("model %s loaded in-process (%s)", name, precision)

    async def _take_better_file(
        self,
        stub: coordinator_pb2_grpc.CoordinatorStub,
        name: str,
        info: common_pb2.ModelInfo | None,
    ) -> None:
        if info is None or info.name != name or not info.files or self.local is None:
            return
        have = info_precisions(info)
        want, _ = pick_file(self.cfg.precision, on_cuda=self.on_cuda, available=have)
        if want == self._local_precisions.get(name):
            return
        path, precision = await self.cache.ensure_precision(
            stub, name, self.cfg.precision, on_cuda=self.on_cuda, info=info
        )
        async with self._lock:
            if name not in self._local_names or precision == self._local_precisions.get(name):
                return
            loaded = await self.local.registry.swap(str(path), precision)
            self._local_names[name] = loaded.name
            self._local_precisions[name] = precision
        log.info("model %s: now playing its %s file", name, precision)

    def get(self, name: str) -> tuple[Evaluator, str]:
        """(evaluator, model argument for its requests)."""
        if self.remote is not None:
            return self.remote, name
        return self.local, self._local_names[name]

    def release(self, keep: set[str]) -> None:
        """Unload in-process models not in ``keep`` once idle (memory over days of releases)."""
        if self.local is None:
            return
        registry = self.local.registry
        kept = {self._local_names[n] for n in keep if n in self._local_names}
        for name in list(self._local_names):
            if name in keep:
                continue
            loaded = registry.models.get(self._local_names[name])
            if loaded is not None and loaded.name not in kept:
                if loaded.name == registry.default:
                    # The first model loaded is the registry's default; the worker names the
                    # model in every request, so the default may move to a model still in
                    # use. None loaded yet (the new release still downloading): next time.
                    if not kept:
                        continue
                    registry.default = sorted(kept)[0]
                loaded.pinned = False
                registry.retire(loaded)
            del self._local_names[name]
            self._local_precisions.pop(name, None)

    def evals(self) -> int:
        ev = self.remote or self.local
        return int(getattr(ev, "evals", 0)) if ev is not None else 0

    async def mean_batch(self) -> float | None:
        """Mean positions per net run, as the engine (local or the server) measures it."""
        try:
            if self.local is not None:
                return float(self.local.metrics.mean_batch_size)
            if self.remote is not None:
                stats = await asyncio.wait_for(self.remote.stats(), 2.0)
                return float(stats.mean_batch_size)
        except Exception:  # figures only: never let them stop the worker
            return None
        return None

    async def close(self) -> None:
        for ev in (self.remote, self.local):
            if ev is not None:
                try:
                    await ev.close()
                except Exception as exc:  # closing on the way out
                    log.debug("closing evaluator: %s", exc)
