"""Loaded models: one Engine + Batcher per model, a default model, hot swap, on-demand fetch.

A model is looked up by name ("" = the default). ``acquire`` counts the request as in flight
on that model until it is answered, so a swap never drops requests: ``add(..., make_default=
True, retire_previous=True)`` loads the new model beside the old one, switches the default
(new requests go to the new model at once) and unloads the old one in the background when it
has no request in flight and an empty queue. Models given with ``--model`` are pinned (never
retired). With a ``fetcher`` (the coordinator follower), an unknown model name is fetched on
demand; without one, an unknown name raises :class:`ModelNotFoundError`. A model file of another
feature version is never registered: ``load`` raises :class:`kgrpc.schema.FeatureVersionError`
(from :class:`inference.engine.Engine`).
Every model is loaded in the registry's ``precision`` (``auto``: see
:func:`kgrpc.precision.choose_precision` and inference/engine.py), unless ``load``
names one (the file a worker or follower downloaded). A fetcher's file is loaded in the
precision its name says (``NAME.int8.onnx``: int8).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import numpy as np

from inference.batcher import Batcher, Outputs
from inference.cache import EvalCache
from inference.engine import Engine
from inference.metrics import Metrics
from kgrpc.precision import precision_of_path

log = logging.getLogger("kgrpc.inference.models")

Fetcher = Callable[[str], Awaitable[str]]  # model name -> local path of the downloaded file


class ModelNotFoundError(KeyError):
    def __init__(self, name: str, known: list[str]) -> None:
        super().__init__(name)
        self.message = f"unknown model {name!r} (loaded: {', '.join(known) or 'none'})"

    def __str__(self) -> str:
        return self.message


@dataclass(eq=False)
class LoadedModel:
    engine: Engine
    batcher: Batcher
    cache: EvalCache
    pinned: bool = False
    retired: bool = False
    on_demand: bool = False
    in_flight: int = 0
    idle: asyncio.Event = field(default_factory=asyncio.Event)
    last_active: float = 0.0  # event-loop time the last request was answered

    @property
    def name(self) -> str:
        return self.engine.name

    async def evaluate(self, board_size: int, packed: np.ndarray, globals_: np.ndarray) -> Outputs:
        """Cache lookups per position; the misses go to the batcher as one request."""
        cache, metrics = self.cache, self.batcher.metrics
        if not cache.enabled:
            return await self.batcher.submit(board_size, packed, globals_)
        count = packed.shape[0]
        keys = [cache.key(self.name, board_size, packed[i], globals_[i]) for i in range(count)]
        hits = [cache.get(k) for k in keys]
        miss_idx = [i for i, h in enumerate(hits) if h is None]
        metrics.cache_hits += count - len(miss_idx)
        metrics.cache_misses += len(miss_idx)
        if miss_idx:
            sel = np.asarray(miss_idx)
            p, v, s, o = await self.batcher.submit(board_size, packed[sel], globals_[sel])
            for j, i in enumerate(miss_idx):
                # Copies: a row view would keep its whole batch's output alive in the cache.
                entry = (p[j].copy(), float(v[j]), float(s[j]), o[j].copy())
                cache.put(keys[i], entry)
                hits[i] = entry
        entries = [h for h in hits if h is not None]
        return (
            np.stack([e[0] for e in entries]),
            np.array([e[1] for e in entries], dtype=np.float32),
            np.array([e[2] for e in entries], dtype=np.float32),
            np.stack([e[3] for e in entries]),
        )


class ModelRegistry:
    def __init__(
        self,
        *,
        device: str = "auto",
        precision: str = "auto",
        intra_threads: int = 0,
        max_batch: int = 64,
        max_delay_ms: float = 2.0,
        max_queue: int = 4096,
        in_flight: int = 0,
        cache_size: int = 0,
        metrics: Metrics | None = None,
        fetcher: Fetcher | None = None,
        on_demand_grace_s: float = 60.0,
    ) -> None:
        self.on_demand_grace_s = on_demand_grace_s
        self.device = device
        self.precision = precision
        self.intra_threads = intra_threads
        self.max_batch = max_batch
        self.max_delay_ms = max_delay_ms
        self.max_queue = max_queue
        self.in_flight = in_flight
        self.cache_size = cache_size
        self.metrics = metrics or Metrics()
        self.fetcher = fetcher
        self.models: dict[str, LoadedModel] = {}
        self.default: str = ""
        self._fetching: dict[str, asyncio.Future[LoadedModel]] = {}
        self._retirers: set[asyncio.Task[None]] = set()

    def batches_in_flight(self, engine: Engine) -> int:
        """Batches run at once per model (``in_flight``, 0 = automatic).

        Automatic is 2 on CUDA (the next batch is packed and copied while the GPU runs this
        one) and 1 on the CPU: there packing and running compete for the same cores, and two
        concurrent runs oversubscribe them (2 runs x 2 threads on 2 cores lose ~12%, measured
        with b6c96 19x19 at batch 64), while one runner lets requests pile up into the next,
        larger batch as long as the current one computes.
        """
        if self.in_flight:
            return self.in_flight
        return 2 if engine.on_cuda else 1

    @property
    def queue_depth(self) -> int:
        return sum(m.batcher.queue_depth for m in self.models.values())

    async def load(
        self,
        path: str,
        *,
        make_default: bool = True,
        pinned: bool = False,
        retire_previous: bool = False,
        precision: str | None = None,
    ) -> LoadedModel:
        """Create the session off the event loop and register the model (in ``precision``,
        default the registry's)."""
        engine = await asyncio.to_thread(
            Engine,
            path,
            device=self.device,
            precision=precision or self.precision,
            intra_threads=self.intra_threads,
        )
        existing = self.models.get(engine.name)
        if existing is not None:  # same name again: keep the running one
            existing.retired = existing.on_demand = False
            existing.pinned = existing.pinned or pinned
            if make_default:
                self._set_default(existing.name, retire_previous)
            return existing
        model = self._register(engine, pinned)
        if make_default or not self.default:
            self._set_default(model.name, retire_previous)
        return model

    async def swap(self, path: str, precision: str) -> LoadedModel:
        """Serve the model of ``path`` from that file, in ``precision``, instead of the
        loaded session of the same name (its file in another precision, published after the
        model was loaded: the trainer sends fp32 first, and a release does not wait for the
        rest). Requests already queued finish on the old session, unloaded once idle; a
        model not loaded yet is loaded as by :meth:`load` (not made the default)."""
        engine = await asyncio.to_thread(
            Engine, path, device=self.device, precision=precision, intra_threads=self.intra_threads
        )
        old = self.models.get(engine.name)
        if old is None:
            return self._register(engine, pinned=False)
        if old.engine.precision == engine.precision:
            return old
        model = self._register(engine, pinned=old.pinned)
        model.on_demand = old.on_demand
        log.info(
            "model %s: %s session replaces the %s one", model.name, precision, old.engine.precision
        )
        self.retire(old)
        return model

    def _register(self, engine: Engine, pinned: bool) -> LoadedModel:
        batcher = Batcher(
            engine.run,
            max_batch=self.max_batch,
            max_delay_ms=self.max_delay_ms,
            max_queue=self.max_queue,
            in_flight=self.batches_in_flight(engine),
            metrics=self.metrics,
        )
        model = LoadedModel(engine, batcher, EvalCache(self.cache_size), pinned=pinned)
        model.idle.set()
        self.models[model.name] = model
        log.info(
            "loaded model %s (%s, %s) from %s",
            model.name,
            engine.precision,
            engine.provider,
            engine.path,
        )
        return model

    def _set_default(self, name: str, retire_previous: bool) -> None:
        old = self.default
        self.default = name
        if old and old != name:
            log.info("default model %s -> %s", old, name)
            prev = self.models.get(old)
            if retire_previous and prev is not None and not prev.pinned:
                self.retire(prev)

    def retire(self, model: LoadedModel, grace_s: float = 0.0) -> None:
        """Unload ``model`` once it has been idle (nothing queued or in flight) for
        ``grace_s`` seconds; it keeps serving whoever asks for it by name until then."""
        model.retired = True
        task = asyncio.ensure_future(self._unload_when_idle(model, grace_s))
        self._retirers.add(task)
        task.add_done_callback(self._retirers.discard)

    async def _unload_when_idle(self, model: LoadedModel, grace_s: float) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await model.idle.wait()
            await model.batcher.wait_idle()
            if not model.retired:
                return  # re-activated meanwhile
            # Idle for grace_s since the last answer, not merely idle at the end of one sleep:
            # a match that keeps asking (with gaps between its requests) keeps its model.
            wait = grace_s - (loop.time() - model.last_active)
            if wait > 0:
                await asyncio.sleep(wait)
                continue
            if model.in_flight == 0:
                break
        if self.models.get(model.name) is model:  # not a session swap() replaced it with
            del self.models[model.name]
        await model.batcher.close()
        log.info("unloaded model %s", model.name)

    async def get(self, name: str) -> LoadedModel:
        name = name or self.default
        model = self.models.get(name)
        if model is not None:
            return model
        if self.fetcher is None or not name:
            raise ModelNotFoundError(name, list(self.models))
        pending = self._fetching.get(name)
        if pending is None:
            pending = asyncio.ensure_future(self._fetch(name))
            self._fetching[name] = pending
            pending.add_done_callback(lambda _f: self._fetching.pop(name, None))
        return await asyncio.shield(pending)

    async def _fetch(self, name: str) -> LoadedModel:
        assert self.fetcher is not None
        try:
            path = await self.fetcher(name)
        except KeyError as exc:
            raise ModelNotFoundError(name, list(self.models)) from exc
        model = await self.load(path, make_default=False, precision=precision_of_path(path))
        # Fetched on demand for a match: retired (unloaded after a quiet spell) once its
        # first request is answered, unless it is or becomes the default; see use().
        model.on_demand = not model.pinned
        return model

    @contextlib.asynccontextmanager
    async def use(self, name: str):  # type: ignore[no-untyped-def]
        """``async with registry.use(name) as model:`` counts a request in flight."""
        model = await self.get(name)
        # A model fetched on demand may have been retired and unloaded while this request
        # waited for the fetch: look it up again (no await between this check and in_flight).
        for _ in range(3):
            if self.models.get(model.name) is model:
                break
            model = await self.get(name)
        else:
            raise ModelNotFoundError(name, list(self.models))
        model.in_flight += 1
        model.idle.clear()
        try:
            yield model
        finally:
            model.in_flight -= 1
            model.last_active = asyncio.get_running_loop().time()
            if model.in_flight == 0:
                model.idle.set()
                if model.on_demand and not model.retired and model.name != self.default:
                    self.retire(model, grace_s=self.on_demand_grace_s)

    async def close(self) -> None:
        for task in list(self._retirers):
            task.cancel()
        for model in list(self.models.values()):
            await model.batcher.close()
        self.models.clear()
