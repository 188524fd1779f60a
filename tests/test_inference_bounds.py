"""The inference server's memory against a client that sends and never reads (issue 11 item 6):
a real ``kgrpc-inference`` process, its RSS read with psutil."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import psutil
import pytest

from inference.wire import encode_request
from kgrpc.v1 import inference_pb2
from tests.inference_helpers import make_model, positions

ROOT = Path(__file__).resolve().parent.parent
MB = 1 << 20
EVALUATE = "/kgrpc.v1.Inference/Evaluate"


@pytest.mark.slow
async def test_a_client_that_never_reads_cannot_grow_the_server(tmp_path: Path) -> None:
    model = make_model(tmp_path / "m.onnx", "kg-b1c8-s0-d0")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "inference",
            "--model",
            str(model),
            "--listen",
            "127.0.0.1:0",
            "--device",
            "cpu",
            "--intra-threads",
            "1",
            "--log-every-s",
            "0",
            "--stream-window",
            "1024",
        ],
        cwd=ROOT,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        port = 0
        while not port:
            line = await asyncio.to_thread(proc.stderr.readline)  # type: ignore[union-attr]
            assert line, "kgrpc-inference exited"
            if m := re.search(r"listening on [\d.]+:(\d+)", line):
                port = int(m.group(1))
        threading.Thread(target=proc.stderr.read, daemon=True).start()  # type: ignore[union-attr]
        ps = psutil.Process(proc.pid)
        await asyncio.sleep(0.5)
        idle = ps.memory_info().rss / MB
        planes, g = positions(512, 9, 1)
        req = encode_request(1, planes, g, want_ownership=True)  # 94 KB; 170 KB answered
        sent = 0

        async def forever() -> AsyncIterator[inference_pb2.EvalRequest]:
            nonlocal sent
            while True:
                sent += 1
                yield req

        options = [
            ("grpc.max_send_message_length", 64 * MB),
            ("grpc.max_receive_message_length", 64 * MB),
        ]
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=options) as ch:
            call = ch.stream_stream(
                EVALUATE,
                request_serializer=inference_pb2.EvalRequest.SerializeToString,
                response_deserializer=inference_pb2.EvalResponse.FromString,
            )(forever())
            peak = idle
            for _ in range(40):  # 4 s of sending without reading a single answer
                await asyncio.sleep(0.1)
                peak = max(peak, ps.memory_info().rss / MB)
            # Before, the server read every request and queued every answer: thousands of
            # requests went out and its memory grew for as long as the client kept sending.
            assert sent < 300, sent
            assert peak - idle < 48, (idle, peak)
            call.cancel()
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=options) as ch:
            one = ch.unary_unary(
                "/kgrpc.v1.Inference/EvaluateOne",
                request_serializer=inference_pb2.EvalRequest.SerializeToString,
                response_deserializer=inference_pb2.EvalResponse.FromString,
            )
            resp = await one(req, timeout=30)
            stats = await ch.unary_unary(
                "/kgrpc.v1.Inference/GetInferenceStats",
                request_serializer=inference_pb2.GetInferenceStatsRequest.SerializeToString,
                response_deserializer=inference_pb2.InferenceStats.FromString,
            )(inference_pb2.GetInferenceStatsRequest(), timeout=30)
        assert resp.error_code == 0 and resp.count == 512
        assert stats.queue_depth == 0
        after = ps.memory_info().rss / MB
        # The idle figure is taken before the first evaluation, so ONNX Runtime's arena and
        # gRPC's buffers, which stay allocated, count here too (33 MB seen on a busy machine);
        # the bound is 128 MB within 30 s, this scaled-down test allows 48.
        for _ in range(300):
            if after - idle < 48:
                break
            await asyncio.sleep(0.1)
            after = ps.memory_info().rss / MB
        assert after - idle < 48, (idle, after)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
