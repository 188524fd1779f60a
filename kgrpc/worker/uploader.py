"""The uploader: sends the spooled games to the coordinator (``UploadGames``) in batches and
deletes a spooled game only once the coordinator acknowledged it (ACCEPTED or DUPLICATE);
REJECTED games move to ``spool/rejected/`` with the reason and are never sent again.

A batch goes when ``games_per_batch`` games wait, at least every ``upload_interval_s``, and at
once when stopping. An upload the coordinator does not answer is retried (the coordinator
stores each game id once, so a re-sent game comes back DUPLICATE); after a stop request with
the coordinator away, for at most the stop's final wait. A damaged spool file is moved aside,
never retried; any other error of the uploader itself is logged and the upload tried again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable

import grpc
import zstandard

from kgrpc.net import FatalError
from kgrpc.v1 import coordinator_pb2, records_pb2
from kgrpc.worker.config import WorkerConfig
from kgrpc.worker.lifecycle import Stop
from kgrpc.worker.link import CoordinatorLink
from kgrpc.worker.spool import Spool
from kgrpc.worker.status import WorkerCounters

log = logging.getLogger(__name__)
MAX_UPLOAD_BYTES = 32 * 1024 * 1024
FINISHING_CAP_S = 5.0  # longest wait between tries once no more games are coming


class Uploader:
    def __init__(
        self,
        cfg: WorkerConfig,
        spool: Spool,
        link: CoordinatorLink,
        counters: WorkerCounters,
        stop: Stop,
        batch_size: Callable[[], int],
    ) -> None:
        self.cfg = cfg
        self.spool = spool
        self.link = link
        self.counters = counters
        self.stop = stop
        self.batch_size = batch_size  # games per upload (known once registered)
        self._wake = asyncio.Event()
        self._finishing = False
        self._backoff = link.policy.backoff()

    def spooled(self, count: int) -> None:
        """A game was spooled; ``count`` wait now. A full batch is sent at once."""
        if count >= self.batch_size():
            self._wake.set()

    def finish(self) -> None:
        """No more games are coming: send what is spooled, then return."""
        self._finishing = True
        self._backoff.cap_s = min(self._backoff.cap_s, FINISHING_CAP_S)
        self._wake.set()

    async def run(self) -> None:
        last = time.monotonic()
        while True:
            if not self._finishing:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), 1.0)
                self._wake.clear()
            pending = await asyncio.to_thread(self.spool.pending_ids)
            self.counters.spooled = len(pending)
            if not pending:
                if self._finishing:
                    return
                continue
            batch = self.batch_size()
            due = (
                len(pending) >= batch
                or self._finishing
                or self.stop.is_set()
                or time.monotonic() - last >= self.cfg.upload_interval_s
            )
            if not due:
                continue
            try:
                await self._upload(pending[:batch])
            except FatalError:
                raise
            except grpc.aio.AioRpcError:  # retried until the stop's final wait ran out
                log.warning(
                    "coordinator still unreachable; %d games stay in the spool for the next start",
                    len(pending),
                )
                return
            except Exception:
                # A disk error or a bug must not end the uploads for the rest of the run
                # (the games would pile up in the spool with nobody sending them).
                log.exception("uploading spooled games failed; retrying")
                if self.stop.final_wait_over():
                    log.warning("%d games stay in the spool for the next start", len(pending))
                    return
                await asyncio.sleep(self._backoff.next_delay())
                continue
            self._backoff.reset()
            last = time.monotonic()

    async def _upload(self, ids: list[str]) -> None:
        records = await self._load(ids)
        if not records:
            return
        messages = _pack(records)

        async def requests() -> AsyncIterator[coordinator_pb2.UploadGamesRequest]:
            for payload, count in messages:
                yield coordinator_pb2.UploadGamesRequest(games_zstd=payload, game_count=count)

        resp = await self.link.call(
            lambda: self.link.stub.UploadGames(requests(), timeout=120),
            what="UploadGames",
            backoff=self._backoff,
            stop=None,
            give_up=self.stop.final_wait_over,
        )
        await asyncio.to_thread(self._apply_acks, resp, {r.game_id for r in records})
        self.counters.uploads += 1
        self.counters.spooled = self.spool.count()
        log.info(
            "uploaded %d games: %d accepted, %d duplicates, %d rejected",
            len(records),
            resp.accepted,
            resp.duplicates,
            resp.rejected,
        )

    async def _load(self, ids: list[str]) -> list[records_pb2.GameRecord]:
        """The spooled records of ``ids``; damaged files go to rejected/ instead."""
        records = []
        for gid in ids:
            try:
                rec = await asyncio.to_thread(self.spool.load, gid)
            except FileNotFoundError:
                continue
            except Exception as exc:  # a damaged file cannot become valid by retrying
                log.error("spooled game %s is unreadable (%s); moved to rejected/", gid, exc)
                await asyncio.to_thread(self.spool.reject, gid, "corrupt_spool", str(exc))
                continue
            if rec.game_id != gid:
                # The acks name the record's id: a file holding another id (or none, e.g. an
                # empty file) could never be acknowledged and would be re-sent forever.
                log.error("spooled file %s holds game id %r; moved to rejected/", gid, rec.game_id)
                await asyncio.to_thread(
                    self.spool.reject,
                    gid,
                    "corrupt_spool",
                    f"file {gid}.game holds game id {rec.game_id!r}",
                )
                continue
            records.append(rec)
        return records

    def _apply_acks(self, resp: coordinator_pb2.UploadGamesResponse, sent: set[str]) -> None:
        for ack in resp.acks:
            if ack.game_id not in sent:  # never act on a file this upload did not send
                log.warning("ack for game %r, which was not in the upload; ignored", ack.game_id)
                continue
            if ack.status in (
                coordinator_pb2.GAME_STATUS_ACCEPTED,
                coordinator_pb2.GAME_STATUS_DUPLICATE,
            ):
                self.spool.acknowledge(ack.game_id)
                self.counters.games_uploaded += 1
            elif ack.status == coordinator_pb2.GAME_STATUS_REJECTED:
                log.warning("game %s rejected: %s (%s)", ack.game_id, ack.reason, ack.detail)
                self.spool.reject(ack.game_id, ack.reason, ack.detail)
                self.counters.games_rejected += 1


def _pack(records: list[records_pb2.GameRecord]) -> list[tuple[bytes, int]]:
    """zstd(GameBatch) payloads, split so no message gets near the gRPC size limit."""
    cctx = zstandard.ZstdCompressor(level=3)
    out: list[tuple[bytes, int]] = []
    batch = records_pb2.GameBatch()
    size = 0
    for rec in records:
        n = rec.ByteSize()
        if batch.games and size + n > MAX_UPLOAD_BYTES:
            out.append((cctx.compress(batch.SerializeToString()), len(batch.games)))
            batch = records_pb2.GameBatch()
            size = 0
        batch.games.append(rec)
        size += n
    if batch.games:
        out.append((cctx.compress(batch.SerializeToString()), len(batch.games)))
    return out
