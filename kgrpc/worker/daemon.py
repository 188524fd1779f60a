"""The worker: register, get tasks, play games in parallel, spool them, upload them in batches,
follow model releases, play gating matches, heartbeat. :class:`Worker` composes the parts
that do each of these and starts and stops them:

=====================  ===========================================================
``link``               :class:`~kgrpc.worker.link.CoordinatorLink`: channel, stub, retry policy
``source``             :class:`~kgrpc.worker.source.TaskSource`: Register, GetTask -> jobs
``runner``             :func:`~kgrpc.worker.runner.make_runner`: plays the jobs (native/Python)
``games``              :class:`~kgrpc.worker.games.Games`: limits; finished/failed games
``uploader``           :class:`~kgrpc.worker.uploader.Uploader`: spool -> UploadGames -> acks
``models``             :class:`~kgrpc.worker.follower.ModelFollower`: releases, model cache
``reporter``           :class:`~kgrpc.worker.matches.MatchReporter`: ReportMatchResult
``heartbeat``          :class:`~kgrpc.worker.heartbeat.Heartbeat`
``status``             :class:`~kgrpc.worker.status.StatusReporter`: the status line
``tasks``, ``stop``    :mod:`kgrpc.worker.lifecycle`: the tasks started, the stop request
=====================  ===========================================================

Durability: a finished game is written to the spool before anything else happens to it and
is deleted only after the coordinator acknowledged it (see :mod:`kgrpc.worker.spool`), so a
worker killed at any moment re-sends exactly the unacknowledged games when it restarts.
Outages: every call to the coordinator is retried with growing, jittered waits; the log says
once that a service is down and once that it is back (:mod:`kgrpc.net.retry`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import signal

from kgrpc.net import FatalError, Outage
from kgrpc.worker.config import WorkerConfig
from kgrpc.worker.follower import ModelFollower
from kgrpc.worker.games import Games
from kgrpc.worker.heartbeat import Heartbeat
from kgrpc.worker.lifecycle import (
    Pause,
    Stop,
    TaskRegistry,
    remove_pid_file,
    write_pid_file,
)
from kgrpc.worker.link import CoordinatorLink
from kgrpc.worker.matches import MatchReporter
from kgrpc.worker.models import ModelCache
from kgrpc.worker.runner import make_runner
from kgrpc.worker.source import TaskSource
from kgrpc.worker.spool import Spool
from kgrpc.worker.status import RateMeter, StatusReporter, WorkerCounters
from kgrpc.worker.uploader import Uploader

log = logging.getLogger("kgrpc.worker")


class Worker:
    def __init__(self, cfg: WorkerConfig) -> None:
        cfg.check()
        self.cfg = cfg
        self.counters = WorkerCounters()
        self.meter = RateMeter()
        self.rng = random.Random(cfg.seed)
        self.spool = Spool(cfg.spool_path)
        # A --games run counts games only once acknowledged: it waits for the coordinator.
        self.stop = Stop(final_wait_s=30.0, bounded=not cfg.games)
        self.tasks = TaskRegistry("worker")
        self.pausing = Pause(self.stop)
        self.coord_outage = Outage(
            f"coordinator {cfg.coordinator}", logger=log, meanwhile=self._meanwhile_offline
        )
        self.infer_outage = Outage(
            "inference" if cfg.inference_addresses else "in-process inference",
            logger=log,
            meanwhile="games in progress wait",
        )
        self.link = CoordinatorLink(cfg, self.coord_outage, self.stop.event, self.rng)
        self.source = TaskSource(cfg, self.link, self.stop)
        self.models = ModelFollower(
            cfg,
            self.link,
            self.source,
            ModelCache(cfg.model_path, keep=cfg.keep_models),
            inference_outage=self.infer_outage,
            stop=self.stop,
            tasks=self.tasks,
            counters=self.counters,
            rng=self.rng,
            pause=self.pausing,
        )
        self.uploader = Uploader(
            cfg,
            self.spool,
            self.link,
            self.counters,
            self.stop,
            lambda: self.source.games_per_batch,
        )
        self.reporter = MatchReporter(self.link, self.tasks, on_superseded=self.source.abandon)
        self.games = Games(
            cfg,
            self.source,
            self.spool,
            self.uploader,
            self.reporter,
            self.counters,
            self.stop,
            coordinator_outage=self.coord_outage,
            inference_outage=self.infer_outage,
            pause=self.pausing,
        )
        self.runner = make_runner(
            self.models,
            stats=self.counters.search,
            rng=self.rng,
            backoff=self.link.policy.backoff,
            stop=self.stop,
        )
        self.heartbeat = Heartbeat(self.link, self.source, self.models, self.counters, self.meter)
        self.status = StatusReporter(
            self.counters,
            self.meter,
            interval_s=cfg.status_interval_s,
            quiet=cfg.quiet,
            mean_batch=self.models.mean_batch,
        )
        self._signals = 0
        self._main: asyncio.Task[int] | None = None

    def _meanwhile_offline(self) -> str:
        """What the worker does while the coordinator is away (its outage's first log line)."""
        if self.source.can_play_offline:
            return "games keep being spooled"
        return "nothing to play until it answers (no self-play task yet)"

    def pause(self) -> None:
        """No new game, and the searches wait at their next evaluation (SIGUSR1)."""
        if not self.pausing.paused:
            self.pausing.pause()
            self.counters.paused = True
            log.info(
                "paused: %d games in progress wait, none is lost (kgrpc-worker resume, or "
                "SIGUSR2, to go on)",
                self.counters.games_started - self.counters.games_finished,
            )
            self.status.show()

    def resume(self) -> None:
        """Go on after :meth:`pause` (SIGUSR2)."""
        if self.pausing.paused:
            self.pausing.resume()
            self.counters.paused = False
            log.info("resumed")
            self.status.show()

    def request_stop(self) -> None:
        """First call: finish the games in progress, upload, exit. Second: exit now."""
        self._signals += 1
        if self._signals == 1:
            log.info(
                "stopping: finishing %d games in progress, then uploading "
                "(again to quit at once; finished games stay spooled)",
                self.counters.games_started - self.counters.games_finished,
            )
            self.stop.request()
        elif self._main is not None:
            log.info("quitting now; finished games stay in the spool for the next start")
            self._main.cancel()

    async def run(self, install_signals: bool = True) -> int:
        """Play until stopped (or ``--games`` games are acknowledged). Returns the exit
        status: 0 done, 2 refused by the coordinator (e.g. a revoked token), 130 quit."""
        self._main = asyncio.current_task()  # type: ignore[assignment]
        loop = asyncio.get_running_loop()
        handlers = {
            signal.SIGINT: self.request_stop,
            signal.SIGTERM: self.request_stop,
            signal.SIGUSR1: self.pause,
            signal.SIGUSR2: self.resume,
        }
        if install_signals:
            for sig, handler in handlers.items():
                with contextlib.suppress(NotImplementedError, RuntimeError):
                    loop.add_signal_handler(sig, handler)
            write_pid_file(self.cfg.work_dir)
        self.link.open()
        self.models.open()
        self.counters.spooled = self.spool.count()
        if self.counters.spooled:
            log.info("%d games from an earlier run wait in the spool", self.counters.spooled)
        try:
            await self.source.register()
            if self.stop.is_set() and not self.source.worker_id:
                return 0
            self.tasks.spawn("models", self.models.run())
            self.tasks.spawn("heartbeat", self.heartbeat.run())
            self.tasks.spawn("status", self.status.run())
            uploader = self.tasks.spawn("uploader", self.uploader.run())
            playing = self.tasks.spawn(
                "games", self.runner.run(self.games, self.games, self.cfg.parallel_games)
            )
            await asyncio.wait({playing, uploader}, return_when=asyncio.FIRST_COMPLETED)
            if uploader.done():
                uploader.result()  # a fatal error (e.g. token revoked): no use playing on
            await playing
            self.uploader.finish()
            await uploader
            await self.reporter.drain(self.stop.final_wait_over)
            self.status.show(final=True)
            return 0
        except FatalError as exc:
            log.error("%s", exc)
            return 2
        except asyncio.CancelledError:
            return 130
        finally:
            # Nothing this run started may go on after run() returns (a second Ctrl-C, a
            # fatal error). Finished games are on disk already.
            await self.tasks.cancel_all()
            await self.models.close()
            await self.link.close()
            if install_signals:
                remove_pid_file(self.cfg.work_dir)
                for sig in handlers:
                    with contextlib.suppress(NotImplementedError, RuntimeError):
                        loop.remove_signal_handler(sig)
