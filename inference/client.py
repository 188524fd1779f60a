"""``InferenceClient``: the remote :class:`kgrpc.evaluator.Evaluator` over the bidi stream.

Each evaluate() call is one EvalRequest on one of ``streams`` long-lived ``Evaluate`` streams
(picked round robin, spread over all ``addresses``), so many calls are in flight at once and
responses are matched back by request_id. A broken stream (server restart: UNAVAILABLE) is
reopened and the calls it carried are retried a few times with growing, jittered waits
(:func:`kgrpc.net.retry`, the project's one retry loop), as are RESOURCE_EXHAUSTED answers
(full server queue); an outage is logged once (:class:`kgrpc.net.Outage`), a full queue only
at debug level. Other errors raise :class:`kgrpc.evaluator.EvaluationError` with the status
name (INVALID_ARGUMENT, NOT_FOUND...); so does a server that disagrees with the client about
TLS, at once, with what to do in the log (:func:`kgrpc.net.describe`).

Channels are :func:`kgrpc.net.make_channel`'s: TLS when ``tls_ca`` names the CA (PEM) of the
servers. The token goes as per-call metadata on each stream (no client interceptor on the hot
stream). No onnxruntime or torch import here.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os

import grpc
import numpy as np

from inference.wire import STREAM_OPEN, decode_response, encode_request
from kgrpc.evaluator import EvalResult, EvaluationError
from kgrpc.net import (
    Backoff,
    Outage,
    auth_metadata,
    describe,
    is_tls_mismatch,
    make_channel,
    retry,
)
from kgrpc.v1 import inference_pb2, inference_pb2_grpc

log = logging.getLogger("kgrpc.inference.client")

MAX_MESSAGE = 64 * 1024 * 1024
KEEPALIVE_MS = 20_000
# How long a failed stream write waits for the call's final status (normally at once).
WRITE_FAILURE_STATUS_S = 2.0
# How long a new stream waits for the server's STREAM_OPEN before writing anyway (a server that
# does not announce streams; ours does at once).
STREAM_OPEN_WAIT_S = 2.0
RETRYABLE = {grpc.StatusCode.UNAVAILABLE.name, grpc.StatusCode.RESOURCE_EXHAUSTED.name}
_STATUS_NAMES = {c.value[0]: c.name for c in grpc.StatusCode}


def ended_status(code: str, detail: str) -> tuple[str, str]:
    """The status to report for an accepted stream that ended with ``code``/``detail``.

    A write racing the end of the call (the server stopping or restarting) fails in grpc.aio
    with INTERNAL, which it then reports as the call's own status too (grpc/grpc#36066), the
    detail being "Internal error from Core" or the server's own words ("Cancelling all
    calls"). kgrpc's server never ends an accepted stream with INTERNAL (a failed evaluation
    is an error in its response), so INTERNAL here is reported as UNAVAILABLE: an outage a
    worker waits out, where INTERNAL would drop the games in progress."""
    if code == grpc.StatusCode.INTERNAL.name:
        return grpc.StatusCode.UNAVAILABLE.name, f"stream ended under a write ({code}: {detail})"
    return code, detail


class _Stream:
    """One Evaluate call: a reader task resolving futures by request_id."""

    def __init__(
        self, stub: inference_pb2_grpc.InferenceStub, metadata: tuple[tuple[str, str], ...]
    ) -> None:
        self.call = stub.Evaluate(metadata=metadata)
        self.pending: dict[int, asyncio.Future[inference_pb2.EvalResponse]] = {}
        self.lock = asyncio.Lock()
        self.dead = False
        self.closed = False  # closed by the client (close()), not broken by the server
        self.opened = False  # the server's STREAM_OPEN seen: writes may start
        self.reader = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        code, detail = grpc.StatusCode.UNAVAILABLE.name, "stream closed by the server"
        try:
            async for resp in self.call:
                fut = self.pending.pop(resp.request_id, None)
                if fut is not None and not fut.done():
                    fut.set_result(resp)
        except grpc.aio.AioRpcError as exc:
            code, detail = exc.code().name, exc.details() or ""
            if self.opened:  # a refused stream's status is _open's to report
                code, detail = ended_status(code, detail)
        except asyncio.CancelledError:
            code, detail = grpc.StatusCode.CANCELLED.name, "client closed"
            raise
        finally:
            self.dead = True
            for fut in self.pending.values():
                if not fut.done():
                    fut.set_exception(EvaluationError(code, detail))
            self.pending.clear()

    async def send(
        self, req: inference_pb2.EvalRequest
    ) -> asyncio.Future[inference_pb2.EvalResponse]:
        fut: asyncio.Future[inference_pb2.EvalResponse] = asyncio.get_running_loop().create_future()
        self.pending[req.request_id] = fut
        try:
            async with self.lock:
                if not self.opened:
                    await self._open()
                await self.call.write(req)
        except EvaluationError:
            self.pending.pop(req.request_id, None)
            _discard(fut)
            raise
        except BaseException as exc:
            # The caller never sees ``fut``: drop it, and mark an exception the reader may
            # already have put there (the stream closing) as retrieved, else asyncio logs
            # "Future exception was never retrieved" when it is collected.
            self.pending.pop(req.request_id, None)
            _discard(fut)
            if isinstance(exc, asyncio.CancelledError) and _cancelling():
                raise  # the calling task itself is being cancelled
            if not isinstance(
                exc, grpc.aio.AioRpcError | asyncio.InvalidStateError | asyncio.CancelledError
            ):
                raise
            # grpc.aio raises CancelledError from write() on a call cancelled locally
            # (close()), even though the writing task was not cancelled.
            self.dead = True
            if self.closed:
                raise EvaluationError("CANCELLED", "client closed") from exc
            code, detail = await self._ending_status(exc)
            raise EvaluationError(code, f"stream write failed: {detail}") from exc
        return fut

    async def _open(self) -> None:
        """Wait for the server to accept the stream before the first write. A write racing
        the server's refusal fails with INTERNAL "Internal error from Core", and grpc.aio
        then reports that as the call's status too (grpc/grpc#36066), losing the server's
        UNAUTHENTICATED; a refused call sends no STREAM_OPEN, only its status."""
        try:
            # shield: a timeout must not cancel the call's own metadata future
            metadata = await asyncio.wait_for(
                asyncio.shield(self.call.initial_metadata()), STREAM_OPEN_WAIT_S
            )
        except TimeoutError:  # a server that does not announce its streams: go on
            self.opened = True
            return
        if metadata is None or STREAM_OPEN not in tuple(metadata):
            try:  # refused: the status follows at once
                code = await asyncio.wait_for(asyncio.shield(self.call.code()), STREAM_OPEN_WAIT_S)
            except TimeoutError:
                code = None  # metadata without STREAM_OPEN and no status: go on
            if code is not None:
                self.dead = True
                if code == grpc.StatusCode.OK:
                    raise EvaluationError("UNAVAILABLE", "stream closed by the server")
                raise EvaluationError(code.name, (await self.call.details()) or "")
        self.opened = True

    async def _ending_status(self, exc: BaseException) -> tuple[str, str]:
        """The status that ended the call a write failed on. A write racing with the server
        ending the call (a restart) fails with INTERNAL "Internal error from Core" or
        InvalidStateError, whatever the server said: the call's own status says it."""
        try:
            code = await asyncio.wait_for(self.call.code(), WRITE_FAILURE_STATUS_S)
            return ended_status(code.name, (await self.call.details()) or "")
        except Exception:  # no status within the wait: what the write said
            if isinstance(exc, grpc.aio.AioRpcError):
                return ended_status(exc.code().name, exc.details() or "")
            return "UNAVAILABLE", str(exc)

    async def close(self) -> None:
        self.closed = True
        self.dead = True
        with contextlib.suppress(Exception):
            await self.call.done_writing()
        self.call.cancel()
        self.reader.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self.reader


