"""Games kept as SGF: every gating game sent with its record, and a share of the self-play
games (``sgf_share``, all by default), under ``DATA_DIR/sgf/``::

    sgf/<model>/selfplay/<game id>.sgf     self-play games of <model>
    sgf/<candidate>/gating/<game id>.sgf   games of <candidate>'s gating match

This module is the writer, :class:`GameArchive`. The SGF archive is four modules, split by
job: what a kept game is, its file name, the choice of self-play games and the SGF rendering
(:mod:`kgrpc.coordinator.kept_games`, which the validation pool's processes import alone);
the ``sgf_games`` table that indexes each file and that every reader queries
(:mod:`kgrpc.coordinator.sgf_index`); the check of the records a gating report carries
(:mod:`kgrpc.coordinator.match_records`); and here, writing the files, making them durable
and indexing them, off the event loop and within a memory budget.

A gating game is kept when its worker sends the record with the result (``MatchGame.record``)
and the record replays (:func:`kgrpc.coordinator.match_records.check_match_records`).

Order: a file is written in place (:func:`kgrpc.durable.write_unsynced`: no temporary file
and rename, which cost more than the write) and made durable, with the others of the last
``FLUSH_INTERVAL_S`` seconds (:func:`kgrpc.durable.sync_files`: one ``syncfs`` on Linux),
before its index row is committed, so every row names a whole file; a file a crash cut short
has no row, is never listed or served, and is written again if its game is kept again. A
failure is logged and counted; it never fails an upload (the game's training rows are stored
either way).
With a blob store other than DATA_DIR (S3) no file is written: the games of each flush are
put as one pack object before their rows, which point at (pack, offset, length), and a game
is read back with one ranged read (:mod:`kgrpc.coordinator.sgf_packs`).
Self-play games are chosen by a hash of their id
(:func:`kgrpc.coordinator.kept_games.selected`), so a game sent again is chosen again.
Building and writing the files runs on the archive's own thread; at most
``max_pending_bytes`` of serialized games wait for it, beyond that the uploader waits (memory
stays bounded, nothing is dropped).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import errno
import logging
import sqlite3
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from kgrpc.blobstore import BlobNotFoundError, BlobStore, BlobStoreError, BlobUnavailableError
from kgrpc.coordinator import sgf_packs
from kgrpc.coordinator.blobs import in_place, sgf_key, unavailable
from kgrpc.coordinator.errors import not_found
from kgrpc.coordinator.kept_games import KINDS, KeptGame, prepare, prepare_selfplay, selected
from kgrpc.coordinator.outcome import GameOutcome
from kgrpc.coordinator.sgf_index import index, known
from kgrpc.durable import sync_files, write_unsynced
from kgrpc.v1 import coordinator_pb2, records_pb2

log = logging.getLogger("kgrpc.coordinator")

SGF_DIR = "sgf"
MAX_PENDING_BYTES = 64 << 20
FLUSH_INTERVAL_S = 2.0
OnStorage = Callable[..., Awaitable[Any]]


class GameArchive:
    """Writes SGF files on its own thread and indexes them through ``on_storage`` (the
    storage thread, owner of ``conn``).

    Files are renamed into place as soon as they are built, but made durable in groups: at
    most ``flush_interval_s`` later, every file written since is fsynced (together) and only
    then indexed, so a crash loses at most the last moments' SGFs (unindexed files, never a
    row naming a file that is not whole) and the fsyncs do not hold up the ingest journal's."""

    def __init__(
        self,
        data_dir: Path,
        share: float,
        conn: sqlite3.Connection,
        on_storage: OnStorage,
        *,
        max_pending_bytes: int = MAX_PENDING_BYTES,
        flush_interval_s: float = FLUSH_INTERVAL_S,
        blobs: BlobStore | None = None,
    ) -> None:
        self.root = Path(data_dir) / SGF_DIR
        # Another store than DATA_DIR (kgrpc.coordinator.blobs): no files; each flush puts
        # one pack of its games' SGF into the store before their rows (sgf_packs.py).
        self.blobs = blobs
        self.remote = blobs is not None and not in_place(
            blobs, sgf_key("x.sgf"), self.root / "x.sgf"
        )
        self.share = share
        self.conn = conn
        self.flush_interval_s = flush_interval_s
        self._db = on_storage
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="kgrpc-sgf")
        self._budget = max_pending_bytes
        self._pending_bytes = 0
        self._space = asyncio.Condition()
        self._tasks: set[asyncio.Task[None]] = set()
        self._unsynced: list[KeptGame] = []
        self._queued: set[str] = set()  # ids submitted and not yet indexed (or given up)
        self._unsynced_dirs: set[Path] = set()
        self._unpacked: list[bytes] = []  # the SGF of each of _unsynced, with a remote store
        self._flush_lock = asyncio.Lock()
        self._flusher: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        # This process's figures, for /metrics.
        self.written = dict.fromkeys(KINDS, 0)
        self.failures = 0
        self.refused_records = 0
        self._disk_full = False  # a full disk was reported (once, until a write succeeds)
        self._store_down = ""  # a remote store's failure, while packs wait for it (logged once)
        self._closing = False  # close(): nothing more is kept back for a retry

    async def keep_selfplay(self, accepted: Sequence[tuple[bytes, GameOutcome]]) -> None:
        """Queue the chosen share of newly accepted self-play games (serialized, outcome)."""
        picked = [(data, o) for data, o in accepted if selected(o.game_id, self.share)]
        if picked:
            # Rendered by the validation pool (GameOutcome.kept) unless its share differed.
            ready = [o.kept for _, o in picked if o.kept is not None]
            chosen = [(data, o.worker_id) for data, o in picked if o.kept is None]
            size = sum(len(data) for data, _ in picked)
            await self._submit(
                size,
                [o.game_id for _, o in picked],
                lambda: ready + prepare_selfplay(chosen),
            )

    async def keep_match(
        self,
        req: coordinator_pb2.ReportMatchResultRequest,
        records: Sequence[records_pb2.GameRecord],
    ) -> None:
        """Queue the checked records of a recorded match report (games kept before are not
        written again)."""
        if not records:
            return
        have = await self._db(known, self.conn, [r.game_id for r in records])
        todo = [r for r in records if r.game_id not in have and r.game_id not in self._queued]
        if todo:
            size = sum(r.ByteSize() for r in todo)
            await self._submit(
                size,
                [r.game_id for r in todo],
                lambda: [prepare(r, "gating", req.candidate_model, req.worker_id) for r in todo],
            )

    async def _submit(
        self, size: int, ids: list[str], build: Callable[[], list[tuple[KeptGame, bytes]]]
    ) -> None:
        """Queue ``build`` (``size`` bytes of games) once the budget has room for it (or
        nothing else waits: a batch larger than the budget goes alone)."""
        async with self._space:
            await self._space.wait_for(
                lambda: not self._pending_bytes or self._pending_bytes + size <= self._budget
            )
            self._pending_bytes += size
        self._queued.update(ids)
        task = asyncio.ensure_future(self._keep(size, ids, build))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _keep(
        self, size: int, ids: list[str], build: Callable[[], list[tuple[KeptGame, bytes]]]
    ) -> None:
        try:
            loop = asyncio.get_running_loop()
            games, dirs, texts = await loop.run_in_executor(self._pool, self._write, build)
            self._unsynced.extend(games)
            self._unsynced_dirs |= dirs
            self._unpacked.extend(texts)
            self._disk_full = False
            if self._flusher is None or self._flusher.done():
                self._flusher = asyncio.ensure_future(self._flush_soon())
        except OSError as exc:
            self.failures += 1
            self._queued.difference_update(ids)
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                log.exception("could not write games as SGF")
            elif not self._disk_full:
                # The storage's own health check reports the full disk (one line per
                # incident, kgrpc.coordinator.storage_health): one line here too, no traceback.
                self._disk_full = True
                log.warning("games not kept as SGF while the disk is full: %s", exc)
        except Exception:  # noqa: BLE001 - the games are stored; only their SGF is missing
            self.failures += 1
            self._queued.difference_update(ids)
            log.exception("could not write games as SGF")
        finally:
            async with self._space:
                self._pending_bytes -= size
                self._space.notify_all()

    def _write(
        self, build: Callable[[], list[tuple[KeptGame, bytes]]]
    ) -> tuple[list[KeptGame], set[Path], list[bytes]]:
        items = build()
        if self.remote:  # packed at the next flush (sgf_packs.py): nothing written here
            return [g for g, _ in items], set(), [data for _, data in items]
        dirs = write_unsynced([(self.root / g.path, data) for g, data in items])
        return [g for g, _ in items], dirs, []

    async def _flush_soon(self) -> None:
        """Flush ``flush_interval_s`` from now (or when woken), until nothing is left."""
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.flush_interval_s)
            self._wake.clear()
            await self.flush()
            if not self._unsynced:
                return

    async def flush(self) -> None:
        """Make the files written so far durable, then index them."""
        async with self._flush_lock:
            games, dirs, texts = self._unsynced, self._unsynced_dirs, self._unpacked
            self._unsynced, self._unsynced_dirs, self._unpacked = [], set(), []
            if not games:
                return
            retry = False
            try:
                loop = asyncio.get_running_loop()
                if self.remote:
                    assert self.blobs is not None
                    games = await loop.run_in_executor(
                        self._pool, sgf_packs.put, self.blobs, games, texts
                    )
                else:
                    await loop.run_in_executor(
                        self._pool, sync_files, [self.root / g.path for g in games], dirs
                    )
                await self._db(index, self.conn, games)
                if self._store_down:
                    log.warning("SGF packs reach the store again (after: %s)", self._store_down)
                    self._store_down = ""
            except BlobUnavailableError as exc:
                retry = self._retry_later(games, texts, exc)
                if not retry:
                    self.failures += 1
                    log.error("could not keep %d games as SGF: %s", len(games), exc)
                return
            except BlobStoreError as exc:  # the store refuses: one line, not a traceback
                self.failures += 1
                log.error("could not keep %d games as SGF: %s", len(games), exc)
                return
            except Exception:  # noqa: BLE001 - the games are stored; only their SGF is missing
                self.failures += 1
                log.exception("could not keep %d games as SGF", len(games))
                return
            finally:
                if not retry:
                    self._queued.difference_update(g.game_id for g in games)
            for g in games:
                self.written[g.kind] += 1

    def _retry_later(
        self, games: list[KeptGame], texts: list[bytes], exc: BlobUnavailableError
    ) -> bool:
        """Keep a pack the store could not take for the next flush, while the SGF waiting in
        memory stays within the archive's budget (``max_pending_bytes``) and the archive is
        not closing: a short outage of the store loses no kept game."""
        waiting = sum(map(len, texts)) + sum(map(len, self._unpacked))
        if self._closing or waiting > self._budget:
            return False
        self._unsynced[:0] = games
        self._unpacked[:0] = texts
        if not self._store_down:
            self._store_down = str(exc)
            log.error(
                "SGF of kept games waits in memory (up to %d MiB) for the store: %s",
                self._budget >> 20,
                exc,
            )
        return True

    def path(self, game: KeptGame) -> Path:
        return self.root / game.path

    async def read_text(self, game: KeptGame) -> str:
        """The SGF of a kept game: one ranged read of its pack, or its file under
        DATA_DIR/sgf/; UNAVAILABLE when the store cannot be reached."""
        if not game.pack:
            try:
                return await asyncio.to_thread(self.path(game).read_text, "utf-8")
            except FileNotFoundError:
                return await self._read_unpacked(game)
        if self.blobs is None:
            raise unavailable(BlobStoreError(f"game {game.game_id} is in a pack: no store"))
        try:
            data = await asyncio.to_thread(sgf_packs.read, self.blobs, game)
        except BlobStoreError as exc:
            raise unavailable(exc) from None
        return data.decode("utf-8")

    async def _read_unpacked(self, game: KeptGame) -> str:
        """A game kept as an object of its own (a run stored one SGF object per game before
        packs), or NOT_FOUND saying it is missing: never a traceback for a lost file."""
        if self.blobs is not None and not self.blobs.is_local:
            try:
                data = await asyncio.to_thread(self.blobs.get_bytes, sgf_key(game.path))
            except BlobNotFoundError:
                pass
            except BlobStoreError as exc:
                raise unavailable(exc) from None
            else:
                return data.decode("utf-8")
        raise not_found(f"the SGF of game {game.game_id} is missing from the archive")

    @property
    def waiting_for_store(self) -> bool:
        """Whether kept games' SGF waits in memory for a store that is down."""
        return bool(self._store_down)

    @property
    def pending_bytes(self) -> int:
        """Serialized games queued or being written."""
        return self._pending_bytes

    async def drain(self) -> None:
        """Wait until every queued game is written, durable and indexed."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
        if self._flusher is not None:
            self._wake.set()
            await self._flusher
        await self.flush()

    async def close(self) -> None:
        """Finish every queued batch, then stop the thread."""
        self._closing = True
        await self.drain()
        self._pool.shutdown(wait=True)
