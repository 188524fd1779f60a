"""``kgrpc-bench fleet``: many simulated volunteers against one or more coordinator replicas.

Each volunteer (kgrpc.programs.bench.fleet_sim) is one asyncio task over a few shared
channels (``--channels``; each over every replica, gRPC's round_robin), so thousands fit in
one process: it registers, watches models, heartbeats, takes tasks and uploads real games at
``--games-per-minute`` (default one a minute, a volunteer's pace). Registrations are spread
over ``--ramp-s``; heartbeats follow the interval the coordinator gives (it grows with the
fleet beyond ``--max-heartbeats-per-s``, kgrpc.coordinator.pace). Figures: per RPC the
calls, p50, p99 and worst latency in ms; errors (RPCs that failed, by status code, and games
not accepted); games accepted per second; the
coordinators' CPU (cores, with their validation processes) and peak memory (RSS), and this
process's CPU (the volunteers: when it nears a core, the fleet, not the coordinator, is the
limit). ``--json FILE`` has ``errors`` (the total) and ``p99_ms`` (the worst RPC's p99) at
the top level; ``steady_p99_ms`` (and ``steady_*`` per RPC) is the same of the calls started
after the ramp, the load of a fleet that is up, without the burst of registrations.
Target (issue 26): 10,000 volunteers on loopback, 0 errors, every p99 < 1 s.

Without ``--coordinator`` the benchmark starts its own replicas on ``--backend`` (sqlite;
pg-s3 and pg-s3-x2 start PostgreSQL and SeaweedFS: kgrpc.programs.bench.cluster) and
publishes a first model (``--model``, or a tiny random one made with the trainer). With
``--coordinator HOST:PORT[,HOST:PORT...]`` it takes running replicas and a worker
``--token``; it needs a released model there, or ``--trainer-token`` and ``--model`` to
publish one. Their CPU and memory are read when they listen on this machine.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kgrpc.cli_help import env_flag
from kgrpc.programs.bench.cluster import BACKENDS, cpu_seconds, rss_bytes

HELP = (
    "simulated volunteers (Register, Heartbeat, GetTask, WatchModels, UploadGames) against "
    "one or more replicas: p50/p99 per RPC, errors, the coordinators' CPU and memory"
)
TARGET_WORKERS = 10_000
TARGET_P99_MS = 1000.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    env_flag(
        parser,
        "--coordinator",
        default="",
        help="running replicas, HOST:PORT[,HOST:PORT...] (empty: start them here on --backend)",
    )
    env_flag(parser, "--token", default="", help="worker token (with --coordinator)")
    env_flag(
        parser,
        "--trainer-token",
        default="",
        help="trainer token, to publish --model when the coordinator has released none",
    )
    env_flag(parser, "--model", default="", help="model file to publish first (.onnx)")
    env_flag(parser, "--workers", type=int, default=100, help="simulated volunteers")
    env_flag(parser, "--seconds", type=float, default=30.0, help="how long the fleet runs")
    env_flag(
        parser,
        "--games-per-minute",
        type=float,
        default=1.0,
        help="games each volunteer uploads per minute (0: none)",
    )
    env_flag(
        parser,
        "--ramp-s",
        type=float,
        default=-1.0,
        help="registrations spread over this many seconds (-1: a quarter of --seconds, at most 30)",
    )
    env_flag(parser, "--channels", type=int, default=4, help="channels the volunteers share")
    env_flag(
        parser,
        "--backend",
        default="sqlite",
        choices=list(BACKENDS),
        help="without --coordinator: where the replicas started here keep their state",
    )
    env_flag(
        parser,
        "--heartbeat-s",
        type=int,
        default=30,
        help="without --coordinator: the replicas' heartbeat interval (their default: 30)",
    )
    env_flag(
        parser,
        "--max-heartbeats-per-s",
        type=float,
        default=-1.0,
        help="without --coordinator: the replicas' max_heartbeats_per_s, the fleet's heartbeat "
        "rate beyond which the interval grows (-1: their default; 0: a fixed interval)",
    )
    env_flag(
        parser,
        "--validate-workers",
        type=int,
        default=0,
        help="without --coordinator: validation processes per replica (0 = one per core)",
    )
    env_flag(parser, "--json", metavar="FILE", help="also write the figures as JSON to FILE")


def _tiny_model(folder: Path) -> Path:
    """A random 1-block net for boards 9, 13 and 19 (the default curriculum's sizes)."""
    try:
        from trainer.export import init_model
    except ImportError as exc:
        raise SystemExit(f"kgrpc-bench fleet: give --model FILE (no trainer here: {exc})") from None
    path = folder / "kg-b1c8-s0-d0.onnx"
    init_model([9, 13, 19], 1, 8, path, name="kg-b1c8-s0-d0")
    return path


async def _ensure_model(address: str, token: str, trainer_token: str, model: str) -> None:
    """Publish ``model`` when the coordinator has released none; SystemExit if it cannot."""
    from kgrpc.net import make_channel
    from kgrpc.v1 import coordinator_pb2, coordinator_pb2_grpc

    async with make_channel(address, token=token) as ch:
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)
        latest = await stub.GetLatestModel(coordinator_pb2.GetLatestModelRequest(), timeout=60)
    if latest.found:
        return
    if not (trainer_token and model):
        raise SystemExit(
            "kgrpc-bench fleet: the coordinator has no released model, so volunteers would "
            "get no task: publish one, or give --trainer-token and --model"
        )
    from trainer.publish import publish_model

    resp = await publish_model(address.split(",")[0], trainer_token, model, timeout_s=300)
    print(f"published {resp.model.name}")


