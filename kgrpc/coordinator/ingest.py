"""Taking in uploaded games: decode, check who may claim them, validate, store, cut shards.

A record's ``worker_id`` must be empty or a worker registered under the caller's token (any
registered worker with auth off); otherwise the game is refused as ``worker_mismatch``.
Games without a worker id, and refused claims, are counted under the caller's bucket
(:func:`kgrpc.coordinator.workers.upload_bucket`). Games already stored are duplicates and
are not validated again. The others are validated against the stored terms of the task
each names (``task_terms``, :meth:`kgrpc.coordinator.tasks.Tasks.terms`, looked up on the
storage thread with the claims). A game's fields are checked on the wire before anything
parses it (:func:`kgrpc.coordinator.upload.scan_game`); a message's games are taken up to
``max_moves_per_message`` moves. After each message, and on a timer, full shards are cut.

Storing is a group commit: the messages whose games are ready while the storage thread is
busy are stored together, with one journal write and fsync and one SQLite transaction
(:meth:`Ingest.commit`). An fsync costs milliseconds whatever it carries, so under
concurrent uploads the games per fsync grow with the load instead of the fsyncs.

With a blob store other than DATA_DIR (``store``), a cut shard is put into it, off the
storage thread, before it is indexed (:mod:`kgrpc.coordinator.blobs`). While the store is
down the shards' games stay in the journal and uploads are still acknowledged into it, up to
``store_outage_journal_mb`` (:class:`~kgrpc.coordinator.blobs.StoreOutage`); the cuts are
tried at growing intervals and drain the journal once the store is back.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Any

from kgrpc.blobstore import BlobStoreError
from kgrpc.coordinator import cut, workers
from kgrpc.coordinator.auth import TokenInfo
from kgrpc.coordinator.blobs import StoreOutage, fetch_sources, put_window
from kgrpc.coordinator.config import Config
from kgrpc.coordinator.errors import CoordinatorError
from kgrpc.coordinator.file_work import FileWork
from kgrpc.coordinator.store import GameOutcome, Store
from kgrpc.coordinator.upload import GameHead, decode_batch, max_game_bytes, scan_game
from kgrpc.coordinator.validation_pool import ValidationPool
from kgrpc.coordinator.window_quarantine import QuarantineFollower
from kgrpc.records.terms import TaskTerms
from kgrpc.v1 import coordinator_pb2

log = logging.getLogger("kgrpc.coordinator")
# Messages decompressed at once: each may hold up to ``max_decompressed_mb`` while it is read.
DECODE_SLOTS = 2
OnStorage = Callable[..., Awaitable[Any]]
# Told of each message's newly accepted games (serialized, outcome), e.g. to keep them as SGF.
KeepAccepted = Callable[[list[tuple[bytes, GameOutcome]]], Awaitable[None]]
# The stored terms of each of the task ids that is known (run on the storage thread).
TaskLookup = Callable[[Iterable[str]], dict[str, TaskTerms]]


def take_games(heads: list[GameHead], max_moves: int) -> int:
    """How many games of a message to take: the first one always, then while the moves
    taken stay within ``max_moves`` (games refused on the wire cost nothing more)."""
    total = 0
    for i, h in enumerate(heads):
        total += h.moves if h.problem is None else 0
        if i and total > max_moves:
            return i
    return len(heads)


@dataclass
class Taken:
    """The games taken from one upload message: (outcome, status) of each, and whether
    that was every game of the message."""

    acks: list[tuple[GameOutcome, str]]
    complete: bool


def claim_check(
    heads: list[tuple[str, str]],
    owners: dict[str, int | None],
    caller: TokenInfo | None,
    bucket: str,
) -> list[GameOutcome | None]:
    """A ``worker_mismatch`` outcome for each game whose worker id the caller may not claim,
    None for the others; a game without a worker id gets ``bucket`` in ``heads``."""
    refused: list[GameOutcome | None] = [None] * len(heads)
    for i, (gid, wid) in enumerate(heads):
        if not wid:
            heads[i] = (gid, bucket)
        elif wid not in owners:
            refused[i] = GameOutcome(
                gid,
                bucket,
                False,
                "worker_mismatch",
                f"worker {wid!r} is not registered: use the id Register "
                "returned, or leave worker_id empty",
            )
        elif caller is not None and owners[wid] != caller.id:
            refused[i] = GameOutcome(
                gid,
                bucket,
                False,
                "worker_mismatch",
                f"worker {wid!r} is registered under another token",
            )
    return refused


@dataclass
class _Commit:
    """One message's games waiting for the next group commit."""

    outcomes: list[GameOutcome]
    caller: TokenInfo | None
    bucket: str
    done: asyncio.Future[list[str]]


