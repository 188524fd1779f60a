"""The load measurements of ``kgrpc-bench inference``: raw ONNX Runtime, the in-process
batcher, the gRPC server, and how busy the rest of the machine was.

:func:`bench_raw` times bare engine runs at one batch (:func:`bench_sweep`: at batch sizes 1, 2,
4, ...); :func:`bench_local` drives :class:`inference.local.LocalEvaluator` and
:func:`bench_grpc` an inference server (:func:`start_server`, a separate process) with
concurrent clients, each with latency percentiles and mean batch size; :class:`Busyness` is
other processes' share of all CPUs meanwhile.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from kgrpc.schema import NUM_GLOBALS, NUM_PLANES


class Busyness:
    """Other processes' CPU use, as a share of all CPUs, between start() and stop()."""

    def __init__(self, ours: list[int]) -> None:
        import psutil

        self.psutil = psutil
        self.ours = ours

    def _ours_cpu(self) -> float:
        total = 0.0
        for pid in self.ours:
            try:
                t = self.psutil.Process(pid).cpu_times()
                total += t.user + t.system + t.children_user + t.children_system
            except self.psutil.Error:
                pass
        return total

    def start(self) -> None:
        t = self.psutil.cpu_times()
        self.t0 = time.monotonic()
        self.busy0 = t.user + t.system + t.nice + getattr(t, "irq", 0) + getattr(t, "softirq", 0)
        self.ours0 = self._ours_cpu()

    def stop(self) -> float:
        t = self.psutil.cpu_times()
        busy = t.user + t.system + t.nice + getattr(t, "irq", 0) + getattr(t, "softirq", 0)
        wall = (time.monotonic() - self.t0) * (os.cpu_count() or 1)
        others = (busy - self.busy0) - (self._ours_cpu() - self.ours0)
        return max(0.0, others / wall) if wall > 0 else 0.0


