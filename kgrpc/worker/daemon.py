"""The worker loop: register, get a task, fetch the model, play games in parallel, spool
them, upload them in batches, follow model releases, play gating matches, heartbeat.

Durability: a finished game is written to the spool before anything else happens to it and
is deleted only after the coordinator acknowledged it (see :mod:`kgrpc.worker.spool`), so a
worker killed at any moment re-sends exactly the unacknowledged games when it restarts.
Outages: every call to the coordinator is retried with growing, jittered waits; the log says
once that a service is down and once that it is back.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import signal
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import zstandard

from kgrpc.durable import atomic_write_bytes
from kgrpc.evaluator import EvaluationError
from kgrpc.go.rules import Rules
from kgrpc.mcts.config import SearchConfig, SelfPlayConfig
from kgrpc.mcts.selfplay import PlayedGame, play_match_game, play_selfplay_game
from kgrpc.net import Backoff, make_channel
from kgrpc.v1 import common_pb2, coordinator_pb2, coordinator_pb2_grpc, records_pb2
from kgrpc.worker.config import WorkerConfig
from kgrpc.worker.evaluators import Evaluators
from kgrpc.worker.models import ModelCache, ModelDownloadError
from kgrpc.worker.spool import Spool
from kgrpc.worker.status import RateMeter, WorkerCounters, status_line, to_proto

log = logging.getLogger("kgrpc.worker")
VERSION = "kgrpc-worker/0.1"
FATAL_CODES = {grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED,
               grpc.StatusCode.UNIMPLEMENTED}
MAX_UPLOAD_BYTES = 32 * 1024 * 1024


class FatalError(RuntimeError):
    """Retrying cannot help (bad token, wrong server)."""


class Outage:
    """Logs that a service went down once, and once that it came back."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.since: float | None = None

    def failed(self, exc: BaseException) -> None:
        if self.since is None:
            self.since = time.monotonic()
            log.warning("%s unreachable (%s); retrying with backoff, games keep being spooled",
                        self.what, _describe(exc))

    def ok(self) -> None:
        if self.since is not None:
            log.info("%s reachable again after %.0f s", self.what, time.monotonic() - self.since)
            self.since = None

    @property
    def down(self) -> bool:
        return self.since is not None


def _describe(exc: BaseException) -> str:
    if isinstance(exc, grpc.aio.AioRpcError):
        return f"{exc.code().name}: {exc.details()}"
    return f"{type(exc).__name__}: {exc}"


def _model_missing(exc: BaseException) -> bool:
    """The coordinator (download) or the inference server (evaluation) has no such model."""
    if isinstance(exc, grpc.aio.AioRpcError):
        return exc.code() == grpc.StatusCode.NOT_FOUND
    return isinstance(exc, EvaluationError) and exc.code == "NOT_FOUND"


def _check_fatal(exc: BaseException) -> None:
    if isinstance(exc, grpc.aio.AioRpcError) and exc.code() in FATAL_CODES:
        raise FatalError(f"coordinator refused: {_describe(exc)}") from exc


class _WaitsOutOutages:
    """The evaluator a game plays through: an inference outage (UNAVAILABLE, e.g. a server
    restart longer than the client's own few seconds of retries, or RESOURCE_EXHAUSTED) pauses
    the game until the server is back instead of throwing away the moves played so far. Once
    the worker is stopping, the error goes through (the game is dropped, as it must end)."""

    RETRYABLE = ("UNAVAILABLE", "RESOURCE_EXHAUSTED")

    def __init__(self, inner: Any, worker: Worker) -> None:
        self.inner = inner
        self.worker = worker

    @property
    def evals(self) -> int:
        return int(self.inner.evals)

    @property
    def requests(self) -> int:
        return int(self.inner.requests)

    async def evaluate(self, planes: Any, globals_: Any, *, model: str = "",
                       want_ownership: bool = False) -> Any:
        w = self.worker
        backoff: Backoff | None = None
        while True:
            try:
                result = await self.inner.evaluate(planes, globals_, model=model,
                                                   want_ownership=want_ownership)
            except EvaluationError as exc:
                if exc.code not in self.RETRYABLE or w.stopping.is_set():
                    raise
                w.infer_outage.failed(exc)
                backoff = backoff or w._backoff()
                await w._sleep(backoff.next_delay())
                continue
            if backoff is not None:
                w.infer_outage.ok()
            return result

    async def close(self) -> None:  # the worker closes the evaluators it owns
        pass