def _listening_pids(address: str) -> list[int]:
    """The processes of this machine listening on the replicas' ports ([] if none is seen)."""
    import psutil

    from kgrpc.net.channel import split_addresses

    ports = {port for _, port in split_addresses(address)}
    try:
        conns = psutil.net_connections(kind="tcp")
    except psutil.Error:
        return []
    return sorted(
        {c.pid for c in conns if c.pid and c.status == "LISTEN" and c.laddr.port in ports}
    )


async def _drive(args: argparse.Namespace, address: str, token: str, pids: list[int]) -> dict:
    import psutil

    from kgrpc.net import make_channel
    from kgrpc.programs.bench.fleet_sim import GamePool, Plan, Recorder, Volunteer
    from kgrpc.v1 import coordinator_pb2, coordinator_pb2_grpc

    replicas = address.split(",")
    channels = []
    for c in range(max(1, args.channels)):
        first = c % len(replicas)
        channels.append(make_channel(",".join(replicas[first:] + replicas[:first]), token=token))
    stubs = [coordinator_pb2_grpc.CoordinatorStub(ch) for ch in channels]
    rec, pool = Recorder(), GamePool()
    # The pool's games for the task kind in play, made before the clock starts.
    probe = await stubs[0].GetTask(coordinator_pb2.GetTaskRequest(), timeout=60)
    if probe.HasField("selfplay"):
        pool.game(probe, "")
    ramp = args.ramp_s if args.ramp_s >= 0 else min(30.0, args.seconds / 4)
    start = time.perf_counter()
    plan = Plan(args.workers, args.games_per_minute, ramp, start + args.seconds)
    rec.steady_from, rec.ramp_s = start + ramp, ramp
    peak = [0, 0]
    done = asyncio.Event()

    async def sample() -> None:
        while not done.is_set():
            own, total = rss_bytes(pids)
            peak[0], peak[1] = max(peak[0], own), max(peak[1], total)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(done.wait(), 0.5)

    sampler = asyncio.ensure_future(sample())
    cpu0, me0 = cpu_seconds(pids), psutil.Process().cpu_times()
    volunteers = [Volunteer(i, stubs[i % len(stubs)], rec, pool, plan) for i in range(args.workers)]
    await asyncio.gather(*(v.run() for v in volunteers))
    elapsed = time.perf_counter() - start
    cpu1, me1 = cpu_seconds(pids), psutil.Process().cpu_times()
    done.set()
    await sampler
    for ch in channels:
        await ch.close()
    fleet_cpu = (me1.user + me1.system) - (me0.user + me0.system)
    return _figures(args, rec, elapsed, ramp, len(replicas), pids, cpu1 - cpu0, fleet_cpu, peak)


