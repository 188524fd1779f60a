"""What happens around each game the runner plays: whether another may start, where a finished
one goes, and what a failed one means. The worker's :class:`~kgrpc.worker.runner.JobFeed` and
:class:`~kgrpc.worker.runner.GameSink` for its game runner.

* Starting: no new game once a stop is requested or ``--games`` games have started, and none
  while ``max_spooled_games`` finished games wait for upload.
* Finished: a self-play game is written to the spool (before anything else happens to it) and
  the uploader told; a gating game is reported to the match reporter, with its record (the
  coordinator keeps it as SGF).
* Failed: a task whose model nobody has (NOT_FOUND from the coordinator or the inference
  server) is given up, not retried game by game; a refused coordinator call (revoked token)
  ends the run; an outage is logged once per outage; anything else is a bug in one game,
  logged in full and counted, and the worker plays on.
"""

from __future__ import annotations

import asyncio
import logging

import grpc

from kgrpc.evaluator import EvaluationError
from kgrpc.mcts.selfplay import PlayedGame
from kgrpc.net import FatalError, Outage, describe, is_fatal, is_not_found
from kgrpc.v1 import common_pb2, coordinator_pb2
from kgrpc.worker.config import WorkerConfig
from kgrpc.worker.lifecycle import Pause, Stop
from kgrpc.worker.matches import MatchReporter
from kgrpc.worker.models import ModelDownloadError
from kgrpc.worker.source import Job, TaskSource
from kgrpc.worker.spool import Spool
from kgrpc.worker.status import WorkerCounters
from kgrpc.worker.uploader import Uploader

log = logging.getLogger(__name__)

# Errors of the services a game depends on (coordinator downloads, inference), and of the disk.
SERVICE_ERRORS = (EvaluationError, ModelDownloadError, grpc.aio.AioRpcError, OSError)


class Games:
    def __init__(
        self,
        cfg: WorkerConfig,
        source: TaskSource,
        spool: Spool,
        uploader: Uploader,
        reporter: MatchReporter,
        counters: WorkerCounters,
        stop: Stop,
        *,
        coordinator_outage: Outage,
        inference_outage: Outage,
        pause: Pause | None = None,
    ) -> None:
        self.cfg = cfg
        self.pause = pause
        self.source = source
        self.spool = spool
        self.uploader = uploader
        self.reporter = reporter
        self.counters = counters
        self.stop = stop
        self.coordinator_outage = coordinator_outage
        self.inference_outage = inference_outage

    def _limit_reached(self) -> bool:
        return bool(self.cfg.games) and self.counters.games_started >= self.cfg.games

    async def next_job(self) -> Job | None:
        if self.stop.is_set() or self._limit_reached():
            return None
        while self.counters.spooled >= self.cfg.max_spooled_games and not self.stop.is_set():
            await self.stop.sleep(1.0)  # the spool is full: wait for uploads
        if self.pause is not None:
            await self.pause.wait()  # paused: no new game
            if self.stop.is_set():
                return None
        job = await self.source.next_job()
        if job is None or self._limit_reached():
            return None
        self.counters.games_started += 1
        return job

    async def finished(self, job: Job, game: PlayedGame) -> None:
        c = self.counters
        record = game.record
        if job.is_match:
            c.games_finished += 1
            c.match_games += 1
            self.reporter.submit(
                job,
                coordinator_pb2.MatchGame(
                    game_id=record.game_id,
                    candidate_color=(
                        common_pb2.COLOR_BLACK if job.candidate_black else common_pb2.COLOR_WHITE
                    ),
                    winner=record.result.winner,
                    score=record.result.score,
                    moves=len(record.moves),
                    record=record,
                ),
            )
        else:
            await asyncio.to_thread(self.spool.put, record)
            c.games_finished += 1
            c.spooled += 1
            if game.would_resign:
                c.playouts_checked += 1
                c.false_resignations += int(game.false_resignation)
            model = job.models[0]
            c.games_by_model[model] = c.games_by_model.get(model, 0) + 1
            self.uploader.spooled(c.spooled)
        self.inference_outage.ok()

    def failed(self, job: Job, exc: BaseException) -> None:
        self.counters.games_started -= 1
        if not isinstance(exc, Exception):
            return  # cancelled: the worker is quitting
        if isinstance(exc, SERVICE_ERRORS):
            if is_not_found(exc):
                # Neither service is down: the task names a model nobody has. Its other
                # games would fail the same way; ask for another task.
                log.error(
                    "task %s cannot be played (%s); asking for another",
                    job.task.task_id,
                    describe(exc),
                )
                self.source.abandon(job.task)
            elif isinstance(exc, grpc.aio.AioRpcError):
                if is_fatal(exc):
                    raise FatalError(f"coordinator refused: {describe(exc)}") from exc
                self.coordinator_outage.failed(exc)
            else:
                self.inference_outage.failed(exc)
            return
        self.counters.games_failed += 1
        log.error(
            "a game failed and was dropped (%d so far)", self.counters.games_failed, exc_info=exc
        )
