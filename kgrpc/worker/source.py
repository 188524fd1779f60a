"""Where the worker's games come from: registration (``Register``) and the task queue
(``GetTask``), handed out one game (:class:`Job`) at a time.

A task is a number of self-play games with one model, or a chunk of a gating match between two
models. Each game of a self-play task with a ``komi_range`` gets a komi drawn from the range's
values (:func:`game_komi`); every other game the task's ``komi``. Every record names its task
(``task_id``). While the coordinator is away, the last self-play task is played again (games
keep being spooled under it: the coordinator accepts them within its task retention); a new
model release ends the current self-play task early, so that the next games use it; a task
whose model nobody has is given up.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import grpc

from kgrpc import __version__
from kgrpc.durable import atomic_write_bytes
from kgrpc.mcts.config import SearchConfig, SelfPlayConfig
from kgrpc.net import is_fatal, is_tls_mismatch
from kgrpc.protocol import is_version_too_old
from kgrpc.records.terms import komi_values
from kgrpc.v1 import coordinator_pb2
from kgrpc.worker.config import WorkerConfig
from kgrpc.worker.lifecycle import Stop
from kgrpc.worker.link import CoordinatorLink

log = logging.getLogger(__name__)
# What Register names (a coordinator may refuse versions below its min_worker_version).
VERSION = f"kgrpc-worker/{__version__}"
# A first Register failing this often in a row because client and coordinator disagree about
# TLS ends the worker with the hint (kgrpc.net.handshake) instead of retrying for ever.
TLS_MISMATCH_TRIES = 3


def _too_old(exc: BaseException) -> bool:
    """Register refused this worker's version: retrying cannot help (its message says what to
    install)."""
    return isinstance(exc, grpc.aio.AioRpcError) and is_version_too_old(exc)


def task_models(task: coordinator_pb2.Task) -> tuple[str, ...]:
    """The models a task plays: its self-play model, or the match's candidate and reference."""
    if task.WhichOneof("kind") == "selfplay":
        return (task.selfplay.model,)
    return (task.match.candidate_model, task.match.reference_model)


def game_komi(task: coordinator_pb2.Task, rng: random.Random) -> float:
    """The komi of one game of ``task``: drawn uniformly from the values of its komi range
    (``records.komi_values``, the grid the coordinator accepts) for a self-play task that
    has one, else the task's komi."""
    r = task.komi_range
    if task.WhichOneof("kind") != "selfplay" or not task.HasField("komi_range") or r.step <= 0:
        return float(task.komi)
    return rng.choice(komi_values(r.low, r.high, r.step))


@dataclass(frozen=True)
class Job:
    """One game to play: its task, its number within the task, how to search, who plays,
    and its komi (None: the task's)."""

    task: coordinator_pb2.Task
    index: int
    config: SelfPlayConfig
    worker_id: str
    komi: float | None = None

    @property
    def game_komi(self) -> float:
        return float(self.task.komi) if self.komi is None else self.komi

    @property
    def is_match(self) -> bool:
        return self.task.WhichOneof("kind") == "match"

    @property
    def candidate_black(self) -> bool:
        """Match games alternate colours: the candidate takes black in the even ones."""
        return self.index % 2 == 0

    @property
    def models(self) -> tuple[str, ...]:
        """The models in play order: ``(model,)`` for self-play, ``(black, white)`` for a match."""
        if not self.is_match:
            return (self.task.selfplay.model,)
        m = self.task.match
        if self.candidate_black:
            return (m.candidate_model, m.reference_model)
        return (m.reference_model, m.candidate_model)


