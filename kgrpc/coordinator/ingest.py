"""Taking in uploaded games: decode, check who may claim them, validate, store, cut shards.

A record's ``worker_id`` must be empty or a worker registered under the caller's token (any
registered worker with auth off); otherwise the game is refused as ``worker_mismatch``.
Games without a worker id, and refused claims, are counted under the caller's bucket
(:func:`kgrpc.coordinator.workers.upload_bucket`). Games already stored are duplicates and
are not validated again. After each message, and on a timer, full shards are cut.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from kgrpc.coordinator import workers
from kgrpc.coordinator.auth import TokenInfo
from kgrpc.coordinator.config import Config
from kgrpc.coordinator.store import GameOutcome, Store
from kgrpc.coordinator.upload import decode_batch, game_heads, max_game_bytes
from kgrpc.coordinator.validation_pool import ValidationPool
from kgrpc.v1 import coordinator_pb2

log = logging.getLogger("kgrpc.coordinator")
OnStorage = Callable[..., Awaitable[Any]]
# Told of each message's newly accepted games (serialized, outcome), e.g. to keep them as SGF.
KeepAccepted = Callable[[list[tuple[bytes, GameOutcome]]], Awaitable[None]]


def claim_check(heads: list[tuple[str, str]], owners: dict[str, int | None],
                caller: TokenInfo | None, bucket: str) -> list[GameOutcome | None]:
    """A ``worker_mismatch`` outcome for each game whose worker id the caller may not claim,
    None for the others; a game without a worker id gets ``bucket`` in ``heads``."""
    refused: list[GameOutcome | None] = [None] * len(heads)
    for i, (gid, wid) in enumerate(heads):
        if not wid:
            heads[i] = (gid, bucket)
        elif wid not in owners:
            refused[i] = GameOutcome(gid, bucket, False, "worker_mismatch",
                                     f"worker {wid!r} is not registered: use the id Register "
                                     "returned, or leave worker_id empty")
        elif caller is not None and owners[wid] != caller.id:
            refused[i] = GameOutcome(gid, bucket, False, "worker_mismatch",
                                     f"worker {wid!r} is registered under another token")
    return refused


class Ingest:
    """Ingest for one coordinator: ``on_storage(fn, *args)`` runs ``fn`` on the storage
    thread, the single owner of ``store``."""

    def __init__(self, cfg: Config, store: Store, pool: ValidationPool,
                 on_storage: OnStorage, keep: KeepAccepted | None = None) -> None:
        self.cfg = cfg
        self.keep = keep
        self.store = store
        self.pool = pool
        self._db = on_storage
        self._cut_lock = asyncio.Lock()

    async def message(self, req: coordinator_pb2.UploadGamesRequest, caller: TokenInfo | None
                      ) -> list[tuple[GameOutcome, str]]:
        """Validate and store the games of one upload message: (outcome, status) of each,
        status ``accepted``, ``duplicate`` or ``rejected``."""
        cfg = self.cfg
        bucket = workers.upload_bucket(caller)

        def decode() -> tuple[list[bytes], list[tuple[str, str] | None]]:
            # Off the event loop whatever the compressed size: a small message may expand a lot.
            games = decode_batch(req, cfg.max_decompressed_mb << 20, cfg.max_games_per_message,
                                 max_game_bytes(cfg.max_moves))
            return games, game_heads(games)

        games, parsed = await asyncio.to_thread(decode)
        outcomes: list[GameOutcome | None] = [None] * len(games)
        heads: list[tuple[str, str]] = []
        for i, h in enumerate(parsed):
            if h is None:
                outcomes[i] = GameOutcome("", bucket, False, "undecodable",
                                          "game record does not parse")
            heads.append(h or ("", ""))
        owners = await self._db(workers.owners, self.store.conn, {w for _, w in heads if w})
        known = await self._db(self.store.known_games, [g for g, _ in heads if g])
        refused = claim_check(heads, owners, caller, bucket)
        todo: list[int] = []
        for i, (gid, wid) in enumerate(heads):
            if outcomes[i] is not None:
                continue
            if refused[i] is not None:
                outcomes[i] = refused[i]
            elif gid and gid in known:
                outcomes[i] = GameOutcome(gid, wid, True)
            else:
                todo.append(i)
        validated = await self.pool.validate([(games[i], heads[i][1]) for i in todo])
        for i, o in zip(todo, validated, strict=True):
            outcomes[i] = o
        final = [o for o in outcomes if o is not None]
        statuses = await self._db(self._store, final, caller, bucket)
        if self.keep is not None:
            pairs = zip(final, statuses, strict=True)
            await self.keep([(games[i], o) for i, (o, st) in enumerate(pairs) if st == "accepted"])
        asyncio.ensure_future(self.cut())
        return list(zip(final, statuses, strict=True))

    def _store(self, outcomes: list[GameOutcome], caller: TokenInfo | None,
               bucket: str) -> list[str]:
        if any(o.worker_id == bucket for o in outcomes):
            workers.claim_bucket(self.store.conn, bucket, caller)
        return self.store.ingest(outcomes)

    async def cut(self, older_than_s: float | None = None) -> None:
        """Write every full shard (and, with ``older_than_s``, every shard whose games have
        waited that long). A failure is logged: the games stay in the journal."""
        async with self._cut_lock:
            try:
                await self._db(functools.partial(self.store.cut_ready, older_than_s=older_than_s))
            except Exception:  # noqa: BLE001 - the games stay in the journal; next cut retries
                log.exception("shard cut failed")

    async def flush_loop(self) -> None:
        """Cut shards whose games waited ``flush_interval_s``, checking often enough."""
        period = max(0.5, min(60.0, self.cfg.flush_interval_s / 4))
        while True:
            await asyncio.sleep(period)
            await self.cut(older_than_s=self.cfg.flush_interval_s)
