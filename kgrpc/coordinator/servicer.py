"""The Coordinator gRPC service: each RPC translates its request into a call on
:class:`~kgrpc.coordinator.server.CoordinatorApp` and the answer back into protobuf. A
:class:`~kgrpc.coordinator.errors.CoordinatorError` becomes the call's gRPC status."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

import grpc
from google.protobuf import json_format

from kgrpc.coordinator.config import Config
from kgrpc.coordinator.downloads import read_chunks
from kgrpc.coordinator.errors import CoordinatorError, invalid
from kgrpc.coordinator.ratings import RatingReport
from kgrpc.go.rules import Rules
from kgrpc.v1 import coordinator_pb2, coordinator_pb2_grpc

if TYPE_CHECKING:
    from kgrpc.coordinator.auth import TokenInfo
    from kgrpc.coordinator.server import CoordinatorApp

Context = grpc.aio.ServicerContext
# Size limits of the rating RPCs (ReportRating, ListRatings, GetStats' ratings). They belong
# with the other RPC limits; kept here until those have a module of their own.
RATING_MODEL_CHARS = 200  # a model name (the worker's model cache takes names this long)
RATING_OPPONENT_CHARS = 64  # a reference engine's name
LIST_RATINGS_MAX = 10_000  # ratings in one ListRatings reply
STATS_RATINGS_MAX = 2_000  # ratings in one GetStats reply
STATUS_PROTO = {
    "accepted": coordinator_pb2.GAME_STATUS_ACCEPTED,
    "duplicate": coordinator_pb2.GAME_STATUS_DUPLICATE,
    "rejected": coordinator_pb2.GAME_STATUS_REJECTED,
}


def _unary(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn CoordinatorError into the matching gRPC status."""

    @functools.wraps(fn)
    async def wrapper(self: Any, request: Any, context: Context) -> Any:
        try:
            return await fn(self, request, context)
        except CoordinatorError as exc:
            await context.abort(exc.code, exc.message)

    return wrapper


