"""Model releases as a stream: each WatchModels call follows the releases from its start.

A release is sent once per change: a new best model, or a file of another precision added to
the current best (``ModelInfo.files`` grew). A client that already took the release by name
sees the same name again with more files and may fetch the file it prefers.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from kgrpc.v1 import common_pb2

log = logging.getLogger("kgrpc.coordinator")


def _key(info: common_pb2.ModelInfo) -> tuple[str, tuple[int, ...]]:
    return info.name, tuple(sorted(f.precision for f in info.files))


class Releases:
    def __init__(self) -> None:
        self._watchers: set[asyncio.Queue[common_pb2.ModelInfo]] = set()

    def announce(self, info: common_pb2.ModelInfo) -> None:
        """Tell every watcher that ``info`` is the new best model (or the best model with a
        new file)."""
        log.info(
            "released model %s (elo %.1f, %d file%s)",
            info.name,
            info.elo,
            len(info.files),
            "" if len(info.files) == 1 else "s",
        )
        for q in list(self._watchers):
            q.put_nowait(info)

    async def watch(
        self, known_model: str, best: Callable[[], Awaitable[common_pb2.ModelInfo | None]]
    ) -> AsyncIterator[common_pb2.ModelInfo]:
        """The current best model (``best()``) unless it is ``known_model``, then each
        release as it happens, never the same (name, files) twice in a row; runs until
        cancelled."""
        queue: asyncio.Queue[common_pb2.ModelInfo] = asyncio.Queue()
        self._watchers.add(queue)
        try:
            current = await best()
            last: tuple[str, tuple[int, ...]] = (known_model, ())
            if current is not None and current.name != known_model:
                last = _key(current)
                yield current
            elif current is not None:
                last = _key(current)  # the client has it; only news from here on
            while True:
                info = await queue.get()
                if _key(info) != last:
                    last = _key(info)
                    yield info
        finally:
            self._watchers.discard(queue)


# How often a replica on a shared index looks for releases made by the others: a release
# reaches every replica's WatchModels streams within this (plus one read), and the look is
# one indexed row, so four a second cost the index nothing measurable.
FOLLOW_INTERVAL_S = 0.25
_UNSEEN = object()


def release_key(conn: sqlite3.Connection, run: str) -> tuple[Any, ...] | None:
    """What changes with each release of ``run``: the best model's name, release time and
    number of files (None before the first release). Runs on a reader connection."""
    row = conn.execute(
        "SELECT m.name, m.released_ms, (SELECT COUNT(*) FROM model_files f "
        "WHERE f.model = m.name) FROM models m WHERE m.status = 'released' AND m.run = ? "
        "ORDER BY m.released_ms DESC, m.rowid DESC LIMIT 1",
        (run,),
    ).fetchone()
    return None if row is None else tuple(row)


async def follow_index(
    releases: Releases,
    probe: Callable[[], Awaitable[tuple[Any, ...] | None]],
    best: Callable[[], Awaitable[common_pb2.ModelInfo | None]],
    interval_s: float = FOLLOW_INTERVAL_S,
) -> None:
    """Announce the releases other replicas sharing the index make (``probe``: the
    :func:`release_key` of now; ``best``: the best model's info); runs until cancelled. An
    index that cannot be read is tried again at the next tick (logged once per outage)."""
    last: object = _UNSEEN
    failing = False
    while True:
        try:
            key = await probe()
            if failing:
                log.warning("release follower: the index answers again")
                failing = False
            if key != last:
                info = await best() if key is not None else None
                if last is not _UNSEEN and info is not None:
                    releases.announce(info)  # (the state at start is what watchers read first)
                last = key
        except sqlite3.Error as exc:
            if not failing:
                log.error("release follower: cannot read the index (%s); retrying", exc)
                failing = True
        await asyncio.sleep(interval_s)
