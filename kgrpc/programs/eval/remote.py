"""A run on a coordinator, as the ladder sees it (``kgrpc-eval ladder --coordinator ADDR``).

- :meth:`RemoteRun.released_models`: the released models (ListModels), downloaded into a
  cache directory as workers do (DownloadModel, resumed, sha256 checked:
  :class:`kgrpc.worker.models.ModelCache`), with the training steps, rows and creation time
  the coordinator holds, in training order; :meth:`RemoteRun.releases` lists them without
  downloading and :meth:`RemoteRun.fetch` downloads those a budgeted ladder rates.
- :meth:`RemoteRun.check_may_report`: fails at once when the token may not report.
- :meth:`RemoteRun.recorder`: reports each result (ReportRating, a trainer token) and turns
  the coordinator's answer into the ladder row, so self-play games and wall-clock time are the
  coordinator's.
- :meth:`RemoteRun.follow`: calls a function for the current release and each later one
  (WatchModels) until cancelled; an outage of the coordinator is waited out (growing waits),
  and the pass that failed is done again when it is back.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import TracebackType

import grpc

from kgrpc.net import Backoff, describe, is_fatal, make_channel
from kgrpc.programs.eval.ladder import FIRST, RANDOM
from kgrpc.programs.eval.ladder_models import Model, training_order
from kgrpc.programs.eval.ladder_record import LadderRecord, Recorder
from kgrpc.programs.eval.match import MatchSettings
from kgrpc.programs.eval.referee import find_gnugo
from kgrpc.rating import Rating
from kgrpc.v1 import common_pb2, coordinator_pb2, coordinator_pb2_grpc
from kgrpc.worker.models import ModelCache

CALL_TIMEOUT_S = 60.0


def check_opponent_names(names: list[str]) -> None:
    """ValueError unless the coordinator would take every name (checked before any game)."""
    from kgrpc.coordinator.ratings import OPPONENT_NAME
    from kgrpc.net.limits import OPPONENT

    for name in names:
        if len(name) > OPPONENT or not OPPONENT_NAME.match(name):
            raise ValueError(
                f"reference name {name!r}: the coordinator takes letters, digits "
                f"and ._+=- (at most {OPPONENT}, starting with a "
                "letter or digit)"
            )


DEFAULT_FOLLOW_REFERENCES = (RANDOM, FIRST, "gnugo-l1")


def follow_references(references: list[str] | tuple[str, ...], first_model: bool) -> set[str]:
    """The references the ladder of :func:`follow_args` plays a model against: ``references``
    (names: random, first, gnugo-lL), the GNU Go levels only when GNU Go is installed, and
    ``first`` only for a model that is not the first."""
    gnugo = find_gnugo() is not None
    refs = {r for r in references if r != FIRST and (gnugo or not r.startswith("gnugo-l"))}
    return refs | ({FIRST} if FIRST in references and not first_model else set())


def playable_references(references: list[str]) -> tuple[list[str], list[str]]:
    """(``references`` that can be played here, what was changed): GNU Go levels only where
    GNU Go is installed, random play when nothing is left to rate the first release against."""
    if find_gnugo() is not None:
        return list(references), []
    refs = [r for r in references if not r.startswith("gnugo-l")]
    notes = []
    if refs != list(references):
        notes.append("GNU Go is not installed (apt-get install gnugo): the ladder leaves it out")
    if refs in ([], [FIRST]):
        notes.append("the ladder rates against random play instead")
        refs = [RANDOM, *refs]
    return refs, notes


def follow_args(
    address: str,
    games: int,
    size: int,
    komi: float,
    visits: int,
    out: Path,
    references: list[str] | tuple[str, ...] = DEFAULT_FOLLOW_REFERENCES,
    every_minutes: float = 0.0,
    nice: int = 0,
) -> list[str]:
    """``python`` arguments of a ladder that follows a run and reports to its coordinator
    (kgrpc-cluster's ``ladder`` process), against :func:`follow_references`; with
    ``every_minutes``, only some releases (``--every-minutes``); ``nice``: its OS priority
    lowered by that much (``--nice``). The trainer token (and a TLS CA) go in the
    environment: KGRPC_EVAL_TOKEN, KGRPC_EVAL_TLS_CA (or the trainer's KGRPC_TRAINER_TOKEN,
    KGRPC_TRAINER_TLS_CA, which kgrpc-cluster sets)."""
    levels = [r.removeprefix("gnugo-l") for r in references if r.startswith("gnugo-l")]
    return [
        "-m",
        "kgrpc.programs.eval",
        "ladder",
        "--coordinator",
        address,
        "--follow",
        "--games",
        str(games),
        "--size",
        str(size),
        "--komi",
        f"{komi:g}",
        "--visits",
        str(visits),
        "--gnugo-levels",
        ",".join(levels) if find_gnugo() else "",
        *([] if RANDOM in references else ["--no-random"]),
        *([] if FIRST in references else ["--no-first"]),
        *(["--every-minutes", f"{every_minutes:g}"] if every_minutes > 0 else []),
        *(["--nice", str(nice)] if nice > 0 else []),
        "--out",
        str(out),
    ]


def follow_done(
    stats: coordinator_pb2.Stats,
    model: str,
    references: list[str] | tuple[str, ...] = DEFAULT_FOLLOW_REFERENCES,
) -> bool:
    """Whether ``model`` has a rating against each of its :func:`follow_references`."""
    released = [m for m in stats.models if m.status == common_pb2.MODEL_STATUS_RELEASED]
    first = min(released, key=lambda m: (m.created_unix_ms, m.name), default=None)
    wanted = follow_references(references, first is not None and first.name == model)
    return wanted <= {r.opponent for r in stats.ratings if r.model == model}


class RemoteRun:
    def __init__(
        self, address: str, token: str | None, tls_ca: str | None, cache_dir: Path
    ) -> None:
        self.address = address
        self.token = token
        self.tls_ca = tls_ca
        self.cache = ModelCache(cache_dir, keep=0)  # the ladder plays every model again
        self._sha256: dict[str, str] = {}  # model name -> its file's, from ListModels
        self.channel: grpc.aio.Channel | None = None
        self.stub: coordinator_pb2_grpc.CoordinatorStub

    async def __aenter__(self) -> RemoteRun:
        self.channel = make_channel(self.address, token=self.token, tls_ca=self.tls_ca)
        self.stub = coordinator_pb2_grpc.CoordinatorStub(self.channel)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.channel is not None:
            await self.channel.close()

    async def check_may_report(self) -> None:
        """Raise the coordinator's refusal (a worker token, a revoked one) before any game is
        played: an empty report passes the token check only with a trainer token, and then
        gets INVALID_ARGUMENT ("model is empty") without storing anything."""
        try:
            await self.stub.ReportRating(
                coordinator_pb2.ReportRatingRequest(), timeout=CALL_TIMEOUT_S
            )
        except grpc.aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.INVALID_ARGUMENT:
                raise
            return
        raise RuntimeError("the coordinator took an empty rating report")

    async def released_models(self) -> list[Model]:
        """Every released model, downloaded, in training order."""
        return await self.fetch(await self.releases())

    async def releases(self) -> list[Model]:
        """The released models in training order, not downloaded: each one's path is where
        :meth:`fetch` puts it."""
        resp = await self.stub.ListModels(
            coordinator_pb2.ListModelsRequest(), timeout=CALL_TIMEOUT_S
        )
        models = []
        for info in resp.models:
            if info.status != common_pb2.MODEL_STATUS_RELEASED:
                continue
            self._sha256[info.name] = info.sha256
            models.append(
                Model(
                    info.name,
                    self.cache.path(info.name),
                    info.training_steps,
                    info.training_rows,
                    info.created_unix_ms / 1000.0,
                    None,
                )
            )
        return training_order(models)

    async def fetch(self, models: list[Model]) -> list[Model]:
        """``models`` (from :meth:`releases`) with their files downloaded."""
        for model in models:
            await self.cache.ensure(self.stub, model.name, self._sha256[model.name])
        return models

    def recorder(self, visits: int, settings: MatchSettings) -> Recorder:
        async def report(
            model: Model, opponent: str, rating: Rating, distinct: int | None
        ) -> LadderRecord:
            req = coordinator_pb2.ReportRatingRequest(
                model=model.name,
                opponent=opponent,
                wins=rating.wins,
                losses=rating.losses,
                draws=rating.draws,
                visits=visits,
                board_size=settings.size,
                komi=settings.komi,
                rules=settings.rules.to_proto(),
                distinct_games=distinct or 0,  # 0: not counted (a match stored before)
            )
            resp = await self.stub.ReportRating(req, timeout=CALL_TIMEOUT_S)
            return LadderRecord.from_proto(resp.rating)

        return report

    async def follow(self, on_release: Callable[[], Awaitable[None]]) -> None:
        """``on_release()`` for the current release and each later one; runs until
        cancelled. Fatal statuses (a bad token, the wrong server) end it."""
        known = ""
        backoff = Backoff(base_s=2.0, cap_s=60.0)
        while True:
            try:
                watch = self.stub.WatchModels(coordinator_pb2.WatchModelsRequest(known_model=known))
                async for release in watch:
                    await on_release()
                    known = release.model.name  # only once its pass is done
                    backoff.reset()
                problem = "the coordinator ended the release stream"
            except grpc.aio.AioRpcError as exc:
                if is_fatal(exc):
                    raise
                problem = describe(exc)
            wait = backoff.next_delay()
            print(
                f"kgrpc-eval: {self.address}: {problem}; trying again in {wait:.0f} s",
                file=sys.stderr,
                flush=True,
            )
            await asyncio.sleep(wait)
