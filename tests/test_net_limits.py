"""Field limits (kgrpc/net/limits.py): every string, bytes and repeated field of every request of
every service has one, and each RPC of a real coordinator and inference server enforces it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from google.protobuf import message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor, MethodDescriptor
from google.protobuf.message import Message

from inference.models import ModelRegistry
from inference.server import InferenceServer
from kgrpc.coordinator import db
from kgrpc.net import limits
from kgrpc.v1 import coordinator_pb2, coordinator_pb2_grpc, inference_pb2, records_pb2
from tests.inference_helpers import make_model

ROOT = Path(__file__).resolve().parent.parent
SERVICES = [
    coordinator_pb2.DESCRIPTOR.services_by_name["Coordinator"],
    inference_pb2.DESCRIPTOR.services_by_name["Inference"],
]
SIZED = (FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_BYTES)


def pool_message(full_name: str) -> Descriptor:
    for module in (coordinator_pb2, inference_pb2, records_pb2):
        try:
            return module.DESCRIPTOR.pool.FindMessageTypeByName(full_name)
        except KeyError:
            continue
    raise KeyError(full_name)


def bounded_fields(desc: Descriptor, seen: set[str] | None = None) -> list[str]:
    """Full names of the string, bytes and repeated fields reachable from ``desc`` (nested
    messages and the messages carried in bytes fields, limits.EMBEDDED, included)."""
    seen = set() if seen is None else seen
    if desc.full_name in seen:
        return []
    seen.add(desc.full_name)
    out: list[str] = []
    for f in desc.fields:
        if f.is_repeated or f.type in SIZED:
            out.append(f.full_name)
        if f.type == FieldDescriptor.TYPE_MESSAGE:
            out.extend(bounded_fields(f.message_type, seen))
        if f.full_name in limits.EMBEDDED:
            out.extend(bounded_fields(pool_message(limits.EMBEDDED[f.full_name]), seen))
    return out


def all_request_fields() -> set[str]:
    seen: set[str] = set()
    found: set[str] = set()
    for service in SERVICES:
        for method in service.methods:
            found.update(bounded_fields(method.input_type, seen))
    return found


def test_every_string_bytes_and_repeated_request_field_has_a_limit() -> None:
    found = all_request_fields()
    assert len(found) > 30
    missing = sorted(f for f in found if f not in limits.FIELDS and f not in limits.ELSEWHERE)
    assert not missing, f"fields without a limit in kgrpc/net/limits.py: {missing}"
    stale = sorted((set(limits.FIELDS) | set(limits.ELSEWHERE)) - found)
    assert not stale, f"limits of fields no request has: {stale}"
    assert not set(limits.FIELDS) & set(limits.ELSEWHERE)


def test_the_operations_docs_table_is_limits_py() -> None:
    # The table is written from limits.py (scripts/limits_table.py): a new limit needs no row
    # by hand, only the script run; a stale table fails here, saying to run it.
    script = ROOT / "scripts" / "limits_table.py"
    proc = subprocess.run(
        [sys.executable, str(script), "--check"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = (ROOT / "docs" / "operations.md").read_text()
    for name in [*limits.FIELDS, *limits.ELSEWHERE]:
        assert f"`{name.removeprefix('kgrpc.v1.')}`" in doc, name


def oversized(desc: Descriptor) -> tuple[Message, str, int] | None:
    """A request with one field just over its limit, the field's name and the limit; None
    when no field of ``desc`` has a limit of its own."""
    msg = message_factory.GetMessageClass(desc)()
    for f in desc.fields:
        limit = limits.FIELDS.get(f.full_name)
        if limit is not None:
            if f.is_repeated:
                getattr(msg, f.name).extend(
                    message_factory.GetMessageClass(f.message_type)() for _ in range(limit + 1)
                )
            elif f.type == FieldDescriptor.TYPE_STRING:
                setattr(msg, f.name, "x" * (limit + 1))
            else:
                setattr(msg, f.name, b"x" * (limit + 1))
            return msg, f.full_name.removeprefix("kgrpc.v1."), limit
        if f.type == FieldDescriptor.TYPE_MESSAGE and not f.is_repeated:
            inner = oversized(f.message_type)
            if inner is not None:
                getattr(msg, f.name).CopyFrom(inner[0])
                return msg, inner[1], inner[2]
    return None


async def call(channel: grpc.aio.Channel, method: MethodDescriptor, request: Message) -> None:
    path = f"/{method.containing_service.full_name}/{method.name}"
    out = message_factory.GetMessageClass(method.output_type).FromString
    ser = type(request).SerializeToString
    if method.client_streaming:
        await channel.stream_unary(path, request_serializer=ser, response_deserializer=out)(
            iter([request])
        )
    elif method.server_streaming:
        async for _ in channel.unary_stream(
            path, request_serializer=ser, response_deserializer=out
        )(request):
            pass
    else:
        await channel.unary_unary(path, request_serializer=ser, response_deserializer=out)(request)


async def test_every_coordinator_rpc_refuses_a_field_over_its_limit(coordinator) -> None:
    tested: list[str] = []
    async with coordinator.channel("trainer") as ch:
        for method in SERVICES[0].methods:
            case = oversized(method.input_type)
            if case is None:
                continue
            request, field, limit = case
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await call(ch, method, request)
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, method.name
            assert field in err.value.details() and f"limit is {limit}" in err.value.details()
            tested.append(method.name)
        stats = await coordinator_pb2_grpc.CoordinatorStub(ch).GetStats(
            coordinator_pb2.GetStatsRequest()
        )
    # Which RPCs: every one whose request carries a field of limits.FIELDS, found from the
    # descriptors above (a new RPC adds nothing here); a few known ones must be among them,
    # so that a walk that finds nothing cannot pass.
    assert {"Register", "GetTask", "PublishModel", "ListGames"} <= set(tested)
    assert stats.workers_total == 0  # nothing was registered by the refused Register


async def test_inference_refuses_a_model_name_over_its_limit(tmp_path: Path) -> None:
    reg = ModelRegistry(device="cpu", intra_threads=1)
    await reg.load(str(make_model(tmp_path / "m.onnx", "kg-b1c8-s0-d0")), pinned=True)
    server = InferenceServer(reg)
    port = await server.start("127.0.0.1:0")
    req = inference_pb2.EvalRequest(request_id=7, model="m" * 201, board_size=9, count=1)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
            method = SERVICES[1].methods_by_name["EvaluateOne"]
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await call(ch, method, req)
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "EvalRequest.model has 201 characters; the limit is 200" in err.value.details()
            stream = ch.stream_stream(
                "/kgrpc.v1.Inference/Evaluate",
                request_serializer=inference_pb2.EvalRequest.SerializeToString,
                response_deserializer=inference_pb2.EvalResponse.FromString,
            )(iter([req]))
            replies = [r async for r in stream]
    finally:
        await server.stop(0)
    assert [(r.request_id, r.error_code) for r in replies] == [(7, 3)]
    assert "limit is 200" in replies[0].error


@pytest.mark.slow
async def test_stats_stay_answerable_with_many_workers_and_rows_can_be_removed(coordinator) -> None:
    async with coordinator.channel() as ch:
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)
        ids = [
            (await stub.Register(coordinator_pb2.RegisterRequest(username=f"u{i}"))).worker_id
            for i in range(130)
        ]
        # a row written before the limits existed, with a name of 2 MB
        conn = db.connect(coordinator.data_dir)
        conn.execute(
            "INSERT INTO workers (worker_id, username, registered_ms, "
            "last_heartbeat_ms) VALUES ('w-old', ?, 0, 1)",
            ("n" * (2 << 20),),
        )
        conn.close()
        first = await stub.GetStats(coordinator_pb2.GetStatsRequest())
        rest = await stub.GetStats(
            coordinator_pb2.GetStatsRequest(workers_offset=100, workers_limit=50)
        )
    assert first.workers_total == rest.workers_total == 131
    assert len(first.workers) == 100 and len(rest.workers) == 31
    listed = [w.worker_id for w in [*first.workers, *rest.workers]]
    assert sorted(listed) == sorted([*ids, "w-old"])
    assert [len(w.username) for w in rest.workers if w.worker_id == "w-old"] == [limits.LABEL]

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "kgrpc.coordinator",
                "workers",
                *args,
                "--data-dir",
                str(coordinator.data_dir),
            ],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=60,
        )

    listing = cli("list")
    assert listing.returncode == 0, listing.stderr
    lines = listing.stdout.splitlines()
    assert len(lines) == 132 and max(map(len, lines)) < 100
    removed = cli("remove", "w-old", ids[0], "w-nobody")
    assert removed.returncode == 1 and "removed 2 worker(s)" in removed.stdout
    assert "no such worker: w-nobody" in removed.stderr
    by_token = cli("remove", "--token-id", "1")  # the worker token's: every other worker
    assert "removed 129 worker(s)" in by_token.stdout
    async with coordinator.channel() as ch:
        stats = await coordinator_pb2_grpc.CoordinatorStub(ch).GetStats(
            coordinator_pb2.GetStatsRequest()
        )
    assert stats.workers_total == 0