def _streaming(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    async def wrapper(self: Any, request: Any, context: Context) -> Any:
        try:
            async for item in fn(self, request, context):
                yield item
        except CoordinatorError as exc:
            await context.abort(exc.code, exc.message)

    return wrapper


def _check_length(field: str, value: str, most: int) -> None:
    if len(value) > most:
        raise invalid(f"{field} is {len(value)} characters long; at most {most}")


def rating_report(request: coordinator_pb2.ReportRatingRequest) -> RatingReport:
    """The report a ReportRating request carries (INVALID_ARGUMENT for an oversized name or
    unknown rules; :meth:`RatingReport.check` judges the rest)."""
    _check_length("model", request.model, RATING_MODEL_CHARS)
    _check_length("opponent", request.opponent, RATING_OPPONENT_CHARS)
    try:
        rules = Rules.from_proto(request.rules)
    except ValueError as exc:
        raise invalid(str(exc)) from None
    return RatingReport(request.model, request.opponent, request.wins, request.losses,
                        request.draws, request.visits, request.board_size, request.komi, rules)


def selfplay_settings(c: Config) -> coordinator_pb2.SelfPlaySettings:
    return coordinator_pb2.SelfPlaySettings(
        games_per_batch=c.games_per_batch,
        full_search_prob=c.full_search_prob,
        cheap_visits=c.cheap_visits,
        temperature_moves_19=c.temperature_moves_19,
        dirichlet_alpha_19=c.dirichlet_alpha_19,
        noise_fraction=c.noise_fraction,
        resign_threshold=c.resign_threshold,
        resign_playout_fraction=c.resign_playout_fraction,
        max_moves_per_point=c.max_moves_per_point,
    )


class CoordinatorServicer(coordinator_pb2_grpc.CoordinatorServicer):
    def __init__(self, app: CoordinatorApp) -> None:
        self.app = app

    def caller(self, context: Context) -> TokenInfo | None:
        return self.app.caller(context.invocation_metadata())

    # ------------------------------------------------------------------ workers
    @_unary
    async def Register(self, request: coordinator_pb2.RegisterRequest, context: Context
                       ) -> coordinator_pb2.RegisterResponse:
        wid = await self.app.register(request.previous_worker_id, request.username,
                                      request.hostname, request.version, self.caller(context))
        return coordinator_pb2.RegisterResponse(
            worker_id=wid,
            heartbeat_interval_s=self.app.cfg.heartbeat_interval_s,
            settings=selfplay_settings(self.app.cfg),
        )

    @_unary
    async def Heartbeat(self, request: coordinator_pb2.HeartbeatRequest, context: Context
                        ) -> coordinator_pb2.HeartbeatResponse:
        stats_json = json_format.MessageToJson(request.stats, indent=None)
        best = await self.app.heartbeat(request.worker_id, stats_json, self.caller(context))
        return coordinator_pb2.HeartbeatResponse(latest_model=best.name if best else "")

    @_unary
    async def GetTask(self, request: coordinator_pb2.GetTaskRequest, context: Context
                      ) -> coordinator_pb2.Task:
        return await self.app.next_task(request.worker_id, self.caller(context))

    @_unary
    async def UploadGames(self, request_iterator: AsyncIterator[coordinator_pb2.UploadGamesRequest],
                          context: Context) -> coordinator_pb2.UploadGamesResponse:
        caller = self.caller(context)
        resp = coordinator_pb2.UploadGamesResponse()
        async for req in request_iterator:
            for o, status in await self.app.ingest_message(req, caller):
                rejected = status == "rejected"
                resp.acks.append(coordinator_pb2.GameAck(
                    game_id=o.game_id, status=STATUS_PROTO[status],
                    reason=o.reason if rejected else "", detail=o.detail if rejected else "",
                ))
        for a in resp.acks:
            if a.status == coordinator_pb2.GAME_STATUS_ACCEPTED:
                resp.accepted += 1
            elif a.status == coordinator_pb2.GAME_STATUS_DUPLICATE:
                resp.duplicates += 1
            else:
                resp.rejected += 1
        return resp

    # ------------------------------------------------------------------ models
    @_unary
    async def GetLatestModel(self, request: Any, context: Context
                             ) -> coordinator_pb2.GetLatestModelResponse:
        best = await self.app.best_model()
        if best is None:
            return coordinator_pb2.GetLatestModelResponse(found=False)
        return coordinator_pb2.GetLatestModelResponse(found=True, model=best)

    @_unary
    async def ListModels(self, request: Any, context: Context
                         ) -> coordinator_pb2.ListModelsResponse:
        return coordinator_pb2.ListModelsResponse(models=await self.app.list_models())

    @_streaming
    async def DownloadModel(self, request: coordinator_pb2.DownloadModelRequest, context: Context
                            ) -> AsyncIterator[coordinator_pb2.ModelChunk]:
        info, path = await self.app.model_file(request.name, request.offset)
        first = True
        async for offset, data in read_chunks(path, request.offset):
            msg = coordinator_pb2.ModelChunk(offset=offset, data=data)
            if first:
                msg.info.CopyFrom(info)
                first = False
            yield msg
        if first:  # offset == size: still send the info
            yield coordinator_pb2.ModelChunk(info=info, offset=request.offset)

    async def WatchModels(self, request: coordinator_pb2.WatchModelsRequest, context: Context
                          ) -> AsyncIterator[coordinator_pb2.ModelRelease]:
        async for info in self.app.watch_models(request.known_model):
            yield coordinator_pb2.ModelRelease(model=info)

    @_unary
    async def PublishModel(self,
                           request_iterator: AsyncIterator[coordinator_pb2.PublishModelRequest],
                           context: Context) -> coordinator_pb2.PublishModelResponse:
        out = await self.app.publish(request_iterator)
        return coordinator_pb2.PublishModelResponse(model=out.model,
                                                    gating_scheduled=out.gating_scheduled)

    @_unary
    async def ReportMatchResult(self, request: coordinator_pb2.ReportMatchResultRequest,
                                context: Context) -> coordinator_pb2.ReportMatchResultResponse:
        out = await self.app.report_match(request, self.caller(context))
        return coordinator_pb2.ReportMatchResultResponse(games_recorded=out.recorded,
                                                         decision=out.decision)

    # ------------------------------------------------------------------ ratings
    @_unary
    async def ReportRating(self, request: coordinator_pb2.ReportRatingRequest, context: Context
                           ) -> coordinator_pb2.ReportRatingResponse:
        rating = await self.app.report_rating(rating_report(request), self.caller(context))
        return coordinator_pb2.ReportRatingResponse(rating=rating)

    @_unary
    async def ListRatings(self, request: coordinator_pb2.ListRatingsRequest, context: Context
                          ) -> coordinator_pb2.ListRatingsResponse:
        _check_length("model", request.model, RATING_MODEL_CHARS)
        _check_length("opponent", request.opponent, RATING_OPPONENT_CHARS)
        if request.limit < 0:
            raise invalid(f"limit must be >= 0, got {request.limit}")
        limit = min(request.limit or LIST_RATINGS_MAX, LIST_RATINGS_MAX)
        ratings, truncated = await self.app.list_ratings(request.model, request.opponent,
                                                         request.latest_only, limit)
        return coordinator_pb2.ListRatingsResponse(ratings=ratings, truncated=truncated)

    # ------------------------------------------------------------------ stats and shards
    @_unary
    async def GetStats(self, request: Any, context: Context) -> coordinator_pb2.Stats:
        return await self.app.stats(STATS_RATINGS_MAX)

    @_unary
    async def ListShards(self, request: coordinator_pb2.ListShardsRequest, context: Context
                         ) -> coordinator_pb2.ListShardsResponse:
        rows = await self.app.list_shards(request.run or None, request.after_index)
        return coordinator_pb2.ListShardsResponse(
            shards=[
                coordinator_pb2.ShardInfo(
                    run=r.run, index=r.index, file_name=r.file_name, size_bytes=r.size_bytes,
                    sha256=r.sha256, games=r.games, positions=r.positions,
                    board_size=r.board_size,
                )
                for r in rows
            ]
        )

    @_streaming
    async def DownloadShard(self, request: coordinator_pb2.DownloadShardRequest, context: Context
                            ) -> AsyncIterator[coordinator_pb2.FileChunk]:
        path, size = await self.app.shard_file(request.run, request.file_name, request.offset)
        first = True
        async for offset, data in read_chunks(path, request.offset):
            yield coordinator_pb2.FileChunk(offset=offset, data=data,
                                            size_bytes=size if first else 0)
            first = False
        if first:
            yield coordinator_pb2.FileChunk(offset=request.offset, size_bytes=size)