def _discard(fut: asyncio.Future[inference_pb2.EvalResponse]) -> None:
    """Settle a future nobody will await: cancel it, or retrieve the exception it holds."""
    if not fut.done():
        fut.cancel()
    elif not fut.cancelled():
        fut.exception()


def _cancelling() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


class _ServersOutage(Outage):
    """The servers' outage: logged once; a full queue (RESOURCE_EXHAUSTED, back-pressure of
    a busy server, not an outage) only at debug level."""

    def failed(self, exc: BaseException) -> None:
        if isinstance(exc, EvaluationError) and exc.code == "RESOURCE_EXHAUSTED":
            self.log.debug("%s busy: %s", self.what, describe(exc))
            return
        super().failed(exc)


class InferenceClient:
    """Remote evaluator. ``addresses``: "host:port", a comma-separated list, or a list."""

    def __init__(
        self,
        addresses: str | list[str],
        token: str | None = None,
        *,
        streams: int = 4,
        max_retries: int = 6,
        backoff_s: float = 0.05,
        max_backoff_s: float = 2.0,
        tls_ca: str | bytes | os.PathLike[str] | None = None,
    ) -> None:
        if isinstance(addresses, str):
            addresses = [a.strip() for a in addresses.split(",") if a.strip()]
        if not addresses:
            raise ValueError("InferenceClient needs at least one address")
        self.addresses = list(addresses)
        self.metadata: tuple[tuple[str, str], ...] = auth_metadata(token) if token else ()
        # The CA of TLS servers (PEM bytes or file; None or "": plaintext).
        self.tls_ca = tls_ca
        self.num_streams = max(streams, len(self.addresses))
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.outage = _ServersOutage(f"inference {','.join(self.addresses)}", logger=log)
        self.evals = 0
        self.requests = 0
        self.retries = 0
        self._channels: list[grpc.aio.Channel] = []
        self._stubs: list[inference_pb2_grpc.InferenceStub] = []
        self._streams: list[_Stream | None] = [None] * self.num_streams
        self._rr = itertools.count()
        self._ids = itertools.count(1)
        self._closed = False

    def _ensure_channels(self) -> None:
        # Created on first use so they bind to the caller's event loop.
        if not self._channels:
            self._channels = [
                make_channel(
                    a,
                    tls_ca=self.tls_ca,
                    max_message_bytes=MAX_MESSAGE,
                    keepalive_time_ms=KEEPALIVE_MS,
                )
                for a in self.addresses
            ]
            self._stubs = [inference_pb2_grpc.InferenceStub(c) for c in self._channels]

    def _stream(self) -> _Stream:
        if self._closed:
            raise EvaluationError("CANCELLED", "client is closed")
        self._ensure_channels()
        i = next(self._rr) % self.num_streams
        s = self._streams[i]
        if s is None or s.dead:
            s = self._streams[i] = _Stream(self._stubs[i % len(self._stubs)], self.metadata)
        return s

    @property
    def stub(self) -> inference_pb2_grpc.InferenceStub:
        self._ensure_channels()
        return self._stubs[next(self._rr) % len(self._stubs)]

    async def evaluate(
        self,
        planes: np.ndarray,
        globals_: np.ndarray,
        *,
        model: str = "",
        want_ownership: bool = False,
    ) -> EvalResult:
        req = encode_request(0, planes, globals_, model=model, want_ownership=want_ownership)
        resp = await self.evaluate_request(req)
        policy, value, score, own = decode_response(resp, req.board_size)
        self.requests += 1
        self.evals += req.count
        return EvalResult(policy, value, score, own, model=resp.model)

    async def evaluate_request(self, req: inference_pb2.EvalRequest) -> inference_pb2.EvalResponse:
        """Send an already-encoded request (its request_id is overwritten); retry as above."""
        tries = 0

        async def attempt() -> inference_pb2.EvalResponse:
            nonlocal tries
            tries += 1
            if tries > 1:
                self.retries += 1
            req.request_id = next(self._ids)
            resp = await (await self._stream().send(req))
            if resp.error_code:
                raise EvaluationError(_STATUS_NAMES.get(resp.error_code, "UNKNOWN"), resp.error)
            return resp

        return await retry(
            attempt,
            attempts=self.max_retries + 1,
            backoff=self._backoff,
            retryable=self._retryable,
            outage=self.outage,
            what="inference",
        )

    def _backoff(self) -> Backoff:
        return Backoff(base_s=self.backoff_s, factor=2.0, cap_s=self.max_backoff_s)

    def _retryable(self, exc: BaseException) -> bool:
        return (
            isinstance(exc, EvaluationError)
            and exc.code in RETRYABLE
            and not self._closed
            and not is_tls_mismatch(exc)
        )

    async def model_info(self) -> inference_pb2.GetModelInfoResponse:
        return await self.stub.GetModelInfo(
            inference_pb2.GetModelInfoRequest(), metadata=self.metadata
        )

    async def stats(self) -> inference_pb2.InferenceStats:
        return await self.stub.GetInferenceStats(
            inference_pb2.GetInferenceStatsRequest(), metadata=self.metadata
        )

    async def close(self) -> None:
        self._closed = True
        for s in self._streams:
            if s is not None:
                await s.close()
        self._streams = [None] * self.num_streams
        for c in self._channels:
            await c.close()
        self._channels, self._stubs = [], []

    async def __aenter__(self) -> InferenceClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
