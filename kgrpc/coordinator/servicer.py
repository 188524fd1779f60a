"""The Coordinator gRPC service: each RPC translates its request into a call on
:class:`~kgrpc.coordinator.server.CoordinatorApp` and the answer back into protobuf. Every
request (each message of a stream) is first checked against the field limits of
:mod:`kgrpc.net.limits`. A :class:`~kgrpc.coordinator.errors.CoordinatorError` becomes the
call's gRPC status."""

from __future__ import annotations

import functools
import itertools
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

import grpc
from google.protobuf import json_format
from google.protobuf.message import Message

from kgrpc.coordinator.config import Config
from kgrpc.coordinator.downloads import read_chunks
from kgrpc.coordinator.errors import CoordinatorError, invalid
from kgrpc.coordinator.kept_games import kind_from_proto
from kgrpc.coordinator.ratings import RatingReport
from kgrpc.go.rules import Rules
from kgrpc.net import limits
from kgrpc.v1 import coordinator_pb2, coordinator_pb2_grpc

if TYPE_CHECKING:
    from kgrpc.coordinator.auth import TokenInfo
    from kgrpc.coordinator.server import CoordinatorApp

Context = grpc.aio.ServicerContext
# A rejection's detail in an ack is cut to this many characters.
ACK_DETAIL_CHARS = 500
STATUS_PROTO = {
    "accepted": coordinator_pb2.GAME_STATUS_ACCEPTED,
    "duplicate": coordinator_pb2.GAME_STATUS_DUPLICATE,
    "rejected": coordinator_pb2.GAME_STATUS_REJECTED,
}


def _check(request: Message) -> None:
    try:
        limits.check(request)
    except limits.FieldTooLarge as exc:
        raise invalid(str(exc)) from None


async def _checked(requests: AsyncIterator[Message]) -> AsyncIterator[Message]:
    async for request in requests:
        _check(request)
        yield request


def _limited(request: Any) -> Any:
    """The request, or a stream of requests, checked against the field limits
    (:mod:`kgrpc.net.limits`): a field over its limit is INVALID_ARGUMENT."""
    if isinstance(request, Message):
        _check(request)
        return request
    return _checked(request)


