"""The Inference gRPC service (protos/kgrpc/v1/inference.proto) over a ModelRegistry.

``Evaluate`` (bidi): every request becomes its own task, so many requests of one stream are in
flight at once and responses go out in completion order (matched by request_id), up to
``stream_window`` positions per stream (then the stream's requests wait); a bad request
gets a response with ``error_code``/``error`` and the stream goes on. When the client goes away
the handler is cancelled and so are its queued requests. ``EvaluateOne`` maps the same errors
to gRPC statuses. The server set-up is :class:`kgrpc.net.server.GrpcServer`: health checking
(service "kgrpc.v1.Inference" and "") and server reflection are registered; with tokens
configured, every call but a health check needs ``authorization: Bearer <token>``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterator

import grpc

from inference.batcher import BatcherClosedError, QueueFullError
from inference.models import ModelNotFoundError, ModelRegistry
from inference.wire import STREAM_OPEN, BadRequest, decode_request, encode_response
from kgrpc.net import limits
from kgrpc.net.server import BearerTokenInterceptor, GrpcServer, static_token_lookup
from kgrpc.v1 import inference_pb2, inference_pb2_grpc

log = logging.getLogger("kgrpc.inference.server")

SERVICE_NAME = inference_pb2.DESCRIPTOR.services_by_name["Inference"].full_name
MAX_MESSAGE = 64 * 1024 * 1024


# Positions one Evaluate stream may have in flight or waiting to be written (the default).
STREAM_WINDOW = 4096


class InferenceService(inference_pb2_grpc.InferenceServicer):
    def __init__(self, registry: ModelRegistry, stream_window: int = STREAM_WINDOW) -> None:
        self.registry = registry
        self.metrics = registry.metrics
        self.stream_window = stream_window

    async def _evaluate(self, req: inference_pb2.EvalRequest) -> inference_pb2.EvalResponse:
        """Never raises (except cancellation): errors become error_code responses."""
        try:
            try:
                limits.check(req)
            except limits.FieldTooLarge as exc:
                raise BadRequest(grpc.StatusCode.INVALID_ARGUMENT, str(exc)) from None
            d = decode_request(req)
            async with self.registry.use(d.model) as model:
                model_fv = model.engine.info.feature_version
                if req.feature_version and req.feature_version != model_fv:
                    raise BadRequest(
                        grpc.StatusCode.INVALID_ARGUMENT,
                        f"feature_version {req.feature_version} != model {model.name}'s {model_fv}",
                    )
                policy, value, score, own = await model.evaluate(d.board_size, d.packed, d.globals_)
                name = model.name
        except BadRequest as exc:
            return self._error(req, exc.code, exc.message)
        except ModelNotFoundError as exc:
            return self._error(req, grpc.StatusCode.NOT_FOUND, exc.message)
        except QueueFullError as exc:
            return self._error(req, grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc))
        except BatcherClosedError as exc:
            return self._error(req, grpc.StatusCode.UNAVAILABLE, str(exc))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a model failure must not take the stream down
            log.exception("evaluation failed")
            self.metrics.errors += 1
            return self._error(req, grpc.StatusCode.INTERNAL, f"evaluation failed: {exc}")
        self.metrics.record_answered(d.count, name)
        return encode_response(
            req.request_id, name, policy, value, score, own if d.want_ownership else None
        )

    @staticmethod
    def _error(
        req: inference_pb2.EvalRequest, code: grpc.StatusCode, message: str
    ) -> inference_pb2.EvalResponse:
        return inference_pb2.EvalResponse(
            request_id=req.request_id, error_code=code.value[0], error=message
        )

    async def Evaluate(
        self,
        request_iterator: AsyncIterator[inference_pb2.EvalRequest],
        context: grpc.aio.ServicerContext,
    ) -> None:
        """Requests in flight, and answers not yet written, hold at most ``stream_window``
        positions of the stream (a request of ``count`` positions takes ``count``): while the
        window is full the stream's next request is not read, so a client that sends without
        reading the answers stops its own sending (HTTP/2 flow control) instead of growing the
        server's memory."""
        # Accepted: say so at once, so the client's first write cannot race a refusal.
        await context.send_initial_metadata((STREAM_OPEN,))
        window = _Window(self.stream_window)
        out: asyncio.Queue[tuple[int, inference_pb2.EvalResponse] | None] = asyncio.Queue()
        pending: set[asyncio.Future[inference_pb2.EvalResponse]] = set()
        reading = True

        def finished(cost: int, task: asyncio.Future[inference_pb2.EvalResponse]) -> None:
            pending.discard(task)
            if not task.cancelled():
                out.put_nowait((cost, task.result()))

        async def read() -> None:
            nonlocal reading
            try:
                async for req in request_iterator:
                    cost = min(max(req.count, 1), window.size)
                    await window.take(cost)
                    task = asyncio.ensure_future(self._evaluate(req))
                    pending.add(task)
                    task.add_done_callback(functools.partial(finished, cost))
            finally:
                reading = False
                out.put_nowait(None)  # wake the writer to check for the end

        reader = asyncio.ensure_future(read())
        try:
            while reading or pending or not out.empty():
                item = await out.get()
                if item is not None:
                    await context.write(item[1])
                    window.give(item[0])
            await reader  # surfaces a read error, if any
        finally:
            reader.cancel()
            for task in list(pending):
                task.cancel()

    async def EvaluateOne(
        self, request: inference_pb2.EvalRequest, context: grpc.aio.ServicerContext
    ) -> inference_pb2.EvalResponse:
        resp = await self._evaluate(request)
        if resp.error_code:
            await context.abort(grpc.StatusCode(_code(resp.error_code)), resp.error)
        return resp

    async def GetModelInfo(
        self, request: inference_pb2.GetModelInfoRequest, context: grpc.aio.ServicerContext
    ) -> inference_pb2.GetModelInfoResponse:
        reg = self.registry
        return inference_pb2.GetModelInfoResponse(
            default_model=reg.default,
            models=[
                inference_pb2.LoadedModel(
                    name=m.name,
                    sha256=m.engine.info.sha256,
                    provider=m.engine.provider,
                    feature_version=m.engine.info.feature_version,
                    is_default=m.name == reg.default,
                    in_flight=m.in_flight,
                )
                for m in reg.models.values()
            ],
        )

    async def GetInferenceStats(
        self, request: inference_pb2.GetInferenceStatsRequest, context: grpc.aio.ServicerContext
    ) -> inference_pb2.InferenceStats:
        return self.metrics.to_proto(self.registry.queue_depth)


