"""``kgrpc-bench inference``: raw ONNX Runtime vs in-process batcher vs the gRPC server.

One run, one model, four figures: (a) raw ORT evals/s at batch --max-batch (the ceiling);
(b) LocalEvaluator with --clients coroutines, one position each in flight; (c) the gRPC server
(a separate process, so the load generator does not share its GIL) with --clients coroutines
sending one position per request over --streams bidi streams; (d) the same with --batch
positions per request. Latency p50/p99 per request and mean batch size for each, plus how busy
the machine was (other processes' share of all CPUs during the run).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from kgrpc.schema import NUM_GLOBALS, NUM_PLANES

HELP = "inference throughput: raw ONNX Runtime, in-process batcher, gRPC server (1 and K/request)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", help="ONNX model (default: a fresh --arch net)")
    parser.add_argument("--arch", default="b6c96", help="net for a fresh model (default b6c96)")
    parser.add_argument("--board-size", type=int, default=0,
                        help="board size (default: the model's largest, 19 for a fresh one)")
    parser.add_argument("--clients", type=int, default=64, help="concurrent clients (64)")
    parser.add_argument("--batch", type=int, default=8, help="positions per request in (d)")
    parser.add_argument("--seconds", type=float, default=5.0, help="seconds per measurement")
    parser.add_argument("--max-batch", type=int, default=64, help="server/batcher max batch")
    parser.add_argument("--max-delay-ms", type=float, default=2.0, help="batch delay")
    parser.add_argument("--in-flight", type=int, default=0,
                        help="batches run at once per model (0 = automatic: 2 on CUDA, 1 on CPU)")
    parser.add_argument("--streams", type=int, default=8, help="bidi streams of the client")
    parser.add_argument("--device", default="auto", choices=["auto", "cuda", "cpu"])
    parser.add_argument("--no-sweep", dest="sweep", action="store_false",
                        help="skip the raw evals/s by batch size sweep")
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")


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


def bench_raw(path: str, n: int, batch: int, seconds: float, device: str,
              engine: Any = None) -> dict[str, float]:
    from inference.engine import Engine
    from inference.wire import pack_planes

    eng = engine or Engine(path, device=device)
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
    return {"evals_per_s": len(lat) * batch / elapsed, "p50_ms": p50, "p99_ms": p99,
            "mean_batch": float(batch), "provider": eng.provider}  # type: ignore[dict-item]


async def _drive(evaluate, clients: int, per_req: int, n: int, seconds: float  # type: ignore[no-untyped-def]
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
            await evaluate(planes[k:k + per_req], g[k:k + per_req])
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

    ev = LocalEvaluator(path, device=args.device, max_batch=args.max_batch,
                        max_delay_ms=args.max_delay_ms, in_flight=args.in_flight)
    await ev.start()
    m = ev.metrics
    b0, p0 = m.batches, m.batched_positions
    rate, lat = await _drive(ev.evaluate, args.clients, 1, n, args.seconds)
    mean_batch = (m.batched_positions - p0) / max(1, m.batches - b0)
    await ev.close()
    p50, p99 = _pcts(lat)
    return {"evals_per_s": rate, "p50_ms": p50, "p99_ms": p99, "mean_batch": mean_batch}


def start_server(args: argparse.Namespace, path: str, log_path: Path) -> tuple[subprocess.Popen[bytes], str]:
    cmd = [sys.executable, "-m", "inference", "--listen", "127.0.0.1:0", "--model", path,
           "--device", args.device, "--max-batch", str(args.max_batch), "--max-delay-ms",
           str(args.max_delay_ms), "--in-flight", str(args.in_flight), "--log-every-s", "0",
           "--max-queue", str(max(8192, args.clients * args.batch * 2))]
    log = open(log_path, "wb")  # noqa: SIM115 - closed with the process
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                            env={**os.environ, "GRPC_VERBOSITY": "ERROR"})
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


async def bench_grpc(args: argparse.Namespace, addr: str, n: int, per_req: int
                     ) -> dict[str, float]:
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


def run(args: argparse.Namespace) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="kgrpc-bench-inf-"))
    path = args.model
    if not path:
        from trainer.export import init_model
        from trainer.model import parse_arch

        blocks, channels = parse_arch(args.arch)
        n0 = args.board_size or 19
        path = str(tmp / f"{args.arch}.onnx")
        init_model(n0, blocks, channels, path)
    n = args.board_size
    if not n:
        from inference.engine import Engine

        sizes = Engine(path, device="cpu").info.metadata.get("board_sizes", "19")
        n = max(int(s) for s in sizes.split(","))

    proc, addr = start_server(args, path, tmp / "server.log")
    busy = Busyness([os.getpid(), proc.pid])
    busy.start()
    try:
        raw = bench_raw(path, n, args.max_batch, args.seconds, args.device)
        sweep = bench_sweep(path, n, args.max_batch, args.seconds, args.device) if args.sweep else {}
        local = asyncio.run(bench_local(args, path, n))
        grpc1 = asyncio.run(bench_grpc(args, addr, n, 1))
        grpck = asyncio.run(bench_grpc(args, addr, n, args.batch))
    finally:
        others = busy.stop()
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()

    rows = [(f"(a) raw ORT, batch {args.max_batch}", raw),
            ("(b) in-process batcher", local),
            ("(c) gRPC, 1 position/request", grpc1),
            (f"(d) gRPC, {args.batch} positions/request", grpck)]
    print(f"model {Path(path).name} board {n}x{n} clients {args.clients} "
          f"provider {raw['provider']} cpus {os.cpu_count()}")
    print(f"{'mode':36} {'evals/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'mean batch':>10}")
    for label, r in rows:
        print(f"{label:36} {r['evals_per_s']:9.0f} {r['p50_ms']:8.2f} {r['p99_ms']:8.2f} "
              f"{r['mean_batch']:10.1f}")
    if sweep:
        print("raw ORT evals/s by batch size: " + "  ".join(f"{b}: {v:.0f}" for b, v in sweep.items()))
    ratio = grpc1["evals_per_s"] / raw["evals_per_s"]
    print(f"grpc/raw {ratio:.2f}   local/raw {local['evals_per_s'] / raw['evals_per_s']:.2f}   "
          f"other processes used {others:.0%} of the CPUs during the run")
    return {
        "raw_evals_per_s": raw["evals_per_s"],
        "local_evals_per_s": local["evals_per_s"],
        "grpc_evals_per_s": grpc1["evals_per_s"],
        "grpc_batched_evals_per_s": grpck["evals_per_s"],
        "grpc_over_raw": ratio,
        "mean_batch_size": grpc1["mean_batch"],
        "local_mean_batch_size": local["mean_batch"],
        "grpc_batched_mean_batch_size": grpck["mean_batch"],
        "latency_ms": {label: {"p50": r["p50_ms"], "p99": r["p99_ms"]} for label, r in rows},
        "board_size": n,
        "clients": args.clients,
        "max_batch": args.max_batch,
        "provider": raw["provider"],
        "other_processes_cpu_share": others,
        "raw_by_batch": {str(b): v for b, v in sweep.items()},
    }


def bench_sweep(path: str, n: int, max_batch: int, seconds: float, device: str) -> dict[int, float]:
    """Raw ONNX Runtime evals/s at batch sizes 1, 2, 4, ... up to 2 * max_batch (one session)."""
    from inference.engine import Engine

    eng = Engine(path, device=device)
    sizes = [b for b in (1, 2, 4, 8, 16, 32, 64, 128, 256) if b <= 2 * max_batch]
    each = max(1.0, seconds / len(sizes))
    return {b: bench_raw(path, n, b, each, device, engine=eng)["evals_per_s"] for b in sizes}
