"""Where the fleet's CANCELLED Registers come from: gRPC core cancels a call that waited longer
than ``grpc.server_max_unrequested_time_in_server`` (30 s by default) for the application to
take it, whatever the client's deadline.

A bare ``grpc.aio`` server whose one handler holds the event loop for ``--hold-ms`` (as a
saturated coordinator does: the loop takes calls one at a time, between its other work), and
``--calls`` calls sent at once with a 120 s deadline: with gRPC's default the calls still
waiting after 30 s end CANCELLED; with the option the coordinator now sets
(kgrpc.net.server.server_options, 600 s) every call is answered. The CPU cost is small: the
handler sleeps.

    .venv/bin/python docs/results/issue26-engines-fleet/unrequested.py --calls 400 --hold-ms 100
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import time

import grpc

METHOD = "/bench.Hold/Call"


async def serve(options: list[tuple[str, int]], hold_s: float) -> tuple[grpc.aio.Server, int]:
    async def call(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        time.sleep(hold_s)  # holds the loop, as a busy coordinator's other work does
        return request

    handler = grpc.method_handlers_generic_handler(
        "bench.Hold", {"Call": grpc.unary_unary_rpc_method_handler(call)}
    )
    server = grpc.aio.server(options=options)
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, port


async def flood(port: int, calls: int) -> tuple[collections.Counter[str], float, float]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
        stub = ch.unary_unary(METHOD)
        start = time.perf_counter()
        first_cancel = [0.0]

        async def one() -> str:
            try:
                await stub(b"x", timeout=120)
                return "OK"
            except grpc.aio.AioRpcError as exc:
                if exc.code() == grpc.StatusCode.CANCELLED and not first_cancel[0]:
                    first_cancel[0] = time.perf_counter() - start
                return exc.code().name

        codes = collections.Counter(await asyncio.gather(*(one() for _ in range(calls))))
        return codes, time.perf_counter() - start, first_cancel[0]


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=400)
    ap.add_argument("--hold-ms", type=float, default=100.0)
    args = ap.parse_args()
    pending = [
        ("grpc.server.max_pending_requests", 50_000),
        ("grpc.server.max_pending_requests_hard_limit", 100_000),
    ]
    print(
        f"grpcio {grpc.__version__}; {args.calls} calls at once, each holding the loop "
        f"{args.hold_ms:.0f} ms (at most {1000 / args.hold_ms:.0f} calls/s taken)"
    )
    for name, options in (
        ("pending-call limits raised, unrequested time default (30 s)", pending),
        (
            "and grpc.server_max_unrequested_time_in_server=600",
            [*pending, ("grpc.server_max_unrequested_time_in_server", 600)],
        ),
    ):
        server, port = await serve(options, args.hold_ms / 1000)
        codes, took, first = await flood(port, args.calls)
        await server.stop(0)
        cancel = f", first CANCELLED after {first:.1f} s" if first else ""
        print(f"{name}: {dict(codes)} in {took:.1f} s{cancel}")


if __name__ == "__main__":
    asyncio.run(main())