@dataclass
class Job:
    task: coordinator_pb2.Task
    index: int


class Worker:
    def __init__(self, cfg: WorkerConfig) -> None:
        cfg.check()
        self.cfg = cfg
        self.counters = WorkerCounters()
        self.meter = RateMeter()
        self.spool = Spool(cfg.spool_path)
        self.cache = ModelCache(cfg.model_path, keep=cfg.keep_models)
        self.rng = random.Random(cfg.seed)
        self.coord_outage = Outage(f"coordinator {cfg.coordinator}")
        self.infer_outage = Outage("inference" if cfg.inference_addresses
                                   else "in-process inference")
        self.stopping = asyncio.Event()
        self.worker_id = ""
        self.settings = coordinator_pb2.SelfPlaySettings()
        self.heartbeat_s = 30
        self.games_per_batch = 25
        self.latest_model = ""
        self._task: coordinator_pb2.Task | None = None
        self._task_left = 0
        self._task_issued = 0
        self._task_lock = asyncio.Lock()
        self._upload_wake = asyncio.Event()
        self._slots_done = False
        self._background: set[asyncio.Task[None]] = set()
        self._signals = 0
        self._main: asyncio.Task[int] | None = None
        self.channel: grpc.aio.Channel | None = None
        self.stub: coordinator_pb2_grpc.CoordinatorStub | None = None
        self.evaluators: Evaluators | None = None
        self.decisions: dict[str, str] = {}  # match task id -> latest decision
        self._models_in_use: Counter[str] = Counter()  # model -> games playing with it
        self.stop_upload_wait_s = 30.0  # after a stop request, with the coordinator away
        self._give_up_at: float | None = None

    # -- helpers -----------------------------------------------------------------------------

    def _backoff(self) -> Backoff:
        return Backoff(base_s=self.cfg.retry_base_s, cap_s=self.cfg.retry_cap_s,
                       rng=random.Random(self.rng.random()))

    async def _sleep(self, seconds: float) -> bool:
        """Sleep unless a stop is requested first; True when stopping."""
        try:
            await asyncio.wait_for(self.stopping.wait(), seconds)
        except TimeoutError:
            return False
        return True

    def _spawn(self, coro) -> asyncio.Task[None]:  # type: ignore[no-untyped-def]
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    def request_stop(self) -> None:
        """First call: finish the games in progress, upload, exit. Second: exit now."""
        self._signals += 1
        if self._signals == 1:
            log.info("stopping: finishing %d games in progress, then uploading "
                     "(again to quit at once; finished games stay spooled)",
                     self.counters.games_started - self.counters.games_finished)
            self.stopping.set()
        elif self._main is not None:
            log.info("quitting now; finished games stay in the spool for the next start")
            self._main.cancel()

    # -- main --------------------------------------------------------------------------------

    async def run(self, install_signals: bool = True) -> int:
        self._main = asyncio.current_task()  # type: ignore[assignment]
        loop = asyncio.get_running_loop()
        if install_signals:
            for sig in (signal.SIGINT, signal.SIGTERM):
                with contextlib.suppress(NotImplementedError, RuntimeError):
                    loop.add_signal_handler(sig, self.request_stop)
        self.channel = make_channel(self.cfg.coordinator, token=self.cfg.token)
        self.stub = coordinator_pb2_grpc.CoordinatorStub(self.channel)
        self.evaluators = Evaluators(self.cfg, self.cache)
        self.counters.spooled = self.spool.count()
        if self.counters.spooled:
            log.info("%d games from an earlier run wait in the spool", self.counters.spooled)
        players: list[asyncio.Future[None]] = []
        try:
            await self._register()
            if self.stopping.is_set() and not self.worker_id:
                return 0
            self._spawn(self._watch_models())
            self._spawn(self._heartbeats())
            self._spawn(self._status())
            uploader = asyncio.ensure_future(self._uploader())
            slots = [asyncio.ensure_future(self._slot(i)) for i in range(self.cfg.parallel_games)]
            playing = asyncio.gather(*slots)
            players.extend([uploader, playing])  # cancelling the gather cancels the slots
            await asyncio.wait({playing, uploader}, return_when=asyncio.FIRST_COMPLETED)
            if uploader.done():
                uploader.result()  # a fatal error (e.g. token revoked): no use playing on
            await playing
            self._slots_done = True
            self._upload_wake.set()
            await uploader
            self._print_status(final=True)
            return 0
        except FatalError as exc:
            log.error("%s", exc)
            return 2
        except asyncio.CancelledError:
            return 130
        finally:
            # Slots and the uploader too (a second Ctrl-C, a fatal error): nothing of this run
            # may go on after run() returns. Finished games are on disk already.
            for t in players:
                t.cancel()
            await asyncio.gather(*players, return_exceptions=True)
            for t in list(self._background):
                t.cancel()
            await asyncio.gather(*self._background, return_exceptions=True)
            if self.evaluators is not None:
                await self.evaluators.close()
            if self.channel is not None:
                await self.channel.close()
            if install_signals:
                for sig in (signal.SIGINT, signal.SIGTERM):
                    with contextlib.suppress(NotImplementedError, RuntimeError):
                        loop.remove_signal_handler(sig)

    # -- registration and tasks --------------------------------------------------------------

    async def _register(self) -> None:
        assert self.stub is not None
        id_file = Path(self.cfg.work_dir) / "worker_id"
        previous = id_file.read_text().strip() if id_file.exists() else ""
        backoff = self._backoff()
        while not self.stopping.is_set():
            try:
                resp = await self.stub.Register(coordinator_pb2.RegisterRequest(
                    username=self.cfg.username, hostname=self.cfg.hostname, version=VERSION,
                    parallel_games=self.cfg.parallel_games, previous_worker_id=previous),
                    timeout=10)
            except grpc.aio.AioRpcError as exc:
                _check_fatal(exc)
                self.coord_outage.failed(exc)
                if await self._sleep(backoff.next_delay()):
                    return
                continue
            self.coord_outage.ok()
            self.worker_id = resp.worker_id
            self.settings = resp.settings
            self.heartbeat_s = resp.heartbeat_interval_s or 30
            self.games_per_batch = (self.cfg.games_per_batch or resp.settings.games_per_batch
                                    or 25)
            if resp.worker_id != previous:
                id_file.parent.mkdir(parents=True, exist_ok=True)
                atomic_write_bytes(id_file, resp.worker_id.encode())
            log.info("registered as %s (%d games at once, uploads of %d games)",
                     self.worker_id, self.cfg.parallel_games, self.games_per_batch)
            return

    def _selfplay_config(self, task: coordinator_pb2.Task) -> SelfPlayConfig:
        visits = self.cfg.visits or task.visits or 800
        return SelfPlayConfig.from_settings(
            self.settings, visits, search=SearchConfig(leaves_per_batch=self.cfg.leaves_per_batch),
            max_game_moves=task.max_moves)

    def invalidate_selfplay(self, model: str) -> None:
        """A new release: the next games start with it (games in progress finish as they are)."""
        t = self._task
        if t is not None and t.WhichOneof("kind") == "selfplay" and t.selfplay.model != model:
            self._task = None

    async def _next_job(self) -> Job | None:
        assert self.stub is not None
        async with self._task_lock:
            backoff = self._backoff()
            while not self.stopping.is_set():
                t = self._task
                if t is not None and self._task_left > 0:
                    self._task_left -= 1
                    self._task_issued += 1
                    return Job(t, self._task_issued - 1)
                try:
                    t = await self.stub.GetTask(
                        coordinator_pb2.GetTaskRequest(worker_id=self.worker_id), timeout=10)
                except grpc.aio.AioRpcError as exc:
                    _check_fatal(exc)
                    self.coord_outage.failed(exc)
                    if self._task is not None and self._task.WhichOneof("kind") == "selfplay":
                        # Keep playing the last self-play task while the coordinator is away.
                        self._task_left = max(1, self.games_per_batch)
                        continue
                    if await self._sleep(backoff.next_delay()):
                        return None
                    continue
                self.coord_outage.ok()
                kind = t.WhichOneof("kind")
                if kind == "retry_after_s" or kind is None:
                    log.debug("no model yet; asking again in %d s", t.retry_after_s)
                    if await self._sleep(max(0.2, min(float(t.retry_after_s or 5), 60.0))):
                        return None
                    continue
                games = t.selfplay.games if kind == "selfplay" else t.match.games
                self._task, self._task_left, self._task_issued = t, max(1, games), 0
                if kind == "match":
                    log.info("gating match %s: %s vs %s, %d games", t.task_id,
                             t.match.candidate_model, t.match.reference_model, games)
            return None

    # -- playing -----------------------------------------------------------------------------

    async def _slot(self, index: int) -> None:
        backoff = self._backoff()
        while not self.stopping.is_set():
            if self.cfg.games and self.counters.games_started >= self.cfg.games:
                return
            while (self.counters.spooled >= self.cfg.max_spooled_games
                   and not self.stopping.is_set()):
                await self._sleep(1.0)  # the spool is full: wait for uploads
            job = await self._next_job()
            if job is None:
                return
            if self.cfg.games and self.counters.games_started >= self.cfg.games:
                return
            self.counters.games_started += 1
            try:
                await self._play(job)
            except (EvaluationError, ModelDownloadError, grpc.aio.AioRpcError, OSError) as exc:
                self.counters.games_started -= 1
                if _model_missing(exc):
                    # Neither service is down: the task names a model nobody has. Its other
                    # games would fail the same way; ask for another task.
                    log.error("task %s cannot be played (%s); asking for another",
                              job.task.task_id, _describe(exc))
                    if self._task is job.task:
                        self._task = None
                    await self._sleep(backoff.next_delay())
                    continue
                if isinstance(exc, grpc.aio.AioRpcError):
                    _check_fatal(exc)
                    self.coord_outage.failed(exc)
                else:
                    self.infer_outage.failed(exc)
                await self._sleep(backoff.next_delay())
                continue
            except Exception:
                # A bug hit by one game must not stop a worker that runs unattended for days:
                # log it in full, drop that game, and slow down in case it repeats.
                self.counters.games_started -= 1
                self.counters.games_failed += 1
                log.exception("a game failed and was dropped (%d so far)", self.counters.games_failed)
                await self._sleep(backoff.next_delay())
                continue
            except BaseException:
                self.counters.games_started -= 1
                raise
            self.infer_outage.ok()
            backoff.reset()

    async def _play(self, job: Job) -> None:
        t = job.task
        names = ([t.selfplay.model] if t.WhichOneof("kind") == "selfplay"
                 else [t.match.candidate_model, t.match.reference_model])
        self._models_in_use.update(names)
        try:
            await self._play_game(job)
        finally:
            self._models_in_use.subtract(names)
            self._models_in_use += Counter()  # drops the zero counts
            self._release_models()

    def _release_models(self) -> None:
        """Unload in-process models no game plays and no task or release still names (days of
        releases would otherwise keep every model's session in memory)."""
        if self.evaluators is None or not self.evaluators.is_local:
            return
        keep = set(self._models_in_use) | {self.latest_model}
        t = self._task
        if t is not None:
            keep |= ({t.selfplay.model} if t.WhichOneof("kind") == "selfplay"
                     else {t.match.candidate_model, t.match.reference_model})
        self.evaluators.release(keep)

    async def _play_game(self, job: Job) -> None:
        assert self.evaluators is not None and self.stub is not None
        t = job.task
        rules = Rules.from_proto(t.rules)
        cfg = self._selfplay_config(t)
        seed = self.rng.getrandbits(62)
        if t.WhichOneof("kind") == "selfplay":
            model = t.selfplay.model
            await self.evaluators.prepare(self.stub, model)
            self.counters.current_model = model
            ev, arg = self.evaluators.get(model)
            ev = _WaitsOutOutages(ev, self)
            played = await play_selfplay_game(
                ev, t.board_size, rules, t.komi, cfg, model=arg, model_name=model,
                task_id=t.task_id, worker_id=self.worker_id, stats=self.counters.search,
                seed=seed)
            await self._finished(played)
            by_model = self.counters.games_by_model
            by_model[model] = by_model.get(model, 0) + 1
            return
        m = t.match
        for name in (m.candidate_model, m.reference_model):
            await self.evaluators.prepare(self.stub, name)
        candidate_black = job.index % 2 == 0
        black, white = ((m.candidate_model, m.reference_model) if candidate_black
                        else (m.reference_model, m.candidate_model))
        bev, barg = self.evaluators.get(black)
        wev, warg = self.evaluators.get(white)
        bev, wev = _WaitsOutOutages(bev, self), _WaitsOutOutages(wev, self)
        played = await play_match_game(
            bev, wev, t.board_size, rules, t.komi, cfg, black_model=barg, white_model=warg,
            black_name=black, white_name=white, task_id=t.task_id, worker_id=self.worker_id,
            stats=self.counters.search, seed=seed)
        self.counters.games_finished += 1
        self.counters.match_games += 1
        game = coordinator_pb2.MatchGame(
            game_id=played.record.game_id,
            candidate_color=common_pb2.COLOR_BLACK if candidate_black else common_pb2.COLOR_WHITE,
            winner=played.record.result.winner, score=played.record.result.score,
            moves=len(played.record.moves))
        self._spawn(self._report_match(t, game))

    async def _finished(self, played: PlayedGame) -> None:
        await asyncio.to_thread(self.spool.put, played.record)
        self.counters.games_finished += 1
        self.counters.spooled += 1
        if played.would_resign:
            self.counters.playouts_checked += 1
            self.counters.false_resignations += int(played.false_resignation)
        if self.counters.spooled >= self.games_per_batch:
            self._upload_wake.set()

    async def _report_match(self, t: coordinator_pb2.Task, game: coordinator_pb2.MatchGame
                            ) -> None:
        assert self.stub is not None
        req = coordinator_pb2.ReportMatchResultRequest(
            task_id=t.task_id, worker_id=self.worker_id, candidate_model=t.match.candidate_model,
            reference_model=t.match.reference_model, games=[game])
        backoff = self._backoff()
        while True:
            try:
                resp = await self.stub.ReportMatchResult(req, timeout=10)
            except grpc.aio.AioRpcError as exc:
                if exc.code() not in FATAL_CODES and exc.code() != grpc.StatusCode.INVALID_ARGUMENT:
                    self.coord_outage.failed(exc)
                    await asyncio.sleep(backoff.next_delay())
                    continue
                log.error("match result for %s refused: %s", t.task_id, _describe(exc))
                return
            self.coord_outage.ok()
            self.decisions[t.task_id] = resp.decision
            log.info("match %s: reported game %s, decision %s", t.task_id, game.game_id,
                     resp.decision)
            return

    # -- uploading ---------------------------------------------------------------------------

    async def _uploader(self) -> None:
        backoff = self._backoff()
        last = time.monotonic()
        while True:
            finishing = self._slots_done
            if not finishing:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._upload_wake.wait(), 1.0)
                self._upload_wake.clear()
            pending = await asyncio.to_thread(self.spool.pending_ids)
            self.counters.spooled = len(pending)
            if not pending:
                if self._slots_done:
                    if self._match_reports_pending():
                        if self._stop_wait_over():
                            log.warning("coordinator still unreachable; match results not "
                                        "reported")
                            return
                        await asyncio.sleep(0.2)
                        continue
                    return
                continue
            due = (len(pending) >= self.games_per_batch or self._slots_done
                   or self.stopping.is_set()
                   or time.monotonic() - last >= self.cfg.upload_interval_s)
            if not due:
                continue
            try:
                await self._upload(pending[: self.games_per_batch])
            except Exception as exc:
                if isinstance(exc, grpc.aio.AioRpcError):
                    _check_fatal(exc)
                    self.coord_outage.failed(exc)
                else:
                    # A disk error or a bug must not end the uploads for the rest of the run
                    # (the games would pile up in the spool with nobody sending them).
                    log.exception("uploading spooled games failed; retrying")
                if self._stop_wait_over():
                    log.warning("coordinator still unreachable; %d games stay in the "
                                "spool for the next start", len(pending))
                    return
                delay = backoff.next_delay()
                await asyncio.sleep(delay if not self._slots_done else min(delay, 5.0))
                continue
            self.coord_outage.ok()
            backoff.reset()
            last = time.monotonic()

    def _stop_wait_over(self) -> bool:
        """Stopped by a signal with the coordinator away: True once the uploads have been
        tried for ``stop_upload_wait_s`` (the spooled games wait for the next start)."""
        if not self.stopping.is_set() or self.cfg.games:
            return False
        if self._give_up_at is None:
            self._give_up_at = time.monotonic() + self.stop_upload_wait_s
        return time.monotonic() > self._give_up_at

    def _match_reports_pending(self) -> bool:
        return any(not t.done() and getattr(t.get_coro(), "__name__", "") == "_report_match"
                   for t in self._background)

    async def _upload(self, ids: list[str]) -> None:
        assert self.stub is not None
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
                log.error("spooled file %s holds game id %r; moved to rejected/", gid,
                          rec.game_id)
                await asyncio.to_thread(self.spool.reject, gid, "corrupt_spool",
                                        f"file {gid}.game holds game id {rec.game_id!r}")
                continue
            records.append(rec)
        if not records:
            return
        messages = _pack(records)

        async def requests():  # type: ignore[no-untyped-def]
            for payload, count in messages:
                yield coordinator_pb2.UploadGamesRequest(games_zstd=payload, game_count=count)

        resp = await self.stub.UploadGames(requests(), timeout=120)
        await asyncio.to_thread(self._apply_acks, resp, {r.game_id for r in records})
        self.counters.uploads += 1
        self.counters.spooled = self.spool.count()
        log.info("uploaded %d games: %d accepted, %d duplicates, %d rejected", len(records),
                 resp.accepted, resp.duplicates, resp.rejected)

    def _apply_acks(self, resp: coordinator_pb2.UploadGamesResponse, sent: set[str]) -> None:
        for ack in resp.acks:
            if ack.game_id not in sent:  # never act on a file this upload did not send
                log.warning("ack for game %r, which was not in the upload; ignored", ack.game_id)
                continue
            if ack.status in (coordinator_pb2.GAME_STATUS_ACCEPTED,
                              coordinator_pb2.GAME_STATUS_DUPLICATE):
                self.spool.acknowledge(ack.game_id)
                self.counters.games_uploaded += 1
            elif ack.status == coordinator_pb2.GAME_STATUS_REJECTED:
                log.warning("game %s rejected: %s (%s)", ack.game_id, ack.reason, ack.detail)
                self.spool.reject(ack.game_id, ack.reason, ack.detail)
                self.counters.games_rejected += 1

    # -- models, heartbeats, status ----------------------------------------------------------

    async def _watch_models(self) -> None:
        assert self.stub is not None
        backoff = self._backoff()
        while True:
            try:
                call = self.stub.WatchModels(
                    coordinator_pb2.WatchModelsRequest(known_model=self.latest_model))
                async for release in call:
                    self.coord_outage.ok()
                    backoff.reset()
                    self._on_release(release.model)
            except grpc.aio.AioRpcError as exc:
                if exc.code() == grpc.StatusCode.CANCELLED:
                    return
                if exc.code() in FATAL_CODES:
                    log.error("model releases: %s", _describe(exc))
                    return
                self.coord_outage.failed(exc)
            await asyncio.sleep(backoff.next_delay())

    def _on_release(self, info: coordinator_pb2.ModelInfo) -> None:
        if not info.name or info.name == self.latest_model:
            return
        log.info("model released: %s", info.name)
        self.latest_model = info.name
        self.invalidate_selfplay(info.name)
        self._release_models()
        if self.evaluators is not None and self.evaluators.is_local:
            self._spawn(self._prefetch(info))

    async def _prefetch(self, info: coordinator_pb2.ModelInfo) -> None:
        assert self.evaluators is not None and self.stub is not None
        try:
            await self.cache.ensure(self.stub, info.name, info.sha256)
            await self.evaluators.prepare(self.stub, info.name)
        except Exception as exc:  # the game that needs it retries the download
            log.warning("prefetching %s failed: %s", info.name, _describe(exc))

    async def _heartbeats(self) -> None:
        assert self.stub is not None
        while True:
            await asyncio.sleep(self.heartbeat_s)
            try:
                resp = await self.stub.Heartbeat(coordinator_pb2.HeartbeatRequest(
                    worker_id=self.worker_id, stats=to_proto(self.counters, self.meter)),
                    timeout=10)
            except grpc.aio.AioRpcError as exc:
                if exc.code() == grpc.StatusCode.NOT_FOUND:
                    # The coordinator forgot this worker (its database was restored or
                    # reset): register again, or every heartbeat from now on is refused.
                    self.coord_outage.ok()
                    log.warning("coordinator does not know worker %s; registering again",
                                self.worker_id)
                    await self._register()
                    continue
                self.coord_outage.failed(exc)
                continue
            self.coord_outage.ok()
            if resp.latest_model and resp.latest_model != self.latest_model:
                self.invalidate_selfplay(resp.latest_model)

    async def _status(self) -> None:
        assert self.evaluators is not None
        last_log = 0.0
        while True:
            self.meter.sample(self.counters)
            mb = await self.evaluators.mean_batch()
            if mb:
                self.counters.mean_batch = mb
            now = time.monotonic()
            if now - last_log >= 60:
                log.info("%s", status_line(self.counters, self.meter))
                last_log = now
            self._print_status()
            await asyncio.sleep(self.cfg.status_interval_s)

    def _print_status(self, final: bool = False) -> None:
        if self.cfg.quiet:
            if final:
                log.info("final: %s", status_line(self.counters, self.meter))
            return
        print(("final: " if final else "") + status_line(self.counters, self.meter),
              file=sys.stderr, flush=True)


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