def _positions(count: int, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    planes = rng.random((count, NUM_PLANES, n, n)) < 0.25
    planes[:, 0] = True
    return planes, rng.uniform(-0.5, 0.5, (count, NUM_GLOBALS)).astype(np.float32)


def _pcts(lat: list[float]) -> tuple[float, float]:
    if not lat:
        return 0.0, 0.0
    a = np.asarray(lat) * 1000.0
    return float(np.percentile(a, 50)), float(np.percentile(a, 99))


def bench_raw(
    path: str,
    n: int,
    batch: int,
    seconds: float,
    device: str,
    engine: Any = None,
    precision: str = "auto",
) -> dict[str, float]:
    from inference.engine import Engine
    from inference.wire import pack_planes

    eng = engine or Engine(path, device=device, precision=precision)
    planes, g = _positions(batch, n, 1)
    packed = pack_planes(planes)
    eng.run(n, packed, g)  # warm-up
    lat: list[float] = []
    t_end = time.perf_counter() + seconds
    t0 = time.perf_counter()
    while time.perf_counter() < t_end:
        t = time.perf_counter()
        eng.run(n, packed, g)
        lat.append(time.perf_counter() - t)
    elapsed = time.perf_counter() - t0
    p50, p99 = _pcts(lat)
    return {
        "evals_per_s": len(lat) * batch / elapsed,
        "p50_ms": p50,
        "p99_ms": p99,
        "mean_batch": float(batch),
        "provider": eng.provider,  # type: ignore[dict-item]
        "precision": eng.precision,
    }  # type: ignore[dict-item]


async def _drive(
    evaluate,
    clients: int,
    per_req: int,
    n: int,
    seconds: float,  # type: ignore[no-untyped-def]
) -> tuple[float, list[float]]:
    planes, g = _positions(256, n, 2)
    lat: list[float] = []
    done = 0
    stop = time.perf_counter() + seconds

    async def client(i: int) -> None:
        nonlocal done
        j = i
        while time.perf_counter() < stop:
            k = (j * per_req) % (256 - per_req)
            t = time.perf_counter()
            await evaluate(planes[k : k + per_req], g[k : k + per_req])
            lat.append(time.perf_counter() - t)
            done += per_req
            j += 1

    # Warm-up so session start and stream setup are not measured.
    await asyncio.gather(*[evaluate(planes[:per_req], g[:per_req]) for _ in range(4)])
    t0 = time.perf_counter()
    await asyncio.gather(*[client(i) for i in range(clients)])
    return done / (time.perf_counter() - t0), lat


async def bench_local(args: argparse.Namespace, path: str, n: int) -> dict[str, float]:
    from inference.local import LocalEvaluator

    ev = LocalEvaluator(
        path,
        device=args.device,
        precision=args.run_precision,
        max_batch=args.max_batch,
        max_delay_ms=args.max_delay_ms,
        in_flight=args.in_flight,
    )
    await ev.start()
    m = ev.metrics
    b0, p0 = m.batches, m.batched_positions
    rate, lat = await _drive(ev.evaluate, args.clients, 1, n, args.seconds)
    mean_batch = (m.batched_positions - p0) / max(1, m.batches - b0)
    await ev.close()
    p50, p99 = _pcts(lat)
    return {"evals_per_s": rate, "p50_ms": p50, "p99_ms": p99, "mean_batch": mean_batch}


def start_server(
    args: argparse.Namespace, path: str, log_path: Path
) -> tuple[subprocess.Popen[bytes], str]:
    cmd = [
        sys.executable,
        "-m",
        "inference",
        "--listen",
        "127.0.0.1:0",
        "--model",
        path,
        "--device",
        args.device,
        "--precision",
        args.run_precision,
        "--max-batch",
        str(args.max_batch),
        "--max-delay-ms",
        str(args.max_delay_ms),
        "--in-flight",
        str(args.in_flight),
        "--log-every-s",
        "0",
        "--max-queue",
        str(max(8192, args.clients * args.batch * 2)),
    ]
    log = open(log_path, "wb")  # noqa: SIM115 - closed with the process
    proc = subprocess.Popen(
        cmd, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "GRPC_VERBOSITY": "ERROR"}
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        m = re.search(rb"listening on (\S+:\d+)", log_path.read_bytes())
        if m:
            return proc, m.group(1).decode()
        if proc.poll() is not None:
            raise RuntimeError(f"inference server exited: {log_path.read_text()[-2000:]}")
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError("inference server did not start within 60 s")


async def bench_grpc(args: argparse.Namespace, addr: str, n: int, per_req: int) -> dict[str, float]:
    from inference.client import InferenceClient

    client = InferenceClient(addr, streams=args.streams)

    async def evaluate(p: np.ndarray, g: np.ndarray) -> Any:
        return await client.evaluate(p, g)

    await evaluate(*_positions(per_req, n, 3))
    s0 = await client.stats()
    rate, lat = await _drive(evaluate, args.clients, per_req, n, args.seconds)
    s1 = await client.stats()
    await client.close()
    batches = max(1, s1.batches - s0.batches)
    # positions counted by the server include the warm-up calls of _drive (4 requests).
    mean_batch = (s1.positions - s0.positions) / batches
    p50, p99 = _pcts(lat)
    return {"evals_per_s": rate, "p50_ms": p50, "p99_ms": p99, "mean_batch": mean_batch}


def bench_sweep(
    path: str, n: int, max_batch: int, seconds: float, device: str, precision: str = "auto"
) -> dict[int, float]:
    """Raw ONNX Runtime evals/s at batch sizes 1, 2, 4, ... up to 2 * max_batch (one session)."""
    from inference.engine import Engine

    eng = Engine(path, device=device, precision=precision)
    sizes = [b for b in (1, 2, 4, 8, 16, 32, 64, 128, 256) if b <= 2 * max_batch]
    each = max(1.0, seconds / len(sizes))
    return {b: bench_raw(path, n, b, each, device, engine=eng)["evals_per_s"] for b in sizes}
