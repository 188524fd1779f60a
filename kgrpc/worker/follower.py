"""The model follower: follows the coordinator's releases (``WatchModels``), keeps the models
the games need ready (downloaded into the cache, loaded in-process) and unloads the in-process
models that no game, task or release needs any more (days of releases would otherwise keep
every model's session in memory).

A release makes the next self-play games use the new model (games in progress finish as they
are) and, with in-process inference, is downloaded and loaded ahead of the first game with it,
in the file of the worker's ``precision`` that the release lists (``ModelInfo.files``). The
same release announced again with more files (a precision the trainer published after the
fp32 file) is remembered for the model's next load; a model loaded already keeps its file.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import grpc

from kgrpc.evaluator import Evaluator
from kgrpc.net import FatalError, Outage, RetryPolicy, describe
from kgrpc.v1 import common_pb2, coordinator_pb2
from kgrpc.worker.config import WorkerConfig
from kgrpc.worker.evaluators import Evaluators, PatientEvaluator, is_inference_outage
from kgrpc.worker.lifecycle import Pause, Stop, TaskRegistry
from kgrpc.worker.link import CoordinatorLink
from kgrpc.worker.models import ModelCache
from kgrpc.worker.source import Job, TaskSource
from kgrpc.worker.status import WorkerCounters

log = logging.getLogger(__name__)


class ModelFollower:
    def __init__(
        self,
        cfg: WorkerConfig,
        link: CoordinatorLink,
        source: TaskSource,
        cache: ModelCache,
        *,
        inference_outage: Outage,
        stop: Stop,
        tasks: TaskRegistry,
        counters: WorkerCounters,
        rng: random.Random,
        pause: Pause | None = None,
    ) -> None:
        self.cfg = cfg
        self.pause = pause
        self.link = link
        self.source = source
        self.cache = cache
        self.tasks = tasks
        self.counters = counters
        self.inference = RetryPolicy(
            inference_outage,
            base_s=cfg.retry_base_s,
            cap_s=cfg.retry_cap_s,
            rng=rng,
            stop=stop.event,
            retryable=is_inference_outage,
            fatal=None,
        )
        self.latest_model = ""
        self.latest_info: common_pb2.ModelInfo | None = None  # its files, for the cache
        self.evaluators: Evaluators | None = None
        self._in_use: Counter[str] = Counter()  # model -> games playing with it

    def open(self) -> None:
        """Create the evaluators (inside the event loop that will use them)."""
        self.evaluators = Evaluators(self.cfg, self.cache)

    async def close(self) -> None:
        if self.evaluators is not None:
            await self.evaluators.close()

    # -- releases ----------------------------------------------------------------------------

    async def run(self) -> None:
        """Follow releases until cancelled; a stream the coordinator ends is opened again."""
        backoff = self.link.policy.backoff()

        async def follow() -> None:
            call = self.link.stub.WatchModels(
                coordinator_pb2.WatchModelsRequest(known_model=self.latest_model)
            )
            async for release in call:
                self.link.outage.ok()
                backoff.reset()
                self.on_release(release.model)

        while True:
            try:
                await self.link.call(
                    follow,
                    what="WatchModels",
                    backoff=backoff,
                    stop=None,
                    retryable=lambda e: (
                        isinstance(e, grpc.aio.AioRpcError)
                        and e.code() != grpc.StatusCode.CANCELLED
                    ),
                )
            except FatalError as exc:
                log.error("model releases: %s", exc)
                return
            except grpc.aio.AioRpcError:  # CANCELLED: the channel is closing
                return
            await asyncio.sleep(backoff.next_delay())

    def on_release(self, info: common_pb2.ModelInfo) -> None:
        if not info.name:
            return
        if info.name == self.latest_model:
            # Announced again with more files (the trainer sends fp32 first, int8 after the
            # release): the in-process engine takes the one that suits it better.
            self.latest_info = info
            if self.evaluators is not None and self.evaluators.is_local:
                self.tasks.spawn(f"files:{info.name}:{len(info.files)}", self._prefetch(info))
            return
        log.info("model released: %s", info.name)
        self.latest_model = info.name
        self.latest_info = info
        self.source.invalidate_selfplay(info.name)
        self.release_unused()
        if self.evaluators is not None and self.evaluators.is_local:
            self.tasks.spawn(f"prefetch:{info.name}", self._prefetch(info))

    async def _prefetch(self, info: common_pb2.ModelInfo) -> None:
        assert self.evaluators is not None
        try:
            await self.evaluators.prepare(self.link.stub, info.name, info)
        except Exception as exc:  # the game that needs it retries the download
            log.warning("prefetching %s failed: %s", info.name, describe(exc))

    # -- the models of the games -------------------------------------------------------------

    @asynccontextmanager
    async def playing(self, job: Job) -> AsyncIterator[list[tuple[Evaluator, str]]]:
        """Prepare the job's models (download, load) and hold them while its game plays:
        yields ``(evaluator, model argument of its requests)`` per name in ``job.models``."""
        assert self.evaluators is not None, "open() first"
        names = job.models
        self._in_use.update(names)
        try:
            for name in dict.fromkeys(names):
                await self.evaluators.prepare(self.link.stub, name, self._info(name))
            if not job.is_match:
                self.counters.current_model = names[0]
            played: list[tuple[Evaluator, str]] = []
            for name in names:
                evaluator, arg = self.evaluators.get(name)
                played.append((PatientEvaluator(evaluator, self.inference, self.pause), arg))
            yield played
        finally:
            self._in_use.subtract(names)
            self._in_use += Counter()  # drops the zero counts
            self.release_unused()

    def _info(self, name: str) -> common_pb2.ModelInfo | None:
        info = self.latest_info
        return info if info is not None and info.name == name else None

    def release_unused(self) -> None:
        """Unload in-process models no game plays and no task or release still names."""
        if self.evaluators is None or not self.evaluators.is_local:
            return
        keep = set(self._in_use) | {self.latest_model} | set(self.source.current_models())
        self.evaluators.release(keep)

    async def mean_batch(self) -> float | None:
        return await self.evaluators.mean_batch() if self.evaluators is not None else None
