"""The heartbeat interval the coordinator hands to workers (in RegisterResponse and in every
HeartbeatResponse): ``heartbeat_interval_s``, or longer once the workers online would send
more than ``max_heartbeats_per_s`` heartbeats a second, so the heartbeat load of a fleet stays
bounded however large it grows.

Why: each heartbeat is an RPC and an index write. At 30 s, 10,000 workers send 333 a second,
more than a 2-core coordinator answers beside their uploads and registrations (issue 26's
fleet, docs/performance.md). A heartbeat only says "alive, with these figures": once a
minute or once every few minutes serves that as well, and the workers' online status follows
the same interval (a worker is online while its last heartbeat is at most
``views.ONLINE_HEARTBEATS`` intervals old).

The workers online are counted from the index every :data:`REFRESH_S` (so replicas sharing an
index agree, and ``max_heartbeats_per_s`` is the whole fleet's), plus the registrations this
replica took since the count, so a fleet ramping up is paced as it arrives. When the interval
shrinks (the fleet got smaller), the longer one keeps counting for the online cutoff until
every worker told it has beaten again: a worker is not shown offline for following the
interval it was given.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable

log = logging.getLogger("kgrpc.coordinator.pace")

# Never longer than this (an hour): a worker that died is shown offline within a few hours.
MAX_INTERVAL_S = 3600
# Seconds between two counts of the workers online in the index.
REFRESH_S = 10.0


def paced_interval_s(base_s: int, max_per_s: float, online: int) -> int:
    """The interval for ``online`` workers: ``base_s``, or ``online / max_per_s`` when that
    is longer (at most :data:`MAX_INTERVAL_S`); ``base_s`` when ``max_per_s`` is 0 (off)."""
    if max_per_s <= 0:
        return base_s
    return max(base_s, min(MAX_INTERVAL_S, math.ceil(online / max_per_s)))


class HeartbeatPace:
    """The current interval; ``count(cutoff_interval_s)`` returns the workers online in the
    index with that interval's cutoff (it runs off the event loop, on the reader)."""

    def __init__(
        self,
        base_s: int,
        max_per_s: float,
        count: Callable[[float], Awaitable[int]],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.base_s, self.max_per_s = base_s, max_per_s
        self._count, self._clock = count, clock
        self._counted = 0  # workers online at the last count
        self._since = 0  # registrations taken here since that count
        self._counted_at = -math.inf
        self._interval = base_s
        self._longer, self._longer_until = base_s, -math.inf  # see cutoff_interval_s
        self._refresh: asyncio.Task[None] | None = None

    @property
    def online(self) -> int:
        """The workers online as last counted, with this replica's registrations since."""
        return self._counted + self._since

    @property
    def interval_s(self) -> int:
        return self._interval

    @property
    def cutoff_interval_s(self) -> int:
        """The interval the online cutoff uses: the current one, or a longer one handed out
        until the workers told it have had the time to beat once more."""
        if self._clock() < self._longer_until:
            return max(self._interval, self._longer)
        return self._interval

    def registered(self) -> None:
        """A worker registered here: it counts at once, before the next count."""
        self._since += 1
        self._set(paced_interval_s(self.base_s, self.max_per_s, self.online))

    async def current_s(self) -> int:
        """The interval to hand out now; counts again when the last count is stale. One count
        at a time: calls meanwhile get the interval as it is (the count does not hold them)."""
        if self.max_per_s > 0 and self._clock() - self._counted_at >= REFRESH_S:
            if self._refresh is None or self._refresh.done():
                self._refresh = asyncio.ensure_future(self._recount())
            if self._counted_at == -math.inf:
                await asyncio.shield(self._refresh)  # the first call waits for a first count
        return self._interval

    async def _recount(self) -> None:
        started = self._clock()
        try:
            online = await self._count(self.cutoff_interval_s)
        except Exception as exc:  # the index is away: keep the interval, count again later
            log.warning("could not count the workers online (%s); heartbeat interval kept", exc)
            self._counted_at = started
            return
        self._counted, self._since, self._counted_at = online, 0, started
        self._set(paced_interval_s(self.base_s, self.max_per_s, online))

    def _set(self, interval: int) -> None:
        if interval < self._interval:
            # Workers told the longer interval beat again within it, then hear this one.
            self._longer = max(self._interval, self.cutoff_interval_s)
            self._longer_until = self._clock() + self._interval
        self._interval = interval