def _unary(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Check the request's field limits; turn CoordinatorError into the matching gRPC status.

    The abort happens outside the ``except`` block: gRPC keeps the abort's exception for a
    while, and raised inside the block it would chain the CoordinatorError, whose traceback
    holds every frame it passed, with their locals (a refused upload's decompressed bytes)."""

    @functools.wraps(fn)
    async def wrapper(self: Any, request: Any, context: Context) -> Any:
        try:
            return await fn(self, _limited(request), context)
        except CoordinatorError as exc:
            code, message, trailer = exc.code, exc.message, exc.trailing_metadata()
        await context.abort(code, message, trailer)

    return wrapper


def _streaming(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    async def wrapper(self: Any, request: Any, context: Context) -> Any:
        try:
            async for item in fn(self, _limited(request), context):
                yield item
            return
        except CoordinatorError as exc:
            code, message, trailer = exc.code, exc.message, exc.trailing_metadata()
        await context.abort(code, message, trailer)  # outside the except block: see _unary

    return wrapper


def rating_report(request: coordinator_pb2.ReportRatingRequest) -> RatingReport:
    """The report a ReportRating request carries (INVALID_ARGUMENT for unknown rules;
    the field limits are checked before, :meth:`RatingReport.check` judges the rest)."""
    try:
        rules = Rules.from_proto(request.rules)
    except ValueError as exc:
        raise invalid(str(exc)) from None
    return RatingReport(
        request.model,
        request.opponent,
        request.wins,
        request.losses,
        request.draws,
        request.visits,
        request.board_size,
        request.komi,
        rules,
        request.distinct_games,
    )


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
        forced_playouts_k=c.forced_playouts_k,
        score_utility_factor=c.score_utility_factor,
        opening_policy_prob=c.opening_policy_prob,
        opening_moves_19=c.opening_moves_19,
        opening_temperature=c.opening_temperature,
        gumbel=c.gumbel,
        gumbel_considered=c.gumbel_considered,
        gumbel_c_visit=c.gumbel_c_visit,
        gumbel_c_scale=c.gumbel_c_scale,
    )


class CoordinatorServicer(coordinator_pb2_grpc.CoordinatorServicer):
    def __init__(self, app: CoordinatorApp) -> None:
        self.app = app
        self._streams = itertools.count()  # UploadGames streams, for fair validation

    def caller(self, context: Context) -> TokenInfo | None:
        return self.app.caller(context.invocation_metadata())

    # ------------------------------------------------------------------ workers
    @_unary
    async def Register(
        self, request: coordinator_pb2.RegisterRequest, context: Context
    ) -> coordinator_pb2.RegisterResponse:
        wid = await self.app.register(
            request.previous_worker_id,
            request.username,
            request.hostname,
            request.version,
            self.caller(context),
        )
        return coordinator_pb2.RegisterResponse(
            worker_id=wid,
            heartbeat_interval_s=await self.app.heartbeat_interval_s(),
            settings=selfplay_settings(self.app.cfg),
        )

    @_unary
    async def Heartbeat(
        self, request: coordinator_pb2.HeartbeatRequest, context: Context
    ) -> coordinator_pb2.HeartbeatResponse:
        stats_json = json_format.MessageToJson(request.stats, indent=None)
        best = await self.app.heartbeat(request.worker_id, stats_json, self.caller(context))
        return coordinator_pb2.HeartbeatResponse(
            latest_model=best.name if best else "",
            heartbeat_interval_s=await self.app.heartbeat_interval_s(),
        )

    @_unary
    async def GetTask(
        self, request: coordinator_pb2.GetTaskRequest, context: Context
    ) -> coordinator_pb2.Task:
        return await self.app.next_task(request.worker_id, self.caller(context))

    @_unary
    async def UploadGames(
        self, request_iterator: AsyncIterator[coordinator_pb2.UploadGamesRequest], context: Context
    ) -> coordinator_pb2.UploadGamesResponse:
        """The reply covers every game taken; once ``max_games_per_stream`` games are taken,
        or a message held more than ``max_moves_per_message`` moves, it goes out at once,
        whatever the client still sends (the games after it have no ack: the client keeps
        them and sends them on a new stream)."""
        caller = self.caller(context)
        limit = self.app.cfg.max_games_per_stream
        stream = next(self._streams)
        resp = coordinator_pb2.UploadGamesResponse()
        async for req in request_iterator:
            taken = await self.app.ingest_message(req, caller, stream)
            for o, status in taken.acks:
                rejected = status == "rejected"
                resp.acks.append(
                    coordinator_pb2.GameAck(
                        game_id=o.game_id,
                        status=STATUS_PROTO[status],
                        reason=o.reason if rejected else "",
                        detail=o.detail[:ACK_DETAIL_CHARS] if rejected else "",
                    )
                )
                if status == "accepted":
                    resp.accepted += 1
                elif status == "duplicate":
                    resp.duplicates += 1
                else:
                    resp.rejected += 1
            if len(resp.acks) >= limit or not taken.complete:
                break
        return resp

    # ------------------------------------------------------------------ models
    @_unary
    async def GetLatestModel(
        self, request: Any, context: Context
    ) -> coordinator_pb2.GetLatestModelResponse:
        best = await self.app.best_model()
        if best is None:
            return coordinator_pb2.GetLatestModelResponse(found=False)
        return coordinator_pb2.GetLatestModelResponse(found=True, model=best)

    @_unary
    async def ListModels(
        self, request: Any, context: Context
    ) -> coordinator_pb2.ListModelsResponse:
        return coordinator_pb2.ListModelsResponse(models=await self.app.list_models())

    @_streaming
    async def DownloadModel(
        self, request: coordinator_pb2.DownloadModelRequest, context: Context
    ) -> AsyncIterator[coordinator_pb2.ModelChunk]:
        info, file, path = await self.app.model_file(
            request.name, request.offset, request.precision
        )
        first = True
        async for offset, data in read_chunks(path, request.offset):
            msg = coordinator_pb2.ModelChunk(offset=offset, data=data)
            if first:
                msg.info.CopyFrom(info)
                msg.file.CopyFrom(file)
                first = False
            yield msg
        if first:  # offset == size: still send the info
            yield coordinator_pb2.ModelChunk(info=info, file=file, offset=request.offset)

    @_streaming
    async def WatchModels(
        self, request: coordinator_pb2.WatchModelsRequest, context: Context
    ) -> AsyncIterator[coordinator_pb2.ModelRelease]:
        async for info in self.app.watch_models(request.known_model):
            yield coordinator_pb2.ModelRelease(model=info)

    @_unary
    async def PublishModel(
        self, request_iterator: AsyncIterator[coordinator_pb2.PublishModelRequest], context: Context
    ) -> coordinator_pb2.PublishModelResponse:
        out = await self.app.publish(request_iterator)
        return coordinator_pb2.PublishModelResponse(
            model=out.model, gating_scheduled=out.gating_scheduled
        )

    @_unary
    async def ReportMatchResult(
        self, request: coordinator_pb2.ReportMatchResultRequest, context: Context
    ) -> coordinator_pb2.ReportMatchResultResponse:
        out = await self.app.report_match(request, self.caller(context))
        return coordinator_pb2.ReportMatchResultResponse(
            games_recorded=out.recorded, decision=out.decision
        )

    # ------------------------------------------------------------------ ratings
    @_unary
    async def ReportRating(
        self, request: coordinator_pb2.ReportRatingRequest, context: Context
    ) -> coordinator_pb2.ReportRatingResponse:
        rating = await self.app.report_rating(rating_report(request), self.caller(context))
        return coordinator_pb2.ReportRatingResponse(rating=rating)

    @_unary
    async def ListRatings(
        self, request: coordinator_pb2.ListRatingsRequest, context: Context
    ) -> coordinator_pb2.ListRatingsResponse:
        if request.limit < 0:
            raise invalid(f"limit must be >= 0, got {request.limit}")
        limit = min(request.limit or limits.RATINGS_PER_LIST, limits.RATINGS_PER_LIST)
        ratings, truncated = await self.app.list_ratings(
            request.model, request.opponent, request.latest_only, limit
        )
        return coordinator_pb2.ListRatingsResponse(ratings=ratings, truncated=truncated)

    # ------------------------------------------------------------------ stats and shards
    @_unary
    async def GetStats(self, request: Any, context: Context) -> coordinator_pb2.Stats:
        return await self.app.stats(limits.RATINGS_PER_STATS, request)

    @_unary
    async def ListShards(
        self, request: coordinator_pb2.ListShardsRequest, context: Context
    ) -> coordinator_pb2.ListShardsResponse:
        rows = await self.app.list_shards(request.run or None, request.after_index)
        return coordinator_pb2.ListShardsResponse(
            shards=[
                coordinator_pb2.ShardInfo(
                    run=r.run,
                    index=r.index,
                    file_name=r.file_name,
                    size_bytes=r.size_bytes,
                    sha256=r.sha256,
                    games=r.games,
                    positions=r.positions,
                    board_size=r.board_size,
                )
                for r in rows
            ]
        )

    @_streaming
    async def DownloadShard(
        self, request: coordinator_pb2.DownloadShardRequest, context: Context
    ) -> AsyncIterator[coordinator_pb2.FileChunk]:
        path, size = await self.app.shard_file(request.run, request.file_name, request.offset)
        first = True
        async for offset, data in read_chunks(path, request.offset):
            yield coordinator_pb2.FileChunk(
                offset=offset, data=data, size_bytes=size if first else 0
            )
            first = False
        if first:
            yield coordinator_pb2.FileChunk(offset=request.offset, size_bytes=size)

    # ------------------------------------------------------------------ kept games
    @_unary
    async def ListGames(
        self, request: coordinator_pb2.ListGamesRequest, context: Context
    ) -> coordinator_pb2.ListGamesResponse:
        kind = kind_from_proto(request.kind)
        games = await self.app.list_games(
            request.model, kind, request.limit or 50, request.before_seq
        )
        return coordinator_pb2.ListGamesResponse(games=[g.to_proto() for g in games])

    @_unary
    async def DownloadGame(
        self, request: coordinator_pb2.DownloadGameRequest, context: Context
    ) -> coordinator_pb2.DownloadGameResponse:
        game, sgf = await self.app.game_sgf(request.game_id)
        return coordinator_pb2.DownloadGameResponse(game=game.to_proto(), sgf=sgf)
