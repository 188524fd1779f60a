"""The match reporter: sends the result of each gating game (``ReportMatchResult``) and keeps
it pending until the coordinator answered, retrying across outages and coordinator restarts.

Reports are kept in :attr:`MatchReporter.pending` (game id -> request) from submission until
answered or refused, so the worker knows what it still owes before it exits
(:meth:`MatchReporter.drain`). A report the coordinator refuses (a fatal code, or
INVALID_ARGUMENT) is logged and dropped: sending it again cannot change the answer. A report
answered "superseded" (:data:`kgrpc.protocol.MATCH_SUPERSEDED`: a release replaced the match's
reference) is dropped too, without an error, and ``on_superseded(task)`` stops the task's
remaining games.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from functools import partial

import grpc

from kgrpc.net import FatalError, describe
from kgrpc.protocol import is_match_superseded
from kgrpc.v1 import coordinator_pb2
from kgrpc.worker.lifecycle import TaskRegistry
from kgrpc.worker.link import CoordinatorLink
from kgrpc.worker.source import Job

log = logging.getLogger(__name__)


def _superseded(exc: BaseException) -> bool:
    return isinstance(exc, grpc.aio.AioRpcError) and is_match_superseded(exc)


def _worth_retrying(exc: BaseException) -> bool:
    return (
        isinstance(exc, grpc.aio.AioRpcError)
        and exc.code() != grpc.StatusCode.INVALID_ARGUMENT
        and not _superseded(exc)
    )


class MatchReporter:
    def __init__(
        self,
        link: CoordinatorLink,
        tasks: TaskRegistry,
        on_superseded: Callable[[coordinator_pb2.Task], None] | None = None,
    ) -> None:
        self.link = link
        self.tasks = tasks
        self.on_superseded = on_superseded
        self.pending: dict[str, coordinator_pb2.ReportMatchResultRequest] = {}
        self.decisions: dict[str, str] = {}  # match task id -> latest decision
        self._idle = asyncio.Event()
        self._idle.set()

    def submit(self, job: Job, game: coordinator_pb2.MatchGame) -> None:
        """Report ``game`` of match task ``job.task`` in the background until answered."""
        m = job.task.match
        req = coordinator_pb2.ReportMatchResultRequest(
            task_id=job.task.task_id,
            worker_id=job.worker_id,
            candidate_model=m.candidate_model,
            reference_model=m.reference_model,
            games=[game],
        )
        self.pending[game.game_id] = req
        self._idle.clear()
        self.tasks.spawn(f"match-report:{game.game_id}", self._report(game.game_id, req, job.task))

    async def _report(
        self, key: str, req: coordinator_pb2.ReportMatchResultRequest, task: coordinator_pb2.Task
    ) -> None:
        try:
            # Not ended by a stop request: the worker waits for pending reports (drain).
            resp = await self.link.call(
                partial(self.link.stub.ReportMatchResult, req, timeout=10),
                what="ReportMatchResult",
                retryable=_worth_retrying,
                stop=None,
            )
        except grpc.aio.AioRpcError as exc:
            if not _superseded(exc):
                log.error("match result for %s refused: %s", req.task_id, describe(exc))
            else:
                log.info(
                    "match %s superseded by a release: dropping its remaining games", req.task_id
                )
                self.decisions[req.task_id] = "superseded"
                if self.on_superseded is not None:
                    self.on_superseded(task)
        except FatalError as exc:
            log.error(
                "match result for %s refused: %s", req.task_id, describe(exc.__cause__ or exc)
            )
        else:
            self.decisions[req.task_id] = resp.decision
            log.info("match %s: reported game %s, decision %s", req.task_id, key, resp.decision)
        finally:
            # Answered or refused; a cancelled report (the worker quits at once) is gone too:
            # the coordinator never saw it, like a match game never finished.
            del self.pending[key]
            if not self.pending:
                self._idle.set()

    async def drain(self, give_up: Callable[[], bool], poll_s: float = 0.2) -> bool:
        """Wait until every pending report is answered; False when ``give_up()`` said so
        first (the worker stops with the coordinator away)."""
        while self.pending:
            if give_up():
                log.warning(
                    "coordinator still unreachable; %d match results not reported",
                    len(self.pending),
                )
                return False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._idle.wait(), poll_s)
        return True
