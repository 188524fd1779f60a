"""Retrying failed calls with growing, jittered waits.

The wait before attempt ``k`` (0-based, after the first failure) is
``min(cap, base * factor**k)`` scaled by a random factor in ``[1 - jitter, 1]``
("full-ish" jitter), so that many workers that lost the coordinator at the same
moment do not come back in lock-step.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

import grpc

log = logging.getLogger(__name__)
T = TypeVar("T")

# Codes where trying again later can succeed. INVALID_ARGUMENT, PERMISSION_DENIED
# and the like will fail the same way every time.
RETRYABLE_CODES = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.ABORTED,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.UNKNOWN,
    }
)


@dataclass
class Backoff:
    base_s: float = 1.0
    factor: float = 1.5
    cap_s: float = 300.0
    jitter: float = 0.5
    rng: random.Random = field(default_factory=random.Random)
    attempt: int = 0

    def next_delay(self) -> float:
        """Seconds to wait before the next attempt; advances the attempt counter."""
        try:
            grown = self.base_s * self.factor**self.attempt
        except OverflowError:
            # factor**attempt leaves the float range after ~1,750 attempts at 1.5 (days of
            # capped waits for a worker retrying forever): it would crash the retry loop
            # instead of waiting cap_s.
            grown = self.cap_s
        raw = min(self.cap_s, grown)
        self.attempt += 1
        return raw * (1.0 - self.jitter * self.rng.random())

    def reset(self) -> None:
        self.attempt = 0


async def retry(
    call: Callable[[], Awaitable[T]],
    *,
    attempts: int | None = None,
    backoff: Backoff | None = None,
    retryable: Callable[[BaseException], bool] | None = None,
    what: str = "call",
) -> T:
    """Await ``call()`` until it succeeds; retry retryable gRPC errors.

    ``attempts=None`` retries forever. Non-retryable errors propagate at once.
    """
    backoff = backoff or Backoff()

    def default_retryable(exc: BaseException) -> bool:
        return isinstance(exc, grpc.aio.AioRpcError) and exc.code() in RETRYABLE_CODES

    is_retryable = retryable or default_retryable
    tried = 0
    while True:
        try:
            return await call()
        except Exception as exc:  # noqa: BLE001 - filtered just below
            tried += 1
            if not is_retryable(exc) or (attempts is not None and tried >= attempts):
                raise
            delay = backoff.next_delay()
            log.warning("%s failed (%s); retrying in %.1f s", what, _describe(exc), delay)
            await asyncio.sleep(delay)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, grpc.aio.AioRpcError):
        return f"{exc.code().name}: {exc.details()}"
    return repr(exc)