def _figures(
    args: argparse.Namespace,
    rec: Any,
    elapsed: float,
    ramp: float,
    replicas: int,
    pids: list[int],
    coord_cpu: float,
    fleet_cpu: float,
    peak: list[int],
) -> dict[str, Any]:
    from kgrpc.programs.bench.fleet_sim import RPCS, percentile

    rpcs: dict[str, dict[str, Any]] = {}
    for rpc in RPCS:
        lat = rec.latencies.get(rpc, [])
        errs = {code: n for (r, code), n in rec.errors.items() if r == rpc}
        steady = rec.steady.get(rpc, [])
        rpcs[rpc] = {
            "calls": len(lat),
            "p50_ms": round(percentile(lat, 0.5), 2),
            "p99_ms": round(percentile(lat, 0.99), 2),
            "max_ms": round(max(lat, default=0.0), 2),
            "steady_calls": len(steady),
            "steady_p99_ms": round(percentile(steady, 0.99), 2),
            "errors": sum(errs.values()),
            "error_codes": errs,
            "first_errors": {c: m for (r, c), m in rec.first_error.items() if r == rpc},
        }
    measured = bool(pids)
    result: dict[str, Any] = {
        "workers": args.workers,
        "registered": rec.registered,
        "seconds": round(elapsed, 2),
        "ramp_s": round(ramp, 2),
        "games_per_minute": args.games_per_minute,
        "replicas": replicas,
        "channels": max(1, args.channels),
        "backend": args.backend if not args.coordinator else "external",
        "errors": rec.total_errors(),
        "rpc_errors": sum(rec.errors.values()),
        "games_not_accepted": dict(rec.not_accepted),
        "p99_ms": max(r["p99_ms"] for r in rpcs.values()),
        "steady_p99_ms": max(r["steady_p99_ms"] for r in rpcs.values()),
        "rpcs": rpcs,
        "games_accepted": rec.accepted,
        "games_per_s": round(rec.accepted / elapsed, 2) if elapsed else 0.0,
        "task_waits": rec.waits,
        "heartbeat_interval_min_s": rec.interval_min_s,
        "heartbeat_interval_max_s": rec.interval_max_s,
        "coordinator_measured": measured,
        "coordinator_cpu_cores": round(coord_cpu / elapsed, 2) if measured else None,
        "coordinator_peak_rss_mb": round(peak[0] / 2**20, 1) if measured else None,
        "coordinator_peak_rss_with_pool_mb": round(peak[1] / 2**20, 1) if measured else None,
        "fleet_cpu_cores": round(fleet_cpu / elapsed, 2),
        "cpus": os.cpu_count(),
        "target_workers": TARGET_WORKERS,
        "target_p99_ms": TARGET_P99_MS,
    }
    result["met"] = bool(result["errors"] == 0 and result["p99_ms"] < TARGET_P99_MS)
    _print(result)
    return result