class TaskSource:
    def __init__(self, cfg: WorkerConfig, link: CoordinatorLink, stop: Stop) -> None:
        self.cfg = cfg
        self.link = link
        self.stop = stop
        self.worker_id = ""
        self.settings = coordinator_pb2.SelfPlaySettings()
        self.heartbeat_s = 30
        self.games_per_batch = 25
        self._task: coordinator_pb2.Task | None = None
        self._left = 0  # games of the task not handed out yet
        self._issued = 0
        self._lock = asyncio.Lock()
        self._rng = random.Random(cfg.seed)  # each game's komi (game_komi)

    async def register(self) -> None:
        """Register (again), retrying until the coordinator answers or a stop is requested;
        keeps the worker id across restarts in ``work_dir/worker_id``."""
        id_file = Path(self.cfg.work_dir) / "worker_id"
        previous = id_file.read_text().strip() if id_file.exists() else ""
        req = coordinator_pb2.RegisterRequest(
            username=self.cfg.username,
            hostname=self.cfg.hostname,
            version=VERSION,
            parallel_games=self.cfg.parallel_games,
            previous_worker_id=previous,
        )
        if self.stop.is_set():
            return
        try:
            resp = await self.link.call(
                partial(self.link.stub.Register, req, timeout=10),
                what="Register",
                fatal=self._register_fatal(),
            )
        except grpc.aio.AioRpcError:
            return  # stopped while the coordinator was away
        self.worker_id = resp.worker_id
        self.settings = resp.settings
        self.heartbeat_s = resp.heartbeat_interval_s or 30
        self.games_per_batch = self.cfg.games_per_batch or resp.settings.games_per_batch or 25
        if resp.worker_id != previous:
            id_file.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_bytes(id_file, resp.worker_id.encode())
        log.info(
            "registered as %s (%d games at once, uploads of %d games)",
            self.worker_id,
            self.cfg.parallel_games,
            self.games_per_batch,
        )

    def _register_fatal(self) -> Callable[[BaseException], bool]:
        """The errors that end the worker at Register: the fatal codes, and, before the first
        registration succeeded, :data:`TLS_MISMATCH_TRIES` TLS mismatches in a row (the
        coordinator serves TLS and --tls-ca is missing, or the reverse: a settings error that
        no retry mends; later, a coordinator restarted with other TLS settings is an outage
        like another, logged once with the hint)."""
        first = not self.worker_id
        seen = 0

        def fatal(exc: BaseException) -> bool:
            nonlocal seen
            if is_fatal(exc) or _too_old(exc):
                return True
            seen = seen + 1 if first and is_tls_mismatch(exc) else 0
            return seen >= TLS_MISMATCH_TRIES

        return fatal

    async def next_job(self) -> Job | None:
        """The next game to play; None once a stop is requested."""
        async with self._lock:
            while not self.stop.is_set():
                t = self._task
                if t is not None and self._left > 0:
                    self._left -= 1
                    self._issued += 1
                    komi = game_komi(t, self._rng)
                    return Job(t, self._issued - 1, self._config(t), self.worker_id, komi)
                # Coordinator away: keep playing the last self-play task (one try, no wait).
                fallback = t is not None and t.WhichOneof("kind") == "selfplay"
                req = coordinator_pb2.GetTaskRequest(worker_id=self.worker_id)
                try:
                    t = await self.link.call(
                        partial(self.link.stub.GetTask, req, timeout=10),
                        what="GetTask",
                        attempts=1 if fallback else None,
                    )
                except grpc.aio.AioRpcError:
                    if self._task is not None:
                        self._left = max(1, self.games_per_batch)
                    continue
                kind = t.WhichOneof("kind")
                if kind == "retry_after_s" or kind is None:
                    log.debug("no model yet; asking again in %d s", t.retry_after_s)
                    if await self.stop.sleep(max(0.2, min(float(t.retry_after_s or 5), 60.0))):
                        return None
                    continue
                games = t.selfplay.games if kind == "selfplay" else t.match.games
                self._task, self._left, self._issued = t, max(1, games), 0
                if kind == "match":
                    log.info(
                        "gating match %s: %s vs %s, %d games",
                        t.task_id,
                        t.match.candidate_model,
                        t.match.reference_model,
                        games,
                    )
            return None

    @property
    def can_play_offline(self) -> bool:
        """Is there a self-play task to play again while the coordinator is away?"""
        t = self._task
        return t is not None and t.WhichOneof("kind") == "selfplay"

    def invalidate_selfplay(self, model: str) -> None:
        """A new release: the next games start with it (games in progress finish as they are)."""
        t = self._task
        if t is not None and t.WhichOneof("kind") == "selfplay" and t.selfplay.model != model:
            self._task = None

    def abandon(self, task: coordinator_pb2.Task) -> None:
        """``task`` cannot be played (its model is nowhere): hand out no more of its games."""
        if self._task is task:
            self._task = None

    def current_models(self) -> tuple[str, ...]:
        """The models of the task being handed out (none between tasks)."""
        return task_models(self._task) if self._task is not None else ()

    def _config(self, task: coordinator_pb2.Task) -> SelfPlayConfig:
        visits = self.cfg.visits or task.visits or 800
        return SelfPlayConfig.from_settings(
            self.settings,
            visits,
            search=SearchConfig(leaves_per_batch=self.cfg.leaves_per_batch),
            max_game_moves=task.max_moves,
        )
