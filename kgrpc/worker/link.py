"""The worker's line to the coordinator: one channel, its stub, and the retry policy every call
on it goes through (:class:`kgrpc.net.RetryPolicy`).

The worker's rule for coordinator calls: every gRPC error is retried with growing, jittered
waits, except the fatal codes (a bad or revoked token, the wrong server: ``FatalError``); the
log says once that the coordinator is down and once that it is back. Calls change the rule
where theirs differs (see the parts that make them).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc

from kgrpc.net import Outage, RetryPolicy, is_fatal, is_rpc_error, make_channel
from kgrpc.v1 import coordinator_pb2_grpc
from kgrpc.worker.config import WorkerConfig

T = TypeVar("T")


class CoordinatorLink:
    def __init__(
        self, cfg: WorkerConfig, outage: Outage, stop: asyncio.Event, rng: random.Random
    ) -> None:
        self.address = cfg.coordinator
        self._token = cfg.token
        self._tls_ca = cfg.tls_ca
        self._tls = cfg.tls  # TLS with the system's roots when no CA file is given
        self.outage = outage
        self.policy = RetryPolicy(
            outage,
            base_s=cfg.retry_base_s,
            cap_s=cfg.retry_cap_s,
            rng=rng,
            stop=stop,
            retryable=is_rpc_error,
            fatal=is_fatal,
        )
        self.channel: grpc.aio.Channel | None = None
        self._stub: coordinator_pb2_grpc.CoordinatorStub | None = None

    def open(self) -> None:
        """Create the channel (inside the event loop that will use it)."""
        self.channel = make_channel(
            self.address, token=self._token, tls_ca=self._tls_ca, tls=self._tls
        )
        self._stub = coordinator_pb2_grpc.CoordinatorStub(self.channel)

    @property
    def stub(self) -> coordinator_pb2_grpc.CoordinatorStub:
        if self._stub is None:
            raise RuntimeError("the coordinator link is not open")
        return self._stub

    async def call(self, call: Callable[[], Awaitable[T]], *, what: str, **changes: Any) -> T:
        """``call()`` retried by this link's policy; ``changes`` as :meth:`RetryPolicy.call`."""
        return await self.policy.call(call, what=f"coordinator {self.address} {what}", **changes)

    async def close(self) -> None:
        if self.channel is not None:
            await self.channel.close()
            self.channel = None