def _print(r: dict[str, Any]) -> None:
    print(
        f"fleet: {r['workers']} volunteers ({r['registered']} registered) on {r['replicas']} "
        f"replica(s), {r['seconds']} s, {r['games_per_minute']} game(s)/min each"
    )
    print(
        f"{'rpc':<13}{'calls':>8}{'p50 ms':>10}{'p99 ms':>10}{'max ms':>10}{'errors':>8}"
        f"{'after ramp: calls':>19}{'p99 ms':>10}"
    )
    for rpc, f in r["rpcs"].items():
        print(
            f"{rpc:<13}{f['calls']:>8}{f['p50_ms']:>10}{f['p99_ms']:>10}{f['max_ms']:>10}"
            f"{f['errors']:>8}{f['steady_calls']:>19}{f['steady_p99_ms']:>10}"
            f"  {f['error_codes'] or ''}"
        )
    print(
        f"errors {r['errors']} (RPCs {r['rpc_errors']}, games not accepted "
        f"{r['games_not_accepted'] or 0}); worst p99 {r['p99_ms']} ms ({r['steady_p99_ms']} "
        f"ms after the {r['ramp_s']} s ramp); "
        f"{r['games_accepted']} games accepted ({r['games_per_s']}/s)"
    )
    print(
        f"heartbeat interval given: {r['heartbeat_interval_min_s']} to "
        f"{r['heartbeat_interval_max_s']} s"
    )
    for rpc, f in r["rpcs"].items():
        for code, message in f["first_errors"].items():
            print(f"first {rpc} {code} {message}")
    if r["coordinator_measured"]:
        print(
            f"coordinator(s): {r['coordinator_cpu_cores']} cores, peak RSS "
            f"{r['coordinator_peak_rss_mb']} MB ({r['coordinator_peak_rss_with_pool_mb']} MB "
            "with validation processes)"
        )
    else:
        print("coordinator(s): CPU and memory not measured (not listening on this machine)")
    print(f"this process (the volunteers): {r['fleet_cpu_cores']} cores of {r['cpus']}")
    print(
        f"target: {TARGET_WORKERS} volunteers, 0 errors, p99 < {TARGET_P99_MS:.0f} ms: "
        f"{'met' if r['met'] else 'not met'} at {r['workers']}"
    )


@contextlib.contextmanager
def _own_replicas(args: argparse.Namespace) -> Iterator[tuple[Any, Path]]:
    from kgrpc.programs.bench.cluster import Replicas, coordinator_env, open_backends

    with open_backends([args.backend]) as (ready, skipped), tempfile.TemporaryDirectory() as tmp:
        if skipped:
            raise SystemExit(f"kgrpc-bench fleet: backend {args.backend}: {skipped[args.backend]}")
        flags = ["--validate-workers", str(args.validate_workers), "--log-level", "WARNING"]
        flags += ["--heartbeat-interval-s", str(args.heartbeat_s)]
        if args.max_heartbeats_per_s >= 0:
            flags += ["--max-heartbeats-per-s", str(args.max_heartbeats_per_s)]
        replicas = Replicas(Path(tmp), ready[0], flags, coordinator_env())
        try:
            yield replicas, Path(tmp)
        finally:
            replicas.stop()


async def _main(args: argparse.Namespace) -> dict:
    if args.coordinator:
        if not args.token:
            raise SystemExit("kgrpc-bench fleet: --coordinator needs a worker --token")
        await _ensure_model(args.coordinator, args.token, args.trainer_token, args.model)
        return await _drive(args, args.coordinator, args.token, _listening_pids(args.coordinator))
    with _own_replicas(args) as (replicas, tmp):
        token, trainer_token = replicas.create_tokens()
        address = ",".join(await replicas.start())
        model = args.model or str(_tiny_model(tmp))
        await _ensure_model(address, token, trainer_token, model)
        return await _drive(args, address, token, replicas.pids)


def run(args: argparse.Namespace) -> dict:
    if args.workers < 1 or args.seconds <= 0:
        raise SystemExit("kgrpc-bench fleet: --workers must be >= 1 and --seconds > 0")
    from kgrpc.gc_pauses import fewer_full_collections

    # The volunteers' own full collections would stop their clocks mid-call, as the
    # coordinator's (kgrpc.gc_pauses): a latency measured must be the coordinator's.
    fewer_full_collections()
    return asyncio.run(_main(args))
