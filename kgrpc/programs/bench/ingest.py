"""``kgrpc-bench ingest``: games/s the coordinator accepts with full validation.

Random legal games (kgrpc.randgame; ~250 moves at 19x19) are generated before the
clock starts; a coordinator runs as a subprocess (spawn validation pool, default
size = cores); U uploaders stream the games concurrently. Every game names a task (one per
:data:`GAMES_PER_TASK` games, as a worker's self-play tasks do), stored in the coordinator's
task table before it starts: ingest looks each one up and checks the game against it, as it
does in production (``require_task``). Figures: accepted games/s
and positions (training rows)/s, the coordinator's peak RSS (main process, and with
its validation processes), and CPU use: the coordinator's (with its pool), this process's
(the uploaders, on the same machine as the coordinator here), and other processes'; and,
outside the clock, the journal payload of a game (its rows encoded, and as stored).

With ``--impl native,python`` (the default when the native core is installed) the same games
go to two coordinators in turn, one replaying with the native core and one with
``KGRPC_NATIVE=0``: ``games_per_s_native`` and ``games_per_s_python`` side by side, and
``games_per_s`` etc. for the implementation in use.

``--backends`` (issue 26) runs the same games, with the implementation in use, on each
place a coordinator keeps its state (kgrpc.programs.bench.cluster): ``sqlite`` (SQLite and
blobs in its data dir), ``pg-s3`` (a PostgreSQL index and an S3 store, both started here:
kgrpc.programs.bench.engines) and ``pg-s3-x2`` (two replicas on them, each uploader's
channel over both). Per backend: games/s, the coordinators' CPU ms per game (with their
validation processes) and the engines' (PostgreSQL and SeaweedFS) apart, keys suffixed
``_pg_s3`` etc.; and the ratios to SQLite+local, higher is better: ``games_per_s_ratio_*``
(games/s over SQLite's) and ``cpu_per_game_ratio_*`` (SQLite's coordinator CPU per game over
the backend's). A backend whose engine is not installed is skipped with a note
(``backends_skipped``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from kgrpc.cli_help import env_flag
from kgrpc.programs.bench.cluster import (
    BACKENDS,
    Backend,
    Replicas,
    coordinator_env,
    count_processes,
    cpu_seconds,
    open_backends,
    parse_backends,
    rss_bytes,
)

HELP = "games/s accepted by the coordinator with full validation, from concurrent uploaders"
TARGET_GAMES_PER_S = 500.0
GAMES_PER_TASK = 25  # the coordinator's default selfplay_task_games


def add_arguments(parser: argparse.ArgumentParser) -> None:
    env_flag(
        parser,
        "--games",
        type=int,
        default=300,
        help="legal games generated (before the clock starts) and uploaded",
    )
    env_flag(parser, "--board-size", type=int, default=19, help="board size")
    env_flag(parser, "--moves", type=int, default=250, help="move cap of the generated games")
    env_flag(parser, "--uploaders", type=int, default=4, help="concurrent uploading clients")
    env_flag(parser, "--per-message", type=int, default=10, help="games per upload message")
    env_flag(
        parser,
        "--full-search-prob",
        type=float,
        default=0.25,
        help="share of moves recorded as training rows",
    )
    env_flag(
        parser,
        "--validate-workers",
        type=int,
        default=0,
        help="validation processes of the coordinator (0 = one per core)",
    )
    env_flag(
        parser,
        "--impl",
        default="native,python",
        help="coordinator replay implementations (comma-separated: native, "
        "python); native is skipped when the core is not installed",
    )
    env_flag(
        parser,
        "--sgf-share",
        type=float,
        default=1.0,
        help="share of games the coordinator keeps as SGF (1.0 = all, the coordinator's "
        "default; 0 = none)",
    )
    env_flag(
        parser,
        "--backends",
        default=",".join(BACKENDS),
        help="where the coordinators keep their state, side by side (comma-separated): "
        "sqlite (SQLite and blobs in the data dir), pg-s3 (PostgreSQL index, S3 store, one "
        "replica), pg-s3-x2 (the same, two replicas, uploads spread over both); the "
        "PostgreSQL and SeaweedFS servers are started here, and a backend whose engine is "
        "not installed is skipped with a note",
    )
    env_flag(parser, "--json", metavar="FILE", help="also write the figures as JSON to FILE")


def _games(args: argparse.Namespace) -> list:
    from kgrpc.randgame import make_random_game
    from kgrpc.records.terms import move_cap

    t0 = time.perf_counter()
    # The coordinator runs with --max-moves args.moves: a game not ended by passes must stop
    # at exactly its cap on this board (records.move_cap), or it is rejected as unfinished.
    cap = move_cap(args.board_size, args.moves)
    games = [
        make_random_game(
            args.board_size, seed=i, max_moves=cap, full_search_prob=args.full_search_prob
        )
        for i in range(args.games)
    ]
    for i, g in enumerate(games):
        g.task_id = f"selfplay-bench-{i // GAMES_PER_TASK:05d}"
    avg = sum(len(g.moves) for g in games) / len(games)
    print(f"generated {len(games)} games ({avg:.0f} moves avg) in {time.perf_counter() - t0:.1f} s")
    return games


async def _run(
    args: argparse.Namespace, games: list, impl: str, backend: Backend
) -> dict[str, Any]:
    import psutil

    from kgrpc.coordinator.config import Config
    from kgrpc.coordinator.testing import terms_for_games, upload_request
    from kgrpc.net import make_channel
    from kgrpc.v1 import coordinator_pb2_grpc

    step = args.per_message
    requests = [upload_request(games[i : i + step]) for i in range(0, len(games), step)]
    flags = ["--validate-workers", str(args.validate_workers), "--log-level", "WARNING"]
    flags += ["--max-moves", str(args.moves), "--sgf-share", str(args.sgf_share)]
    with tempfile.TemporaryDirectory() as tmp:
        replicas = Replicas(Path(tmp), backend, flags, coordinator_env(impl != "python"))
        worker_token, _ = replicas.create_tokens()
        # The tasks the games name, with the cap of a coordinator run with --max-moves.
        replicas.store_tasks(terms_for_games(games, Config(max_moves=args.moves)))
        try:
            # Several replicas: each uploader has one channel over all of them (gRPC's
            # round_robin), as a worker given the list connects, so the uploads spread over
            # the replicas; the list starts at another replica for each uploader.
            addresses = await replicas.start()
            peak_main = peak_total = 0
            stop = asyncio.Event()

            async def sample() -> None:
                nonlocal peak_main, peak_total
                while not stop.is_set():
                    main, total = rss_bytes(replicas.pids)
                    peak_main, peak_total = max(peak_main, main), max(peak_total, total)
                    await asyncio.sleep(0.1)

            totals = {"accepted": 0, "rejected": 0, "duplicates": 0}

            async def uploader(k: int, mine: list) -> None:
                first = k % len(addresses)
                address = ",".join(addresses[first:] + addresses[:first])
                async with make_channel(address, token=worker_token) as ch:
                    stub = coordinator_pb2_grpc.CoordinatorStub(ch)
                    for req in mine:
                        resp = await stub.UploadGames(iter([req]), timeout=600)
                        totals["accepted"] += resp.accepted
                        totals["rejected"] += resp.rejected
                        totals["duplicates"] += resp.duplicates

            sampler = asyncio.ensure_future(sample())
            psutil.cpu_percent(percpu=False)
            coord_cpu0 = cpu_seconds(replicas.pids)
            engines_cpu0 = cpu_seconds(backend.engine_pids)
            own0 = psutil.Process().cpu_times()
            start = time.perf_counter()
            await asyncio.gather(
                *(uploader(k, requests[k :: args.uploaders]) for k in range(args.uploaders))
            )
            elapsed = time.perf_counter() - start
            machine = psutil.cpu_percent(percpu=False) / 100 * (os.cpu_count() or 1)
            coord_cpu = cpu_seconds(replicas.pids) - coord_cpu0
            engines_cpu = cpu_seconds(backend.engine_pids) - engines_cpu0
            # A short run can cost the engines less than one clock tick, so the test checks
            # that their processes were found rather than that their CPU time is above 0.
            engine_processes = count_processes(backend.engine_pids)
            own1 = psutil.Process().cpu_times()
            own_cpu = (own1.user + own1.system) - (own0.user + own0.system)
            stop.set()
            await sampler
            per_replica = _games_per_replica(replicas)
        finally:
            replicas.stop()
    positions = sum(sum(1 for t in g.targets if t.full_search) for g in games)
    others = max(0.0, machine - (coord_cpu + engines_cpu + own_cpu) / elapsed)
    accepted = max(1, totals["accepted"])
    result = {
        "implementation": impl,
        "backend": backend.name,
        "replicas": backend.replicas,
        "games": args.games,
        "board_size": args.board_size,
        "uploaders": args.uploaders,
        "seconds": round(elapsed, 3),
        "games_per_s": round(totals["accepted"] / elapsed, 2),
        "positions_per_s": round(positions / elapsed * totals["accepted"] / max(1, len(games)), 1),
        "accepted": totals["accepted"],
        "rejected": totals["rejected"],
        "games_per_replica": per_replica,
        "peak_rss_mb": round(peak_main / 2**20, 1),
        "peak_rss_with_pool_mb": round(peak_total / 2**20, 1),
        "coordinator_cpu_cores": round(coord_cpu / elapsed, 2),
        "coordinator_cpu_ms_per_game": round(coord_cpu / accepted * 1000, 2),
        "engines_cpu_cores": round(engines_cpu / elapsed, 2),
        "engines_cpu_ms_per_game": round(engines_cpu / accepted * 1000, 2),
        "engine_processes": engine_processes,
        "uploaders_cpu_cores": round(own_cpu / elapsed, 2),
        "other_processes_cpu_cores": round(others, 2),
        "target_games_per_s": TARGET_GAMES_PER_S,
        "ratio_to_target": round(totals["accepted"] / elapsed / TARGET_GAMES_PER_S, 3),
    }
    print(f"backend: {backend.name} ({backend.replicas} replica(s)), coordinator replay: {impl}")
    print(f"{'figure':<28}{'value':>12}")
    for k in ROW_KEYS:
        print(f"{k:<28}{result[k]:>12}")
    if backend.replicas > 1:
        print(f"games per replica: {per_replica}")
    print(
        f"target {TARGET_GAMES_PER_S:.0f} games/s of {args.board_size}x{args.board_size}: ratio "
        f"{result['ratio_to_target']:.2f}"
    )
    return result


ROW_KEYS = (
    "games_per_s",
    "positions_per_s",
    "accepted",
    "rejected",
    "seconds",
    "peak_rss_mb",
    "peak_rss_with_pool_mb",
    "coordinator_cpu_cores",
    "coordinator_cpu_ms_per_game",
    "engines_cpu_cores",
    "engines_cpu_ms_per_game",
    "uploaders_cpu_cores",
    "other_processes_cpu_cores",
)


def _games_per_replica(replicas: Replicas) -> dict[str, int]:
    """Games stored, by the replica that took them (the index's ``games.replica``)."""
    conn = replicas.connect()
    try:
        rows = conn.execute("SELECT replica, COUNT(*) FROM games GROUP BY replica").fetchall()
    finally:
        conn.close()
    return {str(r[0]) or "-": int(r[1]) for r in rows}


def _journal_kb(games: list, max_moves: int, sample: int = 50) -> tuple[float, float]:
    """Mean journal payload of the first ``sample`` games, in KB: encoded rows and as the
    validation pool stores them (compressed), measured outside the clock."""
    from kgrpc.coordinator import journal
    from kgrpc.coordinator.validate import ValidationSettings, validate_record_bytes

    # The coordinator's settings in this benchmark (--max-moves), without its task table.
    settings = ValidationSettings(max_moves=max_moves, require_task=False)
    raw = packed = n = 0
    for g in games[:sample]:
        out = validate_record_bytes(g.SerializeToString(), "bench", settings)
        if out.ok:
            raw += len(journal.encode_payload(out.row_arrays()))
            packed += len(out.payload)
            n += 1
    return (round(raw / n / 1024, 1), round(packed / n / 1024, 1)) if n else (0.0, 0.0)


# Figures kept per backend (suffixed with the backend's key) and, against SQLite+local, as a
# ratio where higher is better: games/s over SQLite's, and SQLite's CPU per game over theirs.
BACKEND_KEYS = (
    "games_per_s",
    "coordinator_cpu_ms_per_game",
    "engines_cpu_ms_per_game",
    "engine_processes",
)
TARGET_SHARED_RATIO = 0.7


def _key(backend: str) -> str:
    return backend.replace("-", "_")


def _side_by_side(rows: dict[str, dict[str, Any]], result: dict[str, Any]) -> None:
    """Per-backend keys and the ratios to SQLite+local into ``result``; a table printed."""
    base = rows.get("sqlite")
    print(
        f"{'backend':<12}{'replicas':>9}{'games/s':>10}{'coord ms/game':>15}"
        f"{'engines ms/game':>17}{'games/s ratio':>15}{'cpu ratio':>11}"
    )
    for name, r in rows.items():
        k = _key(name)
        for key in BACKEND_KEYS:
            result[f"{key}_{k}"] = r[key]
        g_ratio = c_ratio = ""
        if base is not None and name != "sqlite":
            g = r["games_per_s"] / base["games_per_s"] if base["games_per_s"] else 0.0
            cost = r["coordinator_cpu_ms_per_game"]
            c = base["coordinator_cpu_ms_per_game"] / cost if cost else 0.0
            result[f"games_per_s_ratio_{k}"] = round(g, 3)
            result[f"cpu_per_game_ratio_{k}"] = round(c, 3)
            g_ratio, c_ratio = f"{g:.2f}", f"{c:.2f}"
        print(
            f"{name:<12}{r['replicas']:>9}{r['games_per_s']:>10}"
            f"{r['coordinator_cpu_ms_per_game']:>15}{r['engines_cpu_ms_per_game']:>17}"
            f"{g_ratio:>15}{c_ratio:>11}"
        )
    if base is not None and len(rows) > 1:
        print(
            f"ratios to sqlite (higher is better; target >= {TARGET_SHARED_RATIO} for the "
            "shared engines): games/s over sqlite's, sqlite's coordinator CPU per game over "
            "the backend's"
        )


def run(args: argparse.Namespace) -> dict[str, Any]:
    from kgrpc import native

    impls = [x.strip() for x in args.impl.split(",") if x.strip()]
    if not native.ENABLED:
        impls = [x for x in impls if x != "native"]
    if not impls:
        raise SystemExit("kgrpc-bench ingest: no implementation to measure")
    in_use = native.IMPLEMENTATION if native.IMPLEMENTATION in impls else impls[0]
    names = parse_backends(args.backends)
    games = _games(args)
    runs: dict[str, dict[str, Any]] = {}  # per implementation, on the first backend
    rows: dict[str, dict[str, Any]] = {}  # per backend, the implementation in use
    with open_backends(names) as (ready, skipped):
        for name, why in skipped.items():
            print(f"backend {name}: skipped: {why}")
        for i, backend in enumerate(ready):
            if i == 0:
                runs = {impl: asyncio.run(_run(args, games, impl, backend)) for impl in impls}
                rows[backend.name] = runs[in_use]
            else:
                rows[backend.name] = asyncio.run(_run(args, games, in_use, backend))
    if not rows:
        raise SystemExit("kgrpc-bench ingest: every backend was skipped")
    # The figures of the implementation in use, on the first backend, stay under plain keys.
    result = dict(next(iter(rows.values())))
    for impl, figures in runs.items():
        for key in (
            "games_per_s",
            "positions_per_s",
            "coordinator_cpu_cores",
            "uploaders_cpu_cores",
            "other_processes_cpu_cores",
        ):
            result[f"{key}_{impl}"] = figures[key]
    if len(runs) > 1:
        print(
            "side by side: "
            + ", ".join(f"{impl} {f['games_per_s']} games/s" for impl, f in runs.items())
        )
    _side_by_side(rows, result)
    result["backends"] = list(rows)
    result["backends_skipped"] = skipped
    raw_kb, stored_kb = _journal_kb(games, args.moves)
    result["journal_payload_kb"], result["journal_payload_stored_kb"] = raw_kb, stored_kb
    print(
        f"journal payload per game: {result['journal_payload_kb']} KB of rows, "
        f"{result['journal_payload_stored_kb']} KB as stored (compressed)"
    )
    return result
