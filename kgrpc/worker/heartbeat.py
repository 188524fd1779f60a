"""The heartbeat: tells the coordinator every ``heartbeat_interval_s`` (its setting) that this
worker lives, with its figures, and hears the latest model in the answer, and the interval
until the next heartbeat (longer while a large fleet is online: kgrpc.coordinator.pace).

A heartbeat is not retried (the next one is the retry); a failed one counts toward the
coordinator outage. NOT_FOUND means the coordinator forgot this worker (its database was
restored or reset): the worker registers again, or every heartbeat from then on is refused.
"""

from __future__ import annotations

import asyncio
import logging
from functools import partial

import grpc

from kgrpc.net import is_not_found, is_rpc_error
from kgrpc.v1 import coordinator_pb2
from kgrpc.worker.follower import ModelFollower
from kgrpc.worker.link import CoordinatorLink
from kgrpc.worker.source import TaskSource
from kgrpc.worker.status import RateMeter, WorkerCounters, to_proto

log = logging.getLogger(__name__)


def _outage(exc: BaseException) -> bool:
    return is_rpc_error(exc) and not is_not_found(exc)


class Heartbeat:
    def __init__(
        self,
        link: CoordinatorLink,
        source: TaskSource,
        models: ModelFollower,
        counters: WorkerCounters,
        meter: RateMeter,
    ) -> None:
        self.link = link
        self.source = source
        self.models = models
        self.counters = counters
        self.meter = meter

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.source.heartbeat_s)
            req = coordinator_pb2.HeartbeatRequest(
                worker_id=self.source.worker_id, stats=to_proto(self.counters, self.meter)
            )
            try:
                resp = await self.link.call(
                    partial(self.link.stub.Heartbeat, req, timeout=10),
                    what="Heartbeat",
                    attempts=1,
                    retryable=_outage,
                    fatal=None,
                )
            except grpc.aio.AioRpcError as exc:
                if is_not_found(exc):
                    self.link.outage.ok()
                    log.warning(
                        "coordinator does not know worker %s; registering again",
                        self.source.worker_id,
                    )
                    await self.source.register()
                continue
            if resp.heartbeat_interval_s > 0:  # the coordinator paces a large fleet
                self.source.heartbeat_s = resp.heartbeat_interval_s
            if resp.latest_model and resp.latest_model != self.models.latest_model:
                self.source.invalidate_selfplay(resp.latest_model)