class Ingest:
    """Ingest for one coordinator: ``on_storage(fn, *args)`` runs ``fn`` on the storage
    thread, the single owner of ``store``; ``pool`` replays the games, ``files`` does the
    cuts' file work."""

    def __init__(
        self,
        cfg: Config,
        store: Store,
        pool: ValidationPool,
        files: FileWork,
        on_storage: OnStorage,
        keep: KeepAccepted | None = None,
        task_terms: TaskLookup | None = None,
    ) -> None:
        self.cfg = cfg
        self.task_terms = task_terms
        self.keep = keep
        self.store = store
        self.pool = pool
        # The cuts' file work and the window rebuilds, never in the validation pool: they
        # must not hold a process an upload's replay waits for (kgrpc.coordinator.file_work).
        self.files = files
        self._db = on_storage
        self._cut_lock = asyncio.Lock()
        self._decode_slots = asyncio.Semaphore(DECODE_SLOTS)
        self._cut_failure = ""
        self._window_next: cut.WindowJob | None = None  # a rebuild of latest_games.npz due
        self._window_task: asyncio.Future[None] | None = None
        # Rebuilds the window when a token quarantine changes what it holds.
        self.quarantine = QuarantineFollower()
        self._draining = False  # the coordinator is stopping: no new cut
        self._retry: asyncio.TimerHandle | None = None  # a cut due when the store may be back
        # Store requests waiting for the next group commit: (outcomes, caller, bucket, future).
        self._commits: list[_Commit] = []
        self._committer: asyncio.Task[None] | None = None
        # Group commits made and the messages they stored (messages / commits: the grouping).
        self.commits = 0
        self.committed_messages = 0
        self.outage = StoreOutage(
            store.blobs, store.journal.path, int(cfg.store_outage_journal_mb * (1 << 20))
        )

    async def message(
        self,
        req: coordinator_pb2.UploadGamesRequest,
        caller: TokenInfo | None,
        stream: Hashable = None,
    ) -> Taken:
        """Validate and store the games of one upload message of ``stream`` (fairness, see
        :mod:`~kgrpc.coordinator.validation_pool`): (outcome, status) of each game taken,
        status ``accepted``, ``duplicate`` or ``rejected``. Games past
        ``max_moves_per_message`` moves (counted on the wire) are not taken."""
        cfg = self.cfg
        self.outage.admit()  # UNAVAILABLE once a store outage has filled the journal's bound
        bucket = workers.upload_bucket(caller)

        def decode() -> tuple[list[bytes], list[GameHead]]:
            # Off the event loop whatever the compressed size: a small message may expand a lot.
            games = decode_batch(
                req,
                cfg.max_decompressed_mb << 20,
                cfg.max_games_per_message,
                max_game_bytes(cfg.max_moves),
            )
            return games, [scan_game(g, cfg.max_moves) for g in games]

        async with self._decode_slots:
            games, heads = await asyncio.to_thread(decode)
        taken = take_games(heads, cfg.max_moves_per_message)
        complete = taken == len(games)
        del games[taken:], heads[taken:]
        outcomes: list[GameOutcome | None] = [None] * len(games)
        ids: list[tuple[str, str]] = []
        for i, h in enumerate(heads):
            if h.problem is not None:
                outcomes[i] = GameOutcome(h.game_id, bucket, False, *h.problem)
            ids.append((h.game_id, h.worker_id))
        owners, known, terms = await self._db(self._look_up, ids, heads)
        refused = claim_check(ids, owners, caller, bucket)
        todo: list[int] = []
        for i, (gid, wid) in enumerate(ids):
            if outcomes[i] is not None:
                continue
            if refused[i] is not None:
                outcomes[i] = refused[i]
            elif gid and gid in known:
                outcomes[i] = GameOutcome(gid, wid, True)
            else:
                todo.append(i)
        validated = await self.pool.validate(
            [(games[i], ids[i][1], terms.get(heads[i].task_id)) for i in todo],
            [heads[i].moves for i in todo],
            bucket,
            stream,
        )
        for i, o in zip(todo, validated, strict=True):
            outcomes[i] = o
        final = [o for o in outcomes if o is not None]
        statuses = await self.commit(final, caller, bucket)
        if self.keep is not None:
            pairs = zip(final, statuses, strict=True)
            await self.keep([(games[i], o) for i, (o, st) in enumerate(pairs) if st == "accepted"])
        asyncio.ensure_future(self.cut())
        return Taken(list(zip(final, statuses, strict=True)), complete)

    def _look_up(
        self, ids: list[tuple[str, str]], heads: list[GameHead]
    ) -> tuple[dict[str, int | None], set[str], dict[str, TaskTerms]]:
        """On the storage thread: the owners of the games' worker ids, the game ids already
        stored, the terms of the tasks the games name."""
        conn = self.store.conn
        owners = workers.owners(conn, {w for _, w in ids if w})
        known = self.store.known_games([g for g, _ in ids if g])
        task_ids = {h.task_id for h in heads if h.task_id and h.problem is None}
        terms = self.task_terms(task_ids) if self.task_terms is not None and task_ids else {}
        return owners, known, terms

    async def commit(
        self, outcomes: list[GameOutcome], caller: TokenInfo | None, bucket: str
    ) -> list[str]:
        """Store ``outcomes`` durably in the next group commit; their statuses. A message
        whose caller went away is still stored (as it would be alone): its games are
        validated, and a resend is a duplicate."""
        fut: asyncio.Future[list[str]] = asyncio.get_running_loop().create_future()
        # A failure nobody waits for any more (the caller was cancelled) is not an error.
        fut.add_done_callback(lambda f: f.cancelled() or f.exception())
        self._commits.append(_Commit(outcomes, caller, bucket, fut))
        if self._committer is None or self._committer.done():
            self._committer = asyncio.ensure_future(self._commit_all())
        return await asyncio.shield(fut)

    async def _commit_all(self) -> None:
        """Commit what waits, then what arrived meanwhile, until nothing waits."""
        while self._commits:
            group, self._commits = self._commits, []
            try:
                statuses = await self._db(self._store, group)
                self.commits += 1
                self.committed_messages += len(group)
            except BaseException as exc:
                # Nothing of the group was acknowledged (Store.ingest takes a failed write
                # back out): every message of it fails as it would have alone.
                for c in group:
                    if not c.done.done():
                        c.done.set_exception(exc)
                if not isinstance(exc, Exception):
                    raise
                continue
            for c, st in zip(group, statuses, strict=True):
                if not c.done.done():
                    c.done.set_result(st)

    def _store(self, group: list[_Commit]) -> list[list[str]]:
        outcomes: list[GameOutcome] = []
        for c in group:
            if any(o.worker_id == c.bucket for o in c.outcomes):
                workers.claim_bucket(self.store.conn, c.bucket, c.caller)
            outcomes.extend(c.outcomes)
        # One batch: a game sent in two messages of the group is stored once, the second
        # copy is a duplicate, as if the messages had come one after the other.
        statuses = self.store.ingest(outcomes)
        out: list[list[str]] = []
        start = 0
        for c in group:
            out.append(statuses[start : start + len(c.outcomes)])
            start += len(c.outcomes)
        return out

    async def cut(self, older_than_s: float | None = None) -> None:
        """Write every full shard (and, with ``older_than_s``, every shard whose games have
        waited that long, and groups beyond ``max_shard_groups``), one at a time: the storage
        thread plans each cut and indexes its file, and the file work runs in the file work
        process meanwhile (kgrpc.coordinator.cut, kgrpc.coordinator.file_work), so uploads go
        on being validated and stored. A failure is logged: the games stay in the journal."""
        plan_cut = functools.partial(self.store.plan_cut, older_than_s=older_than_s)
        async with self._cut_lock:
            while not self._draining:
                if not await self._store_reachable():
                    return
                try:
                    plan = await self._db(plan_cut)
                    if plan is None:
                        self._cut_failure = ""
                        return
                    try:
                        written = await self.files.run(cut.write_cut, plan.job)
                    except Exception as exc:
                        await self._db(self.store.abort_cut, plan, exc)  # raises exc
                        raise
                    try:
                        await asyncio.to_thread(self.store.put_cut, plan)
                    except BlobStoreError as exc:
                        # Not indexed: the games stay pending in the journal, tried again.
                        await self._db(self.store.abort_cut, plan)
                        self._store_failed(exc)
                        return
                    self.outage.worked()
                    await self._db(self.store.finish_cut, plan, written)
                    window = await self._db(self.store.latest_due, plan)
                    if window is not None:
                        self._refresh_latest(window)
                except CoordinatorError:
                    return  # a full or failing disk: logged once by the storage thread's owner
                except Exception as exc:  # noqa: BLE001 - the games stay in the journal
                    if str(exc) != self._cut_failure:  # once per distinct failure, not per try
                        self._cut_failure = str(exc)
                        log.exception("shard cut failed (retried after each upload)")
                    return

    async def _store_reachable(self) -> bool:
        """False while a store outage lasts and its next try is not due; when it is due, the
        store is asked once (a cheap listing) before a whole shard is written for it."""
        if not self.outage.down:
            return True
        if not self.outage.may_try():
            self._retry_later()  # the one scheduled may have fired a moment early
            return False
        try:
            await asyncio.to_thread(self.store.blobs.check)
        except BlobStoreError as exc:
            self._store_failed(exc)
            return False
        return True

    def _store_failed(self, exc: BlobStoreError) -> None:
        """Count the failure and try again when the outage's next try is due: uploads may
        have stopped (refused at the bound), and the flush loop may sleep for a minute."""
        self.outage.failed(exc)
        self._retry_later()

    def _retry_later(self) -> None:
        """One cut scheduled for when the outage's next try is due (none while stopping)."""
        if self._draining or (self._retry is not None and not self._retry.cancelled()):
            return

        def fire() -> None:
            self._retry = None
            asyncio.ensure_future(self.cut())

        # A little past the due time: a timer may fire up to the clock's resolution early.
        delay = self.outage.retry_in() + 0.01
        self._retry = asyncio.get_running_loop().call_later(delay, fire)

    def _refresh_latest(self, job: cut.WindowJob) -> None:
        """Rebuild latest_games.npz in the file work process, one rebuild at a time: a job due
        while one runs waits for it, and a newer one replaces it (the file holds the newest
        rows whichever group was cut last, as before)."""
        self._window_next = job
        if self._window_task is None or self._window_task.done():
            self._window_task = asyncio.ensure_future(self._rebuild_windows())

    async def _rebuild_windows(self) -> None:
        while self._window_next is not None:
            job, self._window_next = self._window_next, None
            try:
                await asyncio.to_thread(fetch_sources, self.store.blobs, job.sources)
                await self.files.run(cut.write_window, job)
                await asyncio.to_thread(put_window, self.store.blobs, job.path)
                await self._db(self.store.prune_local, job)
            except CoordinatorError:
                return  # the coordinator is stopping
            except Exception as exc:  # noqa: BLE001 - the shards are intact; next cut retries
                log.error("could not update latest_games.npz: %s", exc)

    async def window_settled(self) -> None:
        """Wait until the rebuilds of latest_games.npz due so far have ended."""
        while self._window_task is not None and not self._window_task.done():
            await asyncio.wait([self._window_task])

    async def follow_quarantine(self) -> asyncio.Future[None] | None:
        """Rebuild latest_games.npz when a token quarantine set or lifted since the last call
        changes what it should hold (kgrpc.coordinator.window_quarantine); the rebuild's
        task (awaited, it has ended), or None when none is due. While a rebuild runs the
        check waits for the next call: the window it writes is what the check must see."""
        if self._draining or (self._window_task is not None and not self._window_task.done()):
            return None
        job = await self._db(self.quarantine.due, self.store)
        if job is None:
            return None
        self._refresh_latest(job)
        return self._window_task

    async def drain(self) -> None:
        """Before the pool stops: cut the shards that are full (the cut in flight ends
        first), start no cut after that, and let the rebuild of latest_games.npz end."""
        await self.cut()
        self._draining = True
        if self._window_task is not None:
            await self._window_task

    async def flush_loop(self) -> None:
        """Cut shards whose games waited ``flush_interval_s``, checking often enough; and
        follow the token quarantine into latest_games.npz (:meth:`follow_quarantine`)."""
        period = max(0.5, min(60.0, self.cfg.flush_interval_s / 4))
        while True:
            await asyncio.sleep(period)
            await self.cut(older_than_s=self.cfg.flush_interval_s)
            try:
                await self.follow_quarantine()
            except CoordinatorError:
                pass  # a full or failing disk, an unreachable index: said by its owner
            except Exception:  # noqa: BLE001 - read again at the next tick
                log.exception("following the token quarantine into latest_games.npz failed")