class _Window:
    """Positions a stream may hold: :meth:`take` waits until they are free."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.free = size
        self._freed = asyncio.Event()

    async def take(self, n: int) -> None:
        while self.free < n:
            self._freed.clear()
            await self._freed.wait()
        self.free -= n

    def give(self, n: int) -> None:
        self.free += n
        self._freed.set()


def _code(value: int) -> tuple[int, str]:
    for code in grpc.StatusCode:
        if code.value[0] == value:
            return code.value
    return grpc.StatusCode.UNKNOWN.value


class InferenceServer:
    """A grpc.aio server with the Inference service, health and reflection; with ``tokens``,
    every call but a health check needs one of them."""

    def __init__(
        self,
        registry: ModelRegistry,
        *,
        tokens: list[str] | None = None,
        stream_window: int = STREAM_WINDOW,
    ) -> None:
        self.registry = registry
        known = [t for t in tokens or () if t]
        interceptor = BearerTokenInterceptor(static_token_lookup(known)) if known else None
        self.grpc = GrpcServer(
            (SERVICE_NAME,), max_message_bytes=MAX_MESSAGE, interceptor=interceptor
        )
        self.service = InferenceService(registry, stream_window)
        inference_pb2_grpc.add_InferenceServicer_to_server(self.service, self.grpc.server)
        self.port = 0
        self._log_task: asyncio.Task[None] | None = None

    async def start(
        self,
        listen: str = "127.0.0.1:0",
        log_every_s: float = 0.0,
        credentials: grpc.ServerCredentials | None = None,
    ) -> int:
        """Listen on ``listen`` (TLS with ``credentials``, see
        :func:`kgrpc.net.server.tls_credentials`); the bound port."""
        self.port = await self.grpc.start(listen, credentials)
        host = listen.rsplit(":", 1)[0]
        log.info("kgrpc-inference listening on %s:%d", host, self.port)
        if log_every_s > 0:
            self._log_task = asyncio.ensure_future(self._log_loop(log_every_s))
        return self.port

    async def _log_loop(self, every_s: float) -> None:
        while True:
            await asyncio.sleep(every_s)
            log.info("%s", self.registry.metrics.log_line(self.registry.queue_depth))

    async def stop(self, grace_s: float = 5.0) -> None:
        if self._log_task is not None:
            self._log_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._log_task
        await self.grpc.stop(grace_s)
        await self.registry.close()
