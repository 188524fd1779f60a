"""Structured error details, the client's end (kgrpc/protocol.py): a client reads an answer's
``google.rpc.ErrorInfo`` from the ``grpc-status-details-bin`` trailer, falls back to the
message's old prefix only when the answer has no details (a coordinator of the last release),
and trusts details over the message. The coordinator's end is held by the tests of each error
(tests/test_precision_release.py, test_coordinator_gating.py, test_worker_version.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import grpc
import pytest

from kgrpc import protocol
from kgrpc.v1 import coordinator_pb2, coordinator_pb2_grpc

Answer = Callable[[grpc.aio.ServicerContext], object]


async def _download_error(answer: Answer) -> grpc.aio.AioRpcError:
    """The error a real CoordinatorStub gets from a loopback server whose DownloadModel answers
    as ``answer`` does."""

    async def download(
        request: coordinator_pb2.DownloadModelRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[coordinator_pb2.ModelChunk]:
        await answer(context)  # type: ignore[misc]
        yield coordinator_pb2.ModelChunk()

    handler = grpc.method_handlers_generic_handler(
        "kgrpc.v1.Coordinator",
        {
            "DownloadModel": grpc.unary_stream_rpc_method_handler(
                download,
                request_deserializer=coordinator_pb2.DownloadModelRequest.FromString,
                response_serializer=coordinator_pb2.ModelChunk.SerializeToString,
            )
        },
    )
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
            stub = coordinator_pb2_grpc.CoordinatorStub(ch)
            with pytest.raises(grpc.aio.AioRpcError) as err:
                async for _ in stub.DownloadModel(coordinator_pb2.DownloadModelRequest(name="m")):
                    pass
            return err.value
    finally:
        await server.stop(None)


def _structured(code: grpc.StatusCode, message: str, why: str) -> Answer:
    async def answer(context: grpc.aio.ServicerContext) -> None:
        trailer = protocol.status_trailer(code, message, why, {"model": "m"})
        await context.abort(code, message, trailer)

    return answer


def _plain(code: grpc.StatusCode, message: str) -> Answer:
    async def answer(context: grpc.aio.ServicerContext) -> None:
        await context.abort(code, message)

    return answer


NOT_FOUND = grpc.StatusCode.NOT_FOUND
ABSENT = protocol.reason(protocol.PRECISION_ABSENT)


async def test_the_client_reads_the_reason_from_the_details_not_the_message() -> None:
    # A message that no longer starts with the prefix (the release after next drops it).
    err = await _download_error(_structured(NOT_FOUND, "no fp16 file of model m", ABSENT))
    info = protocol.error_info(err)
    assert info is not None and info.reason == ABSENT and info.domain == protocol.ERROR_DOMAIN
    assert dict(info.metadata) == {"model": "m"}
    assert protocol.is_precision_absent(err)
    assert not protocol.is_match_superseded(err)  # another code and reason


async def test_details_win_over_a_message_that_looks_like_a_prefix() -> None:
    message = f"{protocol.PRECISION_ABSENT}: ... but the details say otherwise"
    err = await _download_error(_structured(NOT_FOUND, message, "MODEL_UNKNOWN"))
    assert not protocol.is_precision_absent(err)


async def test_an_answer_without_details_falls_back_to_the_prefix() -> None:
    old = await _download_error(_plain(NOT_FOUND, f"{protocol.PRECISION_ABSENT}: no fp16 file"))
    assert protocol.error_info(old) is None and protocol.is_precision_absent(old)
    unknown = await _download_error(_plain(NOT_FOUND, "no model 'm'"))
    assert not protocol.is_precision_absent(unknown)


async def test_details_that_disagree_with_the_call_are_ignored() -> None:
    # The error model requires the Status's code and message to be the call's own.
    async def answer(context: grpc.aio.ServicerContext) -> None:
        trailer = protocol.status_trailer(grpc.StatusCode.INTERNAL, "other", ABSENT)
        await context.abort(NOT_FOUND, "no model 'm'", trailer)

    err = await _download_error(answer)
    assert protocol.error_info(err) is None and not protocol.is_precision_absent(err)
